"""What ``measure`` says about the stats file it wrote: the weights side (architecture, layer
map, per-type norms), the data side (data statistics, Monte Carlo Gibbs risk, per-group σ,
compression) and the ``--json`` summary.

Contract: every function reads a :class:`~boundcalc.stats.Stats` as written by the measurement
and prints to the ``console`` it is given (or returns plain data); none measures or changes
anything. Text from the stats file (paths, names, notes) is escaped, so rich markup in it is
printed as written. Options are named in the caller's words (:func:`boundcalc.words.option`).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..rounding import lower_text, upper_text
from ..words import option

_SHAPE = ("n_layers", "n_heads", "n_kv_heads", "hidden", "head_dim", "intermediate")
_TYPE_COLUMNS = ("spectral", "frobenius", "norm_21", "rank", "stable_rank")
_DATA_ROWS = (("n", "n"), ("emp_risk", "0-1 risk"), ("loss_mean", "mean loss (nats)"),
              ("margin_q05", "margin 5%"), ("margin_q50", "margin median"),
              ("input_token_norm_max", "B_X"), ("seq_len", "T"),
              ("dist_init_total", "‖w − w_prior‖"), ("hessian_trace", "tr H"))


def measure_summary(stats: Any, output: Path, data_side: bool) -> dict[str, Any]:
    """The ``--json`` summary: model, matrix and role counts, exclusions, prior, scalars; with
    ``data_side`` also every curve and the provenance."""
    counts = Counter(m.type for m in stats.matrices)
    out = {"output": str(output), "model": stats.model,
           "matrices": dict(sorted(counts.items())),
           "roles": dict(sorted(Counter(e["role"] for e in stats.layer_map).items())),
           "excluded": stats.excluded, "prior": stats.provenance.get("prior"),
           "scalars": {k: q.to_json() for k, q in sorted(stats.scalars.items())}}
    if data_side:
        out["curves"] = {k: c.to_json() for k, c in sorted(stats.curves.items())}
        out["provenance"] = stats.provenance
    return out


def _mean(rows: list, key: str) -> float:
    vals = [r[key] for r in rows if key in r and r[key] == r[key]]
    return sum(vals) / len(vals) if vals else float("nan")


def print_weights(stats: Any, output: Path, console: Console, show_map: bool = False) -> None:
    """The weights side: architecture, layer map (every entry with ``show_map``), exclusions,
    the per-type means of the matrix norms, the scalars, the prior centre, the file written."""
    m = stats.model
    console.print(f"[bold]{escape(str(m['architecture']))}[/]: {m['n_layers']} layers x "
                  f"{m['n_heads']} heads (kv {m['n_kv_heads']}), hidden {m['hidden']}, head dim "
                  f"{m['head_dim']}, intermediate {m['intermediate']}, {m['n_params']:,} "
                  "parameters", highlight=False)
    for note in m.get("notes", []):
        console.print(f"  note: {escape(str(note))}", highlight=False)
    roles = Counter(e["role"] for e in stats.layer_map)
    console.print("layer map: " + ", ".join(f"{r} {c}" for r, c in sorted(roles.items()))
                  + f"; excluded {len(stats.excluded)}", highlight=False)
    if show_map:
        for e in stats.layer_map:
            extra = (f" rows {e['rows']}" if "rows" in e else "") + \
                    (" (transposed)" if e.get("transposed") else "")
            console.print(f"  {escape(str(e['name']))}  {e['role']}  layer={e['layer']}  "
                          f"group={escape(str(e['group']))}{extra}", highlight=False)
    for x in stats.excluded:
        console.print(f"  excluded {escape(str(x['name']))}: {escape(str(x['reason']))}",
                      highlight=False)
    table = Table(title="per-type summary (mean over matrices)")
    for col in ("type", "count", *_TYPE_COLUMNS):
        table.add_column(col, justify="right" if col != "type" else "left")
    by_type: dict[str, list] = {}  # grouped by hand: pandas would add ~0.5 s to every measure
    for mat in stats.matrices:
        by_type.setdefault(mat.type, []).append(mat.stats)
    for mtype, sub in by_type.items():
        table.add_row(str(mtype), str(len(sub)), *(f"{_mean(sub, c):.4g}" for c in _TYPE_COLUMNS))
    console.print(table)
    for name, q in sorted(stats.scalars.items()):
        if name not in _SHAPE:
            console.print(f"  {escape(str(name))} = {q.value:.6g}", highlight=False)
    console.print(_prior_line(stats), highlight=False)
    console.print(f"wrote {escape(str(output))}", highlight=False)


def _prior_line(stats: Any) -> str:
    """One line: the prior centre (kind, tensors it lacked), or which one to choose."""
    from ..prior_spec import hint

    prior = stats.provenance.get("prior")
    if not prior:
        return escape(hint())
    return escape(str(prior.get("summary") or f"prior centre: {prior.get('init')}"))


def print_data(stats: Any, output: Path, console: Console, sigma_given: bool = True) -> None:
    """The data side: DATA and the prior centre, the data statistics, the Monte Carlo Gibbs
    risk per σ (with :func:`snap_notes` when the σ were the user's), the per-group σ, the
    compression, the file written."""
    sc, pv = stats.scalars, stats.provenance
    console.print(f"data: {escape(str(pv.get('data')))} ({int(sc['n'].value)} samples, task "
                  f"{escape(str(pv.get('task')))})", highlight=False)
    note = str(pv.get("prior_note"))  # stored in keywords: without a prior, say it afresh
    console.print(escape(f"prior centre: {note}") if pv.get("prior") else _prior_line(stats),
                  highlight=False)
    table = Table(title="data statistics")
    table.add_column("statistic")
    table.add_column("value", justify="right")
    table.add_column("name in stats file", overflow="fold")
    for key, label in _DATA_ROWS:
        if key in sc:
            q = sc[key]
            ci = (f" [{lower_text(q.ci[0], 3)}, {upper_text(q.ci[1], 3)}]"  # outward
                  if q.ci is not None else "")
            table.add_row(label, f"{q.value:.4g}{ci}", key)
    console.print(table)
    _print_gibbs(stats, console, sigma_given)
    _print_groups(stats, console)
    _print_compression(stats, console)
    for line in (pv.get("more_draws") or {}).get("lines", []):
        console.print(escape(f"more draws: {line}"), highlight=False)
    console.print(f"wrote {escape(str(output))}", highlight=False)


def _print_gibbs(stats: Any, console: Console, sigma_given: bool) -> None:
    """The isotropic Monte Carlo Gibbs risk: mean and kl upper end per σ (an upper confidence
    limit: rounded up)."""
    c = stats.curves.get("gibbs_risk_mean")
    if c is None:
        return
    pv = stats.provenance
    mode = pv.get("gibbs_mode", "whole")
    prec = (pv.get("precision") or {}).get("data_side", "fp32")
    t = Table(title=f"Monte Carlo Gibbs risk (N = {c.n_samples} losses per σ, {mode} mode, "
                    f"{prec} arithmetic)")
    t.add_column("σ", justify="right")
    t.add_column("mean", justify="right")
    t.add_column(f"kl upper ({c.confidence:.0%})", justify="right")
    for x, v, ci in zip(c.at, c.value, c.ci if c.ci is not None else [None] * len(c.at)):
        t.add_row(f"{x:.4g}", f"{v:.4f}", "—" if ci is None else upper_text(ci[1], 4))
    console.print(t)
    for line in snap_notes(pv.get("sigma_snapped", [])) if sigma_given else []:
        console.print(f"  note: {line}", highlight=False)
    chosen = pv.get("gibbs_sigma")
    if isinstance(chosen, dict):
        console.print(escape(f"  σ = {chosen.get('sigma', 0):.4g} chosen on "
                             f"{chosen.get('chosen_on')}: {chosen.get('note')}"), highlight=False)


def _print_groups(stats: Any, console: Console) -> None:
    """The per-group σ_g, their distances, the Gibbs risk on DATA and where ρ and c were chosen."""
    rec, c = stats.provenance.get("gibbs_groups"), stats.curves.get("gibbs_risk_groups")
    if rec is None or c is None:
        return
    t = Table(title=f"per-group σ_g = {rec['scale']:.3g}·ρ_g; Gibbs risk on DATA "
                    f"{c.value[0]:.4f}, kl upper {upper_text(c.ci[0][1], 4)} ({c.n_samples} "
                    f"draws)")
    for col in ("group", "params", "‖w_g − w₀,g‖²", "σ_g"):
        t.add_column(col, justify="left" if col == "group" else "right")
    for g, d, dist, s in zip(rec["groups"], rec["n_params"], rec["dist_sq"], rec["sigma"]):
        t.add_row(escape(str(g)), str(d), f"{dist:.3g}", f"{s:.3g}")
    console.print(t)
    console.print(f"ρ (shape): {escape(str(rec['shape_chosen_on']))}: "
                  f"{escape(str(rec['shape_note']))}; scale: "
                  f"{escape(str(rec['scale_chosen_on']))}", highlight=False)


def _print_compression(stats: Any, console: Console) -> None:
    """One line on the compressed model: levels, code length, quantized error, agreement."""
    comp = stats.provenance.get("compression")
    if not comp:
        return
    sc = stats.scalars
    console.print(f"compression ({escape(str(comp.get('select')))}): "
                  f"{int(sc['quant_levels'].value)} levels, {sc['code_bits'].value:,.0f} bits; "
                  f"quantized error {sc['quantized_error'].value:.4g} (trained "
                  f"{sc['float_error'].value:.4g}); agrees with the trained model on "
                  f"{comp['agreement']:.1%} of the predictions", highlight=False)


def snap_notes(snaps: list) -> list[str]:
    """One line per requested σ that was moved to a Dziugaite–Roy grid point (or merged with
    another σ on the same point), each short enough for one 80-column line after
    '  note: '. Printed only for σ the user gave (the default σ are grid points by design)."""
    out, seen = [], {}
    for p in snaps:
        sigma = option("sigma", f"{p['requested']:.6g}")
        if p["j"] in seen:
            out.append(f"{sigma} shares grid point j = {p['j']} with {seen[p['j']]:.6g}")
        elif p.get("moved"):
            out.append(f"{sigma} measured at grid point σ = {p['used']:.6g} (j = {p['j']})")
        seen.setdefault(p["j"], p["requested"])
    return out
