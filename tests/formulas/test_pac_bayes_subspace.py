"""``pac_bayes_kl_gaussian_subspace_mc`` (the subspace Gibbs posterior's row,
formulas/pac_bayes.toml) against a 50-digit mpmath recomputation written here: the KL of
isotropic Gaussians on d coordinates, the Monte Carlo kl⁻¹, the bound's kl⁻¹ with ln(2√n/δ) and
ln J for a prior std chosen on a grid of J; and ``boundcalc optimize ID --stats`` on a stats
file holding the row's scalars."""

from __future__ import annotations

import json

import mpmath as mp
import pytest

import boundcalc as bc
from _reference import kl_inv_exact

REG = bc.load_registry()
ID = "pac_bayes_kl_gaussian_subspace_mc"
CASES = [  # E_hat, k, δ′, n, δ, d, ‖z‖², s_Q, s_P, J
    (0.1, 6000, 0.01, 1000, 0.05, 83_000, 0.4, 0.05, 0.05, 1),
    (0.0, 100, 0.1, 8, 0.5, 10, 0.0, 0.02, 0.05, 1),
    (0.3, 10 ** 5, 1e-6, 60_000, 1e-9, 2_000_000, 40.0, 0.0499, 0.05, 9),
    (0.05, 2400, 0.01, 1200, 0.05, 1536, 2.5, 0.31, 0.3, 20),
]


def _exact(E, k, dm, n, d, dim, q, sq, sp, J):
    with mp.workdps(50):
        r2 = (mp.mpf(sq) / mp.mpf(sp)) ** 2
        KL = mp.mpf(q) / (2 * mp.mpf(sp) ** 2) + dim * (r2 - 1 - mp.log(r2)) / 2
        upper = kl_inv_exact(E, mp.log(2 / mp.mpf(dm)) / k, dps=50)
        return kl_inv_exact(upper, (KL + mp.log(2 * mp.sqrt(n) / mp.mpf(d)) + mp.log(J)) / n,
                            dps=50)


@pytest.mark.parametrize("case", CASES)
def test_subspace_row_to_50_digits(case):
    E, k, dm, n, d, dim, q, sq, sp, J = case
    r = bc.evaluate(REG.get(ID), dict(E_hat=E, k=k, delta_mc=dm, n=n, delta=d, dim=dim,
                                      dist_sq=q, sigma_post=sq, sigma_prior=sp, prior_grid=J))
    exact = _exact(*case)
    assert r.is_bound and mp.mpf(r.value) >= exact  # outward: never below the exact value
    assert float(mp.mpf(r.value) - exact) <= 1e-10 * float(exact) + 1e-300
    assert r.delta == pytest.approx(d + dm, rel=1e-12)


def test_the_grid_is_charged_and_zero_kl_is_the_floor():
    base = dict(E_hat=0.1, k=6000, n=1000, dim=1000, dist_sq=0.0, sigma_post=0.05,
                sigma_prior=0.05)
    one = bc.evaluate(REG.get(ID), {**base, "prior_grid": 1}).value
    many = bc.evaluate(REG.get(ID), {**base, "prior_grid": 20}).value
    assert float(_exact(0.1, 6000, 0.01, 1000, 0.05, 1000, 0.0, 0.05, 0.05, 20)) <= many
    assert many > one  # ln 20 more nats
    with pytest.raises(bc.BoundcalcError):
        bc.evaluate(REG.get(ID), {**base, "prior_grid": 1, "sigma_post": -1.0})


def test_optimize_reads_the_row_from_a_stats_file(tmp_path):
    from typer.testing import CliRunner

    from boundcalc.cli import app
    from boundcalc.stats import Quantity, Stats

    case = CASES[0]
    E, k, dm, n, d, dim, q, sq, sp, J = case
    st = Stats()
    for name, v in [("n", n), ("gibbs_subspace_units", k), ("subspace_dim", dim),
                    ("subspace_dist_sq", q), ("subspace_sigma_post", sq),
                    ("subspace_sigma_prior", sp), ("subspace_prior_grid", J)]:
        st.scalars[name] = Quantity(float(v))
    st.scalars["gibbs_subspace_mean"] = Quantity(E, estimated=True, ci=(E, 0.2),
                                                 confidence=0.99, method="test")
    st.save(tmp_path / "s.json")
    res = CliRunner().invoke(app, ["optimize", ID, "--stats", str(tmp_path / "s.json"),
                                   "--json"])
    assert res.exit_code == 0, res.output
    value = json.loads(res.output)["value"]
    exact = _exact(*case)
    assert mp.mpf(value) >= exact and float(mp.mpf(value) - exact) <= 1e-10 * float(exact)
