"""`boundcalc optimize` and `boundcalc compare`: choose free parameters, explain the number."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer
from rich.markup import escape
from rich.console import Group
from rich.table import Table
from rich.text import Text

from .._lazy import lazy_function, lazy_module
from ..errors import BoundcalcError

if TYPE_CHECKING:
    from ..evaluation import Result

np = lazy_module("numpy")  # deferred: `--help` and other commands need neither numpy nor SymPy
bind = lazy_function("boundcalc.binding", "bind")
fmt = lazy_function("boundcalc.report.tables", "fmt")
target_words = lazy_function("boundcalc.report.summary", "target_words")
from .app import app, console, emit_json, fail, guarded, registry
from .progress import Stages, require_paths
from .sets import (ENTRY_ID, JSON, SETS, STATS, TEST_ERROR_HELP, check_test_error,
                   parse_sets)



# ---- optimize ------------------------------------------------------------------------------

def _optimize(entry_id: str, sets: list[str] | None, stats: Path | None, target: float | None,
              shrink: str | None, what_if: bool, test_error: float | None = None) -> Result:
    from ..optimize import optimize
    from ..stats import load_stats

    reg = registry()

    def run() -> Result:
        entry = reg.get(entry_id)
        values = parse_sets(sets)
        # target, shrink, what_if: optimize.core.Options checks them (its declarations)
        if shrink is not None and shrink not in entry.symbols:
            raise BoundcalcError(f"--shrink {shrink}: entry '{entry.id}' has no symbol '{shrink}'")
        st = load_stats(stats) if stats else None
        from ..floor import annotate

        return annotate(optimize(entry, st, values, registry=reg, what_if=what_if,
                                 target=target, shrink=shrink), entry, st, test_error)
    return guarded(run)


def _extra_tables(r: Result) -> list[Any]:
    """The optimizer's extras; a value of the bound at some point rounded as the result's
    own value is (:attr:`Result.value_side`: up for a certified or conditional entry)."""
    x, up = r.extra, r.value_side
    parts: list[Any] = []
    head = Table.grid(padding=(0, 1))
    head.add_column(style="bold")
    head.add_column()
    cert = x.get("certified_optimum")
    head.add_row("certified optimum", Text(("yes" if cert else "no")
                                           + f" ({x.get('certified_optimum_reason', '')})",
                                           style="green" if cert else "yellow"))
    opt = x.get("optimizer") or {}
    for name, chk in (opt.get("closed_form_check") or {}).items():
        head.add_row(f"closed form {name}",
                     f"{fmt(chk.get('closed_form'))} → value "
                     f"{fmt(chk.get('value_at_closed_form'), 8, up)} (optimum "
                     f"{fmt(chk.get('value_at_optimum', chk.get('value_at_numeric')), 8, up)},"
                     f" gap {fmt(chk.get('relative_gap'), 2)})")
    gp = opt.get("gp") or opt.get("gp_relaxation")
    if gp:
        head.add_row("geometric program" + (" (continuous relaxation)" if "gp_relaxation" in opt
                                            else ""), f"{gp.get('status')}"
                     + (f": {gp.get('reason')}" if gp.get("reason") else "")
                     + (f", value {fmt(gp.get('value'), 8, up)}" if gp.get("value") is not None
                        else ""))
    if x.get("comparison"):
        c = x["comparison"]
        head.add_row("per-group vs tied σ",
                     f"{fmt(c['per_group'], 6, up)} vs {fmt(c['tied'], 6, up)} (all σ_g "
                     f"tied, same costs): {fmt(c['relative_improvement'], 3)} relative improvement")
        if c.get("single") is not None:
            head.add_row("classic single σ",
                         f"{fmt(c['single'], 6, up)} (one Dziugaite–Roy charge, union cost "
                         f"{fmt(c['single_union_cost'], 4)} vs {fmt(c['per_group_union_cost'], 4)}"
                         f" for per-group σ; difference {fmt(c['difference_to_single'], 4)})")
    parts.append(head)
    contrib = x.get("contributions")
    if contrib and len(contrib["parts"]) > 1:
        t = Table(title="contributions (additive parts)")
        for col in ("part", "value", "share"):
            t.add_column(col, justify="right" if col != "part" else "left")
        for p in contrib["parts"]:
            t.add_row(p["name"], fmt(p["value"]), fmt(p["share"], 3))
        parts.append(t)
    for idx, info in (contrib or {}).get("by_index", {}).items():
        t = Table(title=f"contributions by {idx}", caption=f"{idx}: {info['meaning']}")
        t.add_column(idx, justify="right")
        t.add_column("total", justify="right")
        names = list(info["by_part"])
        for n in names:
            t.add_column(n, justify="right")
        vals = np.asarray(info["values"])
        for k in range(len(vals)):
            t.add_row(str(k), fmt(vals[k]), *[fmt(np.asarray(info["by_part"][n])[k])
                                              for n in names])
        parts.append(t)
    for p in (contrib or {}).get("parts", []):
        for inner in p.get("inner_sums", []):
            vals = np.asarray(inner["values"])
            if vals.ndim != 1:
                continue
            t = Table(title=f"{inner['name']} by {inner['indices'][0]}",
                      caption=f"a sum inside '{p['name']}' (not an additive part of the value)")
            t.add_column(inner["indices"][0], justify="right")
            t.add_column("value", justify="right")
            t.add_column("share", justify="right")
            for k, v in enumerate(vals):
                t.add_row(str(k), fmt(v), fmt(v / inner["value"] if inner["value"] else None, 3))
            parts.append(t)
    sel = x.get("selections") or []
    if sel:
        t = Table(title="grid value chosen per matrix (GridMin; rows: layer, columns: heads)")
        for col in ("parameter", "grid", "cost", "index", "chosen"):
            t.add_column(col, justify="right" if col in ("cost", "index") else "left")
        for s in sel:
            vals = np.asarray(s["values"], dtype=float)
            rows = vals if vals.ndim == 2 else vals.reshape(-1, 1)
            grid = f"{s['grid_size']} pts in [{s['grid_min']:g}, {s['grid_max']:g}]"
            for k, row in enumerate(rows):
                t.add_row(s["parameter"] if k == 0 else "", grid if k == 0 else "",
                          fmt(s["union_bound_cost"]) if k == 0 else "",
                          f"{s['indices'][0] if s['indices'] else ''}={k}",
                          " ".join(f"{v:.3g}" for v in row))
        parts.append(t)
    for note in x.get("selection_notes", []):
        parts.append(Text(f"note: {note}", style="yellow"))
    sens = x.get("sensitivity")
    if sens:
        t = Table(title="sensitivity at the optimum (parameters held fixed; arrays scaled whole)")
        for col in ("rank", "symbol", "role", "value", "∂B/∂c", "elasticity"):
            t.add_column(col, justify="right" if col in ("rank", "elasticity", "∂B/∂c") else
                         "left")
        for s in sens:
            d = s.get("scale_derivative") if s["indexed"] else s.get("derivative")
            t.add_row(str(s["rank"]), s["symbol"], s["role"],
                      "array" if s["indexed"] else fmt(s.get("value")), fmt(d),
                      fmt(s.get("elasticity"), 4))
        parts.append(t)
    wit = x.get("what_it_takes")
    if wit:
        parts.append(_what_if_table(r, wit))
    return parts


def selection_notes(selections: list[dict[str, Any]]) -> list[str]:
    """Explain a per-matrix grid choice that looks suspicious: every instance at the grid's
    lowest point (for the spectrum-adaptive entries p = 0, the rank term)."""
    low = [s for s in selections if np.asarray(s["values"]).size
           and np.all(np.asarray(s["values"], dtype=float) == s["grid_min"])]
    if not low:
        return []
    names = ", ".join(s["parameter"] for s in low)
    count = sum(np.asarray(s["values"]).size for s in low)
    text = (f"every instance of {names} ({count} in all) selects the lowest point of its grid "
            f"({low[0]['grid_min']:g}): there each term is "
            f"smallest, so its ratio to that value is above 1 at every other grid point.")
    if all((s["parameter"] == "p" or s["parameter"].startswith("p_")) and s["grid_min"] == 0
           for s in low):
        text += (" For the Schatten index: T_p/T_0 > 1 for every p > 0, because the spectral "
                 "scale γαL and the factor N^((p+1)/(p+2)) grow faster than the Schatten sum "
                 "shrinks, so the rank term √(rank·N) wins. Expected for trained BERT-size "
                 "models (MiniLM gives the same), not a bug.")
    return [text]


def _what_if_table(r: Result, wit: dict[str, Any]) -> Any:
    rows: list[Any] = []
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold")
    grid.add_column()
    sn = wit.get("smallest_n")
    if sn and sn.get("status") == "found":
        grid.add_row(f"smallest {sn['symbol']}",
                     f"{sn['n']} for a certified bound below {target_words(wit)} "
                     f"(now {fmt(sn['current'])}; bound re-optimised at each {sn['symbol']})"
                     + (f"; {sn['note']}" if sn.get("note") else ""))
    elif sn and sn.get("status") == "never":
        grid.add_row(f"smallest {sn['symbol']}", f"never below {target_words(wit)} up to "
                                                 f"{sn['cap']:g}")
    sh = wit.get("shrink")
    if sh:
        text = {"found": f"must shrink by ×{fmt(sh.get('factor'), 4)}",
                "never": f"never enough alone ({sh.get('note', '')})",
                "already below": "already below the target"}.get(sh["status"], sh["status"])
        grid.add_row(f"shrink {sh['symbol']}", text)
    if wit.get("note"):
        grid.add_row("note", wit["note"])
    rows.append(grid)
    for key in ("n", "delta"):
        t = (wit.get("table") or {}).get(key)
        if not t:
            continue
        table = Table(title=f"value against {t['symbol']}", caption="re-optimised at each point")
        table.add_column(t["symbol"], justify="right")
        table.add_column("value", justify="right")
        for row in t["rows"]:
            x = row[key]
            text = str(int(x)) if key == "n" and float(x).is_integer() and x < 1e15 else fmt(x)
            table.add_row(text, fmt(row["value"], 6, r.value_side))
        rows.append(table)
    return Group(*rows)


@app.command("optimize")
def optimize_cmd(
    entry_id: str = ENTRY_ID,
    sets: Optional[list[str]] = SETS,
    stats: Optional[Path] = STATS,
    json_out: bool = JSON,
    latex: Optional[Path] = typer.Option(None, "--latex", metavar="FILE",
                                         help="Also write a LaTeX document."),
    plot: Optional[Path] = typer.Option(None, "--plot", metavar="DIR",
                                        help="Write PNG plots into DIR."),
    report: Optional[Path] = typer.Option(None, "--report", metavar="FILE.md",
                                          help="Write a Markdown report (with --plot, linked)."),
    target: Optional[float] = typer.Option(
        None, "--target", help="Target for 'what would it take' (certified bounds only); "
                               "default: the vacuity level (the trivial predictor's error for "
                               "a 0-1 risk where the stats file gives it, else 1)."),
    shrink: Optional[str] = typer.Option(None, "--shrink", metavar="SYMBOL",
                                         help="Statistic whose needed shrinkage is reported "
                                              "(default: the most sensitive measured one)."),
    what_if: bool = typer.Option(True, "--what-if/--no-what-if",
                                 help="Compute smallest n, shrink factor and the n/δ tables."),
    test_error: Optional[float] = typer.Option(None, "--test-error", metavar="ERR",
                                               help=TEST_ERROR_HELP),
) -> None:
    """Choose the free parameters of an entry optimally and explain the number.

    Continuous parameters: SciPy (and a geometric program when the bound is log-log convex,
    giving a certified global optimum). Grid and prior parameters: exhaustive, with their
    union-bound cost charged to δ. Reports sensitivities (∂B/∂c, elasticities), contributions
    per term/layer/matrix, the Schatten index chosen per matrix, and what would it take.

    Example: boundcalc optimize pac_bayes_lambda --set emp_risk=0.05 --set KL=5000 --set n=60000
    """
    check_test_error(test_error)
    result = _optimize(entry_id, sets, stats, target, shrink, what_if, test_error)
    notes = selection_notes(result.extra.get("selections") or [])
    if notes:
        result.extra["selection_notes"] = notes
    plots: dict[str, Path] = {}
    if plot is not None:
        from ..report.plots import write_plots

        plots = guarded(lambda: write_plots(result, plot))
    if report is not None:
        from ..report.markdown import write_markdown

        guarded(lambda: write_markdown(report, result, plots))
    if latex is not None:
        _write_latex(latex, entry_id, result)
    if json_out:
        emit_json(result.to_json())
        return
    from ..report.tables import result_panel

    console.print(result_panel(result))
    console.print(Group(*_extra_tables(result)))
    for name, p in plots.items():
        console.print(f"wrote {escape(str(p))}")
    if report is not None:
        console.print(f"wrote {escape(str(report))}")
    if latex is not None:
        console.print(f"wrote {escape(str(latex))}")


def _write_latex(path: Path, entry_id: str, result: Result) -> None:
    try:
        from ..report.latex import write_latex
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.endswith("report.latex"):
            fail("--latex: LaTeX export (boundcalc.report.latex) is not available in this "
                 "installation")
        raise
    entry = guarded(lambda: registry().get(entry_id))
    guarded(lambda: write_latex(path, entry, result))


# ---- compare -------------------------------------------------------------------------------

@app.command("compare")
def compare_cmd(
    stats: Optional[Path] = STATS,
    model: Optional[str] = typer.Option(
        None, "--model", help="Measure this model first (a checkpoint path, a Hugging Face "
        "folder, or 'minilm' for the bundled MiniLM-L6) instead of reading --stats."),
    output: Optional[Path] = typer.Option(
        None, "-o", "--output", help="With --model: also write the measured stats file here."),
    sets: Optional[list[str]] = SETS,
    test_error: Optional[float] = typer.Option(None, "--test-error", metavar="ERR",
                                               help=TEST_ERROR_HELP),
    json_out: bool = JSON,
    brief: bool = typer.Option(False, "--brief", help="Only the headline, the certified rows "
                               "and one line per missing ingredient."),
) -> None:
    """Optimise every entry that applies to a stats file and show them side by side.

    First a headline: the least certified value about your model with its honest δ (the
    least of k rows re-evaluated at δ/k), or what is missing. Certified bounds in one table
    (vacuous: at or above the trivial predictor's error, or 1); compression rows whose code
    decodes to another model (the prior) apart; each row's zero-complexity floor and what
    dominates it (KL, grid cost, Monte Carlo step); rates and proxies in their own tables,
    which never call their numbers bounds; then every entry not computed with what it lacks.
    Rows that do not apply to the task (bits per token for a classifier) are hidden.
    """
    from ..stats import load_stats

    check_test_error(test_error)
    reg = registry()
    if (stats is None) == (model is None):
        fail("give exactly one of --stats FILE or --model MODEL")
    stages = Stages("compare")
    guarded(lambda: require_paths(stats=stats, model=model, output=None))
    if model is not None:
        from ..measure import measure

        st = guarded(lambda: measure(model, progress=stages.measure_progress(model)))
        if output is not None:
            guarded(lambda: st.save(output))
        stats = Path(output) if output is not None else Path(str(model))
    else:
        st = guarded(lambda: load_stats(stats))
    values = guarded(lambda: parse_sets(sets))
    from ..optimize.compare import compare_entries

    comparison = guarded(lambda: compare_entries(
        st, values, reg,
        track=lambda es: stages.track(es, len(es), "optimising the applicable entries"),
        test_error=test_error))
    stages.done()
    groups, failed, skipped = comparison.groups, comparison.failed, comparison.skipped
    if not any(groups.values()) and not failed:
        need = next((m for m in comparison.missing() if not m["by_hand"]), None)
        fail(f"{stats}: no registry entry applies to this stats file ("
             + (f"missing: {need['give']}, for {len(need['entries'])} certified "
                f"entries; " if need else "") + "add --set for missing symbols)")
    summary = _summary(comparison, test_error)
    if json_out:
        emit_json({k: [_compare_row(r) for r in v] for k, v in groups.items()}
                  | {"failed": failed, "skipped": skipped, "hidden": comparison.hidden}
                  | summary)
        _fail_if_nothing_computed(groups, failed)
        return
    _print_summary(summary)
    from ..report.tables import (another_model_table, certified_models_table,
                                 certified_table, floor_table)

    if comparison.about_users:
        console.print(certified_table(comparison.about_users))
        models = certified_models_table(comparison.about_users)
        if models is not None:
            console.print(models)
    if comparison.about_another:
        console.print(another_model_table(comparison.about_another))
    if brief:
        _fail_if_nothing_computed(groups, failed)
        return
    if groups["certified"]:
        console.print(floor_table(groups["certified"]))
    if groups["conditional"]:
        _conditional_table(groups["conditional"], console)
    if groups["rate"]:
        t = Table(title="rates (O(·) with the hidden constant you set; not bounds)")
        t.add_column("id", no_wrap=True)
        t.add_column("value", justify="right", no_wrap=True)
        t.add_column("hidden constants", overflow="fold")
        for r in groups["rate"]:
            t.add_row(r.id, r.value_text(6),
                      ", ".join(f"{k}={v:g}" for k, v in r.hidden_constants.items()))
        console.print(t)
    if groups["proxy"]:
        t = Table(title="proxies (complexity measures; compare models, not with 1)")
        t.add_column("id", no_wrap=True)
        t.add_column("value", justify="right", no_wrap=True)
        for r in groups["proxy"]:
            t.add_row(r.id, r.value_text(6))
        console.print(t)
    if not groups["certified"] and not groups["rate"] and \
            not any(k in st.scalars for k in ("emp_risk", "loss_mean")):
        console.print(Text("no certified bound and no rate: they need data statistics "
                           "(boundcalc measure MODEL --data DATA); the entries not computed "
                           "below say what each lacks", style="dim"))
    m = st.model
    if m:
        console.print(Text(f"model: {m.get('architecture', '?')}, {m.get('n_layers', '?')} layers "
                           f"× {m.get('n_heads', '?')} heads, hidden {m.get('hidden', '?')}",
                           style="dim"))
    if skipped:
        console.print(_skipped_table(skipped))
    if comparison.hidden:
        console.print(Text(f"{len(comparison.hidden)} entries hidden: they do not apply to "
                           f"this task ({comparison.hidden[0]['reason']}): "
                           + ", ".join(h["id"] for h in comparison.hidden), style="dim"))
    console.print(Text("methods, parameters and δ accounting: boundcalc compare --json, or "
                       "boundcalc optimize ID", style="dim"))
    for f in failed:
        console.print(Text(f"{f['id']}: not computed: {f['error']}", style="yellow"))
    _fail_if_nothing_computed(groups, failed)


def _fail_if_nothing_computed(groups: dict[str, list], failed: list[dict[str, Any]]) -> None:
    """Exit 4 (a domain error) when entries were evaluated and every bound and rate among them
    failed (``--set delta=0``): a run that computed no bound is not a success, whatever
    proxies it printed."""
    if failed and not (groups["certified"] or groups["conditional"] or groups["rate"]):
        fail(f"no bound computed: all {len(failed)} evaluated bounds failed, the first with: "
             f"{failed[0]['id']}: {failed[0]['error']}", 4)


def _summary(comparison: Any, test_error: float | None) -> dict[str, Any]:
    """The headline, how the least certified value is quoted, the missing ingredients and
    the guidance line (strings; also compare --json's 'headline', 'minimum', ...)."""
    from ..report import compare_view as view

    m = comparison.minimum
    best = next((r for r in comparison.about_users if m and r.id == m["id"]), None)
    has_certify = "certify" in {c.name or c.callback.__name__ for c in app.registered_commands}
    missing = comparison.missing()
    return {"headline": view.headline(m, comparison.about_another, comparison.groups.get(
                "certified", []), test_error),
            "minimum": m, "minimum_text": view.minimum_line(m) if m else None,
            "missing": missing, "missing_text": view.missing_lines(missing),
            "guidance": view.guidance_line(best, has_certify)}


def _print_summary(summary: dict[str, Any]) -> None:
    console.print(Text(summary["headline"], style="bold"))
    if summary["minimum_text"]:
        console.print(Text(summary["minimum_text"]))
    for line in summary["missing_text"]:
        console.print(Text(line, style="yellow"))
    if summary["guidance"]:
        console.print(Text(summary["guidance"], style="bold yellow"))


def _conditional_table(results: list[Any], console: Any) -> None:
    """Conditional entries: each value printed with the condition it rests on, never vs 1."""
    t = Table(title="conditional (upper bounds only if the condition holds; not certified, "
                    "not compared with 1)")
    t.add_column("id", no_wrap=True)
    t.add_column("value", justify="right", no_wrap=True)
    t.add_column("holds only if", overflow="fold")
    for r in sorted(results, key=lambda r: r.value):
        t.add_row(r.id, r.value_text(6), "; ".join(r.condition_names)
                  + (" (estimated inputs)" if r.estimated else ""))
    console.print(t)
    console.print(Text("the conditions in full: boundcalc show ID, or compare --json",
                       style="dim"))


def _compare_row(r: Result) -> dict[str, Any]:
    return {"id": r.id, "kind": r.kind, "label": r.label, "value": r.value if
            math.isfinite(r.value) else None, "value_text": r.value_text(),
            "is_bound": r.is_bound, "vacuous": r.vacuous, "vacuous_against": r.vacuous_text,
            "floor": r.floor, "trivial": r.trivial, "test_error": r.test_error, "gap": r.gap,
            "conditions": r.conditions, "certifies": r.certifies,
            "predictor": r.predictor, "unit": r.unit,
            "delta": r.delta,
            "delta_effective": r.delta_effective,
            "union_bound_cost": r.union_bound_cost, "method": r.method,
            "certified_optimum": r.extra.get("certified_optimum"),
            "hidden_constants": r.hidden_constants, "parameters": r.parameters,
            "terms": r.terms, "assumptions": r.assumptions}


def _skipped_table(skipped: list[dict[str, Any]]) -> Table:
    t = Table(title=f"{len(skipped)} entries not computed: values this stats file lacks",
              caption="each missing value, then what gives it: --set NAME=VALUE, or run "
                      "`boundcalc measure` again with the flag named (meanings and stats "
                      "paths: --json)", caption_justify="left")
    t.add_column("id", no_wrap=True)
    t.add_column("lacks → what gives it", overflow="fold", ratio=1)
    for row in skipped:
        lacks = row.get("lacks") or row.get("error", "")
        t.add_row(Text(row["id"]), Text(lacks))
    return t
