"""End to end on real data: a small ViT on scikit-learn's digits → measure → compare.

    python examples/digits_vit.py --out out/digits            # a few minutes on 2 cores

Trains a ViTForImageClassification (prior on one split, fine-tuned on the bound sample S),
saves both as Hugging Face folders, then runs what a user would run:

    boundcalc measure out/digits/model --init out/digits/prior --data out/digits/bound.npz \
        --sigma 0.005 --sigma 0.01 --sigma 0.015 --sigma 0.02 --sigma 0.03 --draws 100 \
        -o out/digits/stats.json
    boundcalc compare --stats out/digits/stats.json

and prints every certified number beside the held-out test error (± its standard error).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("out/digits"))
    ap.add_argument("--draws", type=int, default=100, help="Monte Carlo draws per σ")
    ap.add_argument("--sigma", type=float, action="append",
                    help="posterior σ (repeatable; default 0.005 0.01 0.015 0.02 0.03)")
    args = ap.parse_args(argv)
    from typer.testing import CliRunner

    from boundcalc.cli import app
    from boundcalc.experiments.digits_vit import build

    info = build(args.out)
    print(f"held-out test error {info['test_error']:.4f} ± {info['test_error_stderr']:.4f} "
          f"(n_test = {info['n_test']}); error on the bound sample {info['bound_error']:.4f}",
          file=sys.stderr)
    stats = args.out / "stats.json"
    sig = [a for s in (args.sigma or [0.005, 0.01, 0.015, 0.02, 0.03]) for a in ("--sigma", str(s))]
    runner = CliRunner()
    res = runner.invoke(app, ["measure", str(args.out / "model"), "--init",
                              str(args.out / "prior"), "--data", str(args.out / "bound.npz"),
                              *sig, "--draws", str(args.draws), "--batch-size", "700",
                              "--hessian-probes", "10", "--hessian-samples", "128",
                              "-o", str(stats), "--json"])
    if res.exit_code:
        print(res.output, file=sys.stderr)
        return res.exit_code
    res = runner.invoke(app, ["compare", "--stats", str(stats), "--json"])
    if res.exit_code:
        print(res.output, file=sys.stderr)
        return res.exit_code
    rows = json.loads(res.stdout)
    report = {"test_error": info["test_error"], "test_error_stderr": info["test_error_stderr"],
              "certified": []}
    print(f"{'entry':34s} {'value':>9s} {'label':30s} {'δ':>6s}  test error")
    for r in sorted(rows["certified"], key=lambda r: r["value"] if r["value"] is not None
                    else float("inf")):
        print(f"{r['id']:34s} {r['value_text']:>9s} {r['label'][:30]:30s} "
              f"{r['delta'] if r['delta'] is not None else float('nan'):6.3g}  "
              f"{info['test_error']:.4f}")
        report["certified"].append({k: r[k] for k in ("id", "value", "label", "delta",
                                                      "parameters")})
    (args.out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
