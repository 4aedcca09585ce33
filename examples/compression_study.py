#!/usr/bin/env python
"""Study: compression (Occam) bounds next to PAC-Bayes and norm bounds on a small Transformer.

Trains a one-block Transformer on scikit-learn's bundled 8×8 digits (8 row tokens of 8 pixels)
twice from one seeded initialisation: on all weights, and in a seeded random subspace of
dimension d_int. Each model is quantized (k-means levels, codebook fine-tuned, level count on a
grid paid inside the code), coded with an arithmetic code, and bounded with occam_kl,
occam_catoni and occam_smoothed_nll_kl; the same model gets pac_bayes_kl_gaussian_mc and the
edelman_cor45_rate, and the held-out test error is reported.

The study code lives in studies/compression_study.py; this script only parses
options.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# studies/ imports from the repository root (this checkout), wherever the script is run from
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from boundcalc.errors import BoundcalcError
from boundcalc.rounding import upper_text
from studies.compression_study import StudyConfig, run_study

EPILOG = """\
what you get (in --out):
  report.md     one table (code bits, levels, train/test errors of the float and the quantized
                model, Occam kl and Catoni bounds, best PAC-Bayes-kl, Edelman rate) and, per
                model, whether the compression bound is non-vacuous
  results.json  every number

how to read it:
  The compression bound is on the QUANTIZED model's test error (its decoded weights are the
  ones evaluated), so compare it with the 'quant. test err' column. The code includes
  log2(#level counts) bits for the level choice and 1 bit for choosing between the two
  parameterisations; δ = 0.05. Edelman's entry is a rate with hidden constants 1, not a bound.

examples:
  python examples/compression_study.py                        # n = 1000, d_int = 100, ~1-2 min
  python examples/compression_study.py --full --out out/comp  # n = 1400, d_int = 150, longer
  python examples/compression_study.py --n-train 400 --d-int 50 --steps 100

needs scikit-learn (its digits data set ships inside the package; nothing is downloaded).
"""


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="compression_study.py", description=__doc__.split("\n\n")[0] + "\n\n"
        + __doc__.split("\n\n")[1], epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("out/study_compression"),
                    help="folder for report.md and results.json (default: %(default)s)")
    ap.add_argument("--full", action="store_true",
                    help="n_train 1400, d_int 150, 800 training steps, 200 Monte Carlo draws")
    ap.add_argument("--n-train", type=int, help="training digits (the rest are the test set)")
    ap.add_argument("--d-int", type=int, help="dimension of the random training subspace")
    ap.add_argument("--steps", type=int, help="full-batch Adam steps of each training run")
    ap.add_argument("--qat-steps", type=int, help="codebook fine-tuning steps per level count")
    ap.add_argument("--levels", type=int, nargs="+", metavar="K",
                    help="level counts tried (the choice costs log2(count) bits)")
    ap.add_argument("--mc-draws", type=int, help="Monte Carlo draws of the Gibbs risk")
    ap.add_argument("--seed", type=int, help="seed of the split, the init and the subspace")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    cfg = StudyConfig.full() if args.full else StudyConfig()
    for opt, attr in (("n_train", "n_train"), ("d_int", "d_int"), ("steps", "steps"),
                      ("qat_steps", "qat_steps"), ("mc_draws", "mc_draws"), ("seed", "seed")):
        value = getattr(args, opt)
        if value is not None:
            if value < (0 if opt == "seed" else 1):
                print(f"error: --{opt.replace('_', '-')} must be positive", file=sys.stderr)
                return 2
            setattr(cfg, attr, value)
    if args.levels:
        if min(args.levels) < 1 or len(set(args.levels)) != len(args.levels):
            print("error: --levels must be distinct positive integers", file=sys.stderr)
            return 2
        cfg.levels = tuple(args.levels)
    if not 10 <= cfg.n_train <= 1700:
        print("error: --n-train must lie in [10, 1700] (digits has 1797 images)", file=sys.stderr)
        return 2
    try:
        results = run_study(cfg, args.out,
                            progress=lambda s: print(f"[compression_study] {s}", file=sys.stderr))
    except BoundcalcError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name in ("full", "subspace"):
        r = results[name]
        # the certified values rounded up (boundcalc.rounding), the test error to nearest
        print(f"{name}: {r['code_bits']:.0f} bits, Occam kl bound "
              f"{upper_text(r['occam_kl']['value'], 4)}, quantized test error "
              f"{r['test_error_quantized']:.4f}, PAC-Bayes "
              f"{upper_text(r['pac_bayes']['best']['value'], 4)}")
    print(f"report: {args.out / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
