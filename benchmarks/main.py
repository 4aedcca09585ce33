"""Run the boundcalc performance benchmarks and write ``results/latest.json`` and ``latest.md``.

Usage (normally through ``benchmarks/run``)::

    python benchmarks/main.py [--quick] [--only spectra,optimize,hessian,memory,data_side]
                              [--device auto|cpu|cuda] [--threads 1] [--out DIR] [--tmp DIR]

Every speed figure is a ratio against a baseline measured in the same run, on the same machine,
with the same torch/BLAS thread count, boundcalc and baseline interleaved.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import common  # noqa: E402
from common import Record, fmt_s, loadavg, machine_facts  # noqa: E402

GROUPS = ("process", "spectra", "optimize", "hessian", "memory", "data_side")
EXTRA_GROUPS = ("startup",)  # the start-up half of "process" alone (--only startup), a minute


def _limit_threads(n: int) -> Any:
    import torch

    torch.set_num_threads(n)
    try:
        from threadpoolctl import threadpool_limits

        return threadpool_limits(n)
    except ImportError:
        return None


def _run_group(name: str, quick: bool, device: str, out_dir: str, tmp: str | None
               ) -> list[Record]:
    if name == "process":
        import bench_process as m
        return m.run(quick)
    if name == "startup":
        import bench_process as m
        return m.run_startup(quick)
    if name == "spectra":
        import bench_spectra as m
        return m.run(quick, device)
    if name == "optimize":
        import bench_optimize as m
        return m.run(quick, device)
    if name == "hessian":
        import bench_hessian as m
        return m.run(quick, device)
    if name == "data_side":
        import bench_data_side as m
        return m.run(quick, device)
    if name == "memory":
        import bench_memory as m
        return m.run(quick, device, out_dir, tmp)
    raise ValueError(name)


def _cuda_name() -> str | None:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def markdown(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    lines = ["# boundcalc benchmarks", "",
             f"Run {m['date_utc']}{' (--quick)' if doc['quick'] else ''} on {m['cpu_model']}, "
             f"{m['cpu_count']} cores, {m['memory_bytes'] / 2**30:.0f} GiB; torch "
             f"{m['versions']['torch']}, numpy {m['versions']['numpy']}, "
             f"{m['torch_threads']} torch/BLAS thread(s) for boundcalc and baselines alike.", "",
             f"GPU: {doc['gpu_note']}", "",
             f"Time metric: {doc['metric']}. {doc['load_note']}", "",
             "| benchmark | boundcalc | baseline | ratio | target | met? |",
             "|---|---|---|---|---|---|"]
    for r in doc["records"]:
        met = {True: "yes", False: "**no**", None: "—"}[r["met"]]
        ratio = f"{r['ratio']:.1f}x" if r["ratio"] is not None else "—"
        ours = fmt_s(r["boundcalc_s"])
        if r["id"] == "memory_4gb_sharded" and "peak_rss_gib" in r["details"]:
            ours = (f"peak RSS {r['details']['peak_rss_gb']:.2f} GB = "
                    f"{r['details']['peak_rss_gib']:.2f} GiB ({fmt_s(r['boundcalc_s'])} CPU)")
        elif r["id"] == "scaling_linear_in_matrices" and "min_r2" in r["details"]:
            ours = f"min R² = {r['details']['min_r2']:.4f}"
        elif "skipped" in r["details"] or "error" in r["details"]:
            ours = "skipped: " + str(r["details"].get("skipped") or r["details"].get("error"))
        dev = "" if r["device"] == "cpu" else f" [{r['device']}]"
        lines.append(f"| {r['id']}{dev}: {r['title']} | {ours} | {fmt_s(r['baseline_s'])} "
                     f"({r['baseline']}) | {ratio} | {r['target']} | {met} |")
    lines += ["", "## Checks and context", ""]
    for r in doc["records"]:
        d = r["details"]
        keep = {k: v for k, v in d.items() if k not in ("boundcalc_timing", "baseline_timing",
                                                       "rows", "check")}
        lines.append(f"- **{r['id']}**: " + "; ".join(f"{k} = {_short(v)}"
                                                      for k, v in keep.items()))
        if "check" in d:
            c = d["check"]
            lines.append(f"  - singular values / norms vs the dense SVD: "
                         + "; ".join(f"{k} = {_short(v)}" for k, v in c.items()))
    lines += ["", "Full timings (every repeat, wall and CPU) are in latest.json. Scaling plot: "
              "scaling.png.", ""]
    return "\n".join(lines)


def _short(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_short(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_short(x) for x in v) + "]"
    return str(v)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fast subset (fewer repeats, smaller "
                    "sweeps, no 4 GB checkpoint, SymPy baseline on 1 layer)")
    ap.add_argument("--only", default=",".join(GROUPS), help="comma-separated groups")
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                    help="auto: CPU always, and CUDA too when present")
    ap.add_argument("--threads", type=int, default=1, help="torch and BLAS threads (both sides)")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--tmp", default=None, help="scratch folder for checkpoints (default: TMPDIR)")
    args = ap.parse_args(argv)
    groups = [g.strip() for g in args.only.split(",") if g.strip()]
    bad = [g for g in groups if g not in GROUPS + EXTRA_GROUPS]
    if bad:
        ap.error(f"unknown group {bad[0]!r}; choose from {', '.join(GROUPS + EXTRA_GROUPS)}")
    os.makedirs(args.out, exist_ok=True)
    limiter = _limit_threads(args.threads)  # noqa: F841 - kept alive for the whole run
    gpu = _cuda_name()
    if args.device == "cuda" and gpu is None:
        print("benchmarks: --device cuda but no CUDA device is available", file=sys.stderr)
        return 2
    devices = ["cpu"] + (["cuda"] if gpu is not None and args.device in ("auto", "cuda") else [])
    machine = machine_facts(args.threads, args.device)
    load_start = loadavg()
    records: list[Record] = []
    group_load: dict[str, Any] = {}
    t_start = time.perf_counter()
    for dev in devices:
        common.PRIMARY = "cpu" if dev == "cpu" and args.threads == 1 else "wall"
        for g in groups:
            if dev == "cuda" and g not in ("spectra", "hessian", "data_side"):  # process: CPU, whole commands
                continue  # optimisation is numpy-only; RSS is a host-memory figure
            print(f"[{time.strftime('%H:%M:%S')}] {g} on {dev} ...", flush=True)
            before = loadavg()
            try:
                recs = _run_group(g, args.quick, dev, args.out, args.tmp)
            except Exception as exc:  # noqa: BLE001 - one failing group must not hide the rest
                traceback.print_exc()
                recs = [Record(f"{g}_error", f"{g} benchmarks", "—", None, None, "—", None,
                               False, dev, details={"error": f"{type(exc).__name__}: {exc}"})]
            for r in recs:
                if dev == "cuda":
                    r.id += "_cuda"
                    r.device = f"cuda ({gpu})"
                print(f"    {r.id}: ratio={r.ratio if r.ratio is None else round(r.ratio, 2)} "
                      f"met={r.met}", flush=True)
            records += recs
            group_load[f"{g}@{dev}"] = {"before": before, "after": loadavg()}
    load_end = loadavg()
    cores = machine["cpu_count"] or 1
    peak1 = max([load_start[0] if load_start else 0, load_end[0] if load_end else 0]
                + [v["after"][0] for v in group_load.values() if v["after"]])
    loaded = peak1 > 0.75 * cores
    load_note = (f"Timings were taken under load: 1-min load average up to {peak1:.1f} on "
                 f"{cores} cores (other processes were running); wall-clock times are inflated, "
                 "CPU times much less so." if loaded else
                 f"1-min load average up to {peak1:.1f} on {cores} cores.")
    doc = {
        "schema": "boundcalc.benchmarks", "version": 1, "quick": args.quick,
        "command": "benchmarks/run" + (" --quick" if args.quick else "")
                   + (f" --only {args.only}" if set(groups) != set(GROUPS) else ""),
        "machine": machine, "devices_run": devices,
        "gpu_note": (f"CUDA runs recorded separately (device {gpu})" if gpu else
                     "no GPU was available on this machine; CUDA code paths (device='cuda') "
                     "were not run"),
        "metric": common.metric_name() if len(devices) == 1 else
        "CPU runs: process CPU time (min over repeats); CUDA runs: wall-clock (min)",
        "threads": args.threads,
        "loadavg": {"start": load_start, "end": load_end, "by_group": group_load},
        "under_load": loaded, "load_note": load_note,
        "total_wall_s": time.perf_counter() - t_start,
        "records": [r.to_json() for r in records],
    }
    with open(os.path.join(args.out, "latest.json"), "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, default=_json_default)
    with open(os.path.join(args.out, "latest.md"), "w", encoding="utf-8") as fh:
        fh.write(markdown(json.loads(json.dumps(doc, default=_json_default))))
    print(f"wrote {os.path.join(args.out, 'latest.json')} and latest.md "
          f"({doc['total_wall_s']:.0f} s)")
    return 0


def _json_default(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


if __name__ == "__main__":
    raise SystemExit(main())
