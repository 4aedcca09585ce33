"""``boundcalc certify`` end to end, timed as a user runs it (a subprocess, from a fresh
output folder), then again on the finished folder (every step reused).

    python benchmarks/bench_certify.py --base bert2      # a 2-layer BERT config (random init)
    python benchmarks/bench_certify.py --base minilm     # the bundled MiniLM-L6 (no head)

Data: ``--rows`` labelled rows of the synthetic topic task of ``tests/_certify_helpers.py``
(3 classes, ``--noise`` of the labels redrawn uniformly) and 500 held-out rows of another
seed. Results (wall seconds, load averages before/after, the certified rows, compare's minimum
at δ/k with the Gibbs predictor it certifies and that predictor's held-out error, model/'s
test-set row, the prior's test-set bound on S as the baseline, the total probability of what
is claimed, and each Gibbs route's row taken apart by :func:`studies.route_terms.route_terms`:
its Gibbs error on S, N, KL in nats, floor at KL 0) are written to
``benchmarks/results/certify_<device>.json`` under the base's name, with the date (UTC).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _minimum(m: dict | None) -> dict | None:
    """compare's least certified row at δ/k, the predictor it certifies and its held-out
    error."""
    if m is None:
        return None
    g = m.get("gibbs_test_error") or {}
    return {**{k: m[k] for k in ("id", "method", "k", "value", "row_value", "delta_total",
                                 "certifies", "line", "model_test_error")},
            "gibbs_test_error": g.get("value"), "gibbs_test_draws": g.get("draws")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", choices=("bert2", "minilm"), default="bert2")
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--noise", type=float, default=0.05)
    ap.add_argument("--out", type=Path, default=Path("out/bench_certify"))
    ap.add_argument("--device", default="auto")
    ap.add_argument("--minilm", type=Path, help="the MiniLM folder (default: the bundled one)")
    ap.add_argument("--tokenizer", type=Path, help="tokenizer folder for bert2 (default: "
                    "the bundled MiniLM's)")
    ap.add_argument("--results", default="certify", help="the results file's stem: "
                    "benchmarks/results/<results>_<device>.json (default certify)")
    ap.add_argument("--name", help="the results' key (default: the base's name)")
    ap.add_argument("--once", action="store_true",
                    help="skip the second run on the finished folder (rerun_all_reused_s null)")
    ap.add_argument("extra", nargs="*", help="more certify flags (after --)")
    args = ap.parse_args()
    from tests._certify_helpers import bert_config_folder, synthetic_rows, write_csv

    name = args.name or args.base
    out = args.out / name
    out.mkdir(parents=True, exist_ok=True)
    classes = ("sport", "food", "space")
    write_csv(out / "train.csv", synthetic_rows(args.rows, 0, classes, args.noise))
    write_csv(out / "test.csv", synthetic_rows(500, 1, classes, args.noise))
    if args.base == "bert2":
        base = bert_config_folder(out / "base", tokenizer=args.tokenizer)
    elif args.minilm is not None:
        base = args.minilm
    else:
        from tests._measure_helpers import minilm_path

        base = Path(minilm_path())
    run = out / "run"
    if run.exists():
        import shutil

        shutil.rmtree(run)
    cmd = [sys.executable, "-m", "boundcalc", "certify", str(base), "--data",
           str(out / "train.csv"), "--test-data", str(out / "test.csv"), "-o", str(run),
           "--device", args.device, *args.extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    import resource

    load0 = os.getloadavg()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    res = subprocess.run(cmd, env=env, text=True, capture_output=True)
    wall = time.monotonic() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    load1 = os.getloadavg()
    print(res.stdout)
    print(res.stderr[-3000:], file=sys.stderr)
    if res.returncode:
        return res.returncode
    t1 = time.monotonic()
    again = None if args.once else subprocess.run(cmd, env=env, text=True, capture_output=True)
    resume = None if args.once else time.monotonic() - t1
    report = json.loads((run / "report.json").read_text())
    import torch

    device = "cuda" if torch.cuda.is_available() and args.device != "cpu" else "cpu"
    path = ROOT / "benchmarks" / "results" / f"{args.results}_{device}.json"
    prov = json.loads((run / "stats.json").read_text())["provenance"]
    learned, subspace = prov.get("gibbs_learned"), prov.get("gibbs_subspace")
    from benchmarks.common import keep_result
    from studies.route_terms import route_terms

    rec = {
        "command": " ".join(["boundcalc"] + cmd[3:]), "rows": args.rows, "noise": args.noise,
        "bench_command": "python benchmarks/bench_certify.py " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
        "rerun_all_reused_s": None if resume is None else round(resume, 1),
        "rerun_exit": None if again is None else again.returncode,
        "load_before": load0, "load_after": load1,
        "cores": os.cpu_count(), "device": torch.cuda.get_device_name(0) if device == "cuda"
        else "cpu", "sizes": report["sizes"], "test_error": report["test_error"],
        "prior_test_error": report["prior_test_error"],
        "prior_error_on_S": report["prior_error_on_S"],
        "minimum": _minimum(report["minimum"]),
        "model_rows": [{k: r.get(k) for k in ("id", "certifies", "value", "delta", "errors", "m",
                                              "disagreements", "rows")}
                       for r in report["model_rows"]],
        "baseline": report["baseline"] and {k: report["baseline"][k] for k in (
            "id", "certifies", "value", "delta", "errors", "m", "on", "claimed")},
        "claimed": report["claimed"],
        "certified": [{**{k: r[k] for k in ("id", "value", "vacuous", "floor", "dominates",
                                            "delta")},
                       "gibbs_test_error": (r["gibbs_test_error"] or {}).get("value")}
                      for r in report["certified"] if r["is_bound"]],
        "routes": route_terms(run / "stats.json")}
    if learned:  # the bound-trained Gibbs posterior (--posterior bound)
        rec["bound_posterior"] = {k: learned.get(k) for k in (
            "training", "held_out", "scale", "sigma_post", "sigma_prior_trained_with", "mc")}
    if subspace:  # the subspace Gibbs posterior (--posterior subspace)
        rec["subspace_posterior"] = {k: subspace.get(k) for k in (
            "spec", "dim", "dist_sq", "sigma_post", "prior_sigma", "training", "held_out", "mc")}
    keep_result(path, name, rec)
    print(f"{name}: {wall:.1f} s wall, {cpu:.1f} s CPU (load {load0[0]:.1f} → {load1[0]:.1f}); re-run "
          f"{'skipped' if resume is None else f'{resume:.1f} s'}; wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
