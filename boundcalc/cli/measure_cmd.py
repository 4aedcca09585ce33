"""``boundcalc measure``: measure a checkpoint and write the stats file."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from .app import app, console, emit_json, err_console, guarded


def _summary(stats, output: Path) -> dict:
    counts = Counter(m.type for m in stats.matrices)
    return {"output": str(output), "model": stats.model,
            "matrices": dict(sorted(counts.items())),
            "roles": dict(sorted(Counter(e["role"] for e in stats.layer_map).items())),
            "excluded": stats.excluded,
            "scalars": {k: q.to_json() for k, q in sorted(stats.scalars.items())}}


def _print(stats, output: Path, show_map: bool) -> None:
    m = stats.model
    console.print(f"[bold]{escape(str(m['architecture']))}[/]: {m['n_layers']} layers x {m['n_heads']} heads "
                  f"(kv {m['n_kv_heads']}), hidden {m['hidden']}, head dim {m['head_dim']}, "
                  f"intermediate {m['intermediate']}, {m['n_params']:,} parameters",
                  highlight=False)
    for note in m.get("notes", []):
        console.print(f"  note: {escape(str(note))}", highlight=False)
    roles = Counter(e["role"] for e in stats.layer_map)
    console.print("layer map: " + ", ".join(f"{r} {c}" for r, c in sorted(roles.items()))
                  + f"; excluded {len(stats.excluded)}", highlight=False)
    if show_map:
        for e in stats.layer_map:
            extra = (f" rows {e['rows']}" if "rows" in e else "") + \
                    (" (transposed)" if e.get("transposed") else "")
            console.print(f"  {escape(str(e['name']))}  {e['role']}  layer={e['layer']}  group={escape(str(e['group']))}"
                          f"{extra}", highlight=False)
    for x in stats.excluded:
        console.print(f"  excluded {escape(str(x['name']))}: {escape(str(x['reason']))}", highlight=False)
    table = Table(title="per-type summary (mean over matrices)")
    for col in ("type", "count", "spectral", "frobenius", "norm_21", "rank", "stable_rank"):
        table.add_column(col, justify="right" if col != "type" else "left")
    df = stats.to_dataframe()
    for mtype, sub in df.groupby("type", sort=False):
        table.add_row(str(mtype), str(len(sub)), *(f"{sub[c].mean():.4g}" for c in
                                                   ("spectral", "frobenius", "norm_21", "rank",
                                                    "stable_rank")))
    console.print(table)
    for name, q in sorted(stats.scalars.items()):
        if name in ("n_layers", "n_heads", "n_kv_heads", "hidden", "head_dim", "intermediate"):
            continue
        console.print(f"  {escape(str(name))} = {q.value:.6g}", highlight=False)
    console.print(f"wrote {escape(str(output))}", highlight=False)


@app.command("measure")
def measure_cmd(
    model: str = typer.Argument(..., help="HF folder, .safetensors file, sharded index json or "
                                          "torch state_dict"),
    init: Optional[str] = typer.Option(None, "--init", help="initial weights (same format)"),
    data: Optional[str] = typer.Option(None, "--data", help=".pt/.npz/.safetensors with "
                                                            "'inputs' (and 'targets')"),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda"),
    n_heads: Optional[int] = typer.Option(None, "--n-heads", min=1,
                                          help="attention heads, when no config.json says so"),
    output: Path = typer.Option(Path("stats.json"), "-o", "--output", help="stats file to write"),
    as_json: bool = typer.Option(False, "--json", help="print a JSON summary instead of tables"),
    show_map: bool = typer.Option(False, "--show-map", help="print every layer-map entry"),
) -> None:
    """Measure per-matrix, per-head and data statistics of a checkpoint into a stats file."""

    def run() -> None:
        from ..measure import measure

        stats = measure(model, init=init, data=data, device=device, n_heads=n_heads,
                        progress=not as_json and err_console.is_terminal)
        path = stats.save(output)
        if as_json:
            emit_json(_summary(stats, path))
        else:
            _print(stats, path, show_map)

    guarded(run)
