"""Reliability round five, certify's API (issue 42, item 8): what a ``train`` callback returns
is what certify saves and measures (a trained copy, a state dict), a return it cannot use and a
replaced head are refused in one line (never transformers' RuntimeError), and ``report.json``
records that a custom loop trained the prior and model/."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from boundcalc.errors import BoundcalcError
from tests._certify_helpers import bert_config_folder, synthetic_rows, write_csv


def _config(**over):
    from boundcalc.certify import CertifyConfig

    tiny = dict(prior_epochs=2, post_epochs=1, batch_size=16, max_length=16, draws=1,
                tune_rows=8, device="cpu", sigmas=(0.01,), group_draws=1)
    return CertifyConfig(**{**tiny, **over})


@pytest.fixture(scope="module")
def w(tmp_path_factory):
    w = tmp_path_factory.mktemp("cb")
    bert_config_folder(w / "base", hidden=32, layers=1, heads=2)
    write_csv(w / "d.csv", synthetic_rows(96, 5))
    return w


def _saved(folder):
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")


def test_a_trained_copy_and_a_state_dict_are_what_certify_saves(w, tmp_path):
    """The prior's callback trains a copy and returns it, the posterior's trains a copy and
    returns its state dict; the model handed over stays untrained. prior/ and model/ must hold
    exactly the returned weights, and report.json must say a custom loop trained them."""
    from boundcalc.certify import certify, train_classifier

    given, returned = {}, {}

    def train(model, tok, texts, labels, spec):
        given[spec.stage] = {k: v.clone() for k, v in model.state_dict().items()}
        twin = copy.deepcopy(model)
        train_classifier(twin, tok, texts, labels, spec)
        returned[spec.stage] = {k: v.detach().clone() for k, v in twin.state_dict().items()}
        return twin if spec.stage == "prior" else twin.state_dict()

    res = certify(w / "base", w / "d.csv", tmp_path / "o", None, _config(), train=train)
    for stage, folder in (("prior", "prior"), ("posterior", "model")):
        saved = _saved(tmp_path / "o" / folder)
        assert set(saved) == set(returned[stage])
        assert all(torch.equal(saved[k], returned[stage][k]) for k in saved), stage
        moved = [k for k in saved if not torch.equal(saved[k], given[stage][k])]
        assert "classifier.weight" in moved  # what the callback got was not what it returned
        step = json.loads((tmp_path / "o" / folder / "certify_step.json").read_text())
        assert step["training"]["loop"] == "custom: a custom training loop trained it"
        assert step["training"]["returned"] == ("a trained model" if stage == "prior"
                                                else "a state dict")
    rep = json.loads((tmp_path / "o" / "report.json").read_text())
    assert rep["training_loop"].startswith("custom: a custom training loop trained it (the "
                                           "train callback trained the prior and model/")
    assert res.report["training_loop"] == rep["training_loop"]


def test_a_replaced_head_is_refused_in_one_line_before_anything_is_saved(w, tmp_path):
    from boundcalc.certify import certify

    def three_classes(model, tok, texts, labels, spec):
        model.classifier = torch.nn.Linear(32, 3)  # a head for 3 classes; the data has 2

    with pytest.raises(BoundcalcError) as info:
        certify(w / "base", w / "d.csv", tmp_path / "o", None, _config(), train=three_classes)
    assert str(info.value).startswith(
        "the train callback returned a model for the prior whose parameters differ from the "
        "model it was given ('classifier.bias' has shape [3], the model given [2])")
    assert not (tmp_path / "o" / "prior").exists()

    def wrong_state(model, tok, texts, labels, spec):
        sd = model.state_dict()
        return {**sd, "classifier.weight": torch.zeros(3, 32)}

    with pytest.raises(BoundcalcError, match=r"returned a state dict for the prior whose "
                                             r"parameters differ .*'classifier.weight' has shape "
                                             r"\[3, 32\], the model given \[2, 32\]"):
        certify(w / "base", w / "d.csv", tmp_path / "o", None, _config(), train=wrong_state)


@pytest.fixture()
def parts(w):
    from boundcalc.certify.train import TrainSpec, build_classifier
    from boundcalc.measure.data.hf import load_tokenizer

    tok = load_tokenizer(w / "base")
    model = build_classifier(w / "base", ["food", "sport"], 0, tok)
    spec = TrainSpec("prior", 1, 1e-3, 16, 16, 0, torch.device("cpu"))
    return model, tok, spec


def test_returns_certify_cannot_use_are_refused(parts):
    from boundcalc.certify.callback import trained

    model, tok, spec = parts
    for out, what in (("done", "returned str for the prior, which certify cannot use"),
                      (torch.nn.Linear(2, 2), "returned a Linear for the prior, which is no "
                                              "transformers model"),
                      ({"classifier.weight": torch.zeros(2, 32)},
                       "'bert.embeddings.LayerNorm.bias' is missing")):
        with pytest.raises(BoundcalcError, match=what):
            trained(lambda *a: out, True, model, tok, ["a b"], [0], spec)


def test_in_place_training_a_record_and_a_same_shape_head_are_taken(parts):
    from boundcalc.certify.callback import CUSTOM, trained

    model, tok, spec = parts
    record = {"epochs": 1, "note": "my loop"}

    def fresh_head(m, *_):
        m.classifier = torch.nn.Linear(32, 2)  # a new head of the same shape: fine
        return record

    result, how = trained(fresh_head, True, model, tok, ["a b"], [0], spec)
    assert result is model and how == {"loop": CUSTOM, "returned": "None: trained in place",
                                       "record": record}
    assert result.classifier.weight.shape == (2, 32)
