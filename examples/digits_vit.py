"""End to end on real data: a small ViT on scikit-learn's digits → measure → compare.

    python examples/digits_vit.py --out out/digits            # a few minutes on 2 cores

Trains a ViTForImageClassification (prior on one split, fine-tuned on the bound sample S),
saves both as Hugging Face folders, then runs what a user would run:

    boundcalc measure out/digits/model --init out/digits/prior --data out/digits/bound.npz \
        --tune-data out/digits/prior.npz \
        --sigma 0.005 --sigma 0.01 --sigma 0.015 --sigma 0.02 --sigma 0.03 --draws 5 \
        --group-draws 20 \
        -o out/digits/stats.json
    boundcalc compare --stats out/digits/stats.json

``--tune-data`` is the split the prior was trained on (disjoint from S): the per-group σ_g of
``pac_bayes_kl_gaussian_groups_mc`` are searched there, with the prior weights, at no
union-bound cost; the Gibbs risk on S then gives every digit of every pass its own posterior
draw (N = 20·700 = 14,000 losses). Prints the certified bounds first, then the estimated numbers, each beside
the held-out test error (± its standard error) and the model it certifies, then the least
certified value with its honest δ (the least of k rows re-evaluated at δ/k, as `compare` quotes
it), and writes ``report.json`` with the same split.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

# studies/ imports from the repository root (this checkout), wherever the script is run from
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _stage(t0: float, msg: str) -> None:
    print(f"[{time.monotonic() - t0:5.0f} s] {msg}", file=sys.stderr, flush=True)


def _kind(row: dict) -> str:
    """certified (a bound), estimated (a stochastic input without its confidence term) or
    not_a_bound (δ exhausted, a failed assumption)."""
    if row["is_bound"]:
        return "certified"
    return "estimated" if row["label"].startswith("estimated") else "not_a_bound"


def _certifies(row: dict) -> str:
    """Which model a certified row is about (``studies.report.certified_model``:
    what a compression code decodes to, as ``compare`` names it; the Gibbs posterior around
    model/; or model/ itself)."""
    from studies.report import certified_model

    return certified_model(row["id"], row)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--out", type=Path, default=Path("out/digits"))
    ap.add_argument("--draws", type=int, default=5,
                    help="Monte Carlo passes per isotropic σ; every digit of every pass gets "
                         "its own posterior draw, so N = draws·700 losses per σ")
    ap.add_argument("--group-draws", type=int, default=20,
                    help="Monte Carlo passes at the per-group σ vector (the tightest entry): "
                         "N = group-draws·700 losses")
    ap.add_argument("--sigma", type=float, action="append",
                    help="posterior σ (repeatable; default 0.005 0.01 0.015 0.02 0.03)")
    ap.add_argument("--device", default="auto",
                    help="where the ViT trains and is measured: auto (CUDA when present), cpu, "
                         "cuda")
    ap.add_argument("--seed", type=int, default=0,
                    help="the shuffle of the splits and the training (seeds 0-2 are in the "
                         "README)")
    args = ap.parse_args(argv)
    from typer.testing import CliRunner

    from boundcalc.cli import app
    from studies.digits_vit import DigitsConfig, build
    from boundcalc.report.summary import floor_line

    t0 = time.monotonic()
    _stage(t0, "training the prior on the prior split, then the posterior on S")
    info = build(args.out, DigitsConfig(seed=args.seed, device=args.device))
    _stage(t0, f"held-out test error {info['test_error']:.4f} ± {info['test_error_stderr']:.4f} "
               f"(n_test = {info['n_test']}); error on the bound sample "
               f"{info['bound_error']:.4f}")
    stats = args.out / "stats.json"
    sig = [a for s in (args.sigma or [0.005, 0.01, 0.015, 0.02, 0.03]) for a in ("--sigma", str(s))]
    runner = CliRunner()
    _stage(t0, "boundcalc measure --data bound.npz --tune-data prior.npz (σ search on the "
               "prior split, Monte Carlo Gibbs risk on S, Hessian trace)")
    res = runner.invoke(app, ["measure", str(args.out / "model"), "--init",
                              str(args.out / "prior"), "--data", str(args.out / "bound.npz"),
                              "--tune-data", str(args.out / "prior.npz"),
                              *sig, "--draws", str(args.draws),
                              "--group-draws", str(args.group_draws), "--batch-size", "700",
                              "--hessian-probes", "10", "--hessian-samples", "128",
                              "--device", args.device, "-o", str(stats), "--json"])
    if res.exit_code:
        print(res.output, file=sys.stderr)
        return res.exit_code
    _stage(t0, "boundcalc compare --stats stats.json")
    res = runner.invoke(app, ["compare", "--stats", str(stats), "--json"])
    if res.exit_code:
        print(res.output, file=sys.stderr)
        return res.exit_code
    rows = json.loads(res.stdout)
    test = f"{info['test_error']:.3f} ± {info['test_error_stderr']:.3f}"
    report: dict = {"test_error": info["test_error"],
                    "test_error_stderr": info["test_error_stderr"],
                    "certified": [], "estimated": [], "not_a_bound": []}
    order = {"certified": 0, "estimated": 1, "not_a_bound": 2}
    ranked = sorted(rows["certified"], key=lambda r: (
        order[_kind(r)], r["value"] if r["value"] is not None else float("inf")))
    for r in ranked:
        row = {k: r.get(k) for k in ("id", "value", "label", "delta", "parameters",
                                     "union_bound_cost", "floor", "vacuous",
                                     "vacuous_against")}
        row["certifies"] = _certifies(r)
        report[_kind(r)].append(row)
    report["minimum"], report["minimum_text"] = rows.get("minimum"), rows.get("minimum_text")
    for kind in ("certified", "estimated", "not_a_bound"):
        if not report[kind]:
            continue
        print(f"\n{kind.replace('_', ' ')} (held-out test error {test})")
        for r in (x for x in ranked if _kind(x) == kind):
            d = r["delta"] if r["delta"] is not None else float("nan")
            print(f"  {r['id']:34s} {r['value_text']:>9s}  δ = {d:.3g}")
            print(f"    {r['label']}; "
                  f"{'certifies' if kind == 'certified' else 'about'} {_certifies(r)}")
            if kind == "certified":
                print(f"    {floor_line(r)}")
    if report["minimum_text"]:
        print(f"\n{rows['headline']}\n{report['minimum_text']}")
    _stage(t0, f"wrote {args.out / 'report.json'}")
    (args.out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
