"""The two cuts of issue 54 item 4 on the real-text task, measured against the code without them
in the same process, one run after the other (a ratio, not a wall time to quote alone):

    python benchmarks/real_text.py --out out/RT
    python benchmarks/bench_real_text_cuts.py --data out/RT --base bert2     # or --base minilm

``before``: the compare step measures each certified row's held-out Gibbs error with the
certificate's own passes, and the per-group σ search reads every tune row of every evaluation
(both cuts switched off by patching, nothing else changed); ``after``: the defaults
(``heldout_draws`` 1; a search pass stops once certainly above its target). Both certify the
same base on the same rows with every other option at its default (``duplicates`` drop: the
corpus has repeats) into their own folders. Recorded: wall and CPU seconds of each run and of
each step (the lines certify says, time-stamped), the load before and after, and what each run
certified (compare's minimum, the per-group σ chosen, model/'s test-set row): the cuts must
leave the certified rows and the chosen σ as they were. Written to
``benchmarks/results/real_text_cuts_cpu.json`` under the base's name.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _switch_off_cuts():
    """Patch both cuts off; returns a function that restores them."""
    from boundcalc.certify import claims
    from boundcalc.measure.data import tune

    real_risk, real_error = tune.search_risk, claims._gibbs_error

    def full_pass(tm, data, device, sigma, mc, stop_above):  # every tune row, every evaluation
        return float(tune.gibbs_risk(tm, data, device, [sigma], mc).mean())

    def own_passes(ev, sigma, passes):  # the certificate's own passes, as before
        kept, ev.heldout_passes = ev.heldout_passes, None
        try:
            return real_error(ev, sigma, passes)
        finally:
            ev.heldout_passes = kept

    tune.search_risk, claims._gibbs_error = full_pass, own_passes

    def restore():
        tune.search_risk, claims._gibbs_error = real_risk, real_error
    return restore


def _run(base: Path, data: Path, out: Path) -> dict:
    import shutil

    from boundcalc.certify import CertifyConfig, certify

    shutil.rmtree(out, ignore_errors=True)  # a fresh run: nothing reused

    lines, t0, c0 = [], time.monotonic(), time.process_time()

    def say(m: str) -> None:
        lines.append({"s": round(time.monotonic() - t0, 2),
                      "cpu_s": round(time.process_time() - c0, 2), "line": m[:300]})
        print(f"[{lines[-1]['s']:8.1f} s] {m[:160]}", flush=True)

    res = certify(base, data / "train.csv", out, data / "heldout.csv",
                  CertifyConfig(duplicates="drop"), say=say)
    rep = res.report
    stats = json.loads((out / "stats.json").read_text())
    groups = (stats.get("provenance") or {}).get("gibbs_groups") or {}
    return {"wall_s": round(time.monotonic() - t0, 1),
            "cpu_s": round(time.process_time() - c0, 1), "steps": lines,
            "minimum": {k: (rep.get("minimum") or {}).get(k) for k in ("id", "value",
                                                                      "delta_total")},
            "certified": [{k: r[k] for k in ("id", "value", "delta")}
                          for r in rep["certified"]],
            "sigma_groups": groups.get("sigma"), "scale": groups.get("scale"),
            "model_rows": [{k: r.get(k) for k in ("id", "value", "errors", "m")}
                           for r in rep.get("model_rows", [])],
            "gibbs_test_draws": ((rep.get("minimum") or {}).get("gibbs_test_error")
                                 or {}).get("draws"),
            "duplicates": rep.get("duplicates")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="the folder real_text.py wrote")
    ap.add_argument("--base", choices=("bert2", "minilm"), default="bert2")
    ap.add_argument("--out", type=Path, default=Path("out/bench_real_text_cuts"))
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out = args.out / args.base
    out.mkdir(parents=True, exist_ok=True)
    if args.base == "bert2":
        from tests._certify_helpers import bert_config_folder

        base = bert_config_folder(out / "base", hidden=64, layers=2, heads=2)
    else:
        from boundcalc.measure.io import bundled_model_path

        base = Path(bundled_model_path("minilm"))
    record = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "command": " ".join(sys.argv), "cores": os.cpu_count(),
              "load_before": list(os.getloadavg())}
    restore = _switch_off_cuts()
    try:
        record["before"] = _run(base, args.data, out / "before")
    finally:
        restore()
    record["after"] = _run(base, args.data, out / "after")
    record["load_after"] = list(os.getloadavg())
    b, a = record["before"], record["after"]
    record["same_certified"] = (b["certified"] == a["certified"]
                                and b["sigma_groups"] == a["sigma_groups"]
                                and b["model_rows"] == a["model_rows"])
    record["ratio_wall"] = round(a["wall_s"] / b["wall_s"], 3)
    record["ratio_cpu"] = round(a["cpu_s"] / b["cpu_s"], 3)
    path = ROOT / "benchmarks" / "results" / "real_text_cuts_cpu.json"
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc[args.base] = record
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps({k: record[k] for k in ("same_certified", "ratio_wall", "ratio_cpu")}))
    print(f"before {b['wall_s']} s wall / {b['cpu_s']} s CPU; after {a['wall_s']} s / "
          f"{a['cpu_s']} s; load {record['load_before']} → {record['load_after']}")
    return 0 if record["same_certified"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
