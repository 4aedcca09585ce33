"""Parameters measured at points (formula `measured = true`, stats `curves`): the choice is only
among the measured points, its union bound is paid, the Monte Carlo δ′ is split, and hand-set
inputs are labelled estimated and never moved. Values against hand computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from typer.testing import CliRunner

import boundcalc as bc
from boundcalc.cli import app
from boundcalc.engine.functions import kl_inv_upper
from boundcalc.errors import DomainError, FormulaError
from boundcalc.optimize import optimize
from boundcalc.registry.loader import load_file
from boundcalc.stats import Curve, Quantity, Stats, stats_from_json

runner = CliRunner()


def dr_sigma(j: int) -> float:
    return math.sqrt(0.1 * math.exp(-j / 100))


def hand_mc(E: float, k: int, n: int, d: float, j: int, delta: float, delta_mc: float) -> float:
    upper = kl_inv_upper(E, math.log(2 / delta_mc) / k)
    s = dr_sigma(j)
    delta_j = delta * 6 / (math.pi ** 2 * j ** 2)
    return kl_inv_upper(upper, (d * d / (2 * s * s) + math.log(2 * math.sqrt(n) / delta_j)) / n)


def _stats(js, E, k=200, n=5000, d=0.3):
    return Stats(scalars={"n": Quantity(float(n)), "dist_init_total": Quantity(d),
                          "gibbs_draws": Quantity(float(k))},
                 curves={"gibbs_risk_mean": Curve("sigma", np.array([dr_sigma(j) for j in js]),
                                                  np.array(E), estimated=True, n_samples=k,
                                                  method="Monte Carlo")})


def test_mc_entry_takes_the_best_measured_point_and_pays_for_it():
    js, E = [300, 500, 700], [0.02, 0.05, 0.30]
    st = _stats(js, E)
    hand = [hand_mc(e, 200, 5000, 0.3, j, 0.05, 0.01 / 3) for j, e in zip(js, E)]
    for r in (bc.compute("pac_bayes_kl_gaussian_mc", st),
              optimize("pac_bayes_kl_gaussian_mc", st, sensitivity=False, contributions=False)):
        assert r.value == pytest.approx(min(hand), rel=1e-9)
        best = int(np.argmin(hand))
        assert r.parameters["sigma"] == pytest.approx(dr_sigma(js[best]), rel=1e-12)
        assert r.union_bound_cost["sigma"] == pytest.approx(
            2 * math.log(js[best]) + math.log(math.pi ** 2 / 6))
        assert r.delta == pytest.approx(0.06) and r.is_bound and not r.estimated
        pts = r.extra["measured_points"]["points"]
        got = {round(p["sigma"], 12): p["value"] for p in pts}
        assert [got[round(dr_sigma(j), 12)] for j in js] == pytest.approx(hand, rel=1e-9)


def test_given_sigma_must_be_a_measured_point():
    st = _stats([300, 500], [0.02, 0.05])
    r = bc.compute("pac_bayes_kl_gaussian_mc", st, values={"sigma": dr_sigma(500)})
    assert r.value == pytest.approx(hand_mc(0.05, 200, 5000, 0.3, 500, 0.05, 0.01 / 2), rel=1e-9)
    with pytest.raises(DomainError, match="not a point where"):
        bc.compute("pac_bayes_kl_gaussian_mc", st, values={"sigma": dr_sigma(400)})


def test_off_grid_points_are_never_chosen():
    st = _stats([300], [0.02])
    st.curves["gibbs_risk_mean"] = Curve("sigma", np.array([dr_sigma(300), 0.0123]),
                                         np.array([0.02, 0.0]), estimated=True)
    r = bc.compute("pac_bayes_kl_gaussian_mc", st)  # 0.0123 is not a DR point: ignored
    assert r.parameters["sigma"] == pytest.approx(dr_sigma(300))
    assert r.value == pytest.approx(hand_mc(0.02, 200, 5000, 0.3, 300, 0.05, 0.01), rel=1e-9)


def test_hand_set_gibbs_risk_is_estimated_and_needs_its_sigma():
    vals = {"E_hat": 0.05, "k": 200, "n": 5000, "dist_init": 0.3}
    with pytest.raises(DomainError, match="set by hand"):
        optimize("pac_bayes_kl_gaussian_mc", values=vals)
    r = optimize("pac_bayes_kl_gaussian_mc", values={**vals, "sigma": dr_sigma(500)},
                 sensitivity=False, contributions=False)
    assert r.parameters["sigma"] == pytest.approx(dr_sigma(500))  # not moved
    # Ê with its k draws: the entry charges the Monte Carlo term itself, so it stays a bound
    assert r.is_bound and r.value == pytest.approx(
        hand_mc(0.05, 200, 5000, 0.3, 500, 0.05, 0.01), rel=1e-9)
    # a hand-set Gibbs risk in the entry without a Monte Carlo term is an estimate
    r = optimize("pac_bayes_kl_gaussian", values={"emp_risk": 0.05, "n": 5000, "dist_init": 0.3,
                                                  "sigma": dr_sigma(500)},
                 sensitivity=False, contributions=False)
    assert r.estimated and not r.is_bound


def test_ls_semi_analytic_optimize_with_hand_set_p_hat_does_not_move_sigma():
    base = ["--set", "omega=10", "--set", "D_f=2", "--set", "T=20", "--set", "m=1000000",
            "--set", "Sigma=0.01", "--set", "P_hat=17000"]
    res = runner.invoke(app, ["optimize", "ls_semi_analytic", *base])
    assert res.exit_code != 0 and "sigma" in res.output
    assert len(res.output.strip().splitlines()) == 1
    mesh = np.linspace(0.01, 0.00001, 20)
    res = runner.invoke(app, ["optimize", "ls_semi_analytic", *base, "--set",
                              f"sigma={float(mesh[15])!r}", "--json"])
    assert res.exit_code == 0, res.output[-1500:]
    import json

    r = json.loads(res.stdout)
    assert r["parameters"]["sigma"] == pytest.approx(mesh[15], rel=1e-12)
    assert r["estimated"] is True and r["is_bound"] is False


def test_curves_survive_the_stats_file_round_trip(tmp_path):
    st = _stats([300, 500], [0.02, 0.05])
    path = st.save(tmp_path / "s.json")
    from boundcalc.stats import load_stats

    r1 = bc.compute("pac_bayes_kl_gaussian_mc", st)
    r2 = bc.compute("pac_bayes_kl_gaussian_mc", load_stats(path))
    assert r1.value == r2.value
    assert stats_from_json(st.to_json()).curves["gibbs_risk_mean"].param == "sigma"


def test_formula_file_rules_for_measured(tmp_path):
    head = 'family = "t"\ntitle = "t"\n[[entry]]\nid = "x"\ntitle = "x"\nsource = "s"\n' \
           'provenance = "p"\nkind = "certified"\nexpression = "a*s"\n'
    ok = head + ('[entry.symbols]\na = { meaning = "a", role = "measured", domain = "[0, 1]", '
                 'stat = "curves.a" }\n[entry.parameters]\ns = { choice = "grid", measured = '
                 'true, domain = "(0, 1)", grid = { values = [0.1, 0.2] } }\n')
    (tmp_path / "ok.toml").write_text(ok)
    assert load_file(tmp_path / "ok.toml")[0].parameters["s"].measured
    (tmp_path / "bad.toml").write_text(ok.replace("measured = true, ", ""))
    with pytest.raises(FormulaError, match="measured = true"):
        load_file(tmp_path / "bad.toml")
    (tmp_path / "bad2.toml").write_text(ok.replace('choice = "grid"', 'choice = "simultaneous"')
                                        .replace(', grid = { values = [0.1, 0.2] }', ''))
    with pytest.raises(FormulaError, match="grid"):
        load_file(tmp_path / "bad2.toml")
