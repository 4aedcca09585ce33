"""The README's recipe for a model you trained (issue 44 item 1): ``measure MODEL --init BASE
--data S --tune-data HELDOUT`` with BASE a pretrained encoder without a task head. The prior
predictor is the model's architecture at the prior centre (BASE's tensors, the head at
``head_init``), built before any pass over the data, and the run gives certified rows."""

from __future__ import annotations

import json

import pytest
import torch

from tests._cli_helpers import invoke
from tests._measure_helpers import single_thread, tiny_text_checkpoints, write_text_splits


@pytest.fixture(scope="module")
def user_route(tmp_path_factory):
    """``cls``: a 3-class classifier (the user's fine-tuned model); ``base``: a BertModel (no
    head) whose body is cls's body plus small noise (the pretrained base it started from)."""
    from transformers import BertForSequenceClassification, BertModel

    out = tmp_path_factory.mktemp("route")
    with single_thread():
        tok, cfg = tiny_text_checkpoints(out)
        cls = BertForSequenceClassification.from_pretrained(out / "cls")
        base = BertModel(cfg, add_pooling_layer=True)
        gen = torch.Generator().manual_seed(3)
        sd = {k[len("bert."):]: v + 0.01 * torch.randn(v.shape, generator=gen)
              for k, v in cls.state_dict().items() if k.startswith("bert.")}
        base.load_state_dict(sd)
        base.save_pretrained(out / "base")
        tok.save_pretrained(out / "base")
    write_text_splits(out)
    return out


def test_prior_predictor_is_the_base_body_with_the_head_at_head_init(user_route):
    from boundcalc.measure.data.hf import load_task_model
    from boundcalc.measure.data.prior_model import prior_task_model

    tm = load_task_model(user_route / "cls")
    from transformers import BertModel

    body = BertModel.from_pretrained(user_route / "base").state_dict()
    prior, record = prior_task_model(str(user_route / "base"), tm, None, torch.device("cpu"))
    got = prior.model.state_dict()
    for k, v in body.items():  # every tensor of the base, under the model's 'bert.' prefix
        assert torch.equal(got["bert." + k], v), k
    # the head the base lacks: centred at zero (the default head_init), the model untouched
    assert sorted(record["head_tensors"]) == ["classifier.bias", "classifier.weight"]
    assert torch.count_nonzero(got["classifier.weight"]) == 0
    assert torch.count_nonzero(tm.model.state_dict()["classifier.weight"]) > 0
    assert record["head_init"] == "zero" and "has no task head" in record["note"]
    prior_r, rec_r = prior_task_model(str(user_route / "base"), tm, "random:4",
                                      torch.device("cpu"))
    assert rec_r["head_init"] == "random:4"
    assert torch.count_nonzero(prior_r.model.state_dict()["classifier.weight"]) > 0


def test_a_base_that_cannot_centre_the_model_is_refused_before_any_pass(user_route, tmp_path):
    from transformers import BertConfig, BertModel

    other = BertConfig(vocab_size=100, hidden_size=8, num_hidden_layers=1,
                       num_attention_heads=2, intermediate_size=16)
    BertModel(other).save_pretrained(tmp_path / "small")
    with single_thread():
        res = invoke("-q", "measure", user_route / "cls", "--init", tmp_path / "small",
                     "--data", user_route / "S.csv", "--tune-data", user_route / "tune.csv",
                     "--sigma", "0.01", "--draws", "1", "--tune-draws", "1",
                     "--group-draws", "1", "-o", tmp_path / "never.json")
    assert res.exit_code != 0 and not (tmp_path / "never.json").exists()
    assert "has shape" in res.output and "Traceback" not in res.output


def test_measure_with_a_headless_base_gives_certified_rows(user_route, tmp_path):
    out = tmp_path / "stats.json"
    with single_thread():
        res = invoke("-q", "measure", user_route / "cls", "--init", user_route / "base",
                     "--data", user_route / "S.csv", "--tune-data", user_route / "tune.csv",
                     "--sigma", "0.01", "--draws", "1", "--tune-draws", "1",
                     "--group-draws", "1", "-o", out)
        assert res.exit_code == 0, res.output[-2000:]
        stats = json.loads(out.read_text())
        pred = stats["provenance"]["prior_predictor"]
        assert pred["kind"] == "the model's architecture at the prior centre"
        assert pred["head_tensors"] == ["classifier.bias", "classifier.weight"]
        res = invoke("-q", "compare", "--stats", out, "--json")  # no progress lines in it
    assert res.exit_code == 0, res.output[-2000:]
    rows = json.loads(res.output)
    # computed (on 6 rows the value is the trivial 1: the point is that the route runs)
    row = {r["id"]: r for r in rows["certified"]}["pac_bayes_kl_gaussian_groups_mc"]
    assert row["value"] is not None and 0 < row["value"] <= 1, row
    assert row["floor"] is not None
