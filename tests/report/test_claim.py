"""The predictor of every certified row (boundcalc/claim.py), by hand: a Gibbs row at its σ,
a posterior route's row, a compression row, a row on the measured model itself; every
certified entry of the registry gets one; an unknown predictor is refused."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from boundcalc.claim import PREDICTORS, THROUGH_GIBBS, Claim, Predictor, grouped, predictor_of

STATS = SimpleNamespace(provenance={}, scalars={})  # no record: what the entry alone says


def _entry(ident):
    from boundcalc.registry import load_registry

    return load_registry().get(ident)


@pytest.mark.parametrize("ident, params, key, text", [
    ("pac_bayes_kl_gaussian_mc", {"sigma": 0.01}, "gibbs",
     "the Gibbs predictor of model/: each input answered by its own draw w ∼ N(model/, σ²I), "
     "σ = 0.01"),
    ("pac_bayes_kl_gaussian_learned_mc", {}, "bound_posterior",
     "the bound-trained Gibbs posterior N(μ, diag σ_Q,g²) (μ and σ trained on S on the bound), "
     "not the measured model's own weights"),
    ("occam_kl", {}, "decoded", "the model its code describes; no compression record says "
                                "which (a measurement with compression writes one)"),
    ("disagreement_gibbs_groups_mc", {}, "model", THROUGH_GIBBS),
    ("bartlett_spectral_ln2", {}, "model", "model/ itself"),
    ("rademacher_generalization", {}, "model", "model/ itself"),
])
def test_each_row_kind_names_its_predictor(ident, params, key, text):
    p = predictor_of(_entry(ident), params, STATS)
    assert (p.key, p.text) == (key, text)
    assert p.heading == PREDICTORS[key]


def test_outside_certify_the_measured_model_is_named_so():
    p = predictor_of(_entry("pac_bayes_kl_gaussian_mc"), {"sigma": 0.02}, STATS,
                     "the measured model", "w")
    assert p.text == ("the Gibbs predictor of the measured model: each input answered by its "
                      "own draw w′ ∼ N(w, σ²I), σ = 0.02")


def test_every_certified_entry_has_a_predictor():
    from boundcalc.registry import load_registry

    certified = load_registry().filter(kind="certified")
    assert len(certified) > 20
    for e in certified:
        p = predictor_of(e, {}, STATS)
        assert p.key in PREDICTORS and p.text, e.id


def test_a_claim_row_never_lacks_its_predictor_and_rows_group_in_order():
    rows = [Claim("b", 0.2, 0.05, "certified", True, Predictor("model", "model/ itself"),
                  "S").row(),
            Claim("a", 0.1, 0.05, "certified", True, Predictor("gibbs", "g"), "S").row()]
    assert [r["certifies"] for r in rows] == ["model/ itself", "g"]
    assert [h for h, _ in grouped(rows)] == [PREDICTORS["gibbs"], PREDICTORS["model"]]
    with pytest.raises(ValueError, match="unknown predictor 'nope'"):
        Predictor("nope", "x")
