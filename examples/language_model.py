"""Real text: a byte-level GPT-2-style language model on the standard library's source, with
certified bits per predicted byte on a stated pool of text (the first byte of a chunk has no
context and is not scored: 63 of the 64 bytes of a full chunk count).

    python examples/language_model.py --out out/language_model        # minutes on 2 CPU cores
    python examples/language_model.py --out out/lm_full --full        # a larger model, for a GPU
    python examples/language_model.py --out out/lm_gpt2 --gpt2        # GPT-2 small's body, a GPU

The sampling assumption is made true by construction: the unit is a 64-byte chunk, the pool is
every chunk of the bound-split files, and S is drawn from the pool i.i.d. uniformly with
replacement; every certified number is about a chunk drawn uniformly from that pool. Runs

    boundcalc measure OUT/model --init OUT/prior --data OUT/S.jsonl --max-length 64 \\
        --smoothing 0.01 --sigma 0.002 --draws 4 --hessian-probes 0 \\
        --tune-data OUT/prior.jsonl \\
        --compress delta --quantizer kmeans --levels 1,16 -o OUT/stats.json

then trains the bound-trained Gibbs posterior N(μ, diag σ_Q,g²) on S on the PAC-Bayes bound
for the same smoothed loss (boundcalc.measure.data.bound_posterior.add_bound_posterior: μ from
the prior, σ the learned scale of the prior's per-group σ, searched on prior-split chunks),
measures its Gibbs risk on S with fresh draws into OUT/stats.json, and runs

    boundcalc compare --stats OUT/stats.json

It prints every certified value in bits per predicted byte beside the held-out value (for the
bound-trained row: the held-out value of that same Gibbs predictor) and log2 V, with the model
each certifies (compression rows whose code decodes to another model than the fine-tuned one
are listed apart), and the least certified value with its honest δ. ``--no-bound`` skips the
tune search and the bound-trained posterior (the rows of before).

It also trains the subspace Gibbs posterior around the prior (rank-4 adapters on every Conv1D
of the blocks, z fitted on S by the smoothed loss, then trained on the bound:
studies/language_model_subspace.py; ``--no-subspace`` skips it), certified by
``pac_bayes_kl_gaussian_subspace_mc``, and prints the baseline beside the rows: the prior's
test-set bound on S (``test_set_kl_bounded`` on the same smoothed loss, in bits per predicted
byte), what holding S out would certify with no PAC-Bayes at all, and by how much the least
certified row beats or misses it.
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
    from boundcalc.errors import BoundcalcError
    from studies.language_model import FULL, GPT2, LMConfig, run
    from boundcalc.report.summary import floor_line
    from boundcalc.rounding import upper_text

    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--out", type=Path, default=Path("out/language_model"))
    ap.add_argument("--full", action="store_true",
                    help="256-byte chunks, 6 layers of width 384, n = 20000 (for a GPU)")
    ap.add_argument("--gpt2", action="store_true",
                    help="GPT-2 small's body on bytes (12 layers of width 768, 85 M weights), "
                         "n = 5000: for a card's 15 minutes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="auto",
                    help="where the model trains and is measured: auto (CUDA when present), "
                         "cpu, cuda")
    ap.add_argument("--train-steps", type=int,
                    help=f"prior training steps (default {LMConfig.train_steps})")
    ap.add_argument("--draws", type=int,
                    help=f"Monte Carlo draws per σ (default {LMConfig.draws})")
    ap.add_argument("--no-bound", dest="bound", action="store_false",
                    help="skip the bound-trained Gibbs posterior (and measure's tune search)")
    ap.add_argument("--no-subspace", dest="subspace", action="store_false",
                    help="skip the subspace Gibbs posterior around the prior")
    ap.add_argument("--reuse", action="store_true",
                    help="keep the models of an earlier run in OUT with the same settings; "
                         "only measure and compare again")
    args = ap.parse_args(argv)
    from studies.example_args import COUNT, refused

    bad = refused(args, {"train_steps": COUNT, "draws": COUNT})
    if bad:  # before any work
        print(f"error: {bad}", file=sys.stderr)
        return 2

    over = {k: v for k, v in (("train_steps", args.train_steps), ("draws", args.draws))
            if v is not None}
    if not args.bound:
        over.update(bound=False, tune=False)
    if not args.subspace:
        over.update(subspace=False)
    preset = GPT2 if args.gpt2 else FULL if args.full else {}
    cfg = LMConfig(seed=args.seed, device=args.device, **{**preset, **over})
    try:
        rep = run(args.out, cfg, reuse=args.reuse)
    except BoundcalcError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    h, hs, g = rep["heldout_bits"], rep["heldout_bits_stderr"], rep["random_guess_bits"]
    print(f"\n{rep['n_params']:,} parameters; n = {rep['n']} chunks drawn i.i.d. from a pool "
          f"of {rep['n_pool']}")
    print(f"{rep['sampling']}")
    print(f"held-out {h:.3f} ± {hs:.3f} bits per predicted byte ({rep['n_test']} chunks of "
          f"other files); pool {rep['pool_bits']:.3f} (exact); random guess log2 V = {g:.3f}")
    print(rep["unit_note"])
    print(f"\n{'entry (bits/predicted byte)':32s} {'value':>8s}  {'δ':>6s}  {'held-out':>7s}  "
          f"{'log2 V':>6s}  label")
    for r in rep["certified"]:
        v = "—" if r["value"] is None else upper_text(r["value"], 4)  # rounded up
        d = "—" if r["delta"] is None else f"{r['delta']:.3g}"
        ho = r.get("heldout_bits", h)  # the row's own predictor where it is another one
        print(f"{r['id']:32s} {v:>8s}  {d:>6s}  {ho:7.3f}  {g:6.3f}  {r['label']}")
        scale = r["value"] / r["value_normalized"] if r.get("value_normalized") else 1.0
        print(f"{'':32s} {floor_line(r, scale)}")
        if r.get("certifies"):
            print(f"{'':32s} certifies {r['certifies']}")
        if "heldout_bits" in r:
            print(f"{'':32s} held-out {r['heldout_bits']:.3f} ± {r['heldout_bits_stderr']:.3f} "
                  "bits per predicted byte: this Gibbs predictor's smoothed loss on the "
                  "held-out chunks (Monte Carlo)")
    if rep.get("minimum"):
        print(f"\n{rep['minimum']['text']}")
    if rep.get("baseline"):
        b, m = rep["baseline"], rep.get("minimum")
        print(b["text"])
        if m:
            gap = m["value"] - b["value"]
            print(f"the least certified row {'beats' if gap < 0 else 'misses'} the baseline by "
                  f"{abs(gap):.4f} bits per predicted byte")
    if rep["certified_other"]:
        print("\non the top-1 next-byte error (a probability, not bits):")
        for r in rep["certified_other"]:
            v = "—" if r["value"] is None else upper_text(r["value"], 4)
            print(f"  {r['id']:30s} {v:>8s}  {r['label']}")
            if r.get("certifies"):
                print(f"  {'':30s} certifies {r['certifies']}")
            print(f"  {'':30s} {floor_line(r)}")
    if rep["certified_other_model"]:
        print("\ncertified, but about ANOTHER model than the fine-tuned one (listed apart):")
        for r in rep["certified_other_model"]:
            v = "—" if r["value"] is None else upper_text(r["value"], 4)
            print(f"  {r['id']:30s} {v:>8s}  {r['label']}")
            print(f"  {'':30s} certifies {r['certifies']}")
    print(f"\nreport: {args.out / 'report.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
