#!/usr/bin/env python
"""Study: which registry entries track generalization across a zoo of small Transformers?

Trains small Transformer classifiers on scikit-learn's handwritten digits (real data, offline)
over width × depth × training-set size × seed, measures each model's test error, sweeps every
checkpoint with `boundcalc sweep` (every applicable registry entry, local processes or Ray) and
ranks the entries against test error and generalization gap: Kendall τ, Spearman ρ with
bootstrap intervals, and Jiang et al. 2020's granulated Kendall τ over the four
hyper-parameters.

The study code lives in studies/zoo.py; this script only parses options.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# studies/ imports from the repository root (this checkout), wherever the script is run from
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

EPILOG = """\
what you get (in --out):
  report.md                     the ranking against test error and gap, and the findings
  correlation_test_error.png    τ per entry with bootstrap intervals, ρ and Ψ (colour = kind)
  correlation_gap.png           the same against the generalization gap
  correlation_*.csv             the numbers behind them
  zoo/                          the checkpoints, their inits and manifest.csv
  sweep/results.csv|.parquet    one row per checkpoint × entry; sweep/stats/ the stats files

how to read it:
  τ > 0: a larger value of the entry goes with a larger test error (it tracks). Certified,
  rate and proxy entries are ranked together; tracking never turns a proxy into a bound.

examples:
  python examples/zoo.py                       # 24 models, a few CPU minutes
  python examples/zoo.py --full                # 81 models, 60 epochs
  python examples/zoo.py --ray --workers 2     # the sweep on a local Ray
"""


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="zoo.py",
                                 description="\n\n".join(__doc__.split("\n\n")[:2]),
                                 epilog=EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("out/study_zoo"),
                    help="folder for report.md, figures, the zoo and the sweep "
                         "(default: %(default)s)")
    ap.add_argument("--full", action="store_true",
                    help="widths 16 32 64 x depths 1 2 4 x sizes 200 600 1200 x 3 seeds, "
                         "60 epochs (81 models)")
    ap.add_argument("--widths", type=int, nargs="+", metavar="D")
    ap.add_argument("--depths", type=int, nargs="+", metavar="L")
    ap.add_argument("--sizes", type=int, nargs="+", metavar="N", help="training-set sizes")
    ap.add_argument("--seeds", type=int, nargs="+", metavar="S")
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--workers", type=int, default=2, help="sweep workers (default 2)")
    ap.add_argument("--ray", action="store_true", help="run the sweep on a local Ray")
    ap.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from boundcalc.errors import BoundcalcError
    from studies.zoo import ZooConfig, run_zoo

    cfg = ZooConfig.full_grid() if args.full else ZooConfig()
    for opt, attr in (("widths", "widths"), ("depths", "depths"), ("sizes", "train_sizes"),
                      ("seeds", "seeds")):
        if getattr(args, opt) is not None:
            setattr(cfg, attr, tuple(getattr(args, opt)))
    if args.epochs is not None:
        cfg.epochs = args.epochs
    cfg.workers, cfg.ray, cfg.bootstrap = args.workers, args.ray, args.bootstrap
    try:
        _, rep = run_zoo(args.out, cfg, log=lambda m: print(m, file=sys.stderr))
    except BoundcalcError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"report: {rep.out_dir / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
