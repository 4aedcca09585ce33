#!/usr/bin/env python
"""Study: the shallow Transformer of docs/sources/shallow_gd.md trained by gradient descent, and
the paper's Theorem 5.

Trains the paper's one-layer Transformer (single-head attention with 1/√d_m scaling, ReLU with
W_H = I, average pooling, linear output; LeCun initialisation; d = d_m) by full-batch gradient
descent on scikit-learn's bundled 8×8 digits 0 vs 1, at several training-set sizes N and widths
d_m. For each run it measures what Theorem 5 needs (radii from initialisation over the whole run,
η/ξ norms, α = σ_min of the pooled features at initialisation, Φ(θ⁰), R_X), evaluates the
registry entries shallow_gd_rho4 / shallow_gd_rho2, and writes a Markdown report with figures.

The study code lives in studies/shallow_gd.py; this script only parses options.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# studies/ imports from the repository root (this checkout), wherever the script is run from
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from boundcalc.errors import BoundcalcError
from studies.shallow_gd import ShallowGDConfig, run_study

EPILOG = """\
what you get (in --out):
  report.md         tables of the measured quantities, Theorem 5 as a rate a + C·b with its
                    hidden constant C, which conditions of Theorem 5 hold, and the findings
  radii_vs_N.png    R_Q, R_K, R_V, R_O (max over GD steps) against N, one line per d_m
  rate_vs_N.png     the rate (both ρ-variants) and the measured test loss against N
  loss_curves.png   train/test loss along GD (like the paper's Figures 1-3)
  runs.csv          every number, one row per (N, d_m)

how to read it:
  Theorem 5 hides constants in O(·), so its value is a RATE, not a certified bound: the number
  shown is emp_loss_bound + C·(rademacher_term + confidence_term) with C = --hidden-constant.
  The theorem's conditions (d_m ≥ N³, two α-conditions, ...) are checked from the measurements;
  where one fails the theorem does not apply and the number only shows how the rate scales.

examples:
  python examples/shallow_gd.py                         # reduced grid, ~10-30 s
  python examples/shallow_gd.py --full --out out/gd     # N ≤ 260, d_m ≤ 1024, 5-10 min
  python examples/shallow_gd.py --sizes 10 50 250 --widths 32 512 --steps 800
  python examples/shallow_gd.py --hidden-constant 0.1   # rescale the O(·) part

needs scikit-learn (its digits data set ships inside the package; nothing is downloaded).
"""


def parse(argv: list[str] | None) -> argparse.Namespace:
    from studies.report import add_study_options

    ap = argparse.ArgumentParser(
        prog="shallow_gd.py", description=__doc__.split("\n\n")[0] + "\n\n"
        + __doc__.split("\n\n")[1], epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_study_options(ap, "shallow_gd",
                      "larger grid: N in {10,20,40,80,160,260}, d_m in {16,64,256,1024}, "
                      "1000 GD steps (5-10 minutes on 2 cores)")
    ap.add_argument("--sizes", type=int, nargs="+", metavar="N",
                    help="training-set sizes (at most 360 minus --n-test)")
    ap.add_argument("--widths", type=int, nargs="+", metavar="D_M",
                    help="model widths d_m (≥ 16: tokens are 8 pixels + 8 position codes)")
    ap.add_argument("--steps", type=int, help="full-batch GD steps per run")
    ap.add_argument("--lr", type=float,
                    help="learning rate on the mean squared loss; GD step on Φ is lr/N "
                         "(default 0.5)")
    ap.add_argument("--n-test", type=int, help="digits held out for the test loss (default 100)")
    ap.add_argument("--delta", type=float, help="confidence δ of Theorem 5 (default 0.05)")
    ap.add_argument("--hidden-constant", type=float,
                    help="C_hidden, the constant of the O(·) part (default 1)")
    ap.add_argument("--seed", type=int, help="seed for the split and the initialisation")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    cfg = ShallowGDConfig.full() if args.full else ShallowGDConfig()
    for opt, attr in (("sizes", "sizes"), ("widths", "widths"), ("steps", "steps"),
                      ("lr", "lr"), ("n_test", "n_test"), ("delta", "delta"),
                      ("hidden_constant", "c_hidden"), ("seed", "seed")):
        if getattr(args, opt) is not None:
            setattr(cfg, attr, getattr(args, opt))
    try:
        rep = run_study(args.out, full=args.full, cfg=cfg)
    except BoundcalcError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"report: {rep.out_dir / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
