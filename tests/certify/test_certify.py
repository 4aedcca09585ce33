"""``boundcalc certify``: a config-only BERT and a separable labelled CSV to a certified,
non-vacuous number; every step resumable from the output folder; the API's training
callback; the CLI's output (the minimum at δ/k with its probability, the Gibbs predictor it
certifies and its held-out error, floor, vacuity level, what dominates). The split, the
test-set rows and the baseline: tests/certify/test_honest.py."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from boundcalc.cli import app
from tests._certify_helpers import bert_config_folder, synthetic_rows, write_csv

runner = CliRunner()


def _config(**over):
    from boundcalc.certify import CertifyConfig

    small = dict(prior_epochs=6, prior_lr=3e-3, post_lr=1e-3, batch_size=16, max_length=24,
                 sigmas=(0.01,), draws=1, tune_rows=48, tune_draws=1, group_draws=2)
    return CertifyConfig(**{**small, **over})


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One certify run of a 1-layer, width-32 BERT config on 240 rows, with a callback that
    wraps the default loop and records every stage it trains."""
    from boundcalc.certify import certify, train_classifier

    w = tmp_path_factory.mktemp("certify")
    base = bert_config_folder(w / "base", hidden=32, layers=1, heads=2)
    write_csv(w / "d.csv", synthetic_rows(240, 0), text="sentence", label="topic")
    write_csv(w / "t.csv", synthetic_rows(100, 1), text="sentence", label="topic")
    calls = []

    def train(model, tok, texts, labels, spec):
        calls.append((spec.stage, len(texts), spec.anchor is not None, spec.proximal))
        train_classifier(model, tok, texts, labels, spec)

    cfg = _config(text_column="sentence", label_column="topic")
    res = certify(base, w / "d.csv", w / "out", w / "t.csv", cfg, train=train)
    return {"w": w, "base": base, "res": res, "calls": calls, "cfg": cfg, "train": train}


def test_certified_and_non_vacuous_on_an_easy_task(run):
    from boundcalc.optimize.compare import compare_entries
    from boundcalc.registry import load_registry
    from boundcalc.stats import load_stats

    res = run["res"]
    assert res.steps == dict.fromkeys(("split", "prior", "posterior", "measure", "compare"),
                                      "ran")
    m = res.report["minimum"]
    assert m is not None and "best" not in res.report
    # two balanced classes: guessing (and the majority class of S) errs about 0.5
    assert m["value"] < m["vacuous_at"] <= 0.5 + 0.05 and m["vacuous"] is False
    bounds = [c for c in res.report["certified"] if c["is_bound"]]
    assert len({c["vacuous_at"] for c in bounds}) == 1  # one trivial predictor for every row
    # the number quoted is compare's minimum on the same stats file, not the least row at its
    # own δ: re-evaluated at δ/k it is larger, and holds with probability 1 − Σ(δ_i/k + δ′_i)
    cmp = compare_entries(load_stats(run["w"] / "out" / "stats.json"), {},
                          load_registry()).minimum
    assert (m["id"], m["value"], m["delta_total"]) == (cmp["id"], cmp["value"],
                                                        cmp["delta_total"])
    assert m["row_value"] == min(c["value"] for c in bounds)
    if m["method"] == "delta_over_k":
        assert m["value"] > m["row_value"]
        k = len(bounds)
        # each row's δ = 0.05 (the PAC-Bayes δ, divided by k) + its Monte Carlo δ′ (not)
        assert m["delta_total"] == pytest.approx(sum(0.05 / k + c["delta"] - 0.05
                                                     for c in bounds), rel=1e-12)
    assert f"{m['k']} certified rows" in m["line"]
    assert m["floor"] is not None and m["floor"] <= m["row_value"] and m["dominates"]
    assert m["certifies"].startswith("the Gibbs predictor of model/")
    assert res.report["test_error"] < 0.1  # the task is separable by vocabulary
    assert m["value"] >= res.report["test_error"] - 0.1
    # the callback trained the prior on the prior's data, the posterior on S with an anchor
    assert run["calls"] == [("prior", 120, False, 0.0), ("posterior", 120, True, 1.0)]


def test_split_is_a_seeded_permutation_disjoint_and_recorded(run):
    out = run["w"] / "out"
    rec = json.loads((out / "split.json").read_text())
    prior, s = set(rec["prior"]["indices"]), set(rec["S"]["indices"])
    # the rows by hand: numpy's permutation seeded 0, its first round(0.5·240) to the prior
    assert sorted(prior) == sorted(np.random.default_rng(0).permutation(240)[:120].tolist())
    assert not prior & s and prior | s == set(range(240))
    assert set(rec["tune"]["indices"]) <= prior and rec["tune"]["n"] == 48
    assert rec["classes"] == ["food", "sport"]  # string labels, sorted into class indices
    labels = [r[1] for r in synthetic_rows(240, 0)]
    for name, idx in (("prior", prior), ("S", s)):
        counts = [sum(labels[i] == c for i in idx) for c in rec["classes"]]
        assert counts == rec[name]["counts"]
    rows = [json.loads(x) for x in (out / "S.jsonl").read_text().splitlines()]
    by_index = synthetic_rows(240, 0)
    assert [r["text"] for r in rows] == [by_index[i][0] for i in sorted(s)]
    from boundcalc.certify.split import rows_sha256

    assert rec["S"]["sha256"] == rows_sha256([r["text"] for r in rows],
                                             [r["label"] for r in rows])


def test_resumes_from_its_outputs(run):
    """Re-run: every step reused. A lost stats.json and a half-written model folder: split,
    prior and posterior reused (the callback is not called again), measure and compare run."""
    from boundcalc.certify import certify

    w, out = run["w"], run["w"] / "out"
    before = (out / "prior" / "model.safetensors").stat().st_mtime_ns
    n_calls = len(run["calls"])
    again = certify(run["base"], w / "d.csv", out, w / "t.csv", run["cfg"], train=run["train"])
    assert set(again.steps.values()) == {"reused"}
    assert again.report["minimum"]["value"] == run["res"].report["minimum"]["value"]
    (out / "stats.json").unlink()
    (out / "model.partial").mkdir()  # a posterior step killed while saving
    (out / "model.partial" / "junk").write_text("half")
    third = certify(run["base"], w / "d.csv", out, w / "t.csv", run["cfg"], train=run["train"])
    assert third.steps == {"split": "reused", "prior": "reused", "posterior": "reused",
                           "measure": "ran", "compare": "ran"}
    assert len(run["calls"]) == n_calls  # nothing retrained
    assert (out / "prior" / "model.safetensors").stat().st_mtime_ns == before
    assert third.report["minimum"]["value"] == run["res"].report["minimum"]["value"]


def test_cli_prints_the_minimum_its_predictor_and_what_is_claimed(run):
    """The CLI on the finished folder (every step reused): the certified line names the Gibbs
    predictor first, quotes compare's minimum rounded up with its probability, the vacuity
    level, the floor and what dominates; the held-out errors of that predictor and of model/;
    model/'s own test-set row; the total probability; the baseline, marked not claimed."""
    from boundcalc.rounding import decimal_total, lower_text, probability_text, upper_text

    w = run["w"]
    shutil.copytree(w / "out", w / "out_cli")
    args = ["certify", str(run["base"]), "--data", str(w / "d.csv"), "--test-data",
            str(w / "t.csv"), "-o", str(w / "out_cli"), "--text-column", "sentence",
            "--label-column", "topic", "--epochs", "6", "--lr", "3e-3", "--post-lr", "1e-3",
            "--batch-size", "16", "--max-length", "24", "--sigma", "0.01", "--draws", "1",
            "--tune-rows", "48", "--tune-draws", "1", "--group-draws", "2",
            "--tune-shape", "per-group"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    text = " ".join(res.stdout.split())
    rep = json.loads((w / "out_cli" / "report.json").read_text())
    m = rep["minimum"]
    up = upper_text(m["value"], 4)
    assert float(up) >= m["value"]
    assert (f"certified for {m['certifies']}: ≤ {up} with probability ≥ "
            f"{probability_text(m['delta_total'])}, non-vacuous (vacuity level") in text
    assert f"floor {lower_text(m['floor'], 4)}, dominated by" in text
    assert f"held-out error of that Gibbs predictor {m['gibbs_test_error']['value']:.4f}" in text
    assert f"of model/ itself {rep['test_error']:.4f}" in text
    row = rep["model_rows"][0]
    assert (f"certifies model/ itself: test_set_kl ≤ {upper_text(row['value'], 4)} with "
            f"probability ≥ 0.95") in text
    # everything claimed: the minimum, model/'s test-set row (0.05) and, with held-out texts,
    # the disagreement row (its own Gibbs part and δ_d); their δ's added as decimals
    deltas = [m["delta_total"], 0.05] + [r["delta"] for r in rep["model_rows"][1:]
                                         if r.get("value") is not None]
    assert rep["claimed"]["deltas"] == deltas
    total = decimal_total(deltas)
    assert rep["claimed"]["delta_total"] == total
    assert f"= {probability_text(total)} (union bound)" in text
    assert "baseline, not claimed (shown for comparison, not in the total)" in text
    assert f"certify the prior at ≤ {upper_text(rep['baseline']['value'], 4)}" in text
    assert "prior's data 120 rows, bound sample S 120" in text
    # the plan once the split is known, before the training (issue 54): this run's counts
    err = " ".join(res.stderr.split())
    plan = err.index("plan: prior: 6 epoch(s) on the prior's data (120 rows) from a random "
                     "initialisation; posterior: 1 epoch(s) on S (120 rows)")
    assert err.index("split: 240 rows") < plan < err.index("fine-tuning"), err[:900]
    assert ("measure: one pass over S, 1 isotropic σ × 1 Monte Carlo pass(es) over S, σ search "
            "(per-group shape) on 48 rows of the prior's data, 2 pass(es) over S at the "
            "per-group σ; compare: 100 held-out rows") in err


def test_cli_refuses_a_wrong_column_naming_the_flag(run, tmp_path):
    w = run["w"]
    res = runner.invoke(app, ["certify", str(run["base"]), "--data", str(w / "d.csv"),
                              "-o", str(tmp_path / "o")])
    assert res.exit_code != 0
    err = res.stderr.strip()
    assert "\n" not in err and "no text column 'text'" in err and "--text-column" in err
    res = runner.invoke(app, ["certify", str(run["base"]), "--data", str(w / "d.csv"),
                              "--text-column", "sentence", "-o", str(tmp_path / "o")])
    assert "no label column 'label'" in res.stderr and "--label-column" in res.stderr


def test_cli_mistyped_base(tmp_path):
    res = runner.invoke(app, ["certify", "bert-tiny", "--data", str(tmp_path / "d.csv")])
    assert res.exit_code != 0
    assert res.stderr.strip() == "error: no such file or folder: bert-tiny"


def test_seeded_split_and_classes_by_hand():
    from boundcalc.certify.split import check_no_unseen, class_names, encode, seeded_split
    from boundcalc.errors import BoundcalcError

    p, s = seeded_split(8, 0.5, 3)  # takes no labels at all
    perm = np.random.default_rng(3).permutation(8)
    assert p.tolist() == sorted(perm[:4].tolist()) and s.tolist() == sorted(perm[4:].tolist())
    labels = ["b", "a", "b", "b", "a", "b", "a", "b"]
    classes = class_names(labels)
    y = encode(labels, classes, "x")
    assert classes == ["a", "b"] and y.tolist() == [1, 0, 1, 1, 0, 1, 0, 1]
    assert class_names([1.0, 0, 2.0]) == [0, 1, 2]
    check_no_unseen(["a", "b"], classes, "S")
    with pytest.raises(BoundcalcError, match="S has label 'c' that none of the prior's rows"):
        check_no_unseen(["a", "c"], classes, "S")
    with pytest.raises(Exception, match="not one of the classes"):
        encode(["c"], classes, "t.csv")
