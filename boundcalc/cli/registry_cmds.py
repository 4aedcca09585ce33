"""Commands over the registry: list, show, evaluate, latex."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from .._lazy import lazy_function
from ..errors import BoundcalcError, one_line

# deferred: report.tables pulls numpy and SymPy, which `--help` does not need
entries_table = lazy_function("boundcalc.report.tables", "entries_table")
entry_panel = lazy_function("boundcalc.report.tables", "entry_panel")
print_result = lazy_function("boundcalc.report.tables", "print_result")
from .app import app, console, emit_json, guarded, registry
from .sets import ENTRY_ID, FIXED_HELP, JSON, SETS, STATS, parse_sets



@app.command("list")
def list_entries(
    family: Optional[str] = typer.Option(None, help="Only this family (e.g. pac_bayes)."),
    kind: Optional[str] = typer.Option(None, help="Only this kind: certified, conditional, rate or proxy."),
    requires: Optional[str] = typer.Option(
        None, help="Only entries binding to this stats path (prefix), e.g. matrix.QK"),
    wide: bool = typer.Option(False, "--wide", help="Also show each entry's title and source."),
    json_out: bool = typer.Option(False, "--json", help="Print a JSON array for scripts."),
) -> None:
    """List registry entries: id, kind and family (--wide adds title and source).

    Kinds: [green]certified[/] (a valid bound), [magenta]conditional[/] (a bound if its named
    conditions hold), [yellow]rate[/] (O(·), hidden constant), [cyan]proxy[/] (complexity
    measure).
    """
    reg = registry(symbolic=False)
    entries = guarded(lambda: reg.filter(family=family, kind=kind, requires=requires))
    if json_out:
        emit_json([e.summary() for e in entries])
    else:
        console.print(entries_table(entries, wide=wide))


@app.command("show")
def show(
    entry_id: str = ENTRY_ID,
    json_out: bool = JSON,
) -> None:
    """Show one entry: theorem source, provenance, kind, assumptions, symbols, parameters, LaTeX."""
    reg = registry()
    entry = guarded(lambda: reg.get(entry_id))
    latex = _latex_or_none(entry)
    if json_out:
        emit_json({
            **entry.summary(), "description": entry.description,
            "expression": entry.expression_text, "latex": latex,
            "definitions": {n: {"expr": d.text, "indices": list(d.indices)}
                            for n, d in entry.definitions.items()},
            "symbols": {s.name: {"meaning": s.meaning, "role": s.role,
                                 "domain": s.domain.text(), "indices": list(s.indices),
                                 "stat": s.stat, "default": s.default}
                        for s in entry.symbols.values()},
            "parameters": {p.name: {"choice": p.choice, "domain": p.domain.text(),
                                    "indices": list(p.indices),
                                    "closed_form": p.optimum.text if p.optimum else None,
                                    "note": p.note}
                           for p in entry.parameters.values()},
            "assumptions": [{"text": a.text, "check": a.check.text if a.check else None}
                            for a in entry.assumptions],
            "notes": entry.notes, "source_notes": _source_notes(entry),
        })
    else:
        console.print(entry_panel(entry, latex))


def _source_notes(entry) -> dict[str, str | None]:
    from ..report.source_notes import note_paths

    return note_paths(entry.provenance)


def _latex_or_none(entry) -> str | None:
    try:
        from ..report.latex import entry_latex
    except ImportError:
        return None
    return guarded(lambda: entry_latex(entry))


def _compute(entry_id: str, sets: list[str] | None, stats: Optional[Path],
             fixed: list[str] | None = None, symbolic: bool = True):
    from ..api import compute
    from ..stats import load_stats

    reg = registry(symbolic)

    def run():
        entry = reg.get(entry_id)
        values = parse_sets(sets)
        params = {k: values.pop(k) for k in list(values) if k in entry.parameters}
        st = load_stats(stats) if stats else None
        for name in fixed or []:
            if name not in params and name not in values:
                raise BoundcalcError(f"--fixed {one_line(name)[:60]}: no --set {one_line(name)[:60]}=VALUE given")
        from ..floor import annotate

        return entry, annotate(compute(entry, st, values, params, fixed=fixed or ()), entry, st)
    return guarded(run)


@app.command("evaluate")
def evaluate_cmd(
    entry_id: str = ENTRY_ID,
    sets: Optional[list[str]] = SETS,
    fixed: Optional[list[str]] = typer.Option(None, "--fixed", metavar="NAME", help=FIXED_HELP),
    stats: Optional[Path] = STATS,
    json_out: bool = JSON,
) -> None:
    """Evaluate an entry exactly at the given values.

    Free parameters take the value you set (used exactly: a grid point, charged to δ, unless
    --fixed NAME says it was chosen before seeing the data), else their default, else the best
    admissible grid point near their declared closed form (union-bound cost charged to δ).
    To choose them optimally use `boundcalc optimize`.

    Example: boundcalc evaluate mcallester --set emp_risk=0.05 --set KL=5000 --set n=60000
    """
    _, result = _compute(entry_id, sets, stats, fixed, symbolic=False)
    if json_out:
        emit_json(result.to_json())
    else:
        print_result(result, console)


@app.command("latex")
def latex_cmd(
    entry_id: str = ENTRY_ID,
    output: Path = typer.Option(..., "-o", "--output", help="The .tex file to write."),
    sets: Optional[list[str]] = SETS,
    stats: Optional[Path] = STATS,
    json_out: bool = typer.Option(False, "--json", help="Print JSON (the file written, the "
                                  "entry's LaTeX and, with values, the result) for scripts."),
) -> None:
    """Write a standalone LaTeX document: the bound in paper notation and, with values, the
    instantiated bound and a table of its terms."""
    try:
        from ..report.latex import write_latex
    except ImportError:
        guarded(lambda: (_ for _ in ()).throw(BoundcalcError("LaTeX export is not available")))
        return
    if sets or stats:
        entry, result = _compute(entry_id, sets, stats)
    else:
        entry, result = guarded(lambda: registry().get(entry_id)), None
    path = guarded(lambda: write_latex(output, entry, result))
    if json_out:
        emit_json({"output": str(path), "id": entry.id, "latex": _latex_or_none(entry),
                   "result": result.to_json() if result is not None else None})
    else:
        console.print(f"wrote {escape(str(path))}")
