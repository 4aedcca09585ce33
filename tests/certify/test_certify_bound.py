"""``certify(posterior="bound")``: a config-only BERT on a separable task, with the posterior
trained on the PAC-Bayes bound (boundcalc/certify/bound_posterior.py); the certified row
``pac_bayes_kl_gaussian_learned_mc`` recomputed to 50 digits from stats.json; the saved mean
is the trained one; the option is part of the measure step's key."""

from __future__ import annotations

import json
import math

import mpmath as mp
import numpy as np
import pytest
import torch

from _reference import kl_inv_exact
from tests._certify_helpers import bert_config_folder, synthetic_rows, write_csv

ROW = "pac_bayes_kl_gaussian_learned_mc"


def _config(**over):
    from boundcalc.certify import CertifyConfig

    small = dict(prior_epochs=6, prior_lr=3e-3, post_lr=1e-3, batch_size=16, max_length=24,
                 sigmas=(0.01,), draws=1, tune_rows=48, tune_draws=1, group_draws=2,
                 posterior="bound")
    return CertifyConfig(**{**small, **over})


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from boundcalc.certify import certify

    w = tmp_path_factory.mktemp("certify_bound")
    base = bert_config_folder(w / "base", hidden=32, layers=1, heads=2)
    write_csv(w / "d.csv", synthetic_rows(240, 0))
    write_csv(w / "t.csv", synthetic_rows(100, 1))
    res = certify(base, w / "d.csv", w / "out", w / "t.csv", _config())
    return {"w": w, "base": base, "res": res}


def test_the_bound_trained_row_is_certified_and_non_vacuous(run):
    res = run["res"]
    rows = {r["id"]: r for r in res.report["certified"]}
    row = rows[ROW]
    assert row["is_bound"] and "certified bound" in row["label"]
    assert row["value"] < row["vacuous_at"] and row["vacuous"] is False
    assert math.isclose(row["delta"], 0.06, rel_tol=1e-12)  # δ + δ′, nothing else spent
    assert row["floor"] is not None and row["floor"] <= row["value"]
    # listed apart: it certifies the bound-trained Gibbs posterior, not model/'s weights
    r = next(x for x in res.certified if x.id == ROW)
    assert r.certifies["about"] == "bound_posterior"
    assert "bound-trained Gibbs posterior" in r.certifies["text"]


def test_recomputed_to_50_digits_from_the_stats_file(run):
    out = run["w"] / "out"
    stats = json.loads((out / "stats.json").read_text())
    rec, curve = stats["provenance"]["gibbs_learned"], stats["curves"]["gibbs_risk_learned"]
    split = json.loads((out / "split.json").read_text())
    n = split["S"]["n"]
    N = curve["n_samples"]
    assert N == 2 * n and rec["mc"]["units"] == N  # 2 passes, every row its own draw
    assert rec["shape_disjoint_from_S"] is True  # ρ searched on the tune rows: free
    assert curve["at"] == [rec["scale"]] and rec["scale"] in rec["scale_grid"]
    E = curve["value"][0]
    with mp.workdps(50):
        KL = mp.mpf(0)
        for d, q, s, rho in zip(rec["n_params"], rec["dist_sq"], rec["sigma_post"],
                                rec["shape"]):
            sp = mp.mpf(rec["scale"]) * mp.mpf(rho)
            r2 = (mp.mpf(s) / sp) ** 2
            KL += d * (r2 - 1 - mp.log(r2)) / 2 + mp.mpf(q) / (2 * sp ** 2)
        upper = kl_inv_exact(E, mp.log(2 / mp.mpf("0.01")) / N, dps=50)
        d_eff = mp.mpf("0.05") / 17  # only the scale's grid is paid
        exact = kl_inv_exact(upper, (KL + mp.log(2 * mp.sqrt(n) / d_eff)) / n, dps=50)
    value = next(r for r in run["res"].report["certified"] if r["id"] == ROW)["value"]
    assert mp.mpf(value) >= exact
    assert float(mp.mpf(value) - exact) <= 1e-10 * float(exact)
    # the KL's least point on the grid was chosen, each grid KL as recorded
    assert min(x["KL"] for x in rec["scale_search"]) == pytest.approx(float(KL), rel=1e-9)


def test_the_saved_mean_is_the_trained_one_and_the_record_is_complete(run):
    from transformers import AutoModelForSequenceClassification

    out = run["w"] / "out"
    rec = json.loads((out / "stats.json").read_text())["provenance"]["gibbs_learned"]
    mean = AutoModelForSequenceClassification.from_pretrained(out / "posterior_bound")
    model = AutoModelForSequenceClassification.from_pretrained(out / "model")
    prior = AutoModelForSequenceClassification.from_pretrained(out / "prior")
    total = sum(p.numel() for p in mean.parameters())
    assert sum(rec["n_params"]) == total
    with torch.no_grad():
        moved = sum(float((a - b).double().square().sum()) for a, b in
                    zip(mean.parameters(), model.parameters()))
        dist = sum(float((a - b).double().square().sum()) for a, b in
                   zip(mean.parameters(), prior.parameters()))
    assert moved > 0  # μ is not model/: it started at the prior and was trained
    assert sum(rec["dist_sq"]) == pytest.approx(dist, rel=1e-9)
    assert all(s > 0 for s in rec["sigma_post"]) and len(rec["sigma_post"]) == len(rec["groups"])
    assert rec["training"]["steps"] == math.ceil(120 / 16) and rec["training"]["objective"] == "quad"
    assert 0 <= rec["held_out"]["mean_error"] <= 1 and rec["held_out"]["rows"] == 100
    # the defaults: μ from the prior, one learned factor of the prior's scale, snapped to the
    # declared grid, σ_Q,g = σ_P,g (no variance term)
    from boundcalc.measure.data.tune import SCALE_GRID

    assert (rec["training"]["sigma"], rec["training"]["init"]) == ("scale", "prior")
    snap = rec["sigma_post"][0] / rec["shape"][0]
    assert min(abs(snap / c - 1) for c in SCALE_GRID) < 1e-12
    assert rec["sigma_post"] == pytest.approx([snap * r for r in rec["shape"]], rel=1e-12)


def test_a_stats_file_whose_learned_counts_disagree_is_refused(run, tmp_path):
    from boundcalc.errors import StatsError
    from boundcalc.stats import load_stats

    doc = json.loads((run["w"] / "out" / "stats.json").read_text())
    doc.pop("curves_sha256", None)  # edited by hand below: only the consistency checks apply
    load_stats_path = tmp_path / "s.json"
    for edit, match in [(lambda d: d["scalars"]["gibbs_learned_units"].update(value=7.0),
                         "gibbs_learned_units = 7"),
                        (lambda d: d["provenance"]["gibbs_learned"]["mc"].update(passes=3),
                         "provenance.gibbs_learned.mc: 3 passes"),
                        (lambda d: d["provenance"]["gibbs_learned"].update(scale=4.0),
                         "provenance.gibbs_learned.scale = 4.0")]:
        bad = json.loads(json.dumps(doc))
        edit(bad)
        load_stats_path.write_text(json.dumps(bad))
        with pytest.raises(StatsError, match=match):
            load_stats(load_stats_path)
    load_stats_path.write_text(json.dumps(doc))
    assert load_stats(load_stats_path).curves["gibbs_risk_learned"].n_samples == 240


def test_resumes_and_the_option_reruns_the_measure_step(run):
    """Last in this file: it re-measures the shared output folder without the bound row."""
    from boundcalc.certify import certify

    w = run["w"]
    again = certify(run["base"], w / "d.csv", w / "out", w / "t.csv", _config())
    assert set(again.steps.values()) == {"reused"}
    plain = certify(run["base"], w / "d.csv", w / "out", w / "t.csv",
                    _config(posterior="proximal"))
    assert plain.steps["posterior"] == "reused" and plain.steps["measure"] == "ran"
    assert ROW not in {r["id"] for r in plain.report["certified"]}
    from boundcalc.errors import BoundcalcError

    with pytest.raises(BoundcalcError, match="posterior='nope': expected one of proximal, bound"):
        _config(posterior="nope")  # refused when the settings are made, before any training
    assert np.isfinite(plain.report["minimum"]["value"])  # compare's least row at δ/k


def test_per_group_sigma_from_model_is_an_option_of_the_measure_step(run):
    """bound_sigma="groups", bound_init="model" (the settings before the defaults changed): only
    the measure step re-runs, the record says so, and the choices are measure's own."""
    from boundcalc.certify import certify
    from boundcalc.certify.config import BOUND_INITS, BOUND_SIGMAS
    from boundcalc.measure.data.bound_posterior import INITS, SIGMAS

    assert (BOUND_SIGMAS, BOUND_INITS) == (SIGMAS, INITS)
    w = run["w"]
    res = certify(run["base"], w / "d.csv", w / "out", w / "t.csv",
                  _config(bound_sigma="groups", bound_init="model"))
    assert res.steps["posterior"] == "reused" and res.steps["measure"] == "ran"
    rec = json.loads((w / "out" / "stats.json").read_text())["provenance"]["gibbs_learned"]
    assert (rec["training"]["sigma"], rec["training"]["init"]) == ("groups", "model")
    assert rec["scale_learned"] is None and len(rec["sigma_post"]) == len(rec["groups"])
    assert ROW in {r["id"] for r in res.report["certified"]}
