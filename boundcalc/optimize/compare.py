"""Optimise every registry entry that applies to one stats file (the core of ``compare``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..bind import bind, how_to_give
from ..errors import BoundcalcError, one_line
from ..hints import set_only_note, source_of
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
                "error": one_line(str(exc)) if str(exc) else type(exc).__name__}
    chosen = {p.name for p in per_instance_symbols(entry)}
    rows = [{"symbol": m, "stat": entry.symbols[m].stat, "meaning": entry.symbols[m].meaning,
             "give": how_to_give(entry.symbols[m]), **what_lacks(entry, m, stats)}
            for m in missing if m not in chosen]
    return {"id": entry.id, "kind": entry.kind, "missing": rows, "lacks": lacks_text(rows)}


def what_lacks(entry: Entry, name: str, stats: Stats | None) -> dict[str, str]:
    """What a missing symbol really is, in the user's terms: ``name`` (the symbol, with what
    the file holds instead when it has something of that name) and ``fix`` (the one thing to
    do). The symbol ``emp_risk`` of the Occam entries is the *quantized* model's error, which
    only ``measure --compress`` writes; a symbol that reads no stat is never taken from the
    file, even when the file has a number of that name; an entry that takes one Gibbs risk
    does not read the measured curve; a stat no boundcalc command writes is for --set."""
    spec = entry.symbols[name]
    stat = spec.stat or ""
    head, _, key = stat.partition(".")
    scalars = stats.scalars if stats is not None else {}
    curves = stats.curves if stats is not None else {}
    array = bool(spec.indices)
    label = name + (" (array)" if array else "")
    set_it = "--set NAME=[…] (a JSON array)" if array else "--set NAME=VALUE"
    if key and key.lower() != name.lower():
        label += f" = {key}" + (f", not the file's {name}" if name in scalars else "")
    if not stat:
        have = scalars.get(name)
        if have is not None and not array:
            label += f" (not read from the file's {name} = {have.value:.4g})"
        return {"name": label, "fix": set_it}
    command = source_of(stat)
    if command is not None and "--compress" in command:
        return {"name": label, "fix": command}
    if head == "scalars" and key in curves:
        return {"name": f"{label} (one value; the file has the curve {key} over "
                        f"{curves[key].param})", "fix": set_it}
    if command is not None:
        return {"name": label, "fix": command}
    return {"name": label, "fix": f"{set_it} ({set_only_note(stat)})"}


def lacks_text(rows: list[dict[str, Any]]) -> str:
    """'code_bits, emp_risk = quantized_error: measure --data DATA --compress; KL: --set' —
    the missing symbols grouped by the one thing that gives them."""
    groups: dict[str, list[str]] = {}
    for r in rows:
        groups.setdefault(r.get("fix", ""), []).append(r.get("name", r["symbol"]))
    return "; ".join(", ".join(names) + (f": {fix}" if fix else "")
                     for fix, names in groups.items())


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
                               "error": one_line(str(exc)) if str(exc)
                               else type(exc).__name__})
            continue
        annotate(r, entry, stats, test_error)
        out.groups.setdefault(r.kind, []).append(r)
        out.results.append(r)
    return out
