"""The cost of the bound-trained posterior's training against today's posterior step, in one
process on one folder (a ratio, so the machine's load cancels as far as it can).

    python benchmarks/bench_bound_posterior.py RUN [--reps 2]

RUN is a finished ``boundcalc certify`` output folder (prior/, model/, S.jsonl, stats.json with
the per-group σ search). Each repetition times the default posterior step (the prior
fine-tuned on S with the proximal pull: :func:`boundcalc.certify.train.train_classifier`, the
learning rate certify used, from ``report.json``) and then
:func:`boundcalc.measure.data.bound_posterior.train_bound_posterior` from ``model/`` with its
defaults (no Monte Carlo). Results go to ``benchmarks/results/bound_posterior_<device>.json``
under RUN's base name.
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--name", help="the results' key (default: the folder's parent's name)")
    args = ap.parse_args()
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from boundcalc.certify.pipeline import _read_jsonl
    from boundcalc.certify.train import TrainSpec, train_classifier
    from boundcalc.measure.data.bound_posterior import BoundTraining, train_bound_posterior
    from boundcalc.measure.data.dataset_io import read_batches
    from boundcalc.measure.data.hf import load_task_model
    from boundcalc.measure.data.tune import sigma_groups
    from boundcalc.measure.threads import blas_threads, data_threads

    run, dev = args.run, torch.device("cpu")
    report = json.loads((run / "report.json").read_text())
    cfg = report["settings"]
    rec = json.loads((run / "stats.json").read_text())["provenance"]["gibbs_groups"]
    texts, labels = _read_jsonl(run / "S.jsonl")
    rows = []
    for _ in range(args.reps):
        model = AutoModelForSequenceClassification.from_pretrained(run / "prior").float()
        tok = AutoTokenizer.from_pretrained(run / "prior")
        anchor = {n: p.detach().clone() for n, p in model.named_parameters()}
        spec = TrainSpec("posterior", cfg["post_epochs"], report["learning_rates"]["posterior"],
                         cfg["batch_size"], cfg["max_length"], cfg["seed"] + 1, dev,
                         cfg["proximal"], anchor)
        load0 = os.getloadavg()[0]
        t = time.monotonic()
        train_classifier(model, tok, texts, labels, spec)
        post = time.monotonic() - t
        tm, prior = load_task_model(run / "model", dev), load_task_model(run / "prior", dev)
        S = read_batches(str(run / "S.jsonl"), tm, max_length=cfg["max_length"],
                         batch_size=cfg["batch_size"])
        sp = {g: rec["scale"] * r for g, r in zip(rec["groups"], rec["shape"])}
        t = time.monotonic()
        with blas_threads(data_threads(tm.model, dev)):
            learned = train_bound_posterior(tm, prior, S, dev, sigma_groups(tm.model), sp,
                                            BoundTraining(seed=cfg["seed"]))
        bound = time.monotonic() - t
        rows.append({"posterior_step_s": round(post, 2), "bound_training_s": round(bound, 2),
                     "ratio": round(bound / post, 2), "steps": learned.steps,
                     "load_before": round(load0, 2), "load_after": round(os.getloadavg()[0], 2)})
        print(rows[-1], flush=True)
    path = ROOT / "benchmarks" / "results" / "bound_posterior_cpu.json"
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc[args.name or run.parent.name] = {"run": str(run), "rows": rows, "cores": os.cpu_count(),
                                         "threads": torch.get_num_threads()}
    path.write_text(json.dumps(doc, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
