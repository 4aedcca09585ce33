#!/usr/bin/env python
"""Sequence-length independence (Trauger & Tewari 2024): the sparse-majority study, end to end.

Run ``python examples/study_sequence_length.py --help`` for what it does and how to read it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

DESCRIPTION = """\
Sequence-length independence of norm-based quantities (Trauger & Tewari 2024, arXiv 2310.13088).

The paper proves norm-based generalization bounds for Transformers that do not grow with the
sequence length T, and supports it with a simulated "sparse majority" task: the label of a
length-T bit string is the majority of 9 fixed, hidden positions. This script reruns that
experiment, ported faithfully from the authors' Keras code to torch (embedding dim 64, 2 heads,
token embeddings zero/one/CLS Gram-Schmidt orthogonalised and scaled to unit l1 norm, sinusoidal
positional encoding, one attention layer -> ReLU -> Dense(64) -> CLS -> linear 64->2, BCE with
logits, SGD lr 0.01 momentum 0.9 with lr = max(0.001, 0.999 lr) per epoch, stop at training
accuracy 1.0, keep the best-validation checkpoint). For every T it reports

  * the generalization gap (train - test accuracy; test - train loss),
  * the weight norms: the entrywise l1 norm of every tensor and their sum (what the official
    code prints), plus spectral, Frobenius and (2,1) norms from boundcalc.measure,
  * registry quantities, with their kinds shown: `trauger_tewari_l11_sum` (a PROXY: the paper's
    theorem is not recoverable, only the norm it is stated in) and `edelman_cor45_rate` (a RATE
    with hidden constant 1, whose capacity term grows like ln(mT)). Neither is a bound.

If the theory is right, none of gap or norms trends with T, while the Edelman rate (at fixed
norms) creeps up like ln T.

Default: reduced scale (3 values of T, 500 test strings, at most 150 epochs): a smoke run of
the whole pipeline in about a minute. Training at this learning rate needs thousands of epochs
before accuracy leaves 50 %, so the reduced run says nothing about the paper's claim; the report
says so. --full runs the paper's scale (300 train / 10,000 test strings, up to 200,000 epochs)
on T in {10, 20, 50, 100, 200}, 3 runs each: hours to days on a CPU.
"""

EPILOG = """\
examples:
  python examples/study_sequence_length.py --out runs/seqlen            # reduced, ~1 min
  python examples/study_sequence_length.py --out runs/seqlen --T 10 40 --max-epochs 5000
  python examples/study_sequence_length.py --out runs/seqlen --full     # the paper's scale

output: OUT/report.md (tables, plots, honest labels), OUT/*.png, OUT/results.json.
"""

REDUCED = {"T": [10, 20, 40], "runs": 1, "n_test": 500, "max_epochs": 150}
FULL = {"T": [10, 20, 50, 100, 200], "runs": 3, "n_test": 10_000, "max_epochs": 200_000}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="study_sequence_length.py", description=DESCRIPTION,
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="output folder for report.md and plots")
    p.add_argument("--full", action="store_true",
                   help="the paper's scale (300/10,000 strings, up to 200,000 epochs, 5 T x 3 runs)")
    p.add_argument("--T", type=int, nargs="+", metavar="T",
                   help="sequence lengths (>= 9; default 10 20 40, or 10 20 50 100 200 with --full)")
    p.add_argument("--runs", type=int, help="independent runs per T (default 1, or 3 with --full)")
    p.add_argument("--n-train", type=int, default=300, help="training strings (paper: 300)")
    p.add_argument("--n-test", type=int, help="test strings, also the validation set that picks "
                   "the checkpoint, as in the official code (default 500, or 10,000 with --full)")
    p.add_argument("--max-epochs", type=int, help="epoch cap (default 150, or 200,000 with --full)")
    p.add_argument("--batch-size", type=int, default=128,
                   help="mini-batch size (the official README example uses 128)")
    p.add_argument("--seed", type=int, default=0, help="master seed")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (tiny models run fastest on 1; restored on exit)")
    return p.parse_args(argv)


def _T_axis(ax, Ts: list[int]) -> None:
    """Log-scaled T axis labelled at the studied T only."""
    from matplotlib.ticker import NullFormatter

    ax.set_xscale("log")
    ax.set_xticks(Ts, [str(T) for T in Ts])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("sequence length T")
    ax.grid(alpha=0.3)


def _plots(report, results: list[dict], Ts: list[int]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    def series(get):
        groups = [[get(r) for r in results if r["T"] == T] for T in Ts]
        return np.array([np.mean(g) for g in groups]), groups

    # 1. generalization gap
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, label in ((axes[0], "acc_gap", "accuracy gap (train − test)"),
                           (axes[1], "loss_gap", "loss gap (test − train BCE)")):
        mean, groups = series(lambda r: r[key])
        for T, g in zip(Ts, groups):
            ax.scatter([T] * len(g), g, color="tab:blue", alpha=0.5, s=25)
        ax.plot(Ts, mean, "o-", color="tab:blue", label="mean over runs")
        ax.axhline(0, color="grey", lw=0.8)
        _T_axis(ax, Ts)
        ax.set_ylabel(label)
        ax.legend(fontsize=9)
    fig.suptitle("Generalization gap against sequence length (sparse majority, s = 9)")
    fig.tight_layout()
    report.figure(fig, "gap_vs_T.png", "Generalization gap against T (each dot one run).")

    # 2. weight norms
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.4), gridspec_kw={"width_ratios": [1, 1.1]})
    mean, groups = series(lambda r: r["norms"]["l1_sum"])
    axes[0].plot(Ts, mean, "o-", color="black", lw=2, label="sum of all tensors (official)")
    for name, color in (("q", "tab:blue"), ("k", "tab:orange"), ("v", "tab:green"),
                        ("o", "tab:red"), ("dense", "tab:purple"), ("head", "tab:brown")):
        m, _ = series(lambda r, n=name: r["norms"]["matrices"][n]["norm_11"])
        axes[0].plot(Ts, m, "s--", color=color, ms=4, label=f"{name} weight")
    axes[0].set_ylabel("entrywise ℓ1 norm ‖W‖₁,₁")
    axes[0].set_title("entrywise ℓ1 (what the official code reports)", fontsize=10)
    for name, color in (("q", "tab:blue"), ("k", "tab:orange"), ("v", "tab:green"),
                        ("o", "tab:red"), ("dense", "tab:purple"), ("head", "tab:brown")):
        m, _ = series(lambda r, n=name: r["norms"]["matrices"][n]["spectral"])
        m21, _ = series(lambda r, n=name: r["norms"]["matrices"][n]["norm_21"])
        axes[1].plot(Ts, m, "o-", color=color, ms=4, label=f"{name}: spectral")
        axes[1].plot(Ts, m21, "^:", color=color, ms=4, label=f"{name}: (2,1)")
    axes[1].set_yscale("log")
    axes[1].set_ylabel("norm")
    axes[1].set_title("spectral (solid) and (2,1) (dotted), boundcalc.measure", fontsize=10)
    for ax in axes:
        _T_axis(ax, Ts)
    axes[0].set_ylim(0, 1.25 * max(mean))
    axes[0].legend(fontsize=8, loc="center", bbox_to_anchor=(0.5, 0.62), ncol=2)
    axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle("Weight norms against sequence length (mean over runs)")
    fig.tight_layout()
    report.figure(fig, "norms_vs_T.png", "Weight norms of the trained model against T.")

    # 3. registry quantities
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    tt, _ = series(lambda r: r["registry"]["trauger_tewari"]["value"])
    axes[0].plot(Ts, tt, "o-", color="tab:blue")
    axes[0].set_ylim(0, 1.2 * max(tt))
    axes[0].set_ylabel("trauger_tewari_l11_sum")
    axes[0].set_title("Trauger–Tewari ℓ1 measure — PROXY (not a bound)", fontsize=10)
    ed, _ = series(lambda r: r["registry"]["edelman"]["value"])
    cap, _ = series(lambda r: r["registry"]["edelman"]["terms"]["capacity_term"])
    axes[1].plot(Ts, ed, "o-", color="tab:red", label="edelman_cor45_rate (whole value)")
    axes[1].plot(Ts, cap, "s--", color="tab:orange", label="its capacity term C·ln(mT)/(γ√m)")
    axes[1].set_ylim(0, 1.2 * max(ed))
    axes[1].set_title("Edelman et al. — RATE, hidden constants = 1 (not a bound)", fontsize=10)
    axes[1].legend(fontsize=8, loc="lower right")
    for ax in axes:
        _T_axis(ax, Ts)
    fig.suptitle("Registry quantities against T (mean over runs)")
    fig.tight_layout()
    report.figure(fig, "registry_vs_T.png",
                  "Registry quantities against T: a proxy (left) and a rate (right); neither is "
                  "a bound.")

    # 4. training curves
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for r in results:
        acc = r["history"]["train_acc"]
        ax.plot(range(1, len(acc) + 1), acc, lw=1, label=f"T={r['T']} run {r['run']}")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("epoch")
    ax.set_ylabel("running training accuracy")
    ax.set_title("Training curves (stop rule: accuracy 1.0 at an epoch end)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    report.figure(fig, "training_curves.png", "Running training accuracy per epoch.")


def _spearman(x, y) -> float | None:
    from scipy.stats import spearmanr

    if len(set(x)) < 3:
        return None
    rho = spearmanr(x, y).statistic
    return None if rho != rho else float(rho)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import numpy as np
    import torch

    from boundcalc.errors import BoundcalcError
    from boundcalc.experiments.report import StudyReport
    from boundcalc.experiments.sparse_majority import (EDELMAN_GAMMA, SPARSITY, StudyConfig,
                                                       TrainConfig, run_study)

    scale = FULL if args.full else REDUCED
    for name in ("runs", "n_train", "n_test", "max_epochs", "batch_size"):
        value = getattr(args, name)
        if value is not None and value < 1:
            print(f"error: --{name.replace('_', '-')} must be >= 1, got {value}", file=sys.stderr)
            return 2
    Ts = sorted(set(args.T or scale["T"]))
    runs = args.runs or scale["runs"]
    n_test = args.n_test or scale["n_test"]
    max_epochs = args.max_epochs or scale["max_epochs"]
    if min(Ts) < SPARSITY:
        print(f"error: every T must be >= {SPARSITY} (the number of relevant positions)",
              file=sys.stderr)
        return 2
    cfg = StudyConfig(T_values=tuple(Ts), runs=runs, n_train=args.n_train, n_test=n_test,
                      seed=args.seed, train=TrainConfig(batch_size=args.batch_size,
                                                        max_epochs=max_epochs))
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, args.threads))
    t0 = time.time()
    try:
        results = run_study(cfg, progress=lambda s: print(f"[seqlen] {s}", file=sys.stderr))
    except BoundcalcError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        torch.set_num_threads(threads)
    elapsed = time.time() - t0

    rep = StudyReport("Sequence-length independence (Trauger & Tewari 2024): sparse majority",
                      args.out)
    converged = sum(r["reached_full_train_accuracy"] for r in results)
    rep.text(f"""
**Scale:** {"full (the paper's data sizes)" if args.full else "REDUCED (smoke run)"} —
T ∈ {Ts}, {runs} run(s) per T, {args.n_train} training / {n_test} test strings, batch size
{args.batch_size}, at most {max_epochs} epochs. Wall time {elapsed:.0f} s.

**What is measured.** One-layer, two-head Transformers trained on the sparse-majority task
(label = majority of {SPARSITY} hidden positions of a uniformly random bit string), ported from
the official Keras code (`traugerjacob/Transformer-Gen-Bounds/run_experiment.py` @ 30e70de; setup
in `norm_bounds.md` §6.3). For every T: the generalization gap, the weight norms, and two
registry quantities. **None of the numbers below is a generalization bound**: the Trauger–Tewari
theorem is not recoverable (only its norm is), so `trauger_tewari_l11_sum` is a *proxy*, and
`edelman_cor45_rate` is a *rate* (hidden constants set to 1).

**Training stop rule reached (training accuracy 1.0):** {converged} of {len(results)} runs.
""")
    if converged < len(results):
        rep.text(f"""
> **Caution.** {len(results) - converged} run(s) hit the epoch cap ({max_epochs}) before
> reaching training accuracy 1.0. With the official learning-rate schedule the model needs
> thousands of epochs before its accuracy leaves chance level, so these runs are *not* the
> paper's trained models and their gaps and norms say nothing about sequence-length
> independence. Rerun with `--full` (or a larger `--max-epochs`) for the real study.
""")
    rep.text("""
**Deviations from the official code** (all else is ported line by line):
* random numbers come from seeded numpy/torch generators (the official code uses TF's global
  state), so individual runs are not bit-identical to the paper's;
* accuracy is argmax (categorical) accuracy: Keras 2.x resolves `metrics=['accuracy']` from the
  shapes (2-dim one-hot targets and 2-dim logits → categorical accuracy), not from the loss
  (the reference note's caveat about thresholding logits at 0.5 applies to old Keras only);
* only the CLS query's attention row is computed — exact, since the other positions' outputs
  are discarded by the model;
* the T grid and the number of runs are our choice (the paper's are not recoverable, [NF]).

As in the official code, the checkpoint is the one with the best loss on the *test* set (used
as validation set), so the reported test numbers are slightly optimistic.
""")
    rows = []
    for r in results:
        rows.append([r["T"], r["run"], r["epochs"], "yes" if r["reached_full_train_accuracy"]
                     else "no", r["best_epoch"], r["train_acc"], r["test_acc"], r["acc_gap"],
                     r["train_loss"], r["test_loss"], r["loss_gap"], r["norms"]["l1_sum"]])
    rep.table(["T", "run", "epochs", "train acc 1.0?", "best epoch", "train acc", "test acc",
               "acc gap", "train loss", "test loss", "loss gap", "Σ‖W‖₁ (all tensors)"], rows,
              caption="Runs. acc gap = train − test accuracy (official sign); loss gap = "
                      "test − train BCE (positive = overfitting).")
    names = [n for n, _ in results[0]["norms"]["l1"].items()]
    rep.table(["T", "run"] + names + ["sum"],
              [[r["T"], r["run"]] + [r["norms"]["l1"][n] for n in names] + [r["norms"]["l1_sum"]]
               for r in results],
              caption="Entrywise ℓ1 norm of every trainable tensor (Keras names), as the official "
                      "code prints them, and their sum.")
    rep.table(["T", "run", "matrix", "spectral", "Frobenius", "(2,1)", "ℓ1"],
              [[r["T"], r["run"], n, s["spectral"], s["frobenius"], s["norm_21"], s["norm_11"]]
               for r in results for n, s in r["norms"]["matrices"].items()],
              caption="Per-matrix norms from boundcalc.measure.spectra, torch (out, in) "
                      "orientation; (2,1) = sum of column ℓ2 norms.")
    rep.table(["T", "run", "head", "‖QK_h‖₂", "‖QK_h‖₂,₁", "‖Ṽ_h‖₂", "‖Ṽ_h‖₂,₁"],
              [[r["T"], r["run"], h, r["norms"]["heads"]["QK"][h]["spectral"],
                r["norms"]["heads"]["QK"][h]["norm_21"], r["norms"]["heads"]["V"][h]["spectral"],
                r["norms"]["heads"]["V"][h]["norm_21"]]
               for r in results for h in range(len(r["norms"]["heads"]["QK"]))],
              caption="Per-head products: QK_h = W_Q,hᵀ W_K,h / √64 (the bilinear form of the "
                      "logits), Ṽ_h = (W_O,h W_V,h)ᵀ.")
    rep.table(["T", "run", "entry", "kind", "label", "value", "terms"],
              [[r["T"], r["run"], q["id"], q["kind"], q["label"], q["value"],
                ", ".join(f"{k}={v:.4g}" for k, v in q["terms"].items())]
               for r in results for q in (r["registry"]["trauger_tewari"],
                                          r["registry"]["edelman"])],
              caption="Registry quantities with their kinds. Neither is a bound.")
    rep.text(f"""
How the registry quantities were fed:
* `trauger_tewari_l11_sum` (proxy): L = 1, the ℓ1 norms of q, k, v, o, with `ffn_in` := the
  Dense(64) kernel and `ffn_out` := the 64→2 head (this model has no second FFN matrix). Its value
  equals the official sum without the biases (bias ℓ1 total:
  {", ".join(f"T={r['T']}: {r['norms']['l1_bias']:.4g}" for r in results)}).
* `edelman_cor45_rate` (rate): m = {args.n_train}, T = T + 1 tokens (CLS included), margin
  γ = {EDELMAN_GAMMA} fixed before any run, empirical margin error = share of training strings with
  logit_y − logit_other < γ. Its norm factor C_norms is not recoverable from the paper ([NF]); we
  supply the value-path Lipschitz product B_X · Σ_h ‖Ṽ_h‖₂ · ‖W_dense‖₂ · ‖W_head‖₂ (B_X = largest
  token ℓ2 norm, embedding + PE), which omits the paper's QK and (2,1) terms. Read it for its
  T-dependence only.
""")
    _plots(rep, results, Ts)
    gap_rho = _spearman([r["T"] for r in results], [r["acc_gap"] for r in results])
    l1_rho = _spearman([r["T"] for r in results], [r["norms"]["l1_sum"] for r in results])
    cap = [np.mean([r["registry"]["edelman"]["terms"]["capacity_term"] for r in results
                    if r["T"] == T]) for T in Ts]
    rep.text(f"""
## Summary

* Spearman rank correlation with T (over all runs; with few points it is weak evidence either
  way): accuracy gap {_fmt(gap_rho)}, Σ‖W‖₁ {_fmt(l1_rho)}.
* Edelman capacity term from T = {Ts[0]} to T = {Ts[-1]}: {cap[0]:.4g} → {cap[-1]:.4g} (ratio
  {cap[-1] / cap[0]:.3g}; ln(m(T+1)) alone would give {math.log(args.n_train * (Ts[-1] + 1)) /
  math.log(args.n_train * (Ts[0] + 1)):.3g}).
* {"All runs reached training accuracy 1.0." if converged == len(results) else
   "Not every run reached training accuracy 1.0 (see the caution above): no conclusion about the paper's claim can be drawn from this run."}
""")
    rep.write()
    payload = {"config": {"T": Ts, "runs": runs, "n_train": args.n_train, "n_test": n_test,
                          "max_epochs": max_epochs, "batch_size": args.batch_size,
                          "seed": args.seed, "full": args.full},
               "results": [{k: v for k, v in r.items() if k != "history"} for r in results]}
    (args.out / "results.json").write_text(json.dumps(payload, indent=1, default=float))
    print(f"wrote {args.out / 'report.md'}")
    return 0


def _fmt(x: float | None) -> str:
    return "n/a (fewer than 3 distinct T)" if x is None else f"{x:+.2f}"


if __name__ == "__main__":
    raise SystemExit(main())
