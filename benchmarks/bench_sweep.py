#!/usr/bin/env python
"""Sweep throughput (checkpoints per minute) and per-layer cost, for planning cluster runs.

1. Throughput: the same manifest of BERT-shaped checkpoints (hidden 128, 4 layers, 4 heads,
   each with an init) swept into a fresh folder by the local executor and by Ray, with 1 and
   2 workers. Reported: whole-sweep wall time including worker start-up, and the steady-state
   rate (checkpoints finished after the first one, over the time from the first to the last).
2. Per-layer cost: ``measure_layer`` (one thread, float64) on one LLaMA-shaped layer at hidden
   N ∈ {256, 512, 1024} (head dim 128, 4 query heads per KV head, intermediate 3.5 N), minimum
   of 2 repeats; a log-log fit t ∝ N^a extrapolates to a 70B layer (N = 8192, 64 heads,
   8 KV heads, intermediate 28672). An extrapolation, labelled as such.

Usage: python benchmarks/bench_sweep.py [--quick] [--out benchmarks/results]
Writes sweep.json and sweep.md into --out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in os.environ.get(
    "PYTHONPATH", "").split(os.pathsep) if p])

import torch  # noqa: E402


def make_manifest(folder: Path, n: int) -> Path:
    from safetensors.torch import save_file
    from transformers import BertConfig, BertModel

    rows = ["path,init,set:n,hp:seed"]
    cfg = BertConfig(hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                     intermediate_size=512, vocab_size=100, max_position_embeddings=32)
    torch.manual_seed(1000)
    init = folder / "init"
    init.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in BertModel(cfg).state_dict().items()},
              str(init / "model.safetensors"))
    (init / "config.json").write_text(cfg.to_json_string())
    for s in range(n):
        torch.manual_seed(s)
        d = folder / f"m{s}"
        d.mkdir()
        save_file({k: v.contiguous() for k, v in BertModel(cfg).state_dict().items()},
                  str(d / "model.safetensors"))
        (d / "config.json").write_text(cfg.to_json_string())
        rows.append(f"m{s},init,{1000 * (s + 1)},{s}")
    (folder / "manifest.csv").write_text("\n".join(rows) + "\n")
    return folder / "manifest.csv"


def throughput(manifest: Path, tmp: Path, executor: str, workers: int) -> dict:
    from boundcalc.sweep import run_sweep

    stamps: list[float] = []

    def progress(state) -> None:
        if state.done:
            stamps.append(time.perf_counter())

    if executor == "ray":
        import ray

        t0 = time.perf_counter()
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        ray_start = time.perf_counter() - t0
    start = time.perf_counter()
    out = run_sweep(manifest, tmp / f"out_{executor}_{workers}", ray=executor == "ray",
                    workers=workers, progress=progress)
    wall = time.perf_counter() - start
    if executor == "ray":
        import ray

        ray.shutdown()
    n = out.computed
    steady = (60 * (len(stamps) - 1) / (stamps[-1] - stamps[0])
              if len(stamps) > 2 and stamps[-1] > stamps[0] else None)
    rec = {"executor": executor, "workers": workers, "checkpoints": n, "wall_s": wall,
           "per_minute_total": 60 * n / wall, "per_minute_steady": steady,
           "failed": len(out.failed)}
    if executor == "ray":
        rec["ray_init_s"] = ray_start
    return rec


def llama_layer(folder: Path, hidden: int) -> Path:
    from safetensors.torch import save_file

    heads, kv, inter = hidden // 128, max(1, hidden // 512), int(3.5 * hidden)
    g = torch.Generator().manual_seed(hidden)
    p = "model.layers.0."
    t = {p + "self_attn.q_proj.weight": (hidden, hidden),
         p + "self_attn.k_proj.weight": (kv * 128, hidden),
         p + "self_attn.v_proj.weight": (kv * 128, hidden),
         p + "self_attn.o_proj.weight": (hidden, hidden),
         p + "mlp.gate_proj.weight": (inter, hidden), p + "mlp.up_proj.weight": (inter, hidden),
         p + "mlp.down_proj.weight": (hidden, inter),
         p + "input_layernorm.weight": (hidden,), p + "post_attention_layernorm.weight": (hidden,),
         "model.embed_tokens.weight": (64, hidden), "model.norm.weight": (hidden,)}
    tensors = {k: (torch.randn(s, generator=g) * 0.02).to(torch.bfloat16) for k, s in t.items()}
    d = folder / f"llama_{hidden}"
    d.mkdir()
    save_file(tensors, str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": hidden,
        "num_attention_heads": heads, "num_key_value_heads": kv, "intermediate_size": inter,
        "num_hidden_layers": 1, "vocab_size": 64}))
    return d


def layer_cost(tmp: Path, hiddens: list[int]) -> dict:
    import numpy as np

    from boundcalc.measure.weights.pipeline import measure_layer

    torch.set_num_threads(1)
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:
        pass
    rows = []
    for h in hiddens:
        d = llama_layer(tmp, h)
        times = []
        for _ in range(2):
            t0 = time.perf_counter()
            measure_layer(str(d), 0, device="cpu")
            times.append(time.perf_counter() - t0)
        rows.append({"hidden": h, "seconds": min(times)})
    x = np.log([r["hidden"] for r in rows])
    y = np.log([r["seconds"] for r in rows])
    a, b = np.polyfit(x, y, 1)
    t70 = float(np.exp(b) * 8192 ** a)
    return {"layers": rows, "exponent": float(a), "extrapolated_70b_layer_s": t70,
            "extrapolated_70b_80_layers_s_one_worker": 80 * t70}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="8 checkpoints, layers up to 512")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args(argv)
    n = 8 if args.quick else 16
    hiddens = [256, 512] if args.quick else [256, 512, 1024]
    result: dict = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                "python": platform.python_version(), "torch": torch.__version__,
                                "loadavg_before": os.getloadavg()},
                    "checkpoint": "BERT-shaped, hidden 128, 4 layers, 4 heads, with init"}
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        manifest = make_manifest(tmp / "zoo", n)
        runs = []
        for executor, workers in (("local", 1), ("local", 2), ("ray", 1), ("ray", 2)):
            rec = throughput(manifest, tmp, executor, workers)
            runs.append(rec)
            print(json.dumps(rec), file=sys.stderr)
        result["throughput"] = runs
        result["layer_cost"] = layer_cost(tmp, hiddens)
    result["machine"]["loadavg_after"] = os.getloadavg()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sweep.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = ["# Sweep throughput", "",
             f"{result['checkpoint']}; {n} checkpoints; {os.cpu_count()} CPUs; load average "
             f"before {result['machine']['loadavg_before'][0]:.1f}, after "
             f"{result['machine']['loadavg_after'][0]:.1f}.", "",
             "| executor | workers | wall (s) | checkpoints/min (total) | "
             "checkpoints/min (steady) |", "|---|---|---|---|---|"]
    for r in runs:
        steady = f"{r['per_minute_steady']:.1f}" if r["per_minute_steady"] else "—"
        lines.append(f"| {r['executor']} | {r['workers']} | {r['wall_s']:.1f} | "
                     f"{r['per_minute_total']:.1f} | {steady} |")
    lc = result["layer_cost"]
    lines += ["", "# Per-layer cost (measure_layer, one thread, LLaMA-shaped layer)", "",
              "| hidden | seconds |", "|---|---|"]
    lines += [f"| {r['hidden']} | {r['seconds']:.2f} |" for r in lc["layers"]]
    lines += ["", f"fit t ∝ N^{lc['exponent']:.2f}; extrapolated 70B layer (N = 8192): "
              f"{lc['extrapolated_70b_layer_s']:.0f} s, 80 layers on one worker: "
              f"{lc['extrapolated_70b_80_layers_s_one_worker'] / 3600:.1f} h (extrapolation)."]
    (args.out / "sweep.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
