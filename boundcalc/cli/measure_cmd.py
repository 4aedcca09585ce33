"""``boundcalc measure``: measure a checkpoint and write the stats file."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from .app import app, console, emit_json, err_console, guarded
from .progress import Stages, require_paths


def _summary(stats, output: Path) -> dict:
    counts = Counter(m.type for m in stats.matrices)
    return {"output": str(output), "model": stats.model,
            "matrices": dict(sorted(counts.items())),
            "roles": dict(sorted(Counter(e["role"] for e in stats.layer_map).items())),
            "excluded": stats.excluded,
            "scalars": {k: q.to_json() for k, q in sorted(stats.scalars.items())}}


def _print(stats, output: Path, show_map: bool) -> None:
    m = stats.model
    console.print(f"[bold]{m['architecture']}[/]: {m['n_layers']} layers x {m['n_heads']} heads "
                  f"(kv {m['n_kv_heads']}), hidden {m['hidden']}, head dim {m['head_dim']}, "
                  f"intermediate {m['intermediate']}, {m['n_params']:,} parameters",
                  highlight=False)
    for note in m.get("notes", []):
        console.print(f"  note: {note}", highlight=False)
    roles = Counter(e["role"] for e in stats.layer_map)
    console.print("layer map: " + ", ".join(f"{r} {c}" for r, c in sorted(roles.items()))
                  + f"; excluded {len(stats.excluded)}", highlight=False)
    if show_map:
        for e in stats.layer_map:
            extra = (f" rows {e['rows']}" if "rows" in e else "") + \
                    (" (transposed)" if e.get("transposed") else "")
            console.print(f"  {e['name']}  {e['role']}  layer={e['layer']}  group={e['group']}"
                          f"{extra}", highlight=False)
    for x in stats.excluded:
        console.print(f"  excluded {x['name']}: {x['reason']}", highlight=False)
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
        console.print(f"  {name} = {q.value:.6g}", highlight=False)
    console.print(f"wrote {output}", highlight=False)


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
    compress: Optional[str] = typer.Option(
        None, "--compress", help="code length for compression bounds: 'all' weights or the "
        "'delta' from --init, quantized; needs --data and an HF folder with a task head"),
    quantizer: str = typer.Option("uniform", "--quantizer", help="uniform | kmeans levels"),
    levels: str = typer.Option("2,4,8,16,32,64", "--levels", help="level counts to try; the "
                               "choice costs log2(count) bits inside the code"),
    codebook_bits: int = typer.Option(16, "--codebook-bits", help="bits per codebook level "
                                      "(16 or 32)"),
    prefix: str = typer.Option("none", "--prefix", help="none | authors (add 2·log2 L bits)"),
    max_changed: Optional[float] = typer.Option(None, "--max-changed", help="refuse a quantizer "
                                                "changing more than this fraction of predictions"),
) -> None:
    """Measure per-matrix, per-head and data statistics of a checkpoint into a stats file."""

    def run() -> None:
        if compress is not None:  # option checks: cheapest first
            from ..measure.compression import add_compression, compression_options

            opts = compression_options(compress, quantizer, levels, codebook_bits, prefix,
                                       max_changed, data)
        require_paths(model=model, init=init)  # before torch and the model are loaded
        stages = Stages("measure")
        from ..measure import measure

        stats = measure(model, init=init, data=data, device=device, n_heads=n_heads,
                        progress=stages.measure_progress(model))
        if compress is not None:
            add_compression(stats, model, data, init, **opts)
        path = stats.save(output)
        stages.done()
        if as_json:
            emit_json(_summary(stats, path))
        else:
            _print(stats, path, show_map)

    guarded(run)
