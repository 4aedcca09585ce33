"""High-level entry points: an entry plus hand-set values and/or a stats file → a Result."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from .binding import bind
from .evaluation import Prepared, Result
from .registry import Entry, Registry, load_registry
from .stats import Stats, load_stats


def resolve_entry(entry: Entry | str, registry: Registry | None = None) -> Entry:
    """An :class:`Entry` from itself or from its id."""
    if isinstance(entry, Entry):
        return entry
    return (registry or load_registry()).get(entry)


def prepare(entry: Entry | str, stats: Stats | str | None = None,
            values: Mapping[str, Any] | None = None, registry: Registry | None = None,
            fixed: Iterable[str] = ()) -> Prepared:
    """Bind values (``values`` override the stats file) and validate them once. ``fixed``
    names hand-set parameters chosen before seeing the data (used as given, not charged)."""
    e = resolve_entry(entry, registry)
    if isinstance(stats, str):
        stats = load_stats(stats)
    binding = bind(e, stats, values)
    return Prepared(e, binding.values, binding.estimated, fixed)


def compute(entry: Entry | str, stats: Stats | str | None = None,
            values: Mapping[str, Any] | None = None, params: Mapping[str, float] | None = None,
            registry: Registry | None = None, fixed: Iterable[str] = ()) -> Result:
    """Evaluate an entry on a stats file and/or hand-set values; free parameters from
    ``params``, their default, or their closed form (see :func:`boundcalc.evaluate`)."""
    from .measured import hand_set, over_points

    e = resolve_entry(entry, registry)
    if isinstance(stats, str):
        stats = load_stats(stats)
    params = dict(params or {})
    values = dict(values or {})
    fixed = tuple(fixed)
    for name in fixed:  # a declared-fixed parameter is a value, validated with the others
        if name in params:
            values[name] = params.pop(name)

    def run(variant: Entry, vals: dict[str, Any], prm: dict[str, float],
            est: dict[str, str]) -> Result:
        binding = bind(variant, stats, vals)
        return Prepared(variant, binding.values, {**binding.estimated, **est},
                        fixed).result(prm)

    found = over_points(e, stats, values, params, None, run)
    if found is not None:
        return found
    return run(e, values, params, hand_set(e, values, params))
