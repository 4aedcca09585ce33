"""Bind formula symbols to a stats file through each symbol's declared ``stat`` path.

Paths: ``curves.NAME`` (a statistic measured at several points of a free parameter, supplied
point by point by :mod:`boundcalc.measured`), ``scalars.NAME``, ``model.FIELD``, ``matrix.TYPE.STAT`` (an array over layers, or over
layers × heads, following the symbol's declared indices; ``singular_values`` adds a
zero-padded last axis) and ``groups.STAT`` (an array over parameter groups).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from .codecheck import check_compression_binding
from .errors import BoundcalcError, MissingValueError, StatsError, one_line
from .limits import check_allocation
from .registry.schema import Entry, SymbolSpec
from .stats import Stats
from .words import option, set_value

_MAX_ELEMENTS = 50_000_000  # dense zero-padded singular-value array (400 MB of float64)


# Monte Carlo counts and the curve whose losses they count: a certified row takes N from the
# curve (``n_samples``), not from the scalar (a stats file whose two disagree is refused on load)
COUNTS_OF_CURVES = {"gibbs_draws": "gibbs_risk_mean", "gibbs_groups_units": "gibbs_risk_groups",
                    "disagreement_rows": "disagreement_groups",
                    "gibbs_learned_units": "gibbs_risk_learned"}


@dataclass
class Binding:
    """Values for an entry's symbols, where each came from, and which are estimates."""

    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    estimated: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)


def lookup(stats: Stats, path: str, spec: SymbolSpec | None = None) -> tuple[Any, str | None]:
    """The value at ``path`` and, for an estimate, a description of how it was estimated.

    Raises :class:`KeyError` when the stats file does not have the path.
    """
    head, _, rest = path.partition(".")
    if head == "scalars" and rest in COUNTS_OF_CURVES:
        curve = stats.curves.get(COUNTS_OF_CURVES[rest])
        if curve is not None and curve.n_samples is not None:
            return float(curve.n_samples), None  # the curve's own count, never a free-standing one
    if head == "scalars":
        q = stats.scalars[rest]
        why = None
        if q.estimated:
            why = q.method or "estimated"
            if q.ci is not None and q.confidence is not None:
                why += f" ({q.confidence:.0%} CI [{q.ci[0]:.4g}, {q.ci[1]:.4g}])"
        return q.value, why
    if head == "model":
        value = stats.model[rest]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise KeyError(path)
        try:
            return float(value), None
        except OverflowError:
            raise StatsError(f"model.{rest}: number too large for double precision") from None
    if head == "groups":
        arr = stats.groups.get("stats", {})[rest]
        est = stats.groups.get("estimated", {}).get(rest)
        return np.asarray(arr, dtype=np.float64), ("estimated per group" if est else None)
    if head == "matrix":
        mtype, _, stat = rest.partition(".")
        return _matrix_array(stats, mtype, stat, len(spec.indices) if spec else 1), None
    raise KeyError(path)


def _matrix_array(stats: Stats, mtype: str, stat: str, n_indices: int) -> np.ndarray:
    mats = stats.of_type(mtype)
    if not mats:
        raise KeyError(f"matrix.{mtype}")
    with_sv = stat == "singular_values"
    n_pos = n_indices - (1 if with_sv else 0)
    if n_pos not in (1, 2):
        raise StatsError(f"matrix.{mtype}.{stat}: a symbol bound to it needs "
                         f"{1 + with_sv} or {2 + with_sv} indices")
    layers = [m.layer for m in mats]
    if any(v is None for v in layers):
        raise StatsError(f"matrix type {mtype} has matrices without a layer index")
    n_layers = max(layers) + 1
    n_heads = 1
    if n_pos == 2:
        heads = [m.head for m in mats]
        if any(v is None for v in heads):
            raise StatsError(f"matrix type {mtype} is per layer, not per head")
        n_heads = max(heads) + 1
    # every position must be filled exactly once: check before allocating anything, so a
    # hostile layer index (say 10**6 with one matrix) cannot ask for a huge array
    seen: set[tuple[int, int]] = set()
    for m in mats:
        pos = (m.layer, m.head if n_pos == 2 else 0)
        if pos in seen:
            raise StatsError(f"matrix type {mtype}: two entries for layer {m.layer}"
                             + (f" head {m.head}" if n_pos == 2 else
                                "" if m.head is None else
                                " (it is per head; the symbol wants one value per layer)"))
        seen.add(pos)
    if len(seen) != n_layers * n_heads:
        missing = next((l, h) for l in range(n_layers) for h in range(n_heads)
                       if (l, h) not in seen)
        raise StatsError(f"matrix type {mtype}: no entry for layer {missing[0]}"
                         + (f" head {missing[1]}" if n_pos == 2 else ""))
    if with_sv:
        width = max((len(m.singular_values) for m in mats if m.singular_values is not None),
                    default=0)
        if width == 0:
            raise KeyError(f"matrix.{mtype}.singular_values")
        check_allocation(8.0 * n_layers * n_heads * width,
                         f"matrix.{mtype}.singular_values ({n_layers}x{n_heads}x{width}, "
                         f"zero-padded)")
        if n_layers * n_heads * width > _MAX_ELEMENTS:
            raise StatsError(f"matrix.{mtype}.singular_values: {n_layers}x{n_heads}x{width} "
                             f"values are too many (at most {_MAX_ELEMENTS})")
        arr = np.full((n_layers, n_heads, width), np.nan)
    else:
        arr = np.full((n_layers, n_heads), np.nan)
    for m in mats:
        pos = (m.layer, m.head if n_pos == 2 else 0)
        if with_sv:
            if m.singular_values is None:
                raise StatsError(f"matrix {mtype} layer {m.layer} head {m.head}: "
                                 f"no singular values stored")
            arr[pos] = 0.0
            arr[pos][: len(m.singular_values)] = m.singular_values
        else:
            if stat not in m.stats:
                raise KeyError(f"matrix.{mtype}.{stat}")
            arr[pos] = m.stats[stat]
    if np.isnan(arr).any():
        where = np.argwhere(np.isnan(arr))[0]
        raise StatsError(f"matrix type {mtype}: no entry for layer {where[0]}"
                         + (f" head {where[1]}" if n_pos == 2 else ""))
    if n_pos == 1:
        arr = arr[:, 0]
    return arr


def bind(entry: Entry, stats: Stats | None, overrides: Mapping[str, Any] | None = None,
         strict: bool = True) -> Binding:
    """Values for ``entry``: ``overrides`` first, then the stats file, then defaults.

    With ``strict`` a symbol that has neither raises :class:`MissingValueError` naming the
    symbol and the stats path it expected.
    """
    try:
        return _bind(entry, stats, overrides, strict)
    except BoundcalcError as exc:  # messages quote names from the stats file: one line
        raise type(exc)(one_line(str(exc))) from None


def _bind(entry: Entry, stats: Stats | None, overrides: Mapping[str, Any] | None,
          strict: bool) -> Binding:
    out = Binding()
    overrides = dict(overrides or {})
    for name, value in overrides.items():
        out.values[name] = value
        out.sources[name] = "given"
    for name, spec in entry.symbols.items():
        if name in out.values:
            continue
        if spec.stat and spec.stat.startswith("curves."):
            # measured at points of a free parameter: boundcalc.measured supplies the value
            # point by point; here it only counts as present when the curve is there
            if stats is not None and spec.stat.split(".", 1)[1] in stats.curves:
                out.sources[name] = spec.stat
                continue
            out.missing.append(name)
            continue
        if spec.stat and stats is not None:
            try:
                value, why = lookup(stats, spec.stat, spec)
            except KeyError:
                value, why = None, None
            if value is not None:
                out.values[name] = value
                out.sources[name] = spec.stat
                if why:
                    out.estimated[name] = why
                continue
        if spec.default is not None or spec.role == "size":
            continue
        out.missing.append(name)
    if stats is not None:
        check_compression_binding(entry, out.sources, stats.scalars, stats.curves)
    if strict and out.missing:
        raise MissingValueError(f"entry '{entry.id}': " + missing_message(entry, out.missing))
    return out



def how_to_give(spec: SymbolSpec) -> str:
    """Where a missing value comes from: set by hand for a scalar, a stats file for an array,
    with the command that writes it (:mod:`boundcalc.hints`), or why none does; in the
    caller's words (:mod:`boundcalc.words`: ``--set``/``--stats`` in the CLI)."""
    from .hints import set_only_note, source_of

    stat = spec.stat or ""
    command = source_of(stat)
    if spec.indices or stat.startswith(("matrix.", "groups.")):
        if command is None:
            return f"an array: {set_value(spec.name, '[…]')} (a JSON array)" + (
                f" ({set_only_note(stat)})" if stat else "")
        return f"an array: pass {option('stats', 'FILE')} from `{command}`"
    if command is not None:
        return f"{set_value(spec.name)}, or {option('stats', 'FILE')} from `{command}`"
    if stat:
        return f"{set_value(spec.name)} ({set_only_note(stat)})"
    return set_value(spec.name)


def missing_message(entry: Entry, missing: list[str]) -> str:
    """One line naming the missing symbols and how to give them (a stats file where a value
    set by hand cannot help: per-layer / per-head arrays)."""
    specs = [entry.symbols[m] for m in missing]
    arrays = [s for s in specs if s.indices or (s.stat or "").startswith(("matrix.", "groups."))]
    if arrays:
        first = arrays[0]
        rest = [s.name for s in specs if s is not first]
        return (f"no value for '{first.name}' ({first.meaning}), {how_to_give(first)}"
                + (f" (also missing: {', '.join(rest[:8])}"
                   + (", …" if len(rest) > 8 else "") + ")" if rest else ""))
    first = specs[0]
    where = f" (stats path '{first.stat}')" if first.stat else ""
    return (f"no value for '{first.name}' ({first.meaning}){where}; give it with "
            f"{how_to_give(first)}"
            + (f" (also missing: {', '.join(missing[1:6])})" if len(missing) > 1 else ""))
