"""``disagreement_gibbs_groups_mc`` (docs/sources/disagreement.md): the model's own risk
R(h) ≤ min(1, B_Q + kl⁻¹(D̂, ln(1/δ_d)/m)), with B_Q the per-group Gibbs bound. Checked against a
hand computation written here (float bisection of kl), a 50-digit mpmath recomputation, the
Gibbs row it starts from, and one-line refusals of m = 0 and δ_d outside (0, 1)."""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
from typer.testing import CliRunner

import boundcalc as bc
from boundcalc.cli import app
from boundcalc.errors import BoundcalcError
from boundcalc.stats import Curve, Quantity, Stats
from tests._reference import kl_inv_exact

ENTRY = "disagreement_gibbs_groups_mc"
GIBBS = "pac_bayes_kl_gaussian_groups_mc"
SCALE = float(np.geomspace(0.25, 4, 17)[6])  # a point of the declared grid (2^-1/2)
# ρ_g on the Dziugaite–Roy grid ρ² = 0.1·e^{−j/100} (j = 300, 380, 450), so that a charged shape
# is a grid point too
REC = {"dist_sq": [0.004, 0.0007, 2e-5],
       "shape": [math.sqrt(0.1 * math.exp(-j / 100)) for j in (300, 380, 450)]}


def _stats(E=0.045, k=6006, n=1001, D=0.022, m=500, free=True) -> Stats:
    """A stats file written here: the per-group Gibbs measurement on S and the disagreement."""
    st = Stats()
    st.scalars["n"] = Quantity(float(n))
    st.curves["gibbs_risk_groups"] = Curve("scale", np.array([SCALE]), np.array([E]),
                                           estimated=True, n_samples=k)
    st.curves["disagreement_groups"] = Curve("scale", np.array([SCALE]), np.array([D]),
                                             estimated=True, n_samples=m)
    st.provenance["gibbs_groups"] = {
        "groups": ["a:matrix", "b:matrix", "a:vector"], "dist_sq": REC["dist_sq"],
        "shape": REC["shape"], "shape_disjoint_from_S": free, "tune_data": "tune.jsonl",
        "shape_chosen_on": "tune.jsonl with the prior weights only", "scale": SCALE,
        "sigma": [SCALE * r for r in REC["shape"]]}
    return st


def _kl_inv(q: float, c: float) -> float:
    """kl⁻¹ by the shared mpmath reference (30 digits), as a float."""
    return float(kl_inv_exact(q, c, dps=30))


def _by_hand(E, k, n, D, m, delta=0.05, delta_mc=0.01, delta_d=0.01):
    KL = sum(d / (2 * SCALE ** 2 * r ** 2) for d, r in zip(REC["dist_sq"], REC["shape"]))
    upper = _kl_inv(E, math.log(2 / delta_mc) / k)
    # scale is chosen on a grid of 17 after seeing S: δ → δ/17 in the PAC-Bayes term
    gibbs = _kl_inv(upper, (KL + math.log(2 * math.sqrt(n) / (delta / 17))) / n)
    dis = _kl_inv(D, math.log(1 / delta_d) / m)
    return min(1.0, gibbs + dis), gibbs, dis


@pytest.mark.parametrize("E, D, m", [(0.045, 0.022, 500), (0.2, 0.0, 100), (0.01, 0.3, 37)])
def test_the_value_is_the_gibbs_bound_plus_the_disagreements_kl_inverse(E, D, m):
    st = _stats(E=E, D=D, m=m)
    r = bc.compute(ENTRY, st)
    want, gibbs, dis = _by_hand(E, 6006, 1001, D, m)
    assert r.value == pytest.approx(want, rel=1e-9)
    assert r.value >= want * (1 - 1e-12)
    assert r.terms["gibbs_bound"] == pytest.approx(gibbs, rel=1e-9)
    assert r.terms["disagreement_upper"] == pytest.approx(dis, rel=1e-9)
    if D == 0:  # kl⁻¹(0, c) = 1 − e^{−c}
        assert dis == pytest.approx(1 - 0.01 ** (1 / m), rel=1e-9)
    # the Gibbs part is the Gibbs row's own value on the same stats file
    assert r.terms["gibbs_bound"] == pytest.approx(bc.compute(GIBBS, st).value, rel=1e-12)
    assert r.label == "certified bound" and r.is_bound
    assert r.delta == pytest.approx(0.07)  # δ + δ′ + δ_d, all declared and spent
    assert r.union_bound_cost == {"scale": pytest.approx(math.log(17))}


def test_certified_value_at_50_digits():
    E, k, n, D, m = 0.04495504495504495, 6006, 1001, 0.022, 500
    r = bc.compute(ENTRY, _stats(E=E, k=k, n=n, D=D, m=m))
    with mp.workdps(50):
        c = mp.mpf(SCALE)
        KL = mp.fsum(mp.mpf(d) / (2 * c ** 2 * mp.mpf(rho) ** 2)
                     for d, rho in zip(REC["dist_sq"], REC["shape"]))
        upper = kl_inv_exact(E, mp.log(2 / mp.mpf("0.01")) / k, dps=50)
        budget = (KL + mp.log(2 * mp.sqrt(n) * 17 / mp.mpf("0.05"))) / n
        exact = kl_inv_exact(upper, budget, dps=50) + kl_inv_exact(D, mp.log(100) / m, dps=50)
        assert mp.mpf(r.value) >= exact  # rounded outward: never below the exact value
        assert mp.mpf(r.value) <= exact * (1 + mp.mpf("1e-9"))


def test_clipped_at_one_and_then_vacuous():
    r = bc.compute(ENTRY, _stats(E=0.6, D=0.5, m=20))
    assert r.value == 1.0 and r.is_bound
    assert _by_hand(0.6, 6006, 1001, 0.5, 20)[1] + _by_hand(0.6, 6006, 1001, 0.5, 20)[2] > 1


def test_a_charged_shape_costs_the_same_as_in_the_gibbs_row():
    st = _stats(free=False)
    r, g = bc.compute(ENTRY, st), bc.compute(GIBBS, st)
    assert r.union_bound_cost == pytest.approx(g.union_bound_cost)
    # ln 17 for the scale and 2 ln j + ln(π²/6) for each ρ_g
    assert sum(r.union_bound_cost.values()) == pytest.approx(
        math.log(17) + sum(2 * math.log(j) + math.log(math.pi ** 2 / 6) for j in (300, 380, 450)))
    assert r.terms["gibbs_bound"] == pytest.approx(g.value, rel=1e-12)


HAND = {"E_hat": 0.045, "k": 6006, "n": 1001, "dist_sq": REC["dist_sq"], "rho": REC["shape"],
        "D_hat": 0.022, "m_d": 500, "scale": SCALE}


@pytest.mark.parametrize("name, value", [("m_d", 0), ("m_d", 2.5), ("delta_d", 0.0),
                                         ("delta_d", 1.0), ("delta_d", 1.5), ("D_hat", 1.2)])
def test_bad_inputs_give_one_line_naming_the_symbol(name, value):
    with pytest.raises(BoundcalcError) as exc:
        bc.compute(ENTRY, values={**HAND, name: value}, fixed=["rho"])
    text = str(exc.value)
    assert name in text and "\n" not in text
    # the same values with that one repaired evaluate (the error was about that symbol)
    ok = bc.compute(ENTRY, values=HAND, fixed=["rho"])
    assert ok.value == pytest.approx(_by_hand(0.045, 6006, 1001, 0.022, 500)[0], rel=1e-9)


def test_stats_file_with_zero_rows_is_refused():
    st = _stats()
    st.curves["disagreement_groups"].n_samples = 0
    with pytest.raises(BoundcalcError) as exc:
        bc.compute(ENTRY, st)
    assert "m_d" in str(exc.value) and "\n" not in str(exc.value)


def test_cli_refuses_a_delta_d_outside_the_unit_interval(tmp_path):
    path = tmp_path / "stats.json"
    _stats().save(path)
    res = CliRunner().invoke(app, ["evaluate", ENTRY, "--stats", str(path), "--set",
                                   "delta_d=1.5"])
    assert res.exit_code == 4, res.output
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "delta_d" in lines[0]
