"""CUDA results equal CPU results: spectra, norms and Schatten sums of a checkpoint, Hutchinson
and Hutch++ traces with fixed seeds. Writes ``gpu_check.json`` and ``gpu_check.md`` to ``--out``.

Run by ``benchmarks/gpu_check.sh``; without CUDA every CUDA comparison is recorded as skipped
(the CPU side still runs, so the script is testable anywhere).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

TOL = 1e-6


def card() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "cuda_available": torch.cuda.is_available(),
                            "torch_cuda": torch.version.cuda, "python": platform.python_version(),
                            "cpu_count": os.cpu_count()}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(gpu=torch.cuda.get_device_name(0), gpu_memory_gib=round(p.total_memory / 2**30, 1),
                    capability=f"{p.major}.{p.minor}", device_count=torch.cuda.device_count())
    try:
        info["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        info["nvidia_smi"] = None
    return info


def checkpoint(tmp: str, synthetic: bool = False) -> tuple[str, str]:
    """MiniLM-L6 when installed, else a synthetic checkpoint of its shapes (see
    :func:`common.minilm_checkpoint`)."""
    from common import minilm_checkpoint

    return minilm_checkpoint(tmp, synthetic)


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def compare_measure(path: str, other: str = "cuda") -> dict[str, Any]:
    import numpy as np

    from bench_spectra import paper_grid
    from boundcalc.measure import measure
    from boundcalc.measure.weights import pipeline

    grid = paper_grid(6, 384)
    out: dict[str, Any] = {}
    stats = {}
    real_batched, real_workers = pipeline._batched, pipeline.host_workers
    for key, dev in (("cpu", "cpu"), ("other", other)):
        if key == "other" and dev == "cpu":  # self-test: the CUDA layout of the weights side
            pipeline._batched = lambda W: True
        pipeline.host_workers = lambda hidden: 0  # the card's own numbers, no host layers
        t0 = time.perf_counter()
        try:
            stats[key] = measure(path, device=dev, grid=grid, progress=False)
        finally:
            pipeline._batched, pipeline.host_workers = real_batched, real_workers
        out[f"seconds_{dev if key == 'cpu' else 'other_' + dev}"] = time.perf_counter() - t0
    a, b = stats["other"], stats["cpu"]
    worst_stat, worst_sv, worst_where = 0.0, 0.0, ""
    for ma, mb in zip(a.matrices, b.matrices):
        assert (ma.type, ma.layer, ma.head) == (mb.type, mb.layer, mb.head)
        for k, vb in mb.stats.items():
            d = _rel(ma.stats[k], vb)
            if d > worst_stat:
                worst_stat, worst_where = d, f"{mb.type} layer {mb.layer} head {mb.head}: {k}"
        if mb.singular_values is not None:
            sa, sb = np.asarray(ma.singular_values), np.asarray(mb.singular_values)
            keep = sb > 1e-10 * max(float(sb[0]), 1.0) * sb.size
            if keep.any():
                worst_sv = max(worst_sv, float(np.max(np.abs(sa[keep] - sb[keep]) / sb[keep])))
    for k, q in b.scalars.items():
        worst_stat = max(worst_stat, _rel(a.scalars[k].value, q.value))
    out.update(matrices=len(b.matrices), max_rel_diff_stats=worst_stat,
               max_rel_diff_nonzero_singular_values=worst_sv, worst_stat=worst_where,
               provenance_device_other=a.provenance.get("device"),
               passed=bool(worst_stat <= TOL and worst_sv <= TOL))
    return out


def compare_traces(other: str = "cuda") -> dict[str, Any]:
    import torch

    from bench_hessian import trained_model
    from boundcalc.measure import hutchinson_trace, hutchpp_trace

    torch.set_num_threads(1)
    model, X, y = trained_model("cpu")
    model = model.double()
    X, y = X[:64], y[:64]
    crit = torch.nn.CrossEntropyLoss()
    res: dict[str, Any] = {}
    vals: dict[str, dict[str, Any]] = {}
    for key, dev in (("cpu", "cpu"), ("other", other)):
        m = model.to(dev)
        Xd, yd = X.to(dev), y.to(dev)
        cl = lambda: crit(m(Xd), yd)  # noqa: E731
        t0 = time.perf_counter()
        h = hutchinson_trace(m, cl, n_probes=32, groups="layer", seed=4, probe_device="cpu")
        p = hutchpp_trace(m, cl, sketch=6, n_probes=16, seed=4)
        if dev.startswith("cuda"):
            torch.cuda.synchronize()
        vals[key] = {"hutchinson": h.total.value, "hutchinson_ci": list(h.total.ci),
                     "hutchinson_groups": {g: q.value for g, q in h.groups.items()},
                     "hutchpp": p.total.value, "hutchpp_ci": list(p.total.ci),
                     "seconds": time.perf_counter() - t0}
    c, g = vals["cpu"], vals["other"]
    diffs = [_rel(g["hutchinson"], c["hutchinson"]), _rel(g["hutchpp"], c["hutchpp"])]
    diffs += [_rel(x, y) for x, y in zip(g["hutchinson_ci"] + g["hutchpp_ci"],
                                         c["hutchinson_ci"] + c["hutchpp_ci"])]
    diffs += [_rel(g["hutchinson_groups"][k], v) for k, v in c["hutchinson_groups"].items()]
    res.update(cpu=c, other=g, other_device=other, max_rel_diff=max(diffs), passed=bool(max(diffs) <= TOL),
               model="bench Transformer, float64, 64 sequences, seed 4 (same probes: drawn on "
                     "the CPU generator on both devices)")
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "gpu_check_out"))
    ap.add_argument("--self-test", action="store_true", help="no GPU needed: compare CPU with "
                    "CPU through the same code, on the synthetic checkpoint (tests the script)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import torch

    doc: dict[str, Any] = {"card": card(), "tolerance": TOL, "checks": {}}
    cuda = torch.cuda.is_available() or args.self_test
    other = "cpu" if args.self_test else "cuda"
    doc["compared_with"] = other
    path, what = checkpoint(os.path.join(args.out, ".ckpt_tmp"), synthetic=args.self_test)
    doc["checkpoint"] = what
    for name, fn in (("measure_spectra_norms_schatten", lambda: compare_measure(path, other)),
                     ("hessian_traces_fixed_seed", lambda: compare_traces(other))):
        if not cuda:
            doc["checks"][name] = {"skipped": "no CUDA device: nothing to compare"}
            continue
        try:
            doc["checks"][name] = fn()
        except Exception as exc:  # noqa: BLE001 - record and go on
            doc["checks"][name] = {"error": f"{type(exc).__name__}: {exc}"[:500],
                                   "traceback": traceback.format_exc()[-2000:], "passed": False}
    if not cuda:  # still exercise the CPU side so the script is tested everywhere
        try:
            from boundcalc.measure import measure

            s = measure(path, device="cpu", progress=False)
            doc["cpu_only_smoke"] = {"matrices": len(s.matrices)}
        except Exception as exc:  # noqa: BLE001
            doc["cpu_only_smoke"] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    import shutil

    shutil.rmtree(os.path.join(args.out, ".ckpt_tmp"), ignore_errors=True)
    doc["all_passed"] = (all(c.get("passed") for c in doc["checks"].values()) if cuda else None)
    with open(os.path.join(args.out, "gpu_check.json"), "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, default=str)
    lines = ["# CUDA vs CPU check", "", f"card: {doc['card'].get('gpu', 'no CUDA device')} "
             f"({doc['card'].get('nvidia_smi')}); torch {doc['card']['torch']}, "
             f"CUDA {doc['card']['torch_cuda']}", f"checkpoint: {what}", f"tolerance: {TOL:g} "
             "(relative)", ""]
    for name, c in doc["checks"].items():
        if "skipped" in c:
            lines.append(f"- {name}: skipped ({c['skipped']})")
        elif "error" in c:
            lines.append(f"- {name}: ERROR {c['error']}")
        else:
            worst = c.get("max_rel_diff", c.get("max_rel_diff_stats"))
            lines.append(f"- {name}: {'PASS' if c['passed'] else 'FAIL'} (max relative "
                         f"difference {worst:.3g}"
                         + (f", singular values {c['max_rel_diff_nonzero_singular_values']:.3g}"
                            if "max_rel_diff_nonzero_singular_values" in c else "") + ")")
    with open(os.path.join(args.out, "gpu_check.md"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if doc["all_passed"] in (True, None) else 1


if __name__ == "__main__":
    raise SystemExit(main())
