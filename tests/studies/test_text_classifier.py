"""The text-classifier example at reduced size: MiniLM on standard-library docstrings, measured
and compared through the CLI; every measured risk is checked against a direct computation."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from studies.stdlib_text import SPLITS, package_of, split_by_file
from studies.text_classifier import ClassifierConfig, run
from tests._measure_helpers import single_thread
from tests._reference import kl_inv_exact

pytestmark = pytest.mark.slow

CFG = ClassifierConfig(cap=40, n_bound=50, prior_epochs=20, sigmas=(0.01,), draws=1,
                       tune_rows=16, tune_draws=1, group_draws=1, levels="1,2")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("tc")
    with single_thread():
        rep = run(out, CFG)
    return out, rep


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_splits_are_disjoint_by_file_and_s_comes_from_the_pool(built):
    out, rep = built
    sp = json.loads((out / "splits.json").read_text())
    files = {s: set(sp["files"][s]) for s in SPLITS}
    for a in SPLITS:
        for b in SPLITS:
            if a < b:
                assert not files[a] & files[b], (a, b)
    assert {r["file"] for r in _rows(out / "prior.jsonl")} <= files["prior"]
    assert {r["file"] for r in _rows(out / "pool.jsonl")} <= files["bound"]
    assert {r["file"] for r in _rows(out / "heldout.jsonl")} <= files["heldout"]
    # --tune-data: a subset of the prior split, so disjoint from S by file
    tune, prior_rows = _rows(out / "tune.jsonl"), _rows(out / "prior.jsonl")
    assert len(tune) == min(CFG.tune_rows, len(prior_rows))
    assert all(r in prior_rows for r in tune) and {r["file"] for r in tune} <= files["prior"]
    pool, S = _rows(out / "pool.jsonl"), _rows(out / "S.jsonl")
    assert [pool[i] for i in sp["S"]["draws"]] == S and len(S) == CFG.n_bound
    # the label is the package of the file the docstring comes from
    classes = sp["classes"]
    assert all(classes[r["label"]] == package_of(r["file"]) for r in S)


def test_split_by_file_gives_every_split_files_of_every_package():
    groups = {"a": [(f"a/{i}.py", i + 1) for i in range(6)], "b": [("b/x.py", 50),
                                                                  ("b/y.py", 1), ("b/z.py", 1)]}
    assign = split_by_file(groups, (0.4, 0.35, 0.25), seed=3)
    assert set(assign) == {f for g in groups.values() for f, _ in g}
    for g in groups.values():
        assert {assign[f] for f, _ in g} == {0, 1, 2}


def test_measured_risks_match_a_direct_computation(built):
    from transformers import AutoTokenizer, BertForSequenceClassification

    out, _ = built
    st = json.loads((out / "stats.json").read_text())
    sc = st["scalars"]
    S = _rows(out / "S.jsonl")
    tok = AutoTokenizer.from_pretrained(out / "model")
    y = torch.tensor([r["label"] for r in S])

    def logits_of(model):
        outs = []
        with torch.no_grad():
            for lo in range(0, len(S), 16):
                enc = tok([r["text"] for r in S[lo:lo + 16]], padding=True, truncation=True,
                          max_length=CFG.max_length, return_tensors="pt")
                outs.append(model(**enc).logits.double())
        return torch.cat(outs)

    model = BertForSequenceClassification.from_pretrained(out / "model").eval()
    lg = logits_of(model)
    err = float((lg.argmax(1) != y).double().mean())
    assert sc["n"]["value"] == len(S) == CFG.n_bound
    assert sc["emp_risk"]["value"] == pytest.approx(err, abs=1e-12)
    assert sc["float_error"]["value"] == pytest.approx(err, abs=1e-12)
    assert sc["loss_mean"]["value"] == pytest.approx(
        torch.nn.functional.cross_entropy(lg, y).item(), rel=1e-5)
    # the quantized model: 1 level = prior + the mean of the whole delta, decoded by hand
    assert sc["quant_levels"]["value"] == 1
    prior = BertForSequenceClassification.from_pretrained(out / "prior").eval()
    W, W0 = model.state_dict(), prior.state_dict()
    keys = [k for k, v in W.items() if v.is_floating_point()]
    tot = sum(float((W[k].double() - W0[k].double()).sum()) for k in keys)
    cnt = sum(W[k].numel() for k in keys)
    mean16 = float(np.float16(tot / cnt))  # the codebook is stored in float16
    q = BertForSequenceClassification.from_pretrained(out / "prior").eval()
    q.load_state_dict({k: (W0[k].double() + mean16).float() if k in keys else W0[k]
                       for k in W0})
    qerr = float((logits_of(q).argmax(1) != y).double().mean())
    assert sc["quantized_error"]["value"] == pytest.approx(qerr, abs=1e-12)
    # the report says which model that is, by its distance from the prior (the prior when
    # within 1 % of the fine-tuned model's distance) and its agreement on S, never by bits
    dist = abs(mean16) * math.sqrt(cnt)
    full = math.sqrt(sum(float(((W[k].double() - W0[k].double()) ** 2).sum()) for k in keys))
    agree = float((logits_of(q).argmax(1) == lg.argmax(1)).double().mean())
    rep = json.loads((out / "report.json").read_text())
    dec = rep["compression"]["decoded"]
    assert dec["distance_from_prior"] == pytest.approx(dist, rel=1e-9)
    assert dec["measured_distance_from_prior"] == pytest.approx(full, rel=1e-6)
    assert dec["agreement"] == pytest.approx(agree, abs=1e-12)
    want = "prior" if dist <= 0.01 * full else ("measured" if agree >= 0.95 else "other")
    rows = rep["certified"] + rep["certified_other_model"]
    occ = next(r for r in rows if r["id"] == "occam_kl")
    assert occ["about"] == dec["about"] == want
    assert (occ in rep["certified_other_model"]) is (want != "measured")
    if want == "prior":
        assert "certifies the prior: the code decodes to it" in occ["certifies"]
    # the Monte Carlo Gibbs curve: one σ, one pass with a fresh draw per sample (no tied
    # weights in a sequence classifier), so N = draws·n losses
    c = st["curves"]["gibbs_risk_mean"]
    assert st["provenance"]["gibbs_mode"] == "sample"
    assert c["n_samples"] == CFG.draws * CFG.n_bound == sc["gibbs_draws"]["value"]
    assert len(c["at"]) == 1 and 0 <= c["value"][0] <= 1
    # the per-group σ shape was searched on tune.jsonl with the prior weights: free
    g = st["provenance"]["gibbs_groups"]
    assert g["shape_disjoint_from_S"] is True and g["tune_data"].endswith("tune.jsonl")


def test_report_shape_and_certified_values(built):
    out, rep = built
    doc = json.loads((out / "report.json").read_text())
    assert doc == json.loads(json.dumps(rep))
    assert {"test_error", "test_error_stderr", "certified"} <= set(doc)
    assert 0 <= doc["test_error"] <= 1 and doc["test_error_stderr"] > 0
    n_test = doc["n_test"]
    p = doc["test_error"]
    assert doc["test_error_stderr"] == pytest.approx(math.sqrt(p * (1 - p) / n_test))
    rows = doc["certified"] + doc["certified_other_model"]
    ids = {r["id"] for r in rows}
    assert {"occam_kl", "pac_bayes_kl_gaussian_mc", "pac_bayes_kl_gaussian_groups_mc"} <= ids
    certifies = {r["id"]: r["certifies"] for r in rows}
    assert "quantized model" in certifies["occam_kl"]
    assert "Gibbs posterior N(w, σ²I)" in certifies["pac_bayes_kl_gaussian_mc"]
    assert "diag σ_g²" in certifies["pac_bayes_kl_gaussian_groups_mc"]
    # the least certified value about the fine-tuned model, with its honest δ
    bounds = [r for r in doc["certified"] if r["is_bound"]]
    if len(bounds) > 1:
        m = doc["minimum"]
        assert m["k"] == len(bounds) and m["id"] == min(bounds, key=lambda r: r["value"])["id"]
        # each row's δ symbol divided by k; the Monte Carlo intervals' confidences added whole
        mc = sum(r["delta"] - 0.05 for r in bounds)
        assert m["delta_total"] == pytest.approx(0.05 + mc, rel=1e-12)
        assert "δ/k" in doc["minimum_text"]
    for r in rows:
        assert set(r) >= {"id", "value", "label", "delta"}
        if r["is_bound"]:  # the bounds are about the pool, whose error is known exactly
            assert r["value"] >= doc["pool_error"] - 1e-12, r
    # occam_kl by hand: kl⁻¹(quantized error, (C ln 2 + ln(1/δ))/n), mpmath reference
    st = json.loads((out / "stats.json").read_text())["scalars"]
    occ = next(r for r in rows if r["id"] == "occam_kl")
    hand = float(kl_inv_exact(st["quantized_error"]["value"],
                              (st["code_bits"]["value"] * math.log(2) + math.log(1 / 0.05))
                              / CFG.n_bound))
    assert occ["value"] == pytest.approx(hand, rel=1e-9) and occ["value"] >= hand


def test_bound_posterior_step_and_the_yardstick(built):
    """--posterior bound on the finished folder: the measurement is reused (same arguments),
    the bound-trained row is listed apart with the held-out error of its Gibbs predictor, and
    the yardstick is the prior's test-set bound on S, recomputed here from the prior's errors
    (50-digit kl inverse)."""
    import dataclasses

    from boundcalc.measure.data.dataset_io import read_batches
    from boundcalc.measure.data.hf import load_task_model

    out, _ = built
    before = (out / "stats.json").read_bytes()
    cfg = dataclasses.replace(CFG, posterior="bound", bound_draws=1)
    with single_thread():
        rep = run(out, cfg, reuse=True)
    assert (out / "stats.json").read_bytes() == before  # reused, not measured again
    rows = rep["certified_bound_posterior"]
    assert [r["id"] for r in rows] == ["pac_bayes_kl_gaussian_learned_mc"]
    assert "bound-trained Gibbs posterior" in rows[0]["certifies"]
    bp = rep["bound_posterior"]
    assert bp["training"]["means"] == "moved" and bp["training"]["init"] == "prior"
    assert set(bp["training"]["groups_trained"]) == {"head:matrix", "head:vector"}
    assert 0 <= bp["held_out"]["gibbs_error_estimate"] <= 1
    assert (out / "posterior_bound" / "config.json").is_file()
    # the yardstick by hand: the prior's 0-1 errors on S, then kl⁻¹(k/m, ln(1/δ)/m)
    prior = load_task_model(out / "prior")
    S = read_batches(str(out / "S.jsonl"), prior, max_length=CFG.max_length, batch_size=16)
    wrong = 0
    with torch.no_grad():
        for x, y in S.batches:
            wrong += int((prior.model(**x).logits.argmax(-1) != y).sum())
    b = rep["baseline"]
    assert (b["errors"], b["m"]) == (wrong, CFG.n_bound)
    hand = float(kl_inv_exact(wrong / CFG.n_bound, math.log(1 / 0.05) / CFG.n_bound))
    assert b["value"] == pytest.approx(hand, rel=1e-9) and b["value"] >= hand


def test_subspace_posterior_step_and_its_row_taken_apart(built):
    """--posterior subspace on the finished folder: the measurement is reused, the subspace row
    is listed apart, and the row taken apart (value, floor at KL 0, KL) is recomputed here from
    the scalars measure wrote: the KL of N(z, s_Q² I_d) against N(0, s_P² I_d) by hand, the
    value and the floor by 50-digit kl inverses."""
    import dataclasses

    out, _ = built
    before = (out / "stats.json").read_bytes()
    cfg = dataclasses.replace(CFG, posterior="subspace", subspace_epochs=1, subspace_draws=1)
    with single_thread():
        rep = run(out, cfg, reuse=True)
    assert (out / "stats.json").read_bytes() == before  # reused, not measured again
    rows = rep["certified_subspace_posterior"]
    assert [r["id"] for r in rows] == ["pac_bayes_kl_gaussian_subspace_mc"]
    assert "subspace Gibbs posterior" in rows[0]["certifies"]
    assert not rep["certified_bound_posterior"]
    sc = {k: q["value"] for k, q in
          json.loads((out / "stats_subspace.json").read_text())["scalars"].items()}
    d, dist, sq, sp = sc["subspace_dim"], sc["subspace_dist_sq"], sc["subspace_sigma_post"], \
        sc["subspace_sigma_prior"]
    assert (sp, sc["subspace_prior_grid"]) == (0.05, 1)  # declared before S: nothing charged
    kl = dist / (2 * sp ** 2) + d * ((sq / sp) ** 2 - 1 - 2 * math.log(sq / sp)) / 2
    e, units, n = sc["gibbs_subspace_mean"], sc["gibbs_subspace_units"], CFG.n_bound
    assert units == n  # one pass, every row its own draw

    def hand(k: float, s_q: float) -> float:
        up = kl_inv_exact(e, math.log(2 / 0.01) / units)
        return float(kl_inv_exact(up, (k + math.log(2 * math.sqrt(n) / 0.05)) / n))

    s = rep["subspace_posterior"]
    assert s["KL"] == pytest.approx(kl, rel=1e-9, abs=1e-12) and s["KL"] >= 0
    assert s["value"] == pytest.approx(hand(kl, sq), rel=1e-7)
    assert rows[0]["value"] == pytest.approx(s["value"], rel=1e-9)
    assert s["floor_zero_KL"] == pytest.approx(hand(0.0, sp), rel=1e-7)
    assert s["floor_zero_KL"] <= s["value"] + 1e-12
    assert s["gibbs_error_on_S"] == e and s["dim"] == d
    ho = s["held_out"]
    n_test = len((out / "heldout.jsonl").read_text().splitlines())
    assert ho["rows"] == n_test and 0 <= ho["disagreement_rate"] <= 1
    assert (out / "posterior_subspace" / "config.json").is_file()
