"""Optimise every registry entry that applies to one stats file (the core of ``compare``)."""

from __future__ import annotations

import math
from decimal import Decimal
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..binding import bind, how_to_give
from ..errors import BoundcalcError, DomainError, one_line
from ..which_model import about_users_model
from ..hints import needs_compression, set_only_note, source_of
from ..evaluation import Result
from ..rounding import decimal_total, share
from ..registry import Entry, Registry
from ..stats import Stats
from ..words import command, option, set_value
from .entry_points import applicable, optimize
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
    # entries that do not apply to the task of the stats file (not computed): id, kind, reason
    hidden: list[dict[str, str]] = field(default_factory=list)
    # the least certified risk bound about the user's model, with its honest δ (least_certified)
    minimum: dict[str, Any] | None = None

    @property
    def about_users(self) -> list[Result]:
        """Certified rows about the user's model (every row but a compression row whose code
        decodes to another model: :mod:`boundcalc.which_model`)."""
        return [r for r in self.groups.get("certified", []) if about_users_model(r)]

    @property
    def about_another(self) -> list[Result]:
        """Certified compression rows whose code decodes to another model (listed apart)."""
        return [r for r in self.groups.get("certified", []) if not about_users_model(r)]

    def missing(self) -> list[dict[str, Any]]:
        """One line per missing ingredient: each measurement that certified entries not
        computed lack, with those entries (most needed first; an entry may lack several);
        last, the entries that lack a value no measurement gives (``by_hand``: the values must
        be set by hand, ``give`` names the option that sets them). ``give`` is in the caller's
        words (:mod:`boundcalc.words`)."""
        need: dict[str, list[str]] = {}
        by_hand: list[str] = []
        for row in self.skipped:
            if row.get("kind") != "certified":
                continue
            fixes = list(dict.fromkeys((m.get("fix", ""), bool(m.get("by_hand")))
                                       for m in row.get("missing", [])))
            if not fixes or any(hand for _, hand in fixes):
                by_hand.append(row["id"])
            for fix, hand in fixes:
                if not hand:
                    need.setdefault(fix, []).append(row["id"])
        out = [{"give": k, "by_hand": False, "entries": v}
               for k, v in sorted(need.items(), key=lambda kv: -len(kv[1]))]
        return out + ([{"give": option("values"), "by_hand": True, "entries": by_hand}]
                      if by_hand else [])


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


def what_lacks(entry: Entry, name: str, stats: Stats | None) -> dict[str, Any]:
    """What a missing symbol really is, in the user's terms: ``name`` (the symbol, with what
    the file holds instead when it has something of that name), ``fix`` (the one thing to
    do, in the caller's words: :mod:`boundcalc.words`) and ``by_hand`` (True when the fix is
    to set the value by hand). The symbol ``emp_risk`` of the Occam entries is the
    *quantized* model's error, which only a measurement with compression writes; a symbol
    that reads no stat is never taken from the file, even when the file has a number of that
    name; an entry that takes one Gibbs risk does not read the measured curve; a stat no
    boundcalc command writes is set by hand."""
    spec = entry.symbols[name]
    stat = spec.stat or ""
    head, _, key = stat.partition(".")
    scalars = stats.scalars if stats is not None else {}
    curves = stats.curves if stats is not None else {}
    array = bool(spec.indices)
    label = name + (" (array)" if array else "")
    set_it = {"fix": (f"{set_value('NAME', '[…]')} (a JSON array)" if array
                      else set_value("NAME")), "by_hand": True}
    if key and key.lower() != name.lower():
        label += f" = {key}" + (f", not the file's {name}" if name in scalars else "")
    if not stat:
        have = scalars.get(name)
        if have is not None and not array:
            label += f" (not read from the file's {name} = {have.value:.4g})"
        return {"name": label, **set_it}
    command = source_of(stat)
    if command is not None and needs_compression(stat):
        return {"name": label, "fix": command, "by_hand": False}
    if head == "scalars" and key in curves:
        return {"name": f"{label} (one value; the file has the curve {key} over "
                        f"{curves[key].param})", **set_it}
    if command is not None:
        return {"name": label, "fix": command, "by_hand": False}
    return {"name": label, **set_it, "fix": f"{set_it['fix']} ({set_only_note(stat)})"}


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

    entries = list(registry)
    known = {k for e in entries for k in (*e.symbols, *e.parameters)}
    unknown = sorted(k for k in values if k not in known)
    if unknown:  # as optimize and evaluate refuse it: a typo is never silently unused
        raise DomainError(f"unknown symbol '{unknown[0]}': no entry of the registry declares "
                          f"it (an entry's symbols: {command('show ID')})")
    out = Comparison()
    by_id: dict[str, tuple[Entry, dict[str, Any]]] = {}
    for entry in track(entries):
        own = {k: v for k, v in values.items() if k in entry.symbols or k in entry.parameters}
        reason = not_for_task(entry, stats)
        if reason:
            out.hidden.append({"id": entry.id, "kind": entry.kind, "reason": reason})
            continue
        if not applicable(entry, stats, own):
            out.skipped.append(skipped_row(entry, stats, own))
            continue
        try:
            r = optimize(entry, stats, own, registry=registry, sensitivity=False,
                         contributions=False, what_if=False)
        except BoundcalcError as exc:
            out.failed.append({"id": entry.id, "kind": entry.kind,
                               "error": one_line(str(exc)) if str(exc)
                               else type(exc).__name__})
            continue
        annotate(r, entry, stats, test_error)
        out.groups.setdefault(r.kind, []).append(r)
        out.results.append(r)
        by_id[entry.id] = (entry, own)
    out.minimum = least_certified(out.about_users, by_id, stats, registry, test_error)
    return out


def not_for_task(entry: Entry, stats: Stats | None) -> str | None:
    """Why an entry does not apply to the task of ``stats`` (it is then hidden), or None: a
    smoothed log-loss in bits per token is a language model's measure, not a classifier's."""
    from ..task_facts import is_classifier

    if is_classifier(stats) and entry.output == "loss" and any(
            (s.stat or "").startswith("curves.quantized_smoothed_nll")
            for s in entry.symbols.values()):
        return "a log-loss in bits per token, for language models; this is a classifier"
    return None


def risk_quantity(entry: Entry, stats: Stats | None) -> str:
    """What a certified risk row bounds: the Gibbs rows of a language model bound the
    measured bounded loss (``provenance.bounded_loss``, the smoothed per-token NLL / ln(V/α));
    every other risk row a 0-1 error."""
    prov = stats.provenance if stats is not None and isinstance(stats.provenance, dict) else {}
    loss = prov.get("bounded_loss")
    gibbs = any("gibbs_risk" in (s.stat or "") for s in entry.symbols.values())
    return str(loss) if gibbs and loss and loss != "0-1 error" else "0-1 error"


def least_certified(rows: list[Result], by_id: Mapping[str, tuple[Entry, dict[str, Any]]],
                    stats: Stats, registry: Registry,
                    test_error: float | None = None) -> dict[str, Any] | None:
    """The least of the k certified risk bounds ``rows``, with an honest δ.

    Each row holds with probability ≥ 1 − δ_i on its own; the least of k rows computed on the
    same S holds only when all k do, so at 1 − Σδ_i (a union bound). Quoted here: the least
    row re-evaluated (re-optimised) with its confidence symbol δ at δ/k (``value``;
    ``row_value`` is its own value). All k statements with δ_i/k hold together with
    probability ≥ 1 − Σ(δ_i/k + m_i) (``delta_total``), whichever row the data picks, where
    m_i is the part of a row's δ that is not its δ symbol (a Monte Carlo interval's
    confidence, fixed by the measurement, not divided); = 1 − δ when every row has the same δ
    and no such part. Per-row values are unchanged. If the re-evaluation
    fails, the least row's own value is quoted with Σδ_i. ``parameters``: the free parameters
    (a σ, a scale) at which the quoted value was computed."""
    from ..evaluation import confidence_symbol
    from ..floor import annotate

    bounds = [r for r in rows if r.is_bound and r.output == "risk" and math.isfinite(r.value)]
    if not bounds:
        return None
    # the least of rows bounding one quantity: a language model's Gibbs rows bound its
    # smoothed loss / ln(V/α), its other rows the top-1 error; the 0-1 error comes first
    quantity = {r.id: risk_quantity(by_id[r.id][0], stats) for r in bounds}
    first = "0-1 error" if "0-1 error" in quantity.values() else quantity[bounds[0].id]
    bounds = [r for r in bounds if quantity[r.id] == first]
    best = min(bounds, key=lambda r: r.value)
    k = len(bounds)
    deltas = [r.delta or 0.0 for r in bounds]
    # the part of each row's δ that re-evaluation divides by k (its confidence symbol) and
    # the part it cannot (a Monte Carlo interval's confidence, fixed by the measurement)
    own_delta = []
    for r in bounds:
        conf_r = confidence_symbol(by_id[r.id][0])
        sym = r.inputs.get(conf_r) if conf_r else None
        sym = float(sym) if isinstance(sym, (int, float)) and 0 < sym <= (r.delta or 0) \
            else 0.0
        own_delta.append((sym, decimal_total([r.delta or 0.0, -Decimal(repr(sym))])))
    out: dict[str, Any] = {
        "id": best.id, "row_value": best.value, "delta": best.delta, "k": k,
        "rows": [r.id for r in bounds], "sum_delta": decimal_total(deltas),
        "vacuous": best.vacuous, "vacuous_against": best.vacuous_text,
        "certifies": best.certifies, "predictor": best.predictor, "quantity": first,
        "parameters": dict(best.parameters)}  # the free parameters of the quoted value
    best_sym = own_delta[bounds.index(best)][0]
    if k == 1 or not best_sym:
        out.update(method="single", value=best.value, delta_total=best.delta or 0.0)
        return out
    entry, own = by_id[best.id]
    conf = confidence_symbol(entry)
    try:
        again = optimize(entry, stats, {**own, conf: share(best_sym, k)}, registry=registry,
                         sensitivity=False, contributions=False, what_if=False)
        annotate(again, entry, stats, test_error)
        if not (again.is_bound and math.isfinite(again.value)):
            raise BoundcalcError("not a bound at δ/k")
    except BoundcalcError as exc:
        out.update(method="sum", value=best.value, delta_total=out["sum_delta"],
                   note=f"re-evaluation at δ/k failed: {one_line(str(exc))}")
        return out
    out.update(method="delta_over_k", value=again.value, delta_each=share(best_sym, k),
               delta_fixed=decimal_total(x for _, x in own_delta),
               delta_total=decimal_total([*(share(d, k) for d, _ in own_delta),
                                          *(x for _, x in own_delta)]),
               vacuous=again.vacuous, vacuous_against=again.vacuous_text,
               parameters=dict(again.parameters))
    return out
