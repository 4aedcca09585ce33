"""What ``certify`` claims, checked from outside: no label of S reaches the prior (flip them,
the prior's rows do not move); an unseen class of S is refused in certify's words; model/'s
test-set row and the prior's baseline recomputed at 50 digits from error counts this test
makes itself; the Gibbs predictor's held-out error measured on the held-out rows (at a tiny σ
it is model/'s); the total probability of what is claimed."""

from __future__ import annotations

import json

import mpmath as mp
import numpy as np
import pytest
from typer.testing import CliRunner

from tests._certify_helpers import bert_config_folder, synthetic_rows, write_csv
from tests.formulas.test_test_set import kl_inv_50

mp.mp.dps = 50


def _config(**over):
    from boundcalc.certify import CertifyConfig

    small = dict(prior_epochs=6, prior_lr=3e-3, post_lr=1e-3, batch_size=16, max_length=24,
                 sigmas=(0.01,), draws=1, tune_rows=32, tune_draws=1, group_draws=2)
    return CertifyConfig(**{**small, **over})


class _Stop(Exception):
    pass


def _prior_inputs(base, data, out):
    """What the prior's training receives (texts, class indices, classes), by a training
    callback that records the prior stage and stops before the posterior."""
    from boundcalc.certify import certify

    seen = {}

    def train(model, tok, texts, labels, spec):
        if spec.stage == "posterior":
            raise _Stop
        seen.update(texts=list(texts), labels=list(labels),
                    classes=[model.config.id2label[i] for i in range(model.config.num_labels)])

    with pytest.raises(_Stop):
        certify(base, data, out, None, _config(), train=train)
    return seen


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return bert_config_folder(tmp_path_factory.mktemp("base") / "b", hidden=32, layers=1,
                              heads=2)


def test_flipping_labels_of_S_moves_no_row_of_the_prior(base, tmp_path):
    rows = synthetic_rows(90, 4, classes=("sport", "food", "space"))
    write_csv(tmp_path / "a.csv", rows)
    a = _prior_inputs(base, tmp_path / "a.csv", tmp_path / "out_a")
    s_rows = json.loads((tmp_path / "out_a" / "split.json").read_text())["S"]["indices"]
    flip = {"sport": "food", "food": "space", "space": "sport"}
    flipped = [(t, flip[y]) if i in set(s_rows) else (t, y) for i, (t, y) in enumerate(rows)]
    assert sum(x != y for x, y in zip(rows, flipped)) == len(s_rows)  # every label of S
    write_csv(tmp_path / "b.csv", flipped)
    b = _prior_inputs(base, tmp_path / "b.csv", tmp_path / "out_b")
    assert a["texts"] == b["texts"] and a["labels"] == b["labels"]  # the same rows and labels
    assert a["classes"] == b["classes"]
    assert len(a["texts"]) == 90 - len(s_rows) == 45
    for name in ("prior.jsonl", "tune.jsonl"):
        assert (tmp_path / "out_a" / name).read_bytes() == (tmp_path / "out_b" / name).read_bytes()
    assert (tmp_path / "out_a" / "S.jsonl").read_bytes() != \
        (tmp_path / "out_b" / "S.jsonl").read_bytes()


def test_a_class_only_S_has_is_refused_in_certify_words(base, tmp_path):
    from boundcalc.certify import certify
    from boundcalc.certify.split import seeded_split
    from boundcalc.cli import app
    from boundcalc.errors import BoundcalcError

    rows = synthetic_rows(40, 5)
    _, s = seeded_split(40, 0.5, 0)
    rows[int(s[3])] = (rows[int(s[3])][0], "zebra")
    write_csv(tmp_path / "d.csv", rows)
    with pytest.raises(BoundcalcError, match="S .* has label 'zebra' that none of the prior's"):
        certify(base, tmp_path / "d.csv", tmp_path / "o", None, _config())
    res = CliRunner().invoke(app, ["certify", str(base), "--data", str(tmp_path / "d.csv"),
                                   "-o", str(tmp_path / "o2")])
    err = res.stderr.strip()
    assert res.exit_code != 0 and "\n" not in err
    assert "'zebra'" in err and "--seed" in err and "--prior-fraction" in err


@pytest.fixture(scope="module")
def done(base, tmp_path_factory):
    from boundcalc.certify import certify

    w = tmp_path_factory.mktemp("honest")
    write_csv(w / "d.csv", synthetic_rows(200, 0))
    write_csv(w / "t.csv", synthetic_rows(80, 1))
    res = certify(base, w / "d.csv", w / "out", w / "t.csv", _config())
    return w, res.report


def _errors(folder, texts, labels):
    """0-1 errors of a saved classifier, by transformers directly."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        enc = tok(texts, padding=True, truncation=True, max_length=24, return_tensors="pt")
        pred = model(**enc).logits.argmax(-1).numpy()
    return int((pred != np.array(labels)).sum())


def _rows(path):
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    return [r["text"] for r in rows], [r["label"] for r in rows]


def test_model_row_and_baseline_at_50_digits(done):
    w, rep = done
    out = w / "out"
    classes = rep["classes"]
    test = synthetic_rows(80, 1)
    k_model = _errors(out / "model", [t for t, _ in test], [classes.index(y) for _, y in test])
    k_prior = _errors(out / "prior", *_rows(out / "S.jsonl"))
    row = rep["model_rows"][0]  # then the disagreement route's row (tests/certify/test_model_rows)
    assert [r["id"] for r in rep["model_rows"]] == ["test_set_kl",
                                                    "disagreement_gibbs_groups_mc"]
    assert (row["id"], row["certifies"], row["errors"], row["m"], row["delta"]) == \
        ("test_set_kl", "model/ itself", k_model, 80, 0.05)
    exact = kl_inv_50(k_model, 80, 0.05)
    assert mp.mpf(row["value"]) >= exact and float(mp.mpf(row["value"]) - exact) < 1e-12
    b = rep["baseline"]
    assert (b["errors"], b["m"], b["on"], b["claimed"]) == (k_prior, 100, "S", False)
    exact = kl_inv_50(k_prior, 100, 0.05)
    assert mp.mpf(b["value"]) >= exact and float(mp.mpf(b["value"]) - exact) < 1e-12
    assert rep["test_error"] == k_model / 80 and rep["prior_error_on_S"] == k_prior / 100
    # claimed together: the Gibbs minimum and model/'s rows (test-set, disagreement), not
    # the baseline
    c = rep["claimed"]
    dis = rep["model_rows"][1]["delta"]
    assert c["deltas"] == [rep["minimum"]["delta_total"], 0.05, dis]
    assert c["probability"] == pytest.approx(1 - rep["minimum"]["delta_total"] - 0.05 - dis)
    assert "not counted" in c["rule"] and len(c["rows"]) == 3


def test_gibbs_held_out_error_is_measured_on_the_held_out_rows(done):
    import torch

    from boundcalc.certify.heldout import gibbs_on

    w, rep = done
    m = rep["minimum"]
    g = m["gibbs_test_error"]
    # heldout_draws (default 1): one pass over the 80 held-out rows, each row its own draw,
    # whatever the certificate's own passes (group_draws 2, draws 1 in _config)
    assert g["draws"] == 80 and 0 <= g["value"] <= 1
    assert m["model_test_error"] == rep["test_error"]
    for r in rep["certified"]:
        if r["is_bound"]:
            assert r["gibbs_test_error"]["draws"] == 80 and r["sigma"] is not None
    # at a σ far below any weight's scale every draw is model/: its error, exactly
    f = gibbs_on(w / "out", w / "out" / "test.jsonl", 24, 16, 0, torch.device("cpu"))
    mean, n, how = f(1e-9, 2)
    assert (mean, n) == (rep["test_error"], 160) and "held-out rows" in how


def test_rows_about_model_are_a_list_another_route_extends(done, monkeypatch):
    """A further certificate for model/ is one more function in MODEL_ROWS: its row is listed
    after the test-set row and its δ joins the total; without the prior's count, no baseline."""
    from boundcalc.certify import claims

    w, rep = done

    def another(ev):
        return {"id": "another_route", "certifies": "model/ itself", "value": 0.3,
                "delta": 0.01, "is_bound": True}

    monkeypatch.setattr(claims, "MODEL_ROWS", claims.MODEL_ROWS + [another])
    _, again = claims.build(w / "out" / "stats.json",
                            claims.Evidence(model_test=claims.Count(3, 80)))
    assert [r["id"] for r in again["model_rows"]] == ["test_set_kl", "another_route"]
    assert again["model_rows"][0]["errors"] == 3 and again["baseline"] is None
    assert again["claimed"]["deltas"] == [rep["minimum"]["delta_total"], 0.05, 0.01]
    assert again["claimed"]["probability"] == pytest.approx(
        1 - rep["minimum"]["delta_total"] - 0.06)
    assert again["minimum"]["value"] == rep["minimum"]["value"]
    assert again["minimum"]["gibbs_test_error"] is None  # no held-out rows given this time
