"""``examples/text_classifier.py`` run as a user runs it (a subprocess), timed, with each Gibbs
route's certified row taken apart for issue 50's table.

    python benchmarks/bench_text_classifier.py --out /tmp/tc_issue50 --posterior subspace \\
        --name tc_issue50_subspace
    python benchmarks/bench_text_classifier.py --out /tmp/tc_issue50 --posterior bound \\
        --name tc_issue50_bound --reuse       # the same models, splits and measurement

Writes, under ``--name`` in ``benchmarks/results/text_classifier_routes_cpu.json``: the
example's command, the date (UTC), wall and CPU seconds, the load averages before and after,
the example's baseline (the prior's test-set bound on S), model/'s held-out error, and
:func:`studies.route_terms.route_terms` of the stats file the route's rows were compared on
(``stats.json``, ``stats_bound.json`` or ``stats_subspace.json``): each route's value, Gibbs
error on S, N, KL (nats) and floor at KL 0; with the trained posterior's held-out estimates.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
STATS = {"proximal": "stats.json", "bound": "stats_bound.json",
         "subspace": "stats_subspace.json"}
POSTERIOR = {"bound": "bound_posterior", "subspace": "subspace_posterior"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="the example's --out folder")
    ap.add_argument("--posterior", choices=tuple(STATS), default="proximal")
    ap.add_argument("--name", required=True, help="the results' key")
    ap.add_argument("--reuse", action="store_true", help="pass --reuse to the example")
    args = ap.parse_args()
    from benchmarks.common import keep_result
    from studies.route_terms import route_terms

    cmd = [sys.executable, str(ROOT / "examples" / "text_classifier.py"), "--out",
           str(args.out), "--posterior", args.posterior] + (["--reuse"] if args.reuse else [])
    before, cpu0, start = os.getloadavg(), resource.getrusage(resource.RUSAGE_CHILDREN), \
        time.monotonic()
    res = subprocess.run(cmd, text=True, capture_output=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall, cpu1 = time.monotonic() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    print(res.stdout)
    print(res.stderr[-3000:], file=sys.stderr)
    if res.returncode:
        return res.returncode
    rep = json.loads((args.out / "report.json").read_text())
    b = rep["baseline"]
    post = rep.get(POSTERIOR.get(args.posterior, ""), {}) or {}
    rec = {"command": " ".join(["python", "examples/text_classifier.py"] + cmd[2:]),
           "bench_command": "python benchmarks/bench_text_classifier.py "
                            + " ".join(sys.argv[1:]),
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "wall_s": round(wall, 1),
           "cpu_s": round(cpu1.ru_utime - cpu0.ru_utime + cpu1.ru_stime - cpu0.ru_stime, 1),
           "load_before": before, "load_after": os.getloadavg(), "cores": os.cpu_count(),
           "n": rep["n"], "model_test_error": rep["test_error"],
           "prior_test_error": rep.get("prior_test_error"), "pool_error": rep["pool_error"],
           "baseline": {k: b[k] for k in ("id", "value", "delta", "errors", "m")},
           "prior_error_on_S": b["errors"] / b["m"],
           "routes": route_terms(args.out / STATS[args.posterior]),
           "posterior": {k: post.get(k) for k in ("held_out", "training", "mc", "spec",
                                                  "value", "floor_zero_KL", "KL") if k in post},
           "stdout_tail": res.stdout[-2500:]}
    path = ROOT / "benchmarks" / "results" / "text_classifier_routes_cpu.json"
    keep_result(path, args.name, rec)
    print(f"{args.name}: {wall:.1f} s wall (load {before[0]:.1f} → {rec['load_after'][0]:.1f}); "
          f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
