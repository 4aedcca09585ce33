"""Contradictory stats files are refused (issue 32, 7 cases): a stats file is checked as a whole
on load (boundcalc.stats_checks), every count against the curve or record it summarises, and
its measured curves against their content hash; a certified row takes N from the curve."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

import boundcalc as bc
from boundcalc.engine.functions import kl_inv_upper
from boundcalc.errors import StatsError
from boundcalc.stats import Curve, Quantity, Stats, load_stats
from tests._cli_helpers import invoke
from tests.reliability._rel_helpers import one_line_error

MC = "pac_bayes_kl_gaussian_mc"
GROUPS = "pac_bayes_kl_gaussian_groups_mc"


def _edited(group_stats, tmp_path, edit) -> str:
    _, doc = group_stats
    doc = copy.deepcopy(doc)
    edit(doc)
    p = tmp_path / "edited.json"
    p.write_text(json.dumps(doc))
    return str(p)


def _draws(doc):
    doc["scalars"]["gibbs_draws"]["value"] = 1e12


@pytest.mark.parametrize("command", [
    ["compare", "--stats"], ["evaluate", MC, "--stats"], ["latex", MC, "-o", "{out}", "--stats"],
])
def test_gibbs_draws_against_the_curve_length(group_stats, tmp_path, command):
    """gibbs_draws = 1e12 in a file whose curve holds 12 losses: refused by compare, evaluate
    and latex (it lowered the certified value and the .tex said "certified bound")."""
    path = _edited(group_stats, tmp_path, _draws)
    out = tmp_path / "b.tex"
    argv = [w.replace("{out}", str(out)) for w in command]
    err = one_line_error(invoke(*argv, path), 5)
    assert "gibbs_draws" in err and "1e+12" in err and "N = 12" in err
    assert not out.exists()


def test_gibbs_groups_units_against_the_curve_length(group_stats, tmp_path):
    def edit(doc):
        doc["scalars"]["gibbs_groups_units"]["value"] = 1e12

    err = one_line_error(invoke("compare", "--stats", _edited(group_stats, tmp_path, edit)), 5)
    assert "gibbs_groups_units" in err and "N = 12" in err


def test_passes_times_rows_must_give_N(group_stats, tmp_path):
    """A record of 20 passes × 50 rows for a curve of N = 12 losses."""
    def edit(doc):
        doc["provenance"]["gibbs_groups"]["mc"].update(passes=20, samples_per_pass=50)

    err = one_line_error(invoke("compare", "--stats", _edited(group_stats, tmp_path, edit)), 5)
    assert "20 passes × 50 rows give 1000 losses" in err and "N = 12" in err


def test_free_shape_while_the_record_says_chosen_on_S(group_stats, tmp_path):
    def edit(doc):
        rec = doc["provenance"]["gibbs_groups"]
        assert rec["shape_disjoint_from_S"] is True
        rec.update(tune_data=None, shape_chosen_on="S itself with the posterior weights")

    err = one_line_error(invoke("compare", "--stats", _edited(group_stats, tmp_path, edit)), 5)
    assert "shape_disjoint_from_S is true" in err and "chosen on S" in err


def test_rho_against_the_recorded_sigma(group_stats, tmp_path):
    def edit(doc):
        doc["provenance"]["gibbs_groups"]["shape"][0] = 10.0

    err = one_line_error(invoke("compare", "--stats", _edited(group_stats, tmp_path, edit)), 5)
    assert "shape[0] = ρ = 10.0" in err and "σ_g" in err


def test_the_measured_file_loads_and_is_hashed(group_stats):
    path, doc = group_stats
    assert isinstance(doc["curves_sha256"], str) and len(doc["curves_sha256"]) == 64
    st = load_stats(path)
    assert st.curves["gibbs_risk_groups"].n_samples == 12
    # the charged direction (free → charged) contradicts nothing: accepted
    doc2 = copy.deepcopy(doc)
    doc2["provenance"]["gibbs_groups"]["shape_disjoint_from_S"] = False
    bc.stats.stats_from_json(doc2)


def test_an_edited_curve_does_not_match_its_hash(group_stats, tmp_path):
    def edit(doc):
        doc["curves"]["gibbs_risk_mean"]["value"][0] = 0.0
        doc["curves"]["gibbs_risk_mean"]["ci"][0][0] = 0.0

    with pytest.raises(StatsError, match="curves_sha256 does not match"):
        load_stats(_edited(group_stats, tmp_path, edit))


def test_a_file_without_the_hash_is_checked_for_consistency_only(group_stats, tmp_path):
    def edit(doc):
        del doc["curves_sha256"]

    load_stats(_edited(group_stats, tmp_path, edit))

    def edit2(doc):
        del doc["curves_sha256"]
        _draws(doc)

    with pytest.raises(StatsError, match="gibbs_draws"):
        load_stats(_edited(group_stats, tmp_path, edit2))


def test_the_certified_row_takes_N_from_the_curve():
    """In-process (no load check), a free-standing gibbs_draws never moves the value: the k of
    kl⁻¹(Ê, ln(2/δ′)/k) is the curve's own n_samples (hand computation below)."""
    j, E, k, n, d = 500, 0.05, 200, 5000, 0.3
    s = math.sqrt(0.1 * math.exp(-j / 100))

    def stats(draws):
        return Stats(scalars={"n": Quantity(float(n)), "dist_init_total": Quantity(d),
                              "gibbs_draws": Quantity(float(draws))},
                     curves={"gibbs_risk_mean": Curve("sigma", np.array([s]), np.array([E]),
                                                      estimated=True, n_samples=k)})

    upper = kl_inv_upper(E, math.log(2 / 0.01) / k)
    delta_j = 0.05 * 6 / (math.pi ** 2 * j ** 2)
    hand = kl_inv_upper(upper, (d * d / (2 * s * s) + math.log(2 * math.sqrt(n) / delta_j)) / n)
    honest = bc.compute(MC, stats(k)).value
    assert honest == pytest.approx(hand, rel=1e-9)
    assert bc.compute(MC, stats(1e12)).value == honest
