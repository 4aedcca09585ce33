"""CUDA results equal CPU results: spectra, norms and Schatten sums of a checkpoint, Hutchinson
and Hutch++ traces with fixed seeds. Writes ``gpu_check.json`` and ``gpu_check.md`` to ``--out``.
``--targets``: every target of the card check beside its figure, from the records the other
steps of ``gpu_check.sh`` left in ``--out`` (``targets.md``, ``targets.json``).

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


def _load(out: str, name: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(out, name), encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def card_busy(path: str, seconds: float | None = None) -> dict[str, Any] | None:
    """Mean and largest of nvidia-smi's ``utilization.gpu`` column (``timestamp, utilization,
    memory`` lines, every 250 ms), over the first ``seconds`` after the first sample when
    given (the command's own run, not what came after it)."""
    from datetime import datetime

    util = []
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                parts = [x.strip() for x in line.split(",")]
                if len(parts) < 3:
                    continue
                t = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
                util.append((t, float(parts[1].rstrip(" %"))))  # with or without units
    except (OSError, ValueError):
        return None
    if seconds is not None and util:
        util = [(t, u) for t, u in util if t - util[0][0] <= seconds]
    if not util:
        return None
    vals = [u for _, u in util]
    return {"samples": len(vals), "mean_pct": sum(vals) / len(vals), "max_pct": max(vals)}


def targets(out: str) -> list[dict[str, Any]]:
    """Each target of issue 40 beside the figure its record in ``out`` holds (None: the step
    did not run or stopped before the figure existed)."""
    bert, gpt2, w = (_load(out, f"{c}_gpu.json") for c in ("bert", "gpt2", "weights"))
    cert = (_load(out, "certify_cuda.json") or {}).get("minilm")
    # the first run (its wall time and 2 s for bench_certify to write the rows), not the re-run
    # that follows it with every step reused
    busy = card_busy(os.path.join(out, "smi_minilm.csv"),
                     cert["wall_s"] + 2 if cert else None)
    rows = []

    def row(what, figure, text, met):
        rows.append({"target": what, "figure": figure, "text": text, "met": met})

    mc = (bert or {}).get("monte_carlo", {}).get("fraction_of_plain")
    row("Monte Carlo of `boundcalc measure` >= 60 % of the plain loop (BERT-base)", mc,
        f"{mc:.0%}" if mc is not None else "not measured", None if mc is None else mc >= 0.6)
    done = bert is not None and bert.get("command_exit") == 0
    sec = bert.get("command_s") if bert else None
    row("BERT-base 2048x128, 5 sigma x 20 draws + 20 probes, the whole command <= 60 s", sec,
        "not run" if sec is None else f"{sec:.1f} s" + ("" if done else " (stopped, not done)"),
        None if sec is None else done and sec <= 60)
    csec = cert.get("wall_s") if cert else None
    mean = busy["mean_pct"] if busy else None
    row("`boundcalc certify` MiniLM, 2,000 rows <= 20 s, card > 50 % busy", csec,
        "not run" if csec is None else f"{csec:.1f} s, card busy "
        + ("unknown" if mean is None else f"{mean:.0f} % on average (max {busy['max_pct']:.0f} %)"),
        None if csec is None else csec <= 20 and mean is not None and mean > 50)
    card, host = (w or {}).get("card_s"), (w or {}).get("host_s")
    row("weights side on CUDA no slower than on the host (whole processes)", card,
        "not run" if card is None or host is None else f"{card:.1f} s vs {host:.1f} s",
        None if card is None or host is None else card <= host)
    g_done = gpt2 is not None and gpt2.get("command_exit") == 0
    gsec = gpt2.get("command_s") if gpt2 else None
    row("GPT-2 124M 2048x256, 5 sigma x 20 draws, --precision bf16 <= 120 s", gsec,
        "not run" if gsec is None else f"{gsec:.1f} s" + ("" if g_done else " (stopped)"),
        None if gsec is None else g_done and gsec <= 120)
    return rows


def print_targets(out: str) -> int:
    rows = targets(out)
    lines = ["| target | figure | met |", "|---|---|---|"]
    for r in rows:
        met = {True: "yes", False: "NO", None: "-"}[r["met"]]
        lines.append(f"| {r['target']} | {r['text']} | {met} |")
    with open(os.path.join(out, "targets.md"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "targets.json"), "w", encoding="utf-8") as fh:
        json.dump(rows, fh, indent=1)
    print("\n".join(lines))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "gpu_check_out"))
    ap.add_argument("--self-test", action="store_true", help="no GPU needed: compare CPU with "
                    "CPU through the same code, on the synthetic checkpoint (tests the script)")
    ap.add_argument("--targets", action="store_true", help="only print every target beside "
                    "its figure from the records already in --out (targets.md)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.targets:
        return print_targets(args.out)
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
