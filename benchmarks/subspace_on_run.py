"""The subspace Gibbs posterior on a finished (or half-finished) ``boundcalc certify`` folder,
against the yardstick on the same S: the prior's test-set bound on S.

    python benchmarks/subspace_on_run.py RUN --name real_text [--rank 4 --layers all
        --sigma 0.05 --epochs 3 --lr 1e-3 --draws 6 --max-length 64 --batch 32]

Reads ``RUN/prior``, ``RUN/model`` (for the disagreement), ``RUN/S.jsonl`` and, when present,
``RUN/test.jsonl``; needs neither ``stats.json`` nor ``report.json`` (so it runs as soon as
certify's posterior step has written ``model/``). Trains the subspace posterior exactly as
``certify --posterior subspace`` does (:func:`boundcalc.certify.subspace_posterior.subspace_step`'s
library calls, the same seeds), evaluates ``pac_bayes_kl_gaussian_subspace_mc`` and its floor
(zero KL), the baseline, and writes them under ``--name`` in
``benchmarks/results/subspace_runs_cpu.json`` with the wall time and the load.
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


def certificate(sc: dict, n: int) -> tuple[float, float]:
    """The row's value and its floor (zero KL: ‖z‖ = 0, s_Q = s_P) from the scalars."""
    from boundcalc.evaluation import evaluate
    from boundcalc.registry import load_registry

    entry = load_registry().get("pac_bayes_kl_gaussian_subspace_mc")
    vals = {"E_hat": sc["gibbs_subspace_mean"], "k": sc["gibbs_subspace_units"],
            "dim": sc["subspace_dim"], "dist_sq": sc["subspace_dist_sq"],
            "sigma_post": sc["subspace_sigma_post"], "sigma_prior": sc["subspace_sigma_prior"],
            "prior_grid": sc["subspace_prior_grid"], "n": n}
    value = evaluate(entry, vals).value
    floor = evaluate(entry, {**vals, "dist_sq": 0.0,
                             "sigma_post": sc["subspace_sigma_prior"]}).value
    return value, floor


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--name", required=True)
    ap.add_argument("--rank", type=int, default=4)
    ap.add_argument("--layers", default="all")
    ap.add_argument("--sigma", type=float, default=0.05)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--fit-epochs", type=int, default=0,
                    help="cross-entropy epochs of z before the bound (default 0)")
    ap.add_argument("--fit-lr", type=float, default=1e-3)
    ap.add_argument("--sigma-grid", type=float, nargs="*", default=(),
                    help="declared grid of s_P (ln |grid| charged); default: --sigma fixed")
    ap.add_argument("--draws", type=int, default=6)
    ap.add_argument("--max-length", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = ap.parse_args()

    import numpy as np
    import torch

    from boundcalc.certify.claims import Count, test_set_bound
    from boundcalc.measure.data.disagreement import predictions
    from boundcalc.measure.data.batch_rows import read_sized
    from boundcalc.measure.data.gibbs import MonteCarlo
    from boundcalc.measure.data.hf import load_task_model
    from boundcalc.measure.data.subspace import SubspaceSpec
    from boundcalc.measure.data.subspace_record import held_out, add_subspace_posterior
    from boundcalc.stats import Stats

    torch.set_num_threads(args.threads)
    load0 = os.getloadavg()
    t0 = time.monotonic()
    dev = torch.device("cpu")
    prior = load_task_model(args.run / "prior", dev)
    spec = SubspaceSpec(rank=args.rank, layers=args.layers, sigma_prior=args.sigma,
                        epochs=args.epochs, lr=args.lr, seed=args.seed,
                        fit_epochs=args.fit_epochs, fit_lr=args.fit_lr,
                        sigma_grid=tuple(args.sigma_grid))

    def _classes(tm, data, dev):
        return np.concatenate([p.numpy() for p in predictions(tm, data, dev)])

    def read(name: str, tm) -> object:
        return read_sized(str(args.run / name), tm, dev, max_length=args.max_length,
                          given=args.batch)

    S = read("S.jsonl", prior)
    y = torch.cat([b[1] for b in S.batches]).numpy()
    prior_errors = int(np.sum(_classes(prior, S, dev) != y))
    stats = Stats()
    sub, fit = add_subspace_posterior(stats, prior, S, dev, spec,
                                      MonteCarlo(args.draws, args.seed + 80_000),
                                      prior_source=str(args.run))
    rec = stats.provenance["gibbs_subspace"]
    if (args.run / "test.jsonl").exists() and (args.run / "model" / "config.json").exists():
        model = load_task_model(args.run / "model", dev)
        rec["held_out"] = held_out(sub, read("test.jsonl", prior),
                                   _classes(model, read("test.jsonl", model), dev),
                                   args.seed + 90_000)
    sc = {k: q.value for k, q in stats.scalars.items()}
    value, floor = certificate(sc, S.n)
    base = test_set_bound(Count(prior_errors, S.n))
    from boundcalc.measure.data.subspace import kl_subspace

    KL = kl_subspace(sc["subspace_dist_sq"], int(sc["subspace_dim"]), sc["subspace_sigma_post"],
                     sc["subspace_sigma_prior"])
    out = {"command": "python benchmarks/subspace_on_run.py " + " ".join(sys.argv[1:]),
           "n": S.n, "subspace_row": value, "floor_zero_KL": floor, "KL": KL,
           "gibbs_error_on_S": sc["gibbs_subspace_mean"], "mc_units": sc["gibbs_subspace_units"],
           "baseline": base.value, "prior_errors_on_S": prior_errors,
           "beats_baseline": value < base.value, "gap": value - base.value,
           "dim": int(sc["subspace_dim"]), "sigma_post": sc["subspace_sigma_post"],
           "dist_sq": sc["subspace_dist_sq"], "held_out": rec.get("held_out"),
           "training": rec["training"], "spec": rec["spec"],
           "wall_s": round(time.monotonic() - t0, 1), "load_before": load0,
           "load_after": os.getloadavg(), "cores": os.cpu_count()}
    path = ROOT / "benchmarks" / "results" / "subspace_runs_cpu.json"
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc[args.name] = out
    path.write_text(json.dumps(doc, indent=1))
    print(json.dumps({k: out[k] for k in ("subspace_row", "floor_zero_KL", "KL",
                                          "gibbs_error_on_S", "baseline", "gap", "wall_s")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
