"""The Gibbs routes of a finished ``boundcalc certify`` folder taken apart, for issue 50's table
(measures nothing: reads ``RUN/stats.json`` and ``RUN/report.json``).

    python benchmarks/routes_of_run.py /work/rt/RUN/RUN4 --name real_text_run4 \\
        --made-by "boundcalc certify MINILM --data RT/train.csv ... (real_text_certify_cpu.json)"

Writes, under ``--name`` in ``benchmarks/results/routes_of_runs_cpu.json``: the folder, what
made it (``--made-by``, as given), the date this record was read (UTC), the run's baseline (the
prior's test-set bound on S) with the prior's and model/'s errors, and
:func:`studies.route_terms.route_terms` of its ``stats.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a finished certify folder")
    ap.add_argument("--name", required=True, help="the results' key")
    ap.add_argument("--made-by", required=True, help="the command that made the folder")
    args = ap.parse_args()
    for f in ("stats.json", "report.json"):
        if not (args.run / f).is_file():
            print(f"error: {args.run / f}: not found (a finished certify folder has it)",
                  file=sys.stderr)
            return 2
    from benchmarks.common import keep_result
    from studies.route_terms import route_terms

    rep = json.loads((args.run / "report.json").read_text())
    b = rep["baseline"]
    rec = {"run": str(args.run), "made_by": args.made_by,
           "command": "python benchmarks/routes_of_run.py " + " ".join(sys.argv[1:]),
           "read": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "baseline": {k: b[k] for k in ("id", "value", "delta", "errors", "m")},
           "prior_error_on_S": rep.get("prior_error_on_S"), "test_error": rep.get("test_error"),
           "prior_test_error": rep.get("prior_test_error"),
           "model_rows": [{k: r.get(k) for k in ("id", "value", "delta")}
                          for r in rep.get("model_rows", [])],
           "routes": route_terms(args.run / "stats.json")}
    keep_result(ROOT / "benchmarks" / "results" / "routes_of_runs_cpu.json", args.name, rec)
    print(json.dumps(rec["routes"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
