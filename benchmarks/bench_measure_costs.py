"""Where ``measure``'s time goes beside the plan's passes (issue 44: the acceptance run took
12.9 min for a plan of 7.3), on the fine-tuned MiniLM-L6 of :mod:`bench_measure_defaults`:

    python benchmarks/bench_measure_costs.py --out out/measure_defaults --rows 128

1. The fixed costs, each timed (wall and CPU of this process): imports, loading the model,
   the prior as a predictor, reading S, the weights side (:func:`boundcalc.measure.weights.
   pipeline.measure`), the calibration.
2. One Monte Carlo pass with a posterior draw per row over the first ``--rows`` rows of S at
   σ = 0.0223 (the acceptance run's σ), with the row-wise hooks deferred (a batch whose Gram
   had no Cholesky factor is replayed: what ran on a CPU before) and repaired on the spot
   (what runs on a CPU now), alternated ``--rounds`` times in one process; the replays counted
   and the two means compared (they must be equal).
3. The calibration's per-row estimate of that pass beside it.

Results go to ``benchmarks/results/measure_costs_cpu.json`` with ``uptime`` before and after;
the ratios are from one process, so a steady load cancels in them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
T0, C0 = time.perf_counter(), time.process_time()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("out/measure_defaults"))
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    laps: dict[str, dict[str, float]] = {}
    last = [T0, C0]

    def lap(what: str) -> None:
        w, c = time.perf_counter(), time.process_time()
        laps[what] = {"wall_s": round(w - last[0], 3), "cpu_s": round(c - last[1], 3)}
        last[:] = [w, c]

    before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    import torch

    from benchmarks.bench_measure_defaults import _minilm
    from boundcalc.measure.data import gibbs, row_noise, work_plan
    from boundcalc.measure.data.dataset_io import read_batches
    from boundcalc.measure.data.hf import load_task_model
    from boundcalc.measure.data.prior_model import prior_task_model
    from boundcalc.measure.weights.pipeline import measure
    lap("imports")
    cpu = torch.device("cpu")
    model = str(args.out / "model")
    tm = load_task_model(model, cpu)
    lap("loading the model")
    prior_task_model(str(_minilm()), tm, None, cpu)
    lap("the prior as a predictor")
    data = read_batches(str(args.out / "train.csv"), tm, max_length=64, batch_size=32)
    data.batches = data.batches[:max(1, args.rows // 32)]
    data.n = sum(b[1].shape[0] for b in data.batches)
    lap(f"reading S (kept {data.n} rows)")
    measure(model, init=str(_minilm()), device="cpu", progress=False)
    lap("the weights side")
    speed = work_plan.calibrate(tm, data, cpu, noisy=True, draw=True)
    lap("the calibration")

    replays = [0]
    replay = row_noise.RowNoise.replay

    def counted(self, mark):
        replays[0] += 1
        return replay(self, mark)

    row_noise.RowNoise.replay = counted
    passes = []
    for r in range(args.rounds):
        for name, deferred in (("deferred (replayed)", True), ("on the spot", False)):
            gibbs.defers = lambda device, d=deferred: d
            replays[0] = 0
            w, c = time.perf_counter(), time.process_time()
            est = gibbs.gibbs_estimate(tm, data, cpu, [0.0223],
                                       gibbs.MonteCarlo(1, 0, 0.01, mode="sample"))
            passes.append({"round": r, "hooks": name, "replays": replays[0],
                           "wall_s_per_row": (time.perf_counter() - w) / data.n,
                           "cpu_s_per_row": (time.process_time() - c) / data.n,
                           "mean": float(est.means[0, 0])})
            print(passes[-1], flush=True)
    after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    by = {h: [p["cpu_s_per_row"] for p in passes if p["hooks"] == h]
          for h in ("deferred (replayed)", "on the spot")}
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "uptime_before": before, "uptime_after": after, "rows": data.n,
              "batches": len(data.batches), "threads": torch.get_num_threads(),
              "fixed_costs": laps, "calibration": speed, "monte_carlo_passes": passes,
              "cpu_ratio_deferred_over_on_the_spot": (
                  sum(by["deferred (replayed)"]) / sum(by["on the spot"])),
              "same_means": len({p["mean"] for p in passes}) == 1}
    path = ROOT / "benchmarks" / "results" / "measure_costs_cpu.json"
    path.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("fixed_costs", "calibration",
                                             "cpu_ratio_deferred_over_on_the_spot",
                                             "same_means", "uptime_before", "uptime_after")},
                     indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
