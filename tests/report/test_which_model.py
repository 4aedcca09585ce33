"""Which model a certified compression row is about (issue 31, item 1): the decoded model's
fingerprint, its agreement with the measured model on S and its distance from the prior are
measured by `measure --compress`; every output names the model; a code that decodes to the
prior says so (by distance, never by bit equality) and is listed apart from the rows about
the user's model."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
import torch

from boundcalc.which_model import classify
from boundcalc.measure.compress.coded import model_fingerprint
from boundcalc.measure.compress.compression import compress
from boundcalc.measure.compress.options import CompressOptions
from tests._cli_helpers import BOX, invoke


def _linear_pair(extra: float = 0.0):
    """A prior linear classifier and the 'fine-tuned' one: its bias moved by (+3, −3, 0)
    (the delta sums to 0, so a one-level code of it is 0) and every weight by ``extra``."""
    torch.manual_seed(0)
    prior = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
    model = copy.deepcopy(prior)
    with torch.no_grad():
        model[1].bias += torch.tensor([3.0, -3.0, 0.0])
        model[1].weight += extra
    x = torch.randn(200, 1, 16, generator=torch.Generator().manual_seed(1))
    y = torch.randint(0, 3, (200,), generator=torch.Generator().manual_seed(2))
    return prior, model, {"inputs": x, "targets": y}


def _delta(model: torch.nn.Module, prior: torch.nn.Module) -> np.ndarray:
    p = prior.state_dict()
    return np.concatenate([(v.double() - p[k].double()).reshape(-1).numpy()
                           for k, v in sorted(model.state_dict().items())])


def _agreement(a: torch.nn.Module, b: torch.nn.Module, x: torch.Tensor) -> float:
    with torch.no_grad():
        return float((a(x).argmax(1) == b(x).argmax(1)).double().mean())


def test_a_one_level_code_of_a_zero_sum_delta_decodes_to_the_prior():
    prior, model, data = _linear_pair()
    res = compress(model, data, CompressOptions(select="delta", levels_grid=(1,)),
                   init=prior.state_dict())
    rec = res.decoded()
    assert rec["about"] == "prior" and rec["distance_from_prior"] == 0.0
    assert rec["measured_distance_from_prior"] == pytest.approx(
        float(np.linalg.norm(_delta(model, prior))), rel=1e-12)
    assert rec["measured_distance_from_prior"] == pytest.approx(math.sqrt(18), rel=1e-6)
    # agreement with the measured model on S, by a direct forward pass of the prior
    assert rec["agreement"] == pytest.approx(_agreement(prior, model, data["inputs"]), abs=1e-12)
    # the fingerprint is the prior's own weights' fingerprint: the code decodes to it
    assert rec["fingerprint"] == model_fingerprint(prior.state_dict())
    assert rec["fingerprint"] != model_fingerprint(model.state_dict())
    assert "decodes to the prior" in res.warning()


def test_the_prior_is_recognised_by_distance_not_by_bit_equality():
    """The language-model case: the decoded model is the prior + a tiny constant, so it is not
    bit for bit the prior, and agreement is well below 1."""
    prior, model, data = _linear_pair(extra=1e-3)
    res = compress(model, data, CompressOptions(select="delta", levels_grid=(1,)),
                   init=prior.state_dict())
    level = float(np.float16(_delta(model, prior).mean()))  # the one level, as float16
    assert level != 0.0 and abs(level - 48e-3 / 51) < 1e-5
    assert res.distance_from_prior == pytest.approx(abs(level) * math.sqrt(51), rel=1e-12)
    assert res.distance_from_prior > 0 and res.decoded_fingerprint != model_fingerprint(
        prior.state_dict())
    assert res.decoded()["about"] == "prior"
    # the same record with a decoded model 2 % of the way to the measured one is not the prior
    far = {"decoded": {**res.decoded(), "distance_from_prior":
                       0.02 * res.measured_distance_from_prior}}
    assert classify(far)["about"] == ("measured" if res.agreement >= 0.95 else "other")


def test_measured_and_other_models():
    prior, model, data = _linear_pair()
    exact = compress(model, data, CompressOptions(select="delta", levels_grid=(3,)),
                     init=prior.state_dict())
    assert exact.agreement == 1.0 and exact.decoded()["about"] == "measured"
    assert exact.decoded_fingerprint == model_fingerprint(model.state_dict())
    text = classify({"decoded": exact.decoded()})["text"]
    assert text.startswith("certifies the measured model up to quantization, agreement 1.000")
    assert exact.warning() is None
    other = classify({"decoded": {"agreement": 0.9, "distance_from_prior": 1.0,
                                  "measured_distance_from_prior": 2.0}})
    assert other["about"] == "other" and "90.0% of S" in other["text"]
    assert classify(None)["about"] == "unknown"


@pytest.fixture(scope="module")
def prior_stats(tmp_path_factory):
    """The text-classifier case, small: a BERT classifier whose head bias moved by a
    zero-sum delta from its prior, measured with --compress auto --levels 1."""
    from transformers import BertConfig, BertForSequenceClassification

    tmp = tmp_path_factory.mktemp("tc")
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=16, num_labels=3)
    prior = BertForSequenceClassification(cfg)
    prior.save_pretrained(tmp / "prior")
    model = copy.deepcopy(prior)
    with torch.no_grad():
        model.classifier.bias += torch.tensor([2.0, -2.0, 0.0])
    model.save_pretrained(tmp / "model")
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 40, (60, 8), generator=g)
    torch.save({"inputs": ids, "targets": torch.randint(0, 3, (60,), generator=g)},
               tmp / "d.pt")
    out = tmp / "stats.json"
    res = invoke("measure", tmp / "model", "--init", tmp / "prior", "--data", tmp / "d.pt",
                 "--compress", "auto", "--levels", "1", "--draws", "0", "--hessian-probes", "0",
                 "-o", out, "--json")
    assert res.exit_code == 0, res.output
    with torch.no_grad():
        agree = float((prior.eval()(ids).logits.argmax(1) ==
                       model.eval()(ids).logits.argmax(1)).double().mean())
    return out, agree, model_fingerprint(prior.state_dict())


def test_the_stored_warning_names_options_in_the_apis_words(prior_stats):
    """The warning kept in the stats file does not depend on the front end that measured it:
    written by the CLI, it names the API's keyword, not the flag."""
    path, _, _ = prior_stats
    line = json.loads(path.read_text())["provenance"]["compression"]["warning"]
    assert "decodes to the prior" in line and line.endswith("; allow more levels (levels_grid)")


def test_plain_compare_shows_the_row_as_certifying_the_prior(prior_stats, tmp_path):
    path, agree, prior_fp = prior_stats
    rec = json.loads(path.read_text())["provenance"]["compression"]["decoded"]
    assert rec["about"] == "prior" and rec["agreement"] == pytest.approx(agree, abs=1e-12)
    assert rec["fingerprint"] == prior_fp
    doc = json.loads(invoke("compare", "--stats", path, "--json").stdout)
    occam = {r["id"]: r for r in doc["certified"] if r["certifies"]}
    assert "occam_kl" in occam
    for r in occam.values():
        assert r["certifies"]["about"] == "prior" and r["certifies"]["fingerprint"] == prior_fp
    assert doc["minimum"] is None or doc["minimum"]["id"] not in occam  # never the headline
    res = invoke("compare", "--stats", path)
    assert res.exit_code == 0, res.output
    flat = " ".join(BOX.sub(" ", res.stdout).split())
    assert "certifies the prior: the code decodes to it" in flat and prior_fp in flat
    # listed apart: in the 'another model' table, not in the main certified table
    main, _, apart = res.stdout.partition("about ANOTHER model than yours")
    assert apart and "occam_kl" in apart
    assert "certified entries (bounds only" not in main or "occam_kl" not in \
        main.split("certified entries (bounds only", 1)[1]
    assert flat.startswith("headline: no certified bound about your model")
    # optimize, its Markdown and LaTeX name the model too
    md, tex = tmp_path / "o.md", tmp_path / "o.tex"
    res = invoke("optimize", "occam_kl", "--stats", path, "--no-what-if", "--report", md,
                 "--latex", tex)
    assert res.exit_code == 0, res.output
    flat = " ".join(BOX.sub(" ", res.stdout).split())
    assert "about certifies the prior: the code decodes to it" in flat  # said once, not twice
    assert "certifies certifies" not in flat
    assert "- about: certifies the prior: the code decodes to it" in md.read_text()
    assert "About: certifies the prior: the code decodes to it" in tex.read_text()
    assert prior_fp in tex.read_text()
    js = json.loads(invoke("optimize", "occam_kl", "--stats", path, "--no-what-if",
                           "--json").stdout)
    assert js["certifies"]["about"] == "prior"


def test_bits_rows_are_hidden_for_a_classifier_and_carry_their_unit_otherwise(prior_stats,
                                                                               tmp_path):
    path, _, _ = prior_stats
    doc = json.loads(invoke("compare", "--stats", path, "--json").stdout)
    hidden = {h["id"] for h in doc["hidden"]}
    assert {"occam_smoothed_nll", "occam_smoothed_nll_kl"} <= hidden
    shown = {r["id"] for k in ("certified", "conditional", "rate", "proxy") for r in doc[k]}
    assert not hidden & shown
    text = invoke("compare", "--stats", path).stdout
    assert "hidden: they do not apply to this task" in " ".join(text.split())
    # the same file declared a language model's: shown, in bits per token
    data = json.loads(path.read_text())
    data["provenance"]["task"] = "causal_lm"
    data["provenance"].pop("n_classes", None)
    lm = tmp_path / "lm.json"
    lm.write_text(json.dumps(data))
    doc = json.loads(invoke("compare", "--stats", lm, "--json").stdout)
    rows = {r["id"]: r for k in ("certified", "conditional") for r in doc[k]}
    assert rows["occam_smoothed_nll_kl"]["unit"] == "bits per token"
    assert rows["occam_kl"]["unit"] is None
    assert "bits/token" in invoke("compare", "--stats", lm).stdout


def test_the_code_with_merged_levels_satisfies_kraft_as_the_docs_say():
    """Issue 31 item 5: the decoder does not learn K′ (levels after merging) from the grid
    index, so the code is not prefix-free as written; its Kraft sum is still ≤ (e − 1)/2.
    Every message of a tiny instance (m = 4 symbols, 2-bit codebook values, grid {1, 2, 4}),
    with every K′ ≤ K and every sorted distinct codebook, summed by brute force."""
    import itertools

    from boundcalc.measure.compress.codelength import code_length

    m, b, grid = 4, 2, (1, 2, 4)
    total = 0.0
    for k in grid:
        for kk in range(1, min(k, 2 ** b) + 1):
            books = math.comb(2 ** b, kk)  # sorted distinct K′-subsets of the 2^b values
            for seq in itertools.product(range(kk), repeat=m):
                c = code_length(np.array(seq), kk, b, len(grid)).total
                total += books * 2.0 ** -c
    assert total <= (math.e - 1) / 2
    from pathlib import Path

    note = (Path(__file__).resolve().parents[2] / "docs" / "sources" /
            "compression.md").read_text(encoding="utf-8")
    assert "does **not**" in note and "(e − 1)/2" in note
