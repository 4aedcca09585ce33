"""``boundcalc sweep`` (a model zoo → one results table) and ``boundcalc correlate``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table
from rich.text import Text

from .app import app, console, emit_json, err_console, fail, guarded
from .sets import JSON


def _reporter(quiet: bool):
    """A rich bar on a terminal, one-line stage messages on stderr otherwise (at most one per
    5 s, and the last); nothing when quiet."""
    if quiet:
        return None, lambda: None
    if err_console.is_terminal:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                       TextColumn("{task.fields[extra]}"), console=err_console, transient=True)
        tasks: dict[str, Any] = {}
        bar.start()

        def update(state) -> None:
            if state.stage not in tasks:
                tasks[state.stage] = bar.add_task(state.stage, total=state.total, extra="")
            rate, eta = state.per_minute, state.eta
            bar.update(tasks[state.stage], completed=state.done,
                       extra=(f"{rate:.3g}/min" if rate else "")
                       + (f", ETA {eta:.0f} s" if eta is not None else "")
                       + (f", {state.failed} failed" if state.failed else ""))
        return update, bar.stop
    last = {"t": 0.0}

    def line(state) -> None:
        now = time.monotonic()
        if state.done in (0, state.total) or now - last["t"] >= 5.0:
            last["t"] = now
            err_console.print(state.line(), highlight=False, soft_wrap=True)
    return line, lambda: None


@app.command("sweep")
def sweep_cmd(
    manifest: str = typer.Argument(..., metavar="MANIFEST",
                                   help="CSV/Parquet with a 'path' column (optional init, data, "
                                        "n_heads, set:SYMBOL, hp:NAME, any carried column), or "
                                        "a quoted glob of checkpoints."),
    out: Path = typer.Option(..., "--out", metavar="DIR",
                             help="Folder for results.csv, results.parquet and the stats files "
                                  "(rerun into the same DIR to resume)."),
    ray: bool = typer.Option(False, "--ray", help="Run the tasks on Ray (pip install "
                                                  "'boundcalc\\[ray]') instead of local processes."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", metavar="ADDR",
                                              help="Connect to an existing Ray cluster "
                                                   "(implies --ray)."),
    workers: int = typer.Option(1, "--workers", "-j", min=1,
                                help="Local processes (or local Ray CPUs)."),
    split_layers: bool = typer.Option(False, "--split-layers",
                                      help="One task per layer of each checkpoint (for huge "
                                           "checkpoints), merged into one stats file."),
    target: Optional[str] = typer.Option(None, "--target", metavar="COLUMN",
                                         help="Also rank every entry against this manifest "
                                              "column (see `boundcalc correlate`)."),
    bootstrap: int = typer.Option(1000, "--bootstrap", min=0,
                                  help="Bootstrap resamples for --target's intervals."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress messages."),
    json_out: bool = JSON,
) -> None:
    """Measure every checkpoint of a model zoo and optimise every applicable entry.

    One row per checkpoint × entry in DIR/results.csv and DIR/results.parquet (path, id, kind,
    value, δ, parameters, stats file, and the manifest's own columns). A rerun into the same DIR
    reuses every row whose checkpoint bytes, formula files and options are unchanged. A task
    that fails (bad checkpoint, killed worker, after retries) is recorded with its one-line
    error and the sweep goes on.

    Example: boundcalc sweep zoo.csv --out sweep/ -j 2 --target test_error
    """
    from ..sweep import read_manifest, run_sweep
    from ..sweep.manifest import registry_symbols
    from .app import _state, registry

    reg = registry()
    m = guarded(lambda: read_manifest(manifest, target=target,
                                      known_symbols=registry_symbols(reg)))
    update, stop = _reporter(quiet or json_out)
    try:
        outcome = guarded(lambda: run_sweep(m, out, ray=ray, ray_address=ray_address,
                                            workers=workers, split_layers=split_layers,
                                            formulas=_state["formulas"], progress=update))
    finally:
        stop()
    summary = {"out": str(out), "results_csv": str(out / "results.csv"),
               "results_parquet": str(out / "results.parquet"), "rows": len(m.rows),
               "computed": outcome.computed, "cached": outcome.cached,
               "failed": outcome.failed, "executor": outcome.executor,
               "seconds": round(outcome.seconds, 3)}
    corr = None
    if target is not None:
        from ..sweep.correlate import correlate, write_correlation

        corr = guarded(lambda: correlate(outcome.table, target, n_bootstrap=bootstrap))
        guarded(lambda: write_correlation(corr, out))
    if json_out:
        if corr is not None:
            summary["correlation"] = corr.table.to_dict(orient="records")
        emit_json(summary)
        return
    ok = outcome.table[outcome.table["status"] == "ok"]
    console.print(f"{len(m.rows)} checkpoints ({outcome.computed} computed, {outcome.cached} "
                  f"reused, {len(outcome.failed)} failed) on {outcome.executor} in "
                  f"{outcome.seconds:.1f} s; {len(ok)} entry values", highlight=False)
    for f in outcome.failed:
        console.print(Text(f"row {f['row']} ({f['path']}): failed: {f['error']}",
                           style="yellow"))
    if corr is not None:
        _print_correlation(corr)
        console.print(f"wrote {out / 'correlation.csv'}, {out / 'correlation.png'}",
                      highlight=False)
    console.print(f"wrote {out / 'results.csv'}, {out / 'results.parquet'}", highlight=False)


def _print_correlation(corr) -> None:
    from rich import box

    t = corr.table
    table = Table(title=f"rank correlation with {corr.target}, best first (kinds ranked "
                        "together; tracking does not make a proxy a bound)", box=box.SIMPLE,
                  pad_edge=False, show_edge=False, collapse_padding=True)
    # ids whole at 80 columns: no column wraps, and the padding is collapsed to fit
    table.add_column("id", no_wrap=True, min_width=max([len(str(i)) for i in t["id"]] + [2]))
    table.add_column("kind", no_wrap=True)
    for col in ("τ", f"τ {corr.confidence:.0%} CI", "ρ", "Ψ"):
        table.add_column(col, justify="right", no_wrap=True)
    for _, row in t.iterrows():
        psi = row.get("granulated_tau")
        ci = (f"[{row['tau_lo']:+.2f},{row['tau_hi']:+.2f}]" if "tau_lo" in row
              and row["tau_lo"] == row["tau_lo"] else "—")
        table.add_row(str(row["id"]), str(row["kind"]), f"{row['kendall_tau']:+.2f}", ci,
                      f"{row['spearman_rho']:+.2f}",
                      "—" if psi is None or psi != psi else f"{psi:+.2f}")
    console.print(table)
    n = t["n"]
    caption = (f"τ: Kendall τ-b, bootstrap interval from {corr.n_bootstrap} resamples; ρ: "
               f"Spearman; {n.min()}–{n.max()} checkpoints per entry")
    if corr.hyperparameters:
        caption += (f"; Ψ: granulated τ (Jiang et al. 2020) over "
                    f"{', '.join(corr.hyperparameters)}")
    console.print(Text(caption, style="dim"))
    if t.attrs.get("left_out"):
        console.print(Text("left out (fewer than 3 checkpoints): "
                           + ", ".join(t.attrs["left_out"]), style="dim"))


@app.command("correlate")
def correlate_cmd(
    table: Path = typer.Argument(..., metavar="TABLE",
                                 help="results.csv or results.parquet written by `sweep`."),
    target: str = typer.Option(..., "--target", metavar="COLUMN",
                               help="The generalization column (test error, gap, ...)."),
    hparams: Optional[list[str]] = typer.Option(
        None, "--hparam", metavar="COLUMN",
        help="Hyper-parameter column for the granulated τ (repeatable; default: every hp: "
             "column)."),
    bootstrap: int = typer.Option(1000, "--bootstrap", min=0,
                                  help="Bootstrap resamples for the intervals (0: none)."),
    confidence: float = typer.Option(0.95, "--confidence", help="Interval coverage."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
    out: Optional[Path] = typer.Option(None, "--out", metavar="DIR",
                                       help="Write correlation.csv and correlation.png here."),
    json_out: bool = JSON,
) -> None:
    """Rank every entry of a sweep by how well it tracks generalization.

    Kendall τ and Spearman ρ of each entry's value against the target over the checkpoints,
    with bootstrap intervals, and Jiang et al.'s granulated Kendall τ (Ψ) over the declared
    hyper-parameters: the mean over hyper-parameters of τ among models that differ in that one
    only. Certified, rate and proxy entries are ranked together, labelled with their kind.

    Example: boundcalc correlate sweep/results.csv --target test_error
    """
    from ..sweep.correlate import correlate, write_correlation

    corr = guarded(lambda: correlate(table, target, hyperparameters=hparams,
                                     n_bootstrap=bootstrap, confidence=confidence, seed=seed))
    if out is not None:
        guarded(lambda: write_correlation(corr, out))
    if json_out:
        emit_json({"target": target, "hyperparameters": corr.hyperparameters,
                   "ranked_by": corr.table.attrs.get("ranked_by"),
                   "left_out": corr.table.attrs.get("left_out", []),
                   "entries": corr.table.to_dict(orient="records")})
        return
    _print_correlation(corr)
    if out is not None:
        console.print(f"wrote {out / 'correlation.csv'}, {out / 'correlation.png'}",
                      highlight=False)
