"""``certify(posterior="subspace")``: a config-only BERT on a separable task, with the subspace
Gibbs posterior trained on the bound (boundcalc/certify/subspace_posterior.py); the certified
row ``pac_bayes_kl_gaussian_subspace_mc`` recomputed to 50 digits from stats.json; the saved
mean is the prior moved by c·B·z; the held-out record carries the Gibbs predictor's
disagreement with model/; the options are part of the measure step's key."""

from __future__ import annotations

import json
import math

import mpmath as mp
import pytest
import torch

from _reference import kl_inv_exact
from tests._certify_helpers import SMALL_CERTIFY, small_certify_run

ROW = "pac_bayes_kl_gaussian_subspace_mc"


def _config(**over):
    from boundcalc.certify import CertifyConfig

    small = dict(SMALL_CERTIFY, posterior="subspace", subspace_rank=2, subspace_epochs=2,
                 subspace_lr=1e-2)
    return CertifyConfig(**{**small, **over})


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return small_certify_run(tmp_path_factory.mktemp("certify_subspace"), _config())


def test_the_subspace_row_is_certified_and_names_its_predictor(run):
    res = run["res"]
    row = next(r for r in res.report["certified"] if r["id"] == ROW)
    assert row["is_bound"] and "certified bound" in row["label"]
    assert row["value"] < 1 and row["vacuous"] is False
    assert math.isclose(row["delta"], 0.06, rel_tol=1e-12)  # δ + δ′: s_P fixed, not charged
    assert row["floor"] is not None and row["floor"] <= row["value"]
    r = next(x for x in res.certified if x.id == ROW)
    assert r.certifies["about"] == "subspace_posterior"
    assert "subspace Gibbs posterior" in r.certifies["text"]


def test_recomputed_to_50_digits_from_the_stats_file(run):
    out = run["w"] / "out"
    stats = json.loads((out / "stats.json").read_text())
    sc, rec = stats["scalars"], stats["provenance"]["gibbs_subspace"]
    n = json.loads((out / "split.json").read_text())["S"]["n"]
    N = int(sc["gibbs_subspace_units"]["value"])
    assert N == 2 * n and rec["mc"]["units"] == N  # 2 passes, every row its own draw
    assert sc["subspace_prior_grid"]["value"] == 1 and sc["subspace_sigma_prior"]["value"] == 0.05
    E = sc["gibbs_subspace_mean"]["value"]
    assert E * N == pytest.approx(round(E * N), abs=1e-6)  # a count of 0-1 errors
    d = int(sc["subspace_dim"]["value"])
    # d by hand: 1 layer of q, k, v, o, intermediate (32 → 64), output (64 → 32), the pooler
    # (32 → 32): rank 2 × d_in each; the head 2 × 32 (two classes)
    assert d == 2 * (32 * 5 + 64 + 32) + 2 * 32
    with mp.workdps(50):
        sq, sp = mp.mpf(sc["subspace_sigma_post"]["value"]), mp.mpf("0.05")
        KL = mp.mpf(sc["subspace_dist_sq"]["value"]) / (2 * sp ** 2) + \
            d * ((sq / sp) ** 2 - 1 - mp.log((sq / sp) ** 2)) / 2
        upper = kl_inv_exact(E, mp.log(2 / mp.mpf("0.01")) / N, dps=50)
        exact = kl_inv_exact(upper, (KL + mp.log(2 * mp.sqrt(n) / mp.mpf("0.05"))) / n,
                             dps=50)
    value = next(r for r in run["res"].report["certified"] if r["id"] == ROW)["value"]
    assert mp.mpf(value) >= exact
    assert float(mp.mpf(value) - exact) <= 1e-10 * float(exact)
    assert KL > 0 and sc["subspace_dist_sq"]["value"] > 0  # z moved from 0


def test_the_saved_mean_is_the_prior_moved_in_the_subspace(run):
    from transformers import AutoModelForSequenceClassification

    out = run["w"] / "out"
    rec = json.loads((out / "stats.json").read_text())["provenance"]["gibbs_subspace"]
    mean = dict(AutoModelForSequenceClassification.from_pretrained(
        out / "posterior_subspace").named_parameters())
    prior = dict(AutoModelForSequenceClassification.from_pretrained(out / "prior")
                 .named_parameters())
    adapted = {s["path"] + ".weight" for s in rec["sites"]}
    with torch.no_grad():
        for name, p in prior.items():
            moved = float((mean[name] - p).abs().max())
            assert (moved > 0) == (name in adapted), name  # only the adapted weights move
        for s in rec["sites"]:
            w0 = prior[s["path"] + ".weight"].double()
            assert s["scale"] == pytest.approx(float(w0.square().mean().sqrt()), rel=1e-6)
            # an adapter's change c·B·A has rank ≤ r = 2 (to float32 rounding of the sum)
            dw = (mean[s["path"] + ".weight"].double() - w0)
            rank = int(torch.linalg.matrix_rank(dw, rtol=1e-3))
            assert 1 <= rank <= (min(dw.shape) if s["head"] else 2)
    ho = rec["held_out"]
    assert ho["rows"] == 100 and 0 <= ho["disagreement_rate"] <= 1
    assert ho["disagreements_with_model"] == round(ho["disagreement_rate"] * 100)


def test_resumes_and_the_options_rerun_the_measure_step(run):
    """Last in this file: it re-measures the shared output folder."""
    from boundcalc.certify import certify
    from boundcalc.errors import BoundcalcError

    w = run["w"]
    again = certify(run["base"], w / "d.csv", w / "out", w / "t.csv", _config())
    assert set(again.steps.values()) == {"reused"}
    other = certify(run["base"], w / "d.csv", w / "out", w / "t.csv",
                    _config(subspace_layers="head", subspace_fit_epochs=2,
                            subspace_fit_lr=0.1, subspace_sigma_grid=[0.05, 0.2]))
    assert other.steps["posterior"] == "reused" and other.steps["measure"] == "ran"
    stats = json.loads((w / "out" / "stats.json").read_text())
    sc, rec = stats["scalars"], stats["provenance"]["gibbs_subspace"]
    assert sc["subspace_dim"]["value"] == 2 * 32  # the head alone
    # the cross-entropy fit ran first (2 epochs, z moved), the grid of 2 is charged (J = 2) and
    # s_P is its least KL, by hand from the recorded ‖z‖², d and s_Q
    fit = rec["training"]["cross_entropy_fit"]
    assert fit["epochs"] == 2 and len(fit["loss_per_epoch"]) == 2 and fit["dist_sq_after"] > 0
    assert sc["subspace_prior_grid"]["value"] == 2
    q, d, sq = rec["dist_sq"], rec["dim"], rec["sigma_post"]
    kls = {sp: q / (2 * sp ** 2) + d * ((sq / sp) ** 2 - 1 - 2 * math.log(sq / sp)) / 2
           for sp in (0.05, 0.2)}
    assert sc["subspace_sigma_prior"]["value"] == min(kls, key=kls.get)
    with pytest.raises(BoundcalcError, match="subspace_layers"):
        _config(subspace_layers="ffn")
    with pytest.raises(BoundcalcError, match="subspace_sigma"):
        _config(subspace_sigma=0.0)
