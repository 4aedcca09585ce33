"""Real text: MiniLM-L6 tells which standard-library package a docstring comes from, with
certified numbers for its error.

    python examples/text_classifier.py --out out/text_classifier      # minutes on 2 CPU cores
    python examples/text_classifier.py --out out/tc_full --full       # more draws, for a GPU
    python examples/text_classifier.py --out out/text_classifier --posterior bound
    python examples/text_classifier.py --out out/text_classifier --posterior subspace

Builds the data from this interpreter's own standard library (docstrings of the 10 largest
packages, split by file into prior / bound pool / held-out; S drawn i.i.d. from the pool),
trains the prior centre on the prior split and fine-tunes on S, then runs what a user runs:

    boundcalc measure OUT/model --init OUT/prior --data OUT/S.jsonl --max-length 32 \\
        --sigma 0.01 --draws 4 --hessian-probes 0 \\
        --tune-data OUT/tune.jsonl --tune-draws 2 --group-draws 8 \\
        --compress auto --quantizer kmeans --levels 1,16 -o OUT/stats.json
    boundcalc compare --stats OUT/stats.json

(per-sample Monte Carlo draws, measure's default: N = 4·600 losses; OUT/tune.jsonl is 128
docstrings of the prior split, where the per-group σ_g shape is searched for free) and prints
every certified value beside the held-out error, with the model it certifies: the quantized
model (what its code decodes to: the fine-tuned model up to quantization, or the prior; rows
about another model than the fine-tuned one are listed apart), the Gibbs posterior around the
fine-tuned weights, or the fine-tuned weights; then the least certified value with its honest
δ. With ``--posterior bound`` it also trains the bound-trained Gibbs posterior on S (PAC-Bayes
with backprop: the head's means trained on the bound from the prior's, σ the prior's;
``studies/bound_step.py``) and certifies it with ``pac_bayes_kl_gaussian_learned_mc``, beside
the held-out error of that Gibbs predictor. With ``--posterior subspace`` it trains the subspace
Gibbs posterior around the prior as ``certify --posterior subspace`` does (rank-4 adapters on
every encoder Linear plus the head, s_P declared, 3 epochs on the bound;
``studies/bound_step.py``), certifies it with ``pac_bayes_kl_gaussian_subspace_mc`` and prints
that row taken apart: its value, its floor at KL 0, its KL, its Gibbs error on S, and the held-out
error of its mean and of its Gibbs predictor. Every run prints the yardstick: the prior's
test-set bound on S (the prior never saw S). OUT/report.json has them all.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# studies/ imports from the repository root (this checkout), wherever the script is run from
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--out", type=Path, default=Path("out/text_classifier"))
    ap.add_argument("--full", action="store_true",
                    help="larger S, 64 tokens, 10 passes × 2 σ, 20 per-group passes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reuse", action="store_true",
                    help="keep the models of an earlier run in OUT with the same settings; "
                         "only measure and compare again (a measurement with the same "
                         "arguments is reused too)")
    ap.add_argument("--posterior", choices=("proximal", "bound", "subspace"),
                    default="proximal",
                    help="bound: also train and certify the bound-trained Gibbs posterior; "
                         "subspace: the subspace Gibbs posterior around the prior")
    args = ap.parse_args(argv)
    from studies.example_args import refused

    bad = refused(args, {})
    if bad:  # before any work
        print(f"error: {bad}", file=sys.stderr)
        return 2
    from boundcalc.errors import BoundcalcError
    from studies.text_classifier import FULL, ClassifierConfig, run
    from boundcalc.report.summary import floor_line
    from boundcalc.rounding import upper_text

    cfg = ClassifierConfig(seed=args.seed, posterior=args.posterior,
                           **(FULL if args.full else {}))
    try:
        rep = run(args.out, cfg, reuse=args.reuse)
    except BoundcalcError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    te, se = rep["test_error"], rep["test_error_stderr"]
    print(f"\n{len(rep['classes'])} packages, n = {rep['n']} (S drawn i.i.d. from a pool of "
          f"{rep['n_pool']} docstrings); random guessing errs {rep['random_guess_error']:.2f}")
    print(f"held-out error {te:.4f} ± {se:.4f} ({rep['n_test']} docstrings of other files); "
          f"pool error {rep['pool_error']:.4f} (exact: the quantity the bounds are about)")
    if "compression" in rep:
        c = rep["compression"]
        print(f"compression: {c['levels']} level(s), {c['code_bits']:.1f} bits; the quantized "
              f"model errs {c['quantized_error_on_S']:.4f} on S and "
              f"{c['quantized_test_error']:.4f} held out"
              + (f"; the code decodes to the {c['decoded']['about']} model (agreement "
                 f"{c['decoded']['agreement']:.3f} with the fine-tuned model on S)"
                 if c.get("decoded") else ""))
    for name, g in rep.get("gibbs", {}).items():
        for at, m, u in zip(g["at"], g["mean"], g["upper"]):
            print(f"{name} at {at:.4g}: Monte Carlo mean {m:.4f}, upper {u:.4f} "
                  f"(N = {g['N']:.0f} losses, {g['mode']} mode)")
    bp = rep.get("bound_posterior") or {}
    ho = bp.get("held_out") or {}
    gibbs_te = _gibbs_held_out(bp)
    for title, key, held in (
            ("about the fine-tuned model (a bound only where the label says 'certified bound')",
             "certified", f"{te:.4f} ± {se:.4f}"),
            ("certified, about the bound-trained Gibbs posterior (another predictor: its "
             "held-out error beside it)", "certified_bound_posterior", gibbs_te),
            ("certified, about the subspace Gibbs posterior around the prior (another "
             "predictor: its held-out error beside it)", "certified_subspace_posterior",
             _gibbs_held_out(rep.get("subspace_posterior"))),
            ("certified, but about ANOTHER model (listed apart)", "certified_other_model",
             f"{te:.4f} ± {se:.4f}")):
        if not rep.get(key):
            continue
        print(f"\n{title}\n{'entry':32s} {'value':>8s}  {'δ':>6s}  {'held-out':>15s}  label")
        for r in rep[key]:
            v = "—" if r["value"] is None else upper_text(r["value"], 4)  # rounded up
            d = "—" if r["delta"] is None else f"{r['delta']:.3g}"
            print(f"{r['id']:32s} {v:>8s}  {d:>6s}  {held}  {r['label']}")
            print(f"{'':32s} certifies {r['certifies']}")
            print(f"{'':32s} {floor_line(r)}")
    if ho:
        print(f"the bound-trained posterior's mean errs {ho['mean_error']:.4f} on the "
              f"{ho['rows']} held-out docstrings; its Gibbs predictor "
              f"{ho['gibbs_error_estimate']:.4f} (one Monte Carlo pass, each row its own draw)")
    sp = rep.get("subspace_posterior")
    if sp:
        print(subspace_line(sp))
    b = rep.get("baseline")
    if b:
        print(f"\nyardstick (shown, not claimed): the prior's test-set bound on S "
              f"{upper_text(b['value'], 4)} at δ = {b['delta']:g} ({b['errors']} errors of the "
              f"prior on the {b['m']} rows of S, which it never saw)")
    if rep.get("minimum_text"):
        print(f"\n{rep['minimum_text']}")
    print(f"\nreport: {args.out / 'report.json'}")
    return 0


def _gibbs_held_out(posterior: dict | None) -> str:
    """A trained posterior's held-out Gibbs error (one Monte Carlo pass), or —."""
    ho = (posterior or {}).get("held_out") or {}
    return (f"{ho['gibbs_error_estimate']:.4f} (Gibbs, 1 pass)"
            if "gibbs_error_estimate" in ho else "—")


def subspace_line(sp: dict) -> str:
    """The subspace row taken apart, in one paragraph (``report.json``'s
    ``subspace_posterior``): value rounded up, floor rounded down."""
    from boundcalc.rounding import lower_text, upper_text

    ho = sp.get("held_out") or {}
    held = (f"; held out ({ho['rows']} docstrings) its mean errs {ho['mean_error']:.4f}, its "
            f"Gibbs predictor {ho['gibbs_error_estimate']:.4f} (one pass) and disagrees with "
            f"model/ on {ho['disagreement_rate']:.3f} of them" if ho else "")
    return (f"the subspace posterior: certified {upper_text(sp['value'], 4)}, its floor at KL 0 "
            f"{lower_text(sp['floor_zero_KL'], 4)}; KL {sp['KL']:.3g} nats over d = "
            f"{sp['dim']} coordinates (‖z‖² {sp['dist_sq']:.3g}, s_Q {sp['sigma_post']:.3g}, "
            f"s_P {sp['sigma_prior']:g}); Gibbs error on S {sp['gibbs_error_on_S']:.4f} "
            f"(N = {sp['units']:.0f}){held}")


if __name__ == "__main__":
    raise SystemExit(main())
