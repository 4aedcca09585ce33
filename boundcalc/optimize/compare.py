"""Optimise every registry entry that applies to one stats file (the core of ``compare``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..bind import bind, how_to_give
from ..errors import BoundcalcError
from ..evaluation import Result
from ..registry import Entry, Registry
from ..stats import Stats
from .api import applicable, optimize
from .per_instance import per_instance_symbols


@dataclass
class Comparison:
    """Results grouped by kind, entries that failed (one-line error), and entries skipped
    with every symbol each lacks and where it would come from."""

    groups: dict[str, list[Result]] = field(default_factory=lambda: {
        "certified": [], "conditional": [], "rate": [], "proxy": []})
    failed: list[dict[str, str]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)

    results: list[Result] = field(default_factory=list)  # every computed one, registry order


def skipped_row(entry: Entry, stats: Stats | None, own: Mapping[str, Any]) -> dict[str, Any]:
    """An entry that cannot be computed: every symbol it lacks, and where each would come from."""
    try:
        missing = bind(entry, stats, dict(own), strict=False).missing
    except Exception as exc:  # noqa: BLE001 - as in `applicable`: a malformed section skips
        return {"id": entry.id, "kind": entry.kind, "missing": [],
                "error": str(exc).splitlines()[0] if str(exc) else type(exc).__name__}
    chosen = {p.name for p in per_instance_symbols(entry)}
    return {"id": entry.id, "kind": entry.kind, "missing": [
        {"symbol": m, "stat": entry.symbols[m].stat, "meaning": entry.symbols[m].meaning,
         "give": how_to_give(entry.symbols[m])} for m in missing if m not in chosen]}


def _plain(items: Iterable[Entry]) -> Iterator[Entry]:
    yield from items


def compare_entries(stats: Stats, values: Mapping[str, Any], registry: Registry,
                    track: Callable[[list[Entry]], Iterable[Entry]] = _plain,
                    test_error: float | None = None) -> Comparison:
    """Optimise (without sensitivities or contributions) every entry of ``registry`` whose
    symbols ``stats`` and ``values`` provide; a value is passed to an entry only if the entry
    has that symbol or parameter. ``track`` wraps the iteration (a progress bar). Each result
    carries the trivial predictor's error of ``stats`` (0-1 risk bounds) and ``test_error``."""
    from ..floor import annotate

    out = Comparison()
    for entry in track(list(registry)):
        own = {k: v for k, v in values.items() if k in entry.symbols or k in entry.parameters}
        if not applicable(entry, stats, own):
            out.skipped.append(skipped_row(entry, stats, own))
            continue
        try:
            r = optimize(entry, stats, own, registry=registry, sensitivity=False,
                         contributions=False)
        except BoundcalcError as exc:
            out.failed.append({"id": entry.id, "kind": entry.kind,
                               "error": str(exc).splitlines()[0] if str(exc)
                               else type(exc).__name__})
            continue
        annotate(r, entry, stats, test_error)
        out.groups.setdefault(r.kind, []).append(r)
        out.results.append(r)
    return out
