"""Target 4: peak memory on a ≥ 4 GB sharded checkpoint, and time against the number of matrices.

Checkpoints are synthetic BERT-style safetensors written to a temporary folder (free space is
checked first; everything is deleted afterwards): float32 weights N(0, 0.02²), d_h = 64,
FFN 4N, one shard per few layers plus ``model.safetensors.index.json`` and ``config.json``.

* Peak RSS: ``measure(index, raw=False)`` runs in a fresh subprocess, which reports its peak
  resident set ``VmHWM`` from /proc/self/status (file-backed pages of the memory-mapped shards
  included) and its RSS just before ``measure`` (interpreter + torch). ``ru_maxrss`` is recorded
  too but is not the figure: Linux keeps, across ``execve``, the maxrss of the forked
  copy-on-write image of the parent, so it reports max(parent RSS at fork, child peak).
  The big checkpoint is N = 1024, 80 layers (4.2 GB); skipped under ``--quick``.
* Scaling: for each hidden size, one set of per-layer shards of the deepest model, and one index
  per depth listing the first ``depth`` layers (so every depth reads the same files). Time is the
  process CPU time of ``measure(index, raw=False)`` (one thread), fitted by least squares
  against the number of matrices (depth × (2·heads + 2)).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

from common import Record

NAMES = {"q": "attention.self.query.weight", "k": "attention.self.key.weight",
         "v": "attention.self.value.weight", "o": "attention.output.dense.weight",
         "ffn_in": "intermediate.dense.weight", "ffn_out": "output.dense.weight"}


def _layer_tensors(layer: int, N: int, gen) -> dict[str, Any]:
    import torch

    F = 4 * N
    shapes = {"q": (N, N), "k": (N, N), "v": (N, N), "o": (N, N), "ffn_in": (F, N),
              "ffn_out": (N, F)}
    out = {}
    for role, shape in shapes.items():
        out[f"encoder.layer.{layer}.{NAMES[role]}"] = torch.randn(shape, generator=gen) * 0.02
        bias = shape[0]
        out[f"encoder.layer.{layer}.{NAMES[role].replace('weight', 'bias')}"] = torch.zeros(bias)
    return out


def write_checkpoint(folder: str, N: int, layers: int, layers_per_shard: int = 1,
                     vocab: int = 1000, seed: int = 0) -> dict[str, str]:
    """Shards + config; returns the weight map (tensor name -> shard file name)."""
    import torch
    from safetensors.torch import save_file

    os.makedirs(folder, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    wmap: dict[str, str] = {}
    emb = {"embeddings.word_embeddings.weight": torch.randn((vocab, N), generator=gen) * 0.02,
           "embeddings.position_embeddings.weight": torch.randn((512, N), generator=gen) * 0.02}
    save_file(emb, os.path.join(folder, "embeddings.safetensors"))
    wmap.update({k: "embeddings.safetensors" for k in emb})
    del emb
    for lo in range(0, layers, layers_per_shard):
        shard = {}
        for layer in range(lo, min(layers, lo + layers_per_shard)):
            shard.update(_layer_tensors(layer, N, gen))
        name = f"layers-{lo:05d}.safetensors"
        save_file(shard, os.path.join(folder, name))
        wmap.update({k: name for k in shard})
        del shard
    cfg = {"model_type": "bert", "architectures": ["BertModel"], "hidden_size": N,
           "num_attention_heads": N // 64, "num_hidden_layers": layers,
           "intermediate_size": 4 * N, "vocab_size": vocab}
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as fh:
        json.dump(cfg, fh)
    return wmap


def write_index(folder: str, wmap: dict[str, str], depth: int, name: str) -> str:
    keep = {k: v for k, v in wmap.items()
            if not k.startswith("encoder.layer.") or int(k.split(".")[2]) < depth}
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"metadata": {}, "weight_map": keep}, fh)
    return path


def _folder_bytes(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))


def worker(path: str, raw: bool) -> None:
    """Run in a subprocess: one measure(), then report time and peak RSS as JSON."""
    import resource

    import torch

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    from boundcalc.measure import measure

    def status(key: str) -> int:
        with open("/proc/self/status", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        return 0

    before = status("VmRSS")
    r0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    stats = measure(path, raw=raw, progress=False, device="cpu")
    w1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    # VmHWM is this process's own peak. ru_maxrss is not used as the figure: Linux carries the
    # maxrss of the pre-exec fork (a copy-on-write image of the parent, all of its resident
    # pages) across execve, so it reports max(parent RSS at fork, child peak).
    print(json.dumps({"wall_s": w1 - w0,
                      "cpu_s": (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime),
                      "peak_rss_bytes": status("VmHWM"), "ru_maxrss_bytes": r1.ru_maxrss * 1024,
                      "rss_before_bytes": before, "n_matrices": len(stats.matrices)}))


def run_worker(path: str, raw: bool = False) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.abspath(__file__)) + os.pathsep + \
        env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", path,
                          "--raw", "1" if raw else "0"], capture_output=True, text=True,
                         env=env, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"worker failed: {(out.stderr or out.stdout).strip()[-400:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def big_checkpoint(tmp_root: str) -> Record:
    N, layers = 1024, 80
    need = layers * 12 * N * N * 4 + 2 * 10**9  # weights + 2 GB margin
    free = shutil.disk_usage(tmp_root).free
    rid, title = "memory_4gb_sharded", f"peak RSS, measure() of a 4.2 GB sharded checkpoint"
    if free < need:
        return Record(rid, title, "< 1.5 GB peak RSS", None, None, "—", None, None, "cpu",
                      metric="peak RSS", details={"skipped": f"only {free / 1e9:.1f} GB free in "
                                                             f"{tmp_root}, need {need / 1e9:.1f}"})
    folder = tempfile.mkdtemp(prefix="boundcalc_bench_4gb_", dir=tmp_root)
    try:
        t0 = time.perf_counter()
        wmap = write_checkpoint(folder, N, layers, layers_per_shard=8, vocab=30522)
        gen_s = time.perf_counter() - t0
        index = write_index(folder, wmap, layers, "model.safetensors.index.json")
        size = _folder_bytes(folder)
        res = run_worker(index, raw=False)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    peak = res["peak_rss_bytes"]
    return Record(rid, f"{title} (N={N}, {layers} layers, 16 heads, "
                       f"{res['n_matrices']} matrices)", "< 1.5 GB peak RSS", res["cpu_s"], None,
                  "—", None, bool(peak < 1.5e9), "cpu", metric="peak RSS (subprocess)",
                  details={"checkpoint_bytes": size, "shards": (layers + 7) // 8 + 1,
                           "peak_rss_bytes": peak, "peak_rss_gib": peak / 2**30,
                           "peak_rss_gb": peak / 1e9, "limit": "1.5e9 bytes (decimal GB)",
                           "rss_before_measure_bytes": res["rss_before_bytes"],
                           "ru_maxrss_bytes_incl_parent_fork": res["ru_maxrss_bytes"],
                           "measure_wall_s": res["wall_s"], "measure_cpu_s": res["cpu_s"],
                           "generation_s": gen_s, "call": "measure(index, raw=False)",
                           "cleaned_up": not os.path.exists(folder)})


def scaling(tmp_root: str, quick: bool, out_dir: str) -> Record:
    from boundcalc.measure import measure
    import time as _t

    hidden = [128, 256] if quick else [128, 256, 512, 1024]
    depths = [2, 4, 8] if quick else [2, 4, 8, 12, 16, 24]
    rows = []
    folder_root = tempfile.mkdtemp(prefix="boundcalc_bench_scaling_", dir=tmp_root)
    try:
        for N in hidden:
            folder = os.path.join(folder_root, f"N{N}")
            wmap = write_checkpoint(folder, N, max(depths))
            for d in depths:
                idx = write_index(folder, wmap, d, f"depth{d}.index.json")
                reps = 1 if N >= 1024 else 2
                cpu = []
                for _ in range(reps):
                    c0 = _t.process_time()
                    s = measure(idx, raw=False, progress=False, device="cpu")
                    cpu.append(_t.process_time() - c0)
                rows.append({"hidden": N, "depth": d, "heads": N // 64,
                             "n_matrices": len(s.matrices), "cpu_s": min(cpu)})
            shutil.rmtree(folder, ignore_errors=True)
    finally:
        shutil.rmtree(folder_root, ignore_errors=True)
    fits = {}
    for N in hidden:
        r = [x for x in rows if x["hidden"] == N]
        x = np.array([q["n_matrices"] for q in r], float)
        y = np.array([q["cpu_s"] for q in r])
        b, a = np.polyfit(x, y, 1)
        pred = a + b * x
        r2 = 1 - np.sum((y - pred) ** 2) / max(np.sum((y - y.mean()) ** 2), 1e-300)
        fits[str(N)] = {"intercept_s": float(a), "s_per_matrix": float(b), "r2": float(r2),
                        "max_rel_residual": float(np.max(np.abs(y - pred) / y))}
    per_layer = {N: np.mean([q["cpu_s"] / q["depth"] for q in rows if q["hidden"] == N])
                 for N in hidden}
    slope = (float(np.polyfit(np.log(list(per_layer)), np.log(list(per_layer.values())), 1)[0])
             if len(per_layer) > 1 else None)
    png = os.path.join(out_dir, "scaling.png")
    _plot(rows, fits, per_layer, slope, png)
    min_r2 = min(f["r2"] for f in fits.values())
    return Record("scaling_linear_in_matrices",
                  f"measure() time vs number of matrices (hidden {hidden[0]}–{hidden[-1]}, depth "
                  f"{depths[0]}–{depths[-1]})", "linear in #matrices (R² ≥ 0.98 per hidden size)",
                  None, None, "—", None, bool(min_r2 >= 0.98), "cpu",
                  metric="least-squares fit of CPU time", details={
                      "rows": rows, "fits": fits, "min_r2": min_r2,
                      "cpu_s_per_layer_by_hidden": {str(k): float(v) for k, v in
                                                    per_layer.items()},
                      "loglog_slope_time_per_layer_vs_hidden": slope,
                      "plot": os.path.relpath(png, os.path.dirname(out_dir))})


def _plot(rows, fits, per_layer, slope, png: str) -> None:
    """Left: CPU time per matrix against the number of matrices (flat = linear). Right: time
    per layer against the hidden size (log-log)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, NullLocator

    fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
    for N, f in fits.items():
        r = sorted((x for x in rows if x["hidden"] == int(N)), key=lambda q: q["n_matrices"])
        x = np.array([q["n_matrices"] for q in r])
        y = np.array([q["cpu_s"] for q in r])
        ax[0].plot(x, y / x, "o-", label=f"N={N}: linear fit R²={f['r2']:.4f}")
    ax[0].set_xscale("log")
    ax[0].set_yscale("log")
    ax[0].set_xlabel("matrices measured (depth × (2·heads + 2)), depth 2…24")
    ax[0].set_ylabel("CPU time per matrix [s]")
    ax[0].set_title("measure(raw=False): time / #matrices (flat = linear)")
    ax[0].legend(fontsize=8)
    Ns = np.array([int(k) for k in per_layer])
    ax[1].loglog(Ns, list(per_layer.values()), "o-")
    ax[1].xaxis.set_major_locator(FixedLocator(Ns))
    ax[1].xaxis.set_minor_locator(NullLocator())
    ax[1].set_xticklabels([str(n) for n in Ns])
    ax[1].set_xlabel("hidden size N (heads = N/64, FFN 4N)")
    ax[1].set_ylabel("CPU time per layer [s]")
    ax[1].set_title("per-layer time vs N" + (f" (log-log slope {slope:.2f})" if slope else ""))
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def run(quick: bool, device: str, out_dir: str, tmp_root: str | None = None) -> list[Record]:
    tmp_root = tmp_root or tempfile.gettempdir()
    records = []
    if quick:
        records.append(Record("memory_4gb_sharded", "peak RSS, measure() of a 4.2 GB sharded "
                              "checkpoint", "< 1.5 GB peak RSS", None, None, "—", None, None,
                              "cpu", metric="peak RSS", details={"skipped": "--quick"}))
    else:
        records.append(big_checkpoint(tmp_root))
    records.append(scaling(tmp_root, quick, out_dir))
    return records


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--worker":
        worker(sys.argv[2], len(sys.argv) > 4 and sys.argv[4] == "1")
    else:
        print("usage: bench_memory.py --worker PATH [--raw 0|1]  (run via benchmarks/run)")
