"""``boundcalc certify``: a config-only BERT and a separable labelled CSV to a certified,
non-vacuous number; every step resumable from the output folder; the API's training
callback; the CLI's output (floor, vacuity level, what dominates, held-out error)."""

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
    res = run["res"]
    assert res.steps == dict.fromkeys(("split", "prior", "posterior", "measure", "compare"),
                                      "ran")
    best = res.report["best"]
    assert best is not None and best["is_bound"] and "certified bound" in best["label"]
    # two balanced classes: guessing (and the majority class of S) errs about 0.5
    assert best["value"] < best["vacuous_at"] <= 0.5 + 0.05 and best["vacuous"] is False
    bounds = [c for c in res.report["certified"] if c["is_bound"]]
    assert len({c["vacuous_at"] for c in bounds}) == 1  # one trivial predictor for every row
    assert best["floor"] is not None and best["floor"] <= best["value"]
    assert best["dominates"]
    assert res.report["test_error"] < 0.1  # the task is separable by vocabulary
    assert best["value"] >= res.report["test_error"] - 0.1
    # the callback trained the prior on the prior's data, the posterior on S with an anchor
    assert run["calls"] == [("prior", 120, False, 0.0), ("posterior", 120, True, 1.0)]


def test_split_is_stratified_disjoint_and_recorded(run):
    out = run["w"] / "out"
    rec = json.loads((out / "split.json").read_text())
    prior, s = set(rec["prior"]["indices"]), set(rec["S"]["indices"])
    assert not prior & s and prior | s == set(range(240))
    assert set(rec["tune"]["indices"]) <= prior and rec["tune"]["n"] == 48
    assert rec["classes"] == ["food", "sport"]  # string labels, sorted into class indices
    labels = [r[1] for r in synthetic_rows(240, 0)]
    for name, idx in (("prior", prior), ("S", s)):
        counts = [sum(labels[i] == c for i in idx) for c in rec["classes"]]
        assert counts == rec[name]["counts"]
    total = [labels.count(c) for c in rec["classes"]]
    assert all(abs(p - t / 2) <= 0.5 for p, t in zip(rec["prior"]["counts"], total))
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
    assert again.report["best"]["value"] == run["res"].report["best"]["value"]
    (out / "stats.json").unlink()
    (out / "model.partial").mkdir()  # a posterior step killed while saving
    (out / "model.partial" / "junk").write_text("half")
    third = certify(run["base"], w / "d.csv", out, w / "t.csv", run["cfg"], train=run["train"])
    assert third.steps == {"split": "reused", "prior": "reused", "posterior": "reused",
                           "measure": "ran", "compare": "ran"}
    assert len(run["calls"]) == n_calls  # nothing retrained
    assert (out / "prior" / "model.safetensors").stat().st_mtime_ns == before
    assert third.report["best"]["is_bound"]


def test_cli_prints_floor_vacuity_and_what_dominates(run):
    """The CLI on the finished folder (every step reused): the certified line names the
    vacuity level, the floor and what dominates; the held-out error is printed."""
    w = run["w"]
    shutil.copytree(w / "out", w / "out_cli")
    args = ["certify", str(run["base"]), "--data", str(w / "d.csv"), "--test-data",
            str(w / "t.csv"), "-o", str(w / "out_cli"), "--text-column", "sentence",
            "--label-column", "topic", "--epochs", "6", "--lr", "3e-3", "--post-lr", "1e-3",
            "--batch-size", "16", "--max-length", "24", "--sigma", "0.01", "--draws", "1",
            "--tune-rows", "48", "--tune-draws", "1", "--group-draws", "2"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    text = " ".join(res.stdout.split())
    best = json.loads((w / "out_cli" / "report.json").read_text())["best"]
    assert f"certified: {best['id']} = {best['value']:.4f}, non-vacuous (vacuity level" in text
    assert f"floor {best['floor']:.4f}; dominated by" in text
    assert "held-out error" in text and "prior's data 120 rows, bound sample S 120" in text


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


def test_stratified_split_by_hand():
    from boundcalc.certify.split import class_names, encode, stratified_split

    labels = ["b", "a", "b", "b", "a", "b", "a", "b"]
    classes = class_names(labels)
    y = encode(labels, classes, "x")
    assert classes == ["a", "b"] and y.tolist() == [1, 0, 1, 1, 0, 1, 0, 1]
    p, s = stratified_split(y, 0.5, 3)
    assert sorted(np.concatenate([p, s]).tolist()) == list(range(8))
    assert (y[p] == 0).sum() == 2 and (y[p] == 1).sum() == 2  # round(0.5·3) = 2, round(2.5) = 2
    with pytest.raises(Exception, match="not one of the classes"):
        encode(["c"], classes, "t.csv")
