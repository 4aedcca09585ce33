"""Why the subspace posterior does not beat the yardstick, in numbers: fit the subspace
coordinates z on S by cross-entropy (noise off, :func:`boundcalc.measure.data.subspace.fit_cross_entropy`),
then evaluate the Gibbs posterior N(α·z_fit, s² I) on S for a few (α, s), one Monte Carlo pass
each (every row its own draw), with the KL α²‖z_fit‖²/(2s²) (s_P = s_Q = s) and the value of
``pac_bayes_kl_gaussian_subspace_mc`` at that one pass. Points with α = s lie on one KL
(‖z_fit‖²/2 nats): along it, the larger s, the more of the fit the posterior keeps and the more
noise it carries.

    python benchmarks/subspace_scan.py RUN --layers all --rank 4 --fit-epochs 2 --fit-lr 1e-3 \\
        --points 0.25:0.25 0.5:0.5 0.1:0.1 1:1 0.5:0.25

Exploration, not a certificate: (α, s) is chosen here after seeing S and nothing pays for that
choice; the certified route is ``certify --posterior subspace`` (or ``subspace_on_run.py``),
which fixes s_P or charges its grid. Prints one JSON line per point (after the fit: d, the fit's
loss per epoch, ‖z_fit‖², the fitted mean's 0-1 error on S and on RUN/test.jsonl) and writes
them under ``--name`` in ``benchmarks/results/subspace_scan_cpu.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--name", default="real_text")
    ap.add_argument("--layers", default="all")
    ap.add_argument("--rank", type=int, default=4)
    ap.add_argument("--fit-epochs", type=int, default=2)
    ap.add_argument("--fit-lr", type=float, default=1e-3)
    ap.add_argument("--points", nargs="+", default=["0.25:0.25", "0.5:0.5", "0.1:0.1", "1:1"])
    ap.add_argument("--max-length", type=int, default=64)
    args = ap.parse_args()

    import numpy as np
    import torch

    from boundcalc.certify.claims import Count, test_set_bound
    from boundcalc.evaluation import evaluate
    from boundcalc.measure.data.batch_rows import read_sized
    from boundcalc.measure.data.hf import load_task_model
    from boundcalc.measure.data.subspace import (Subspace, SubspaceFit, SubspaceSpec,
                                                 fit_cross_entropy, gibbs_errors)
    from boundcalc.measure.data.subspace_record import gibbs_predictions_mean
    from boundcalc.registry import load_registry

    torch.set_num_threads(1)
    t0, dev = time.monotonic(), torch.device("cpu")
    prior = load_task_model(args.run / "prior", dev)
    S = read_sized(str(args.run / "S.jsonl"), prior, dev, max_length=args.max_length, given=32)
    T = read_sized(str(args.run / "test.jsonl"), prior, dev, max_length=args.max_length,
                   given=32)
    y = torch.cat([b[1] for b in S.batches]).numpy()
    yt = torch.cat([b[1] for b in T.batches]).numpy()
    sub = Subspace(prior, SubspaceSpec(rank=args.rank, layers=args.layers,
                                       fit_epochs=args.fit_epochs, fit_lr=args.fit_lr), dev)
    with torch.no_grad(), sub.draws(None, noise=False):
        prior_S = float(np.mean(gibbs_predictions_mean(sub, S) != y))
    for p in prior.model.parameters():
        p.requires_grad_(False)
    prior.model.eval()
    fit = SubspaceFit(0.05)
    fit_cross_entropy(sub, S, fit)
    for s_ in sub.sites:
        s_.z.requires_grad_(False)
    with torch.no_grad(), sub.draws(None, noise=False):
        mean_S = float(np.mean(gibbs_predictions_mean(sub, S) != y))
        mean_T = float(np.mean(gibbs_predictions_mean(sub, T) != yt))
    base = test_set_bound(Count(int(round(prior_S * S.n)), S.n)).value
    head = {"dim": sub.dim, "fit_loss_per_epoch": fit.fit_history, "dist_sq": fit.fit_dist_sq,
            "prior_error_on_S": prior_S, "baseline": base, "fit_mean_error_on_S": mean_S,
            "fit_mean_error_held_out": mean_T, "fit_s": round(time.monotonic() - t0, 1)}
    print(json.dumps(head), flush=True)
    entry = load_registry().get("pac_bayes_kl_gaussian_subspace_mc")
    z0 = [s_.z.clone() for s_ in sub.sites]
    points = []
    for pt in args.points:
        alpha, s = (float(v) for v in pt.split(":"))
        for s_, z in zip(sub.sites, z0):
            s_.z.copy_(alpha * z)
        sub.log_sigma.fill_(math.log(s))
        errs = gibbs_errors(sub, S, 1, 123)
        E, dsq = float(errs.mean()), alpha ** 2 * fit.fit_dist_sq
        v = evaluate(entry, {"E_hat": E, "k": errs.size, "dim": sub.dim, "dist_sq": dsq,
                             "sigma_post": s, "sigma_prior": s, "prior_grid": 1,
                             "n": S.n}).value
        points.append({"alpha": alpha, "s": s, "gibbs_error_on_S": E, "KL": dsq / (2 * s * s),
                       "value_one_pass": v, "t": round(time.monotonic() - t0, 1),
                       "load": os.getloadavg()})
        print(json.dumps(points[-1]), flush=True)
    path = ROOT / "benchmarks" / "results" / "subspace_scan_cpu.json"
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc[args.name] = {"command": "python benchmarks/subspace_scan.py " + " ".join(sys.argv[1:]),
                      **head, "points": points, "cores": os.cpu_count()}
    path.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
