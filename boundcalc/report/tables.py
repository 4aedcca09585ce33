"""Rich tables for entries and results: read at a glance, labels never overstate a number."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..evaluation import Result
from ..registry.schema import Entry
from ..rounding import bound_text, probability_text
from ..words import command, option

KIND_STYLE = {"certified": "bold green", "conditional": "bold magenta", "rate": "bold yellow",
              "proxy": "bold cyan"}
KIND_MEANING = {
    "certified": "every constant known: under the listed assumptions a valid upper bound with "
                 "probability ≥ 1 − δ",
    "conditional": "not a bound unless its named condition holds, which boundcalc cannot "
                   "check; never compared with 1",
    "rate": "stated with O(·): the number depends on the hidden constant you set; not a bound",
    "proxy": "a complexity measure the paper evaluates; for comparing models, not a bound",
}


def _row(table: Table, *cells: Any) -> None:
    """Add a row; text from formula and stats files is printed literally, never as markup."""
    table.add_row(*[c if isinstance(c, Text) else Text(str(c)) for c in cells])


def fmt(x: Any, digits: int = 6, side: str = "nearest") -> str:
    """A value for a table or report: floats in at most ``digits`` significant digits, arrays
    summarised, None as a dash. ``side`` (:func:`boundcalc.rounding.bound_text`): 'upper'
    for the value of an upper bound (rounded up: a certified or conditional value, a
    :attr:`Result.value_side`), 'lower' for a lower limit (rounded down: a zero-complexity
    floor, a probability 1 − δ), 'nearest' (``%g``) for what bounds nothing (a parameter, a
    term, a cost, a measured error)."""
    if x is None:
        return "—"
    if isinstance(x, (bool, np.bool_)):
        return "yes" if x else "no"
    if isinstance(x, (list, tuple, np.ndarray)):
        arr = np.asarray(x, dtype=float)
        if arr.size <= 6:
            return "[" + ", ".join(fmt(v, 4, side) for v in arr.ravel()) + "]"
        lo, hi = float(arr.min()), float(arr.max())
        return f"array{list(arr.shape)} min {fmt(lo, 4, side)} max {fmt(hi, 4, side)}"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    if isinstance(x, (float, np.floating)):
        x = float(x)
        return bound_text(x, digits, side) if math.isfinite(x) else str(x)
    return str(x)



def entries_table(entries: list[Entry], wide: bool = False) -> Table:
    """One row per entry; ids are never cut. Compact columns (id, kind, family) by default;
    ``wide`` puts the kind, family, title and source beside each id, wrapped at word
    boundaries, so it also reads at 80 columns."""
    width = max([len(e.id) for e in entries] + [2])
    if not wide:
        table = Table(title=f"{len(entries)} registry entries")
        table.add_column("id", style="bold", no_wrap=True, min_width=width)
        table.add_column("kind", no_wrap=True)
        table.add_column("family", no_wrap=True)
        for e in entries:
            _row(table, e.id, Text(e.kind, style=KIND_STYLE.get(e.kind, "bold")), e.family)
        return table
    table = Table(title=f"{len(entries)} registry entries", show_lines=True)
    table.add_column("id", style="bold", no_wrap=True, min_width=width)
    table.add_column("kind · family / title / source", overflow="fold", ratio=1)
    for e in entries:
        body = Text(e.kind, style=KIND_STYLE.get(e.kind, "bold"))
        body.append(f" · {e.family}\n", style="dim")
        body.append(f"{e.title}\n")
        body.append(e.source, style="dim")
        table.add_row(Text(e.id), body)
    return table


def _described(name: str, facts: list[str], text: str) -> tuple[Text, Text]:
    """A name and, beside it, one line of short facts then a wrapped description."""
    body = Text(" · ".join(f for f in facts if f), style="dim")
    if text:
        body.append("\n")
        body.append(text)
    return Text(name, style="bold"), body


def entry_panel(entry: Entry, latex: str | None = None) -> Group:
    """Everything about one entry, laid out to wrap at word boundaries in 80 columns."""
    head = Table.grid(padding=(0, 1))
    head.add_column(style="bold", no_wrap=True)
    head.add_column(overflow="fold")
    _row(head, "id", entry.id)
    _row(head, "title", entry.title)
    _row(head, "kind", Text(f"{entry.kind}: {KIND_MEANING[entry.kind]}",
                              style=KIND_STYLE[entry.kind]))
    for c in entry.conditions:
        _row(head, "condition", Text(c, style=KIND_STYLE["conditional"]))
    _row(head, "family", entry.family)
    if entry.variant:
        _row(head, "variant", entry.variant)
    _row(head, "source", entry.source)
    _row(head, "provenance", entry.provenance)
    from .source_notes import note_paths

    for name, path in note_paths(entry.provenance).items():
        _row(head, "source note", path or f"{name} (not installed here; in the repository's "
                                          f"docs/sources/)")
    _row(head, "file", entry.file)
    _row(head, "expression", entry.expression_text)
    for name, d in entry.definitions.items():
        idx = f"[{', '.join(d.indices)}]" if d.indices else ""
        _row(head, "", f"{name}{idx} = {d.text}")
    if latex:
        _row(head, "LaTeX", latex)
    parts: list[Any] = [Panel(head)]

    def listing(title: str) -> Table:
        t = Table.grid(padding=(0, 2))
        t.add_column(no_wrap=True)
        t.add_column(overflow="fold", ratio=1)
        parts.append(Text(title, style="bold underline"))
        parts.append(t)
        return t

    syms = listing("symbols")
    for s in entry.symbols.values():
        facts = [s.role, s.domain.text(), f"indices {','.join(s.indices)}" if s.indices else "",
                 f"stat {s.stat}" if s.stat else "",
                 "" if s.default is None else f"default {fmt(s.default)}"]
        syms.add_row(*_described(s.name, facts, s.meaning))
    if entry.parameters:
        pars = listing("free parameters")
        for p in entry.parameters.values():
            how = []
            if p.grid is not None:
                how.append(f"{p.grid.kind}{list(map(str, p.grid.args))}")
            if p.prior is not None:
                how.append(f"Dziugaite–Roy: value{'²' if p.prior.squared else ''} = "
                           f"{p.prior.c:g}·exp(−j/{p.prior.b:g})")
            if p.optimum is not None:
                how.append(f"closed form: {p.optimum.text}")
            facts = [p.choice, p.domain.text(),
                     f"indices {','.join(p.indices)}" if p.indices else ""]
            text = "; ".join(how) + ("\n" if how and p.note else "") + (p.note or "")
            pars.add_row(*_described(p.name, facts, text))
    if entry.assumptions:
        asm = listing("assumptions")
        for a in entry.assumptions:
            body = Text(a.text)
            body.append(f"\ncheck: {a.check.text}" if a.check is not None else
                        "\n(stated, not checkable)", style="dim")
            asm.add_row(Text("•"), body)
    for note in entry.notes:
        parts.append(Text(f"note: {note}", style="dim"))
    return Group(*parts)


def result_panel(result: Result) -> Group:
    """The value with its honest label, δ accounting, parameters, terms and assumptions."""
    style = KIND_STYLE[result.kind] if result.is_bound or result.kind != "certified" \
        else "bold red"
    head = Table.grid(padding=(0, 1))
    head.add_column(style="bold", no_wrap=True)
    head.add_column(overflow="fold")
    _row(head, "title", result.title)  # in the panel, not its border: a border cuts long titles
    _row(head, "value", Text(result.value_text(8) + (f" {result.unit}" if result.unit else ""),
                             style=style))
    label = result.label
    if result.conditions and " only if " in label:  # the conditions follow, one per row
        label = label.split(" only if ")[0] + " only if the conditions below hold"
    _row(head, "label", Text(label, style=style))
    for c in result.conditions:
        _row(head, "condition", Text(c, style=KIND_STYLE["conditional"]))
    interval = result.extra.get("interval")
    if interval:
        _row(head, "interval", f"[{fmt(interval['lower'], 17, 'lower')}, "
                               f"{fmt(interval['upper'], 17, 'upper')}] "
                               f"(outward-rounded; the value is its upper end)")
    if result.vacuous is not None:
        _row(head, "vacuous", result.vacuous_text)
    if result.about_text:
        _row(head, "about", result.about_text)  # the text says "certifies …"
    for name, text in floor_rows(result):
        _row(head, name, text)
    if result.delta is not None:
        _row(head, "δ spent", f"{result.delta:g} (holds with probability ≥ "
                              f"{probability_text(result.delta)})"
             if result.delta < 1 else f"{result.delta:g} ≥ 1: no guarantee at all")
    if result.union_bound_cost:
        total = sum(result.union_bound_cost.values())
        costs = ", ".join(f"{k}: {v:.4g}" for k, v in result.union_bound_cost.items())
        eff = "" if result.delta_effective is None else \
            f"; formula evaluated at δ·e^(−{total:.4g}) = {result.delta_effective:.4g}"
        _row(head, "union-bound cost", f"{costs}{eff}")
    if result.hidden_constants:
        _row(head, "hidden constants",
                     ", ".join(f"{k} = {v:g}" for k, v in result.hidden_constants.items()))
    if result.estimated_inputs:
        _row(head, "estimated inputs", "; ".join(result.estimated_inputs))
    _row(head, "method", result.method)
    parts: list[Any] = [Panel(head, title=Text(result.id), expand=False)]
    if result.parameters:
        t = Table(title="free parameters")
        t.add_column("name")
        t.add_column("value")
        t.add_column("how chosen", overflow="fold")
        for k, v in result.parameters.items():
            _row(t, k, fmt(v), result.parameter_choice.get(k, ""))
        parts.append(t)
    if result.terms:
        t = Table(title="terms")
        t.add_column("term")
        t.add_column("value", justify="right")
        for k, v in result.terms.items():
            _row(t, k, fmt(v))
        parts.append(t)
    if result.assumptions:
        t = Table(title="assumptions")
        t.add_column("status")
        t.add_column("assumption", overflow="fold")
        colours = {"holds": "green", "fails": "bold red", "unknown": "yellow",
                   "unchecked": "dim"}
        for a in result.assumptions:
            _row(t, Text(a["status"], style=colours.get(a["status"], "")), a["text"])
        parts.append(t)
    for note in result.notes:
        parts.append(Text(f"note: {note}", style="dim"))
    return Group(*parts)


def floor_rows(result: Result) -> list[tuple[str, str]]:
    """(name, text) lines on the floor, the breakdown and the test-error gap of a result. A
    floor is the least the value could reach (a lower limit of the bound, not a bound): it
    is rounded down; the risk, the test error and the gap are measurements, to nearest."""
    from ..floor import breakdown_text

    rows = []
    f = result.floor
    if f:
        risk = f"{f['risk_symbol']} = {f['emp_risk']:.4g}"
        rows.append(("floor", f"{fmt(f['own'], 4, 'lower')} = kl⁻¹({risk}, c(δ)/n) with the "
                              f"entry's own c(δ) = {f['own_form']}; {fmt(f['plain'], 4, 'lower')} "
                              f"with ln(1/δ) "
                              f"(δ = {f['delta']:g}, n = {f['n']:g}; zero complexity)"))
        rows.append(("what dominates", breakdown_text(f)))
    if result.test_error is not None:
        gap = result.gap
        rows.append(("test error", f"{result.test_error:g} (held out); value − test error = "
                                   + ("—" if gap is None else f"{gap:.4g}")))
    return rows


def print_result(result: Result, console: Console) -> None:
    console.print(result_panel(result))


def _id_width(results: list[Result]) -> int:
    return max([len(r.id) for r in results] + [2])


def vacuity_caption(results: list[Result]) -> str:
    """What 'vacuous' means for these rows: ≥ 1, or ≥ the trivial predictor's error."""
    trivial = next((r.trivial for r in results if r.trivial), None)
    if not trivial:
        return "vacuous: ≥ 1 (no trivial-predictor error in the stats file)"
    both = []
    if "majority" in trivial:
        both.append(f"always the majority class of S errs {trivial['majority']:.3g}")
    if "guess" in trivial:
        both.append(f"guessing among K = {trivial['n_classes']} errs {trivial['guess']:.3g}")
    return (f"vacuous (0-1 risks): ≥ {min(1.0, trivial['error']):.3g}, the trivial predictor's "
            f"error ({'; '.join(both)})")


def certified_table(results: list[Result]) -> Table:
    """Certified rows: id (never cut), value, label head, vacuous, total δ; sorted by value."""
    t = Table(title="certified entries (bounds only where the label says 'certified bound')",
              caption="estimated: a stochastic input without its own confidence term; "
                      f"full labels: {command('optimize ID')}, or {option('json')}. "
                      + vacuity_caption(results), caption_justify="left")
    t.add_column("id", no_wrap=True, min_width=_id_width(results))
    t.add_column("value", justify="right", no_wrap=True)
    t.add_column("label", overflow="fold")
    t.add_column("vacuous", no_wrap=True)
    t.add_column("δ", justify="right", no_wrap=True)
    for r in sorted(results, key=lambda r: r.value):
        _row(t, r.id, value_cell(r), r.label_head,
             "—" if r.vacuous is None else ("yes" if r.vacuous else "no"), fmt(r.delta, 3))
    return t


def value_cell(r: Result, digits: int = 4) -> str:
    """The value with its unit when it is not a probability ('2.01 bits/token'), rounded as
    :meth:`Result.value_text` rounds it (a certified or conditional value up)."""
    return r.value_text(digits) + (f" {r.unit.replace(' per ', '/')}" if r.unit else "")


def certified_models_table(results: list[Result]) -> Table | None:
    """Beside each certified compression row about the user's model: which model it
    certifies (the decoded model's fingerprint, agreement on S, distance from the prior)."""
    rows = [r for r in results if r.certifies]
    if not rows:
        return None
    t = Table(title="the model each compression row certifies (the model its code decodes to)")
    t.add_column("id", no_wrap=True, min_width=_id_width(rows))
    t.add_column("certifies", overflow="fold", ratio=1)
    for r in sorted(rows, key=lambda r: r.value):
        _row(t, r.id, r.certifies["text"])
    return t


def another_model_table(results: list[Result]) -> Table:
    """Certified compression rows whose code decodes to another model than the user's (the
    prior, or a model that disagrees with it on S): listed apart, never the headline."""
    t = Table(title="certified, but about ANOTHER model than yours (listed apart)",
              caption="a compression bound certifies the model its code decodes to; these "
                      "codes decode to the prior or to a model that disagrees with yours on "
                      "S (boundcalc.which_model)", caption_justify="left")
    t.add_column("id", no_wrap=True, min_width=_id_width(results))
    t.add_column("value", justify="right", no_wrap=True)
    t.add_column("certifies", overflow="fold", ratio=1)
    for r in sorted(results, key=lambda r: r.value):
        _row(t, r.id, value_cell(r), r.certifies["text"])
    return t


def floor_table(results: list[Result]) -> Table:
    """Beside each certified row: its zero-complexity floor (the entry's own δ form), the
    union-bound cost, what dominates and, with a test error, the gap. The floor, a lower
    limit of the value, is rounded down (:func:`fmt`)."""
    from ..floor import breakdown_text

    test = any(r.test_error is not None for r in results)
    t = Table(title="zero-complexity floor and what dominates",
              caption="floor: kl⁻¹(ê, c(δ)/n), the value with zero complexity (c(δ): the "
                      "entry's own confidence term; —: not a kl inverse); dominates: the piece "
                      "whose removal lowers the value most; kl⁻¹(ê, ln(1/δ)/n) and every piece: "
                      + option("json") + ("; gap: value − held-out test error" if test else ""),
              caption_justify="left")
    t.add_column("id", no_wrap=True, min_width=_id_width(results))
    t.add_column("floor", justify="right", no_wrap=True)
    t.add_column("cost", justify="right", no_wrap=True)
    if test:
        t.add_column("gap", justify="right", no_wrap=True)
    t.add_column("dominates", overflow="fold", ratio=1)
    for r in sorted(results, key=lambda r: r.value):
        floor = r.floor
        cells = [r.id, fmt(floor["own"], 3, "lower") if floor else "—",
                 fmt(sum(r.union_bound_cost.values()), 3)]
        if test:
            cells.append(fmt(r.gap, 3))
        cells.append(breakdown_text(floor, short=True))
        _row(t, *cells)
    return t
