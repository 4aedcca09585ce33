"""Optimise every registry entry that applies to one stats file (the core of ``compare``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..bind import bind
from ..errors import BoundcalcError
from ..evaluation import Result
from ..registry import Registry
from ..stats import Stats
from .api import applicable, optimize


@dataclass
class Comparison:
    """Results grouped by kind, entries that failed (one-line error), entries skipped for a
    missing symbol (``{symbol: [entry ids]}``)."""

    groups: dict[str, list[Result]] = field(default_factory=lambda: {
        "certified": [], "rate": [], "proxy": []})
    failed: list[dict[str, str]] = field(default_factory=list)
    skipped: dict[str, list[str]] = field(default_factory=dict)

    results: list[Result] = field(default_factory=list)  # every computed one, registry order


def compare_entries(stats: Stats, values: Mapping[str, Any], registry: Registry) -> Comparison:
    """Optimise (without sensitivities or contributions) every entry of ``registry`` whose
    symbols ``stats`` and ``values`` provide; a value is passed to an entry only if the entry
    has that symbol or parameter."""
    out = Comparison()
    for entry in registry:
        own = {k: v for k, v in values.items() if k in entry.symbols or k in entry.parameters}
        if not applicable(entry, stats, own):
            for name in bind(entry, stats, own, strict=False).missing[:1]:
                out.skipped.setdefault(name, []).append(entry.id)
            continue
        try:
            r = optimize(entry, stats, own, registry=registry, sensitivity=False,
                         contributions=False)
        except BoundcalcError as exc:
            out.failed.append({"id": entry.id, "kind": entry.kind,
                               "error": str(exc).splitlines()[0] if str(exc)
                               else type(exc).__name__})
            continue
        out.groups.setdefault(r.kind, []).append(r)
        out.results.append(r)
    return out
