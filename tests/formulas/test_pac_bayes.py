"""Generic PAC-Bayes family (formulas/pac_bayes.toml) and the kl inverse kernel.

Every expected value is computed here, independently of the registry: plain math/numpy,
scipy's brentq for kl inverses at the entry level, and mpmath (60 digits) for the exact
roots the kl-inverse kernel is checked against.
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq, minimize_scalar

import boundcalc as bc
from _reference import kl_inv_exact
from boundcalc.engine.functions import kl_inv_upper
from boundcalc.errors import DomainError, MissingValueError

REG = bc.load_registry()
LN_PI2_6 = math.log(math.pi ** 2 / 6)


def ev(entry_id: str, values: dict, params: dict | None = None) -> bc.Result:
    return bc.evaluate(REG.get(entry_id), values, params)


# ---- independent references ---------------------------------------------------------------

def kl_float(q: float, p: float) -> float:
    """Binary kl in double precision (log1p form), for brentq."""
    out = 0.0
    if q > 0:
        out += q * math.log(q / p)
    if q < 1:
        out += (1 - q) * (math.log1p(-q) - math.log1p(-p))
    return out


def kl_inv_brentq(q: float, c: float) -> float:
    """sup{p ∈ [q, 1]: kl(q‖p) ≤ c} by brentq (1.0 when kl(q‖1⁻) ≤ c)."""
    top = 1 - 1e-16
    if kl_float(q, top) <= c:
        return 1.0
    if c == 0:
        return q
    return brentq(lambda p: kl_float(q, p) - c, q, top, xtol=1e-300, rtol=1e-15, maxiter=500)


mp.mp.dps = 60


def dr_sigma(j: int, c: float = 0.1, b: float = 100.0) -> float:
    """Dziugaite–Roy grid point j: σ_j² = c·e^{−j/b}."""
    return math.sqrt(c * math.exp(-j / b))


def close(a: float, b: float, rel: float = 1e-10, abs_: float = 1e-14) -> bool:
    return abs(a - b) <= abs_ + rel * abs(b)


# ---- kl inverse kernel ----------------------------------------------------------------------

KL_POINTS = [
    (0.1, 0.01), (0.5, 0.3), (0.0, 0.2), (0.02, 1e-6), (0.9, 1e-3), (0.3, 1e-9),
    (0.5, 1e-20), (0.973, 1.91e-15), (0.99, 2.27e-17), (8.75e-5, 6e-22), (0.1, 1e-8),
    (1e-300, 1e-300), (5e-324, 0.1), (1e-12, 1e-3), (1 - 2 ** -53, 1e-3), (0.999999, 5.0),
    (0.25, 2.0), (0.0, 1e-300), (0.7, 1e-300), (0.4, 0.05),
]


@pytest.mark.parametrize("q,c", KL_POINTS)
def test_kl_inv_upper_is_outward_and_tight(q, c):
    v = kl_inv_upper(q, c)
    root = kl_inv_exact(q, c)
    assert mp.mpf(v) >= root, f"kl_inv({q}, {c}) = {v!r} is below the root {root}"
    assert float(mp.mpf(v) - root) <= 1e-12 + 2e-12 * float(root)


def test_kl_inv_upper_random_points_against_exact_root():
    rng = np.random.default_rng(7)
    for _ in range(60):
        kind = rng.integers(4)
        q = [0.0, rng.random(), 10 ** rng.uniform(-200, 0), 1 - 10 ** rng.uniform(-15, 0)][kind]
        c = 10 ** rng.uniform(-25, 1.5)
        v = kl_inv_upper(q, c)
        root = kl_inv_exact(q, c)
        assert mp.mpf(v) >= root
        assert float(mp.mpf(v) - root) <= 1e-12 + 2e-12 * float(root)


@pytest.mark.parametrize("c", [1e-300, 1e-40, 1e-12, 1e-3, 0.5, 3.0, 30.0])
def test_kl_inv_upper_at_zero_is_one_minus_exp(c):
    v = kl_inv_upper(0.0, c)
    exact = -mp.expm1(-mp.mpf(c))
    assert mp.mpf(v) >= exact
    assert float((mp.mpf(v) - exact) / exact) <= 2e-12
    assert close(v, -math.expm1(-c), rel=2e-12, abs_=0)


@pytest.mark.parametrize("q", [0.0, 1e-9, 0.3, 0.999])
@pytest.mark.parametrize("c", [40.0, 1e3, 1e6, math.inf])
def test_kl_inv_upper_saturates_at_one(q, c):
    # 1 − e^{−40} > 1 − 2^{−53}: no double below 1 is an upper bound any more
    assert kl_inv_upper(q, c) == 1.0


def test_kl_inv_upper_trivial_cases():
    assert kl_inv_upper(1.0, 0.3) == 1.0
    assert kl_inv_upper(0.37, 0.0) == 0.37
    assert kl_inv_upper(-0.0, 0.5) == kl_inv_upper(0.0, 0.5)
    for bad in [(math.nan, 0.1), (0.1, math.nan), (-0.1, 0.1), (1.1, 0.1), (0.1, -1e-9)]:
        with pytest.raises(ValueError):
            kl_inv_upper(*bad)


def test_kl_inv_upper_monotone():
    qs = np.linspace(0, 0.99, 23)
    cs = np.geomspace(1e-12, 10, 23)
    grid = np.array([[kl_inv_upper(q, c) for c in cs] for q in qs])
    assert np.all(np.diff(grid, axis=0) >= 0) and np.all(np.diff(grid, axis=1) >= 0)
    assert np.all(grid >= qs[:, None])


# ---- PAC-Bayes-kl and McAllester ----------------------------------------------------------

CORE_POINTS = [  # (emp_risk, KL, n, delta): ordinary, tiny KL, huge KL, δ near 0 and near 1
    (0.1, 50.0, 10_000, 0.05),
    (0.0, 0.0, 8, 0.5),
    (0.02, 1e-9, 1_000_000, 1e-12),
    (0.3, 1e8, 60_000, 0.999),
    (0.5, 3e4, 50_000, 1e-300),
    (1.0, 10.0, 100, 0.05),
]


@pytest.mark.parametrize("L,KL,n,d", CORE_POINTS)
def test_mcallester(L, KL, n, d):
    r = ev("mcallester", dict(emp_risk=L, KL=KL, n=n, delta=d))
    expected = L + math.sqrt((KL + math.log(2 * math.sqrt(n) / d)) / (2 * n))
    assert close(r.value, expected, rel=1e-12)
    assert r.delta == d and r.delta_effective == d and r.union_bound_cost == {}


@pytest.mark.parametrize("L,KL,n,d", CORE_POINTS)
def test_pac_bayes_kl(L, KL, n, d):
    r = ev("pac_bayes_kl", dict(emp_risk=L, KL=KL, n=n, delta=d))
    c = (KL + math.log(2 * math.sqrt(n) / d)) / n
    assert close(r.terms["kl_budget"], c, rel=1e-12)
    expected = kl_inv_brentq(L, c)
    assert close(r.value, expected, rel=1e-10)
    assert r.value >= L
    # Pinsker: the kl form is never looser than McAllester
    mc = ev("mcallester", dict(emp_risk=L, KL=KL, n=n, delta=d)).value
    assert r.value <= mc + 1e-12


def test_pac_bayes_kl_saturates_for_huge_kl():
    r = ev("pac_bayes_kl", dict(emp_risk=0.2, KL=1e7, n=1000))
    assert r.value == 1.0 and r.vacuous


def test_n_below_8_fails_the_assumption():
    r = ev("pac_bayes_kl", dict(emp_risk=0.1, KL=1.0, n=5))
    assert r.failed_assumptions and not r.is_bound
    assert ev("pac_bayes_kl", dict(emp_risk=0.1, KL=1.0, n=8)).is_bound


# ---- PAC-Bayes-λ (Thiemann et al.) ----------------------------------------------------------

def thiemann(L, KL, n, d, lam):
    B = KL + math.log(2 * math.sqrt(n) / d)
    return L / (1 - lam / 2) + B / (n * lam * (1 - lam / 2))


@pytest.mark.parametrize("L,KL,n,d", CORE_POINTS)
def test_pac_bayes_lambda_closed_form(L, KL, n, d):
    r = ev("pac_bayes_lambda", dict(emp_risk=L, KL=KL, n=n, delta=d))
    B = KL + math.log(2 * math.sqrt(n) / d)
    lam_star = 2 / (math.sqrt(2 * n * L / B + 1) + 1)
    assert close(r.parameters["lam"], lam_star, rel=1e-12)
    assert close(r.value, thiemann(L, KL, n, d, lam_star), rel=1e-12)
    # value at the optimum: L̂ + b + √(b² + 2L̂b), b = B/n
    b = B / n
    assert close(r.value, L + b + math.sqrt(b * b + 2 * L * b), rel=1e-10)
    # simultaneous in λ: nothing is charged
    assert r.union_bound_cost == {} and r.delta_effective == d
    # a relaxation of PAC-Bayes-kl
    assert r.value >= ev("pac_bayes_kl", dict(emp_risk=L, KL=KL, n=n, delta=d)).value - 1e-12


@pytest.mark.parametrize("L,KL,n,d", [(0.1, 50.0, 10_000, 0.05), (0.4, 2e3, 5_000, 0.01),
                                      (0.01, 5.0, 100_000, 0.1)])
def test_pac_bayes_lambda_closed_form_minimises(L, KL, n, d):
    e = REG.get("pac_bayes_lambda")
    best = bc.evaluate(e, dict(emp_risk=L, KL=KL, n=n, delta=d))
    num = minimize_scalar(lambda x: thiemann(L, KL, n, d, x), bounds=(1e-9, 2 - 1e-9),
                          method="bounded", options={"xatol": 1e-12})
    assert best.value <= num.fun + 1e-14
    assert abs(best.parameters["lam"] - num.x) < 1e-4
    for lam in [0.05, 0.5 * best.parameters["lam"], 1.5 * best.parameters["lam"], 1.9]:
        other = bc.evaluate(e, dict(emp_risk=L, KL=KL, n=n, delta=d), {"lam": lam})
        assert close(other.value, thiemann(L, KL, n, d, lam), rel=1e-12)
        assert other.value > best.value
    with pytest.raises(DomainError, match="lam"):
        bc.evaluate(e, dict(emp_risk=L, KL=KL, n=n, delta=d), {"lam": 2.0})


# ---- Catoni ---------------------------------------------------------------------------------

CATONI_GRID = np.geomspace(1e-3, 1e2, 51)


def catoni_at(L, KL, n, d, C):
    return -math.expm1(-C * L - (KL + math.log(1 / d)) / n) / -math.expm1(-C)


@pytest.mark.parametrize("L,KL,n,d", CORE_POINTS)
def test_catoni_grid_union_bound(L, KL, n, d):
    r = ev("catoni", dict(emp_risk=L, KL=KL, n=n, delta=d))
    d_eff = d / len(CATONI_GRID)
    vals = [catoni_at(L, KL, n, d_eff, C) for C in CATONI_GRID]
    assert close(r.value, min(vals), rel=1e-10)
    C = float(r.parameters["C"])  # an arg-min on the grid (ties are possible where 1 − e^{−C} = 1)
    assert np.any(np.isclose(CATONI_GRID, C, rtol=1e-12, atol=0))
    assert close(catoni_at(L, KL, n, d_eff, C), min(vals), rel=1e-10)
    assert r.union_bound_cost.keys() == {"C"}
    assert math.isclose(r.union_bound_cost["C"], math.log(51), rel_tol=1e-15)
    assert math.isclose(r.delta_effective, d / 51, rel_tol=1e-12)
    assert r.delta == d
    assert r.value >= L - 1e-12


# ---- Alquier --------------------------------------------------------------------------------

def snapped(grid: np.ndarray, x: float) -> float:
    return float(grid[int(np.argmin(np.abs(np.log(grid) - math.log(x))))])


@pytest.mark.parametrize("L,KL,n,d,B", [(0.1, 50.0, 10_000, 0.05, 1.0), (2.5, 1e4, 3_000, 0.01, 4.0),
                                         (0.0, 0.0, 1, 0.999, 0.5), (0.3, 1e12, 100, 1e-100, 1.0)])
def test_alquier_bounded(L, KL, n, d, B):
    r = ev("alquier_bounded", dict(emp_risk=L, KL=KL, n=n, delta=d, B=B))
    grid = np.geomspace(math.sqrt(n) / B, 1e6 * math.sqrt(n) / B, 61)
    d_eff = d / 61
    lam = snapped(grid, math.sqrt(8 * n * (KL + math.log(1 / d_eff))) / B)
    f = lambda x: L + x * B ** 2 / (8 * n) + (KL + math.log(1 / d_eff)) / x  # noqa: E731
    assert math.isclose(r.parameters["lam"], lam, rel_tol=1e-12)
    assert close(r.value, f(lam), rel=1e-12)
    assert close(r.value, min(f(x) for x in grid), rel=1e-12)  # the snapped point is the best
    assert math.isclose(r.union_bound_cost["lam"], math.log(61), rel_tol=1e-15)
    assert math.isclose(r.delta_effective, d / 61, rel_tol=1e-12)


@pytest.mark.parametrize("L,KL,n,d,s", [(0.1, 50.0, 10_000, 0.05, 0.5), (-0.2, 1e3, 500, 0.01, 0.01),
                                         (3.0, 0.0, 2, 0.9, 20.0), (0.7, 1e9, 10 ** 8, 1e-20, 0.05)])
def test_alquier_subgaussian(L, KL, n, d, s):
    r = ev("alquier_subgaussian", dict(emp_risk=L, KL=KL, n=n, delta=d, s=s))
    grid = np.geomspace(math.sqrt(n) / s, 1e6 * math.sqrt(n) / s, 61)
    d_eff = d / 61
    A = KL + math.log(1 / d_eff)
    lam = snapped(grid, math.sqrt(2 * n * A / s ** 2))
    f = lambda x: L + x * s ** 2 / (2 * n) + A / x  # noqa: E731
    assert math.isclose(r.parameters["lam"], lam, rel_tol=1e-12)
    assert close(r.value, f(lam), rel=1e-12)
    assert close(r.value, min(f(x) for x in grid), rel=1e-12)
    # the continuous optimum 2√(s²A/(2n)) is a lower bound, reached up to the grid spacing
    opt = L + 2 * math.sqrt(s ** 2 * A / (2 * n))
    assert opt - 1e-12 <= r.value <= L + (opt - L) * math.cosh(math.log(10) / 20) + 1e-12
    assert math.isclose(r.union_bound_cost["lam"], math.log(61), rel_tol=1e-15)
    assert math.isclose(r.delta_effective, d / 61, rel_tol=1e-12)


def test_alquier_bounded_assumption_check():
    r = ev("alquier_bounded", dict(emp_risk=1.5, KL=1.0, n=100, B=1.0))
    assert r.failed_assumptions and not r.is_bound


# ---- Gaussian KL ------------------------------------------------------------------------------

@pytest.mark.parametrize("dist,sigma", [(3.0, 0.1), (0.0, 1.0), (1e-5, 1e-6), (250.0, 0.03)])
def test_gaussian_kl_isotropic(dist, sigma):
    assert close(ev("gaussian_kl_isotropic", dict(dist_init=dist, sigma=sigma)).value,
                 dist ** 2 / (2 * sigma ** 2), rel=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gaussian_kl_groups_and_diagonal(seed):
    rng = np.random.default_rng(seed)
    G = [1, 3, 7][seed]
    d = rng.integers(1, 40, size=G)
    mu_q = [rng.normal(size=k) for k in d]
    mu_p = [rng.normal(size=k) * 0.5 for k in d]
    s_post = rng.uniform(0.01, 1.0, size=G)
    s_prior = rng.uniform(0.01, 1.0, size=G)
    dist_sq = np.array([np.sum((a - b) ** 2) for a, b in zip(mu_q, mu_p)])
    # coordinate by coordinate: ½ Σ_i [s_Q²/s_P² + (μ_Q − μ_P)²/s_P² − 1 + ln(s_P²/s_Q²)]
    full = 0.0
    for g in range(G):
        sq = np.full(d[g], s_post[g] ** 2)
        sp_ = np.full(d[g], s_prior[g] ** 2)
        full += 0.5 * np.sum(sq / sp_ + (mu_q[g] - mu_p[g]) ** 2 / sp_ - 1 + np.log(sp_ / sq))
    r = ev("gaussian_kl_diagonal_groups", dict(d=d, dist_sq=dist_sq, sigma_post=s_post,
                                               sigma_prior=s_prior))
    assert close(r.value, full, rel=1e-9)
    # equal variances: the mean term only
    r_eq = ev("gaussian_kl_diagonal_groups", dict(d=d, dist_sq=dist_sq, sigma_post=s_prior,
                                                  sigma_prior=s_prior))
    iso = float(np.sum(dist_sq / (2 * s_prior ** 2)))
    assert close(r_eq.value, iso, rel=1e-12)
    assert close(ev("gaussian_kl_groups", dict(dist_sq=dist_sq, sigma_g=s_prior)).value, iso,
                 rel=1e-12)


def test_gaussian_kl_groups_rejects_bad_arrays():
    with pytest.raises(DomainError, match="sigma_g"):
        ev("gaussian_kl_groups", dict(dist_sq=[1.0, 2.0], sigma_g=[0.1, 0.0]))
    with pytest.raises(DomainError, match="dist_sq"):
        ev("gaussian_kl_groups", dict(dist_sq=[1.0, -2.0], sigma_g=[0.1, 0.1]))
    with pytest.raises(DomainError):
        ev("gaussian_kl_groups", dict(dist_sq=[1.0, 2.0], sigma_g=[0.1, 0.1, 0.2]))


# ---- Gaussian posteriors on the Dziugaite–Roy prior grid -------------------------------------

GAUSS_POINTS = [  # (emp_risk, dist, n, delta, j)
    (0.1, 3.0, 10_000, 0.05, 300),
    (0.0, 0.0, 8, 0.5, 1),
    (0.25, 40.0, 60_000, 1e-6, 57),
    (0.05, 1.5, 1_000_000, 0.999, 1000),
]


@pytest.mark.parametrize("L,dist,n,d,j", GAUSS_POINTS)
def test_pac_bayes_kl_gaussian_prior_grid_cost(L, dist, n, d, j):
    sigma = dr_sigma(j)
    r = ev("pac_bayes_kl_gaussian", dict(emp_risk=L, dist_init=dist, n=n, delta=d), {"sigma": sigma})
    cost = 2 * math.log(j) + LN_PI2_6
    assert math.isclose(r.union_bound_cost["sigma"], cost, rel_tol=1e-12, abs_tol=1e-15)
    d_j = d * 6 / (math.pi ** 2 * j ** 2)
    assert math.isclose(r.delta_effective, d_j, rel_tol=1e-12)
    KL = dist ** 2 / (2 * sigma ** 2)
    assert close(r.terms["KL_gauss"], KL, rel=1e-12)
    expected = kl_inv_brentq(L, (KL + math.log(2 * math.sqrt(n) / d_j)) / n)
    assert close(r.value, expected, rel=1e-10)
    # the same as PAC-Bayes-kl with that KL, at δ_j
    plain = ev("pac_bayes_kl", dict(emp_risk=L, KL=KL, n=n, delta=d_j)).value
    assert close(r.value, plain, rel=1e-10)


@pytest.mark.parametrize("L,dist,n,d,j", GAUSS_POINTS)
def test_mcallester_gaussian_isotropic(L, dist, n, d, j):
    sigma = dr_sigma(j)
    r = ev("mcallester_gaussian_isotropic", dict(emp_risk=L, dist_init=dist, n=n, delta=d, sigma=sigma))
    d_j = d * 6 / (math.pi ** 2 * j ** 2)
    KL = dist ** 2 / (2 * sigma ** 2)
    expected = L + math.sqrt((KL + math.log(2 * math.sqrt(n) / d_j)) / (2 * n))
    assert close(r.value, expected, rel=1e-12)
    assert math.isclose(r.union_bound_cost["sigma"], 2 * math.log(j) + LN_PI2_6, abs_tol=1e-12)


def test_gaussian_sigma_must_be_given_on_the_grid():
    e = REG.get("pac_bayes_kl_gaussian")
    vals = dict(emp_risk=0.1, dist_init=3.0, n=1000)
    with pytest.raises(MissingValueError, match="sigma"):
        bc.evaluate(e, vals)
    for bad in [0.3, -0.1, 0.0, math.nan, math.inf, 10.0]:
        with pytest.raises(DomainError, match="sigma"):
            bc.evaluate(e, vals, {"sigma": bad})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pac_bayes_kl_gaussian_groups(seed):
    rng = np.random.default_rng(10 + seed)
    G = [1, 4, 12][seed]
    dist_sq = rng.uniform(0, 5, size=G)
    sig = rng.uniform(0.02, 0.5, size=G)
    L, n, d = [(0.1, 5000, 0.05), (0.0, 8, 0.3), (0.4, 200_000, 1e-9)][seed]
    r = ev("pac_bayes_kl_gaussian_groups", dict(emp_risk=L, n=n, delta=d, dist_sq=dist_sq, sigma_g=sig))
    KL = sum(dist_sq[g] / (2 * sig[g] ** 2) for g in range(G))
    assert close(r.terms["KL_groups"], KL, rel=1e-12)
    assert close(r.value, kl_inv_brentq(L, (KL + math.log(2 * math.sqrt(n) / d)) / n), rel=1e-10)
    assert r.union_bound_cost == {} and r.delta_effective == d


# ---- Monte Carlo Gibbs risk -----------------------------------------------------------------

@pytest.mark.parametrize("E,k,dm", [(0.1, 1000, 0.01), (0.0, 1, 0.5), (0.37, 150_000, 1e-10),
                                    (1.0, 10, 0.05), (0.002, 50, 0.999)])
def test_monte_carlo_gibbs_risk(E, k, dm):
    r = ev("monte_carlo_gibbs_risk", dict(E_hat=E, k=k, delta_mc=dm))
    assert close(r.value, kl_inv_brentq(E, math.log(2 / dm) / k), rel=1e-10)
    assert r.delta == dm and r.value >= E


def test_monte_carlo_default_delta_prime():
    r = ev("monte_carlo_gibbs_risk", dict(E_hat=0.1, k=1000))
    assert r.delta == 0.01
    assert close(r.value, kl_inv_brentq(0.1, math.log(200) / 1000), rel=1e-10)


@pytest.mark.parametrize("E,k,dm,KL,n,d", [(0.1, 1000, 0.01, 50.0, 10_000, 0.05),
                                            (0.0, 20, 0.1, 0.0, 8, 0.5),
                                            (0.3, 10 ** 5, 1e-6, 1e4, 60_000, 1e-12)])
def test_pac_bayes_kl_mc(E, k, dm, KL, n, d):
    r = ev("pac_bayes_kl_mc", dict(E_hat=E, k=k, delta_mc=dm, KL=KL, n=n, delta=d))
    upper = kl_inv_brentq(E, math.log(2 / dm) / k)
    assert close(r.terms["gibbs_risk_upper"], upper, rel=1e-10)
    expected = kl_inv_brentq(upper, (KL + math.log(2 * math.sqrt(n) / d)) / n)
    assert close(r.value, expected, rel=1e-9)
    assert math.isclose(r.delta, d + dm, rel_tol=1e-15)   # total confidence 1 − δ − δ′
    assert r.delta_effective == d


@pytest.mark.parametrize("E,k,dm,dist,n,d,j", [(0.1, 1000, 0.01, 3.0, 10_000, 0.05, 300),
                                                (0.02, 5000, 0.1, 0.5, 100_000, 0.01, 20),
                                                (0.5, 10, 0.5, 0.0, 8, 0.9, 1)])
def test_pac_bayes_kl_gaussian_mc(E, k, dm, dist, n, d, j):
    sigma = dr_sigma(j)
    r = ev("pac_bayes_kl_gaussian_mc", dict(E_hat=E, k=k, delta_mc=dm, dist_init=dist, n=n,
                                            delta=d, sigma=sigma))
    d_j = d * 6 / (math.pi ** 2 * j ** 2)
    upper = kl_inv_brentq(E, math.log(2 / dm) / k)
    expected = kl_inv_brentq(upper, (dist ** 2 / (2 * sigma ** 2)
                                     + math.log(2 * math.sqrt(n) / d_j)) / n)
    assert close(r.value, expected, rel=1e-9)
    assert math.isclose(r.delta, d + dm, rel_tol=1e-15)
    assert math.isclose(r.delta_effective, d_j, rel_tol=1e-12)


# ---- Rademacher -------------------------------------------------------------------------------

@pytest.mark.parametrize("Ls,R,rho,c,n,d", [(0.1, 0.01, 2.0, 1.0, 10_000, 0.05),
                                             (0.0, 0.0, 0.0, 1.0, 1, 0.999),
                                             (3.0, 0.2, 0.5, 5.0, 100, 1e-30)])
def test_rademacher_generalization(Ls, R, rho, c, n, d):
    r = ev("rademacher_generalization", dict(emp_loss=Ls, rademacher=R, rho=rho, c=c, n=n, delta=d))
    assert close(r.value, Ls + 2 * rho * R + 3 * c * math.sqrt(math.log(2 / d) / (2 * n)), rel=1e-12)
    for K in [1, 7, 1000]:
        u = ev("rademacher_generalization_union", dict(emp_loss=Ls, rademacher=R, rho=rho, c=c,
                                                       n=n, delta=d, K=K))
        expected = Ls + 2 * rho * R + 3 * c * math.sqrt(math.log(2 * K / d) / (2 * n))
        assert close(u.value, expected, rel=1e-12)
        if K == 1:
            assert close(u.value, r.value, rel=1e-14)


# ---- domain errors ----------------------------------------------------------------------------

BASE = {
    "mcallester": dict(emp_risk=0.1, KL=5.0, n=1000, delta=0.05),
    "pac_bayes_kl": dict(emp_risk=0.1, KL=5.0, n=1000, delta=0.05),
    "pac_bayes_lambda": dict(emp_risk=0.1, KL=5.0, n=1000, delta=0.05),
    "catoni": dict(emp_risk=0.1, KL=5.0, n=1000, delta=0.05),
    "alquier_bounded": dict(emp_risk=0.1, KL=5.0, n=1000, delta=0.05, B=1.0),
    "alquier_subgaussian": dict(emp_risk=0.1, KL=5.0, n=1000, delta=0.05, s=0.5),
    "pac_bayes_kl_mc": dict(E_hat=0.1, k=100, delta_mc=0.01, KL=5.0, n=1000, delta=0.05),
    "pac_bayes_kl_gaussian": dict(emp_risk=0.1, dist_init=2.0, n=1000, delta=0.05,
                                  sigma=dr_sigma(100)),
    "mcallester_gaussian_isotropic": dict(emp_risk=0.1, dist_init=2.0, n=1000, delta=0.05,
                                          sigma=dr_sigma(100)),
    "pac_bayes_kl_gaussian_mc": dict(E_hat=0.1, k=100, delta_mc=0.01, dist_init=2.0, n=1000,
                                     delta=0.05, sigma=dr_sigma(100)),
    "pac_bayes_kl_gaussian_groups": dict(emp_risk=0.1, n=1000, delta=0.05, dist_sq=[1.0, 2.0],
                                         sigma_g=[0.1, 0.2]),
    "pac_bayes_kl_gaussian_groups_mc": dict(E_hat=0.1, k=100, delta_mc=0.01, n=1000,
                                            delta=0.05, dist_sq=[1.0, 2.0],
                                            rho=[dr_sigma(100), dr_sigma(200)], scale=1.0),
    "pac_bayes_kl_gaussian_learned_mc": dict(E_hat=0.1, k=100, delta_mc=0.01, n=1000,
                                             delta=0.05, d=[100, 50], dist_sq=[1.0, 2.0],
                                             sigma_post=[0.2, 0.5],
                                             rho=[dr_sigma(100), dr_sigma(200)], scale=1.0),
    "pac_bayes_kl_gaussian_subspace_mc": dict(E_hat=0.1, k=100, delta_mc=0.01, n=1000,
                                              delta=0.05, dim=1000, dist_sq=0.5,
                                              sigma_post=0.04, sigma_prior=0.05),
    "monte_carlo_gibbs_risk": dict(E_hat=0.1, k=100, delta_mc=0.01),
    "rademacher_generalization": dict(emp_loss=0.1, rademacher=0.01, rho=1.0, n=1000, delta=0.05),
    "rademacher_generalization_union": dict(emp_loss=0.1, rademacher=0.01, rho=1.0, n=1000,
                                            delta=0.05, K=5),
}

BAD_VALUES = [
    ("delta", [0.0, 1.0, 1.5, -0.1, math.nan]),
    ("delta_mc", [0.0, 1.0, math.nan]),
    ("KL", [-1e-9, -5.0, math.nan, math.inf]),
    ("emp_risk", [math.nan]),
    ("E_hat", [-0.1, 1.1, math.nan]),
    ("n", [0, 0.5, 2.5, -3, math.nan]),
    ("k", [0, 1.5]),
    ("dist_init", [-1.0, math.nan]),
]


@pytest.mark.parametrize("entry_id", sorted(BASE))
def test_domain_errors_name_the_symbol(entry_id):
    base = BASE[entry_id]
    ev(entry_id, base)  # the base point itself is valid
    tried = 0
    for name, bads in BAD_VALUES:
        if name not in base:
            continue
        for bad in bads:
            with pytest.raises(DomainError, match=f"symbol '{name}'"):
                ev(entry_id, {**base, name: bad})
            tried += 1
    assert tried >= 3


def test_emp_risk_outside_unit_interval_is_refused():
    for entry_id in ["mcallester", "pac_bayes_kl", "pac_bayes_lambda", "catoni",
                     "pac_bayes_kl_gaussian"]:
        for bad in [-0.01, 1.01]:
            with pytest.raises(DomainError, match="symbol 'emp_risk'"):
                ev(entry_id, {**BASE[entry_id], "emp_risk": bad})


# ---- properties over the declared domains --------------------------------------------------------

EMP = st.floats(0, 1)
KL_S = st.floats(0, 1e9)
N_S = st.integers(1, 10 ** 9)
# δ ≥ 1e-300: below that, δ·e^{−cost} of a grid or prior underflows to 0 (engine limitation,
# refused with a DomainError rather than a value)
DELTA = st.floats(1e-300, 1, exclude_max=True)
J_S = st.integers(1, 2000)


@st.composite
def point(draw, entry_id):
    """A random valid input of ``entry_id``, with the names that may move and its empirical term."""
    n, d = draw(N_S), draw(DELTA)
    if entry_id in ("mcallester", "pac_bayes_kl", "pac_bayes_lambda", "catoni"):
        return dict(emp_risk=draw(EMP), KL=draw(KL_S), n=n, delta=d), "emp_risk", "KL"
    if entry_id == "alquier_bounded":
        B = draw(st.floats(1e-3, 1e3))
        L = draw(st.floats(0, 1)) * B
        return dict(emp_risk=L, KL=draw(KL_S), n=n, delta=d, B=B), "emp_risk", "KL"
    if entry_id == "alquier_subgaussian":
        return (dict(emp_risk=draw(st.floats(-1e6, 1e6)), KL=draw(KL_S), n=n, delta=d,
                     s=draw(st.floats(1e-3, 1e3))), "emp_risk", "KL")
    if entry_id in ("pac_bayes_kl_gaussian", "mcallester_gaussian_isotropic"):
        return (dict(emp_risk=draw(EMP), dist_init=draw(st.floats(0, 1e4)), n=n, delta=d,
                     sigma=dr_sigma(draw(J_S))), "emp_risk", "dist_init")
    if entry_id == "pac_bayes_kl_gaussian_groups":
        G = draw(st.integers(1, 5))
        return (dict(emp_risk=draw(EMP), n=n, delta=d,
                     dist_sq=draw(st.lists(st.floats(0, 1e4), min_size=G, max_size=G)),
                     sigma_g=draw(st.lists(st.floats(1e-3, 1.0), min_size=G, max_size=G))),
                "emp_risk", "dist_sq")
    if entry_id == "pac_bayes_kl_mc":
        return (dict(E_hat=draw(EMP), k=draw(st.integers(1, 10 ** 6)), delta_mc=draw(DELTA),
                     KL=draw(KL_S), n=n, delta=d), "E_hat", "KL")
    if entry_id == "pac_bayes_kl_gaussian_mc":
        return (dict(E_hat=draw(EMP), k=draw(st.integers(1, 10 ** 6)), delta_mc=draw(DELTA),
                     dist_init=draw(st.floats(0, 1e4)), n=n, delta=d,
                     sigma=dr_sigma(draw(J_S))), "E_hat", "dist_init")
    if entry_id == "pac_bayes_kl_gaussian_groups_mc":
        # up to 5 Dziugaite–Roy charges + ln 17 (≤ 81 nats): δ ≥ 1e-250 keeps δ·e^{−cost} > 0
        G, d = draw(st.integers(1, 5)), draw(st.floats(1e-250, 1, exclude_max=True))
        return (dict(E_hat=draw(EMP), k=draw(st.integers(1, 10 ** 6)), delta_mc=draw(DELTA),
                     n=n, delta=d,
                     dist_sq=draw(st.lists(st.floats(0, 1e4), min_size=G, max_size=G)),
                     rho=[dr_sigma(j) for j in draw(st.lists(J_S, min_size=G, max_size=G))],
                     scale=float(np.geomspace(0.25, 4, 17)[draw(st.integers(0, 16))])),
                "E_hat", "dist_sq")
    if entry_id == "pac_bayes_kl_gaussian_learned_mc":
        G, d = draw(st.integers(1, 5)), draw(st.floats(1e-250, 1, exclude_max=True))
        return (dict(E_hat=draw(EMP), k=draw(st.integers(1, 10 ** 6)), delta_mc=draw(DELTA),
                     n=n, delta=d, d=draw(st.lists(st.integers(1, 10 ** 7), min_size=G,
                                                   max_size=G)),
                     dist_sq=draw(st.lists(st.floats(0, 1e4), min_size=G, max_size=G)),
                     sigma_post=draw(st.lists(st.floats(1e-4, 10.0), min_size=G, max_size=G)),
                     rho=[dr_sigma(j) for j in draw(st.lists(J_S, min_size=G, max_size=G))],
                     scale=float(np.geomspace(0.25, 4, 17)[draw(st.integers(0, 16))])),
                "E_hat", "dist_sq")
    if entry_id == "pac_bayes_kl_gaussian_subspace_mc":
        # (its values at 50 digits: tests/formulas/test_pac_bayes_subspace.py)
        return (dict(E_hat=draw(EMP), k=draw(st.integers(1, 10 ** 6)), delta_mc=draw(DELTA),
                     n=n, delta=d, dim=draw(st.integers(1, 10 ** 7)),
                     dist_sq=draw(st.floats(0, 1e4)), sigma_post=draw(st.floats(1e-4, 10.0)),
                     sigma_prior=draw(st.floats(1e-3, 1.0)),
                     prior_grid=draw(st.integers(1, 100))), "E_hat", "dist_sq")
    if entry_id == "monte_carlo_gibbs_risk":
        return dict(E_hat=draw(EMP), k=draw(st.integers(1, 10 ** 6)), delta_mc=d), "E_hat", None
    if entry_id.startswith("rademacher_generalization"):
        v = dict(emp_loss=draw(st.floats(0, 1)), rademacher=draw(st.floats(0, 1e3)),
                 rho=draw(st.floats(0, 1e3)), n=n, delta=d)
        if entry_id.endswith("union"):
            v["K"] = draw(st.integers(1, 10 ** 6))
        return v, "emp_loss", "rademacher"
    raise AssertionError(entry_id)


def worsen(draw, values: dict, grow: str | None) -> dict:
    """Decrease n, k, δ or δ′, or grow the KL-like input: a bound must not get smaller."""
    options = [m for m in ("n", "k", "delta", "delta_mc") if m in values] + ([grow] if grow else [])
    move = draw(st.sampled_from(options))
    out = dict(values)
    if move in ("n", "k"):
        out[move] = draw(st.integers(1, int(values[move])))
    elif move in ("delta", "delta_mc"):
        out[move] = values[move] * draw(st.floats(0, 1, exclude_min=True))
        assume(out[move] >= (1e-250 if move == "delta" and "rho" in values else 1e-300))
    elif move == "dist_sq" and isinstance(values[move], list):
        out[move] = [x + draw(st.floats(0, 1e4)) for x in values[move]]
    else:
        out[move] = values[move] + draw(st.floats(0, 1e6))
    return out


CERTIFIED_BOUNDS = sorted(BASE)


@pytest.mark.parametrize("entry_id", CERTIFIED_BOUNDS)
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_certified_bound_properties(entry_id, data):
    values, emp, grow = data.draw(point(entry_id))
    r = ev(entry_id, values)
    assert r.kind == "certified"
    assert math.isfinite(r.value)
    assert r.value >= values[emp] - 1e-12 * abs(values[emp])
    worse = worsen(data.draw, values, grow)
    r2 = ev(entry_id, worse)
    assert r2.value >= r.value - 1e-12 * abs(r.value), (values, worse, r.value, r2.value)


def test_every_entry_is_tested_and_declared_honestly():
    ids = {e.id for e in REG.filter(family="pac_bayes")}
    kl_values = {"gaussian_kl_isotropic", "gaussian_kl_groups", "gaussian_kl_diagonal_groups"}
    assert ids == set(BASE) | kl_values
    for e in REG.filter(family="pac_bayes"):
        assert e.kind == "certified" and e.provenance.startswith("docs/sources/pac_bayes.md §")
        for p in e.parameters.values():
            assert p.choice in ("simultaneous", "grid", "prior")
    assert REG.get("pac_bayes_lambda").parameters["lam"].choice == "simultaneous"
    assert REG.get("catoni").parameters["C"].choice == "grid"
    assert REG.get("pac_bayes_kl_gaussian").parameters["sigma"].choice == "prior"
