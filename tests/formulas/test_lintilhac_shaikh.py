"""Lintilhac & Shaikh PAC-Bayes sharpness entries vs independent math/numpy/scipy computations
of the formulas in sharper_picture.md (§2.2–2.3, §3.1–3.5, §5, §6)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import brentq, minimize_scalar

import boundcalc as bc
from boundcalc.errors import DomainError, MissingValueError
from boundcalc.stats import Curve, Quantity, Stats

MESH = np.linspace(0.01, 0.00001, 20)        # [C] np.linspace(.01, .00001, 20)
FINE = np.geomspace(1e-9, 1.0, 1000)
E3 = dict(omega=10, D_f=2, T=20, m=1_000_000, Sigma=0.01)


@pytest.fixture(scope="module")
def reg():
    return bc.load_registry()


# ---- independent formulas ---------------------------------------------------------------------

def g_u(w, D):
    return 4 + 4 * w * (2 + D + 32 * D**2 + 32 * D**3)


def l_v2(w, D, T):
    return 11 + 16 * (D + 1) * D**2 + 8 * (D + 1) + 4 * math.log(T) ** 2 * (D * w + T - w)


def l_radicand(w, D, T):
    return 21 + 16 * (D + 1) * D**2 + 8 * (D + 1) + 4 * math.log(T) ** 2 * (D * w + T + 1 - w)


def thm2(sigma, L, G, m, S, delta, P=0.0):
    """σ²(G_u + P) + min_λ [λΣ²/(2m) + (L/(2σ²) + ln 1/δ)/λ], λ minimised numerically."""
    c = L / (2 * sigma**2) + math.log(1 / delta)
    lam = math.sqrt(2 * m * c) / S
    closed = sigma**2 * (G + P) + lam * S**2 / (2 * m) + c / lam
    return closed


def analytic_pieces(s, w, D, T, d):
    """Theorem 17 pieces, transcribed term by term from §3.4."""
    l, r2, G = math.log(T), math.sqrt(2), g_u(w, D)
    Gp = (128 * r2 * s * D**2 * math.sqrt(w) * l + 192 * s * math.sqrt(w) * D**2
          + 128 * r2 * D**2 * w**2 * l + 64 * r2 * d * D**2 * w**2 * l
          + 128 * s * d * w**2 * l * D**1.5 + 1024 * s * D**3.5 * w**1.5 * l
          + 8 * s * math.sqrt(D * w) * l * d + 256 * s * D**2.5 * w**2 * d
          + 32 * s * math.sqrt(D) * w**2 * d**2)
    Hu = (8 * (D + 1) + 6 * (D + 1) * math.sqrt(w) + 2 * math.sqrt(3 * T * (D + 1))
          + math.sqrt(48 * T * (D + 1) * D) + math.sqrt(T) * math.sqrt(12 * (D + 1)) * D
          + 2 * math.sqrt(T) * math.sqrt(12 * (D + 1)) * D + 8 * r2 * math.sqrt(d * T) * D
          + 2 * math.sqrt(d * T) * D + 8 * r2 * d * D * math.sqrt(w) + 6 * r2 * d**1.5 * D)
    Hp = s * (768 * r2 * D**2 * w**1.5 * d * l + 256 * w**1.5 * d**2 * D**1.5 * l
              + 1024 * D**3.5 * w**1.5 * l + 512 * D**2.5 * w**1.5 * d**2 * l
              + 1536 * D**3.5 * w**2.5 * math.sqrt(d) * l**2 + 768 * D**2 * w**2.5 * d * l**2
              + 16 * w**2 * d**2.5 * l)
    Tp = 128 * s * D**2 * w * l + s * math.sqrt(2 * d) + 32 * math.sqrt(w) * s * D**2
    n = 3 * (d + 1) ** 2 + (d + 1) + (8 * d + 6) * (D + 1)
    P = 2 * Gp * (2 * math.sqrt(G) + Gp) + Tp * (Hu + Hp) * n
    return dict(G_p=Gp, H_u=Hu, H_p=Hp, T_p=Tp, n_params=n, P=P)


# ---- G_u and L --------------------------------------------------------------------------------

REFERENCE_GRID = {  # sharper_picture.md §3.1, rows D_f, columns ω = 1, 7, 14, 20
    1: [272, 1880, 3756, 5364], 2: [1556, 10868, 21732, 31044], 3: [4632, 32400, 64796, 92564],
    4: [10268, 71852, 143700, 205284], 5: [19232, 134600, 269196, 384564],
}


def test_gu_matches_e3_value_and_reference_grid(reg):
    e = reg.get("ls_min_samples_truncated")
    assert bc.evaluate(e, E3).terms["G_u"] == 15524
    for D, row in REFERENCE_GRID.items():
        for w, expected in zip([1, 7, 14, 20], row):
            got = bc.evaluate(e, dict(E3, omega=w, D_f=D)).terms["G_u"]
            assert got == expected == g_u(w, D)


def test_norm_bound_variants_at_e3_and_elsewhere(reg):
    v2 = bc.evaluate(reg.get("ls_truncated"), E3, params={"sigma": MESH[15]}).terms
    rad = bc.evaluate(reg.get("ls_truncated_c_radicand"), E3, params={"sigma": MESH[15]}).terms
    code = bc.evaluate(reg.get("ls_truncated_c_code"), E3, params={"sigma": MESH[15]}).terms
    assert v2["L_norm"] == pytest.approx(1303.93, abs=5e-3)
    assert rad["L_norm"] == pytest.approx(1349.83, abs=5e-3)
    assert code["L_radicand"] == pytest.approx(1349.83, abs=5e-3)
    assert code["L_norm"] == pytest.approx(36.74, abs=5e-3)
    # the code variant puts the root into KL; the others the value itself
    assert code["KL"] == pytest.approx(math.sqrt(l_radicand(10, 2, 20)) / (2 * MESH[15] ** 2))
    assert v2["KL"] == pytest.approx(l_v2(10, 2, 20) / (2 * MESH[15] ** 2))
    for w, D, T in [(1, 1, 2), (1, 2, 20), (7, 3, 50), (20, 5, 20), (3, 4, 1000)]:
        vals = dict(E3, omega=w, D_f=D, T=T)
        a = bc.evaluate(reg.get("ls_truncated"), vals, params={"sigma": MESH[0]}).terms
        b = bc.evaluate(reg.get("ls_truncated_c_code"), vals, params={"sigma": MESH[0]}).terms
        assert a["L_norm"] == pytest.approx(l_v2(w, D, T), rel=1e-12)
        assert b["L_radicand"] == pytest.approx(l_radicand(w, D, T), rel=1e-12)
        assert b["L_norm"] == pytest.approx(math.sqrt(l_radicand(w, D, T)), rel=1e-12)
    # the v2-consistent L differs from the radicand by exactly 10 + 4 ln²T
    assert l_radicand(10, 2, 20) - l_v2(10, 2, 20) == pytest.approx(10 + 4 * math.log(20) ** 2)


# ---- truncated bound --------------------------------------------------------------------------

@pytest.mark.parametrize("k, m, S, delta", [
    (0, 1_000_000, 0.01, 0.05), (15, 1_000_000, 0.01, 0.2), (19, 8192, 0.1, 0.01),
    (7, 1, 0.05, 0.5), (12, 10**9, 1e-3, 1e-6),
])
def test_truncated_bound_at_points(reg, k, m, S, delta):
    vals = dict(E3, m=m, Sigma=S, delta=delta)
    for eid, L in [("ls_truncated", l_v2(10, 2, 20)),
                   ("ls_truncated_c_radicand", l_radicand(10, 2, 20)),
                   ("ls_truncated_c_code", math.sqrt(l_radicand(10, 2, 20)))]:
        r = bc.evaluate(reg.get(eid), vals, params={"sigma": MESH[k]})
        expected = thm2(MESH[k], L, 15524, m, S, delta / 20)
        assert r.value == pytest.approx(expected, rel=1e-10)
        assert r.terms["sharpness_term"] + r.terms["norm_term"] == pytest.approx(r.value)
    j = 300 + 100 * (k % 5)
    r = bc.evaluate(reg.get("ls_truncated_fine"), vals, params={"sigma": FINE[j]})
    assert r.value == pytest.approx(thm2(FINE[j], l_v2(10, 2, 20), 15524, m, S, delta / 1000),
                                    rel=1e-10)


def test_lambda_star_is_the_minimiser(reg):
    r = bc.evaluate(reg.get("ls_truncated"), E3, params={"sigma": MESH[14]})
    c = l_v2(10, 2, 20) / (2 * MESH[14] ** 2) + math.log(20 / 0.05)
    f = lambda lg: math.exp(lg) * 1e-4 / 2e6 + c / math.exp(lg)  # noqa: E731
    opt = minimize_scalar(f, bounds=(0, 40), method="bounded", options={"xatol": 1e-10})
    assert r.terms["lam_star"] == pytest.approx(math.exp(opt.x), rel=1e-4)
    assert r.terms["norm_term"] == pytest.approx(opt.fun, rel=1e-9)


@pytest.mark.parametrize("eid, Lf", [("ls_truncated", l_v2), ("ls_truncated_c_radicand", l_radicand),
                                     ("ls_truncated_c_code", lambda *a: math.sqrt(l_radicand(*a)))])
@pytest.mark.parametrize("w, D, T, m, S", [(10, 2, 20, 10**6, 0.01), (1, 1, 20, 8192, 0.1),
                                           (20, 5, 50, 10**8, 0.03)])
def test_closed_form_sigma_is_numeric_optimum(reg, eid, Lf, w, D, T, m, S):
    e = reg.get(eid)
    vals = dict(omega=w, D_f=D, T=T, m=m, Sigma=S)
    prep = bc.Prepared(e, vals)
    closed = prep.eval_scalar(e.parameters["sigma"].closed_form)
    G, L = g_u(w, D), Lf(w, D, T)
    B0 = lambda ls: G * math.exp(2 * ls) + math.sqrt(S**2 * L / m) / math.exp(ls)  # noqa: E731
    opt = minimize_scalar(B0, bounds=(-30, 5), method="bounded", options={"xatol": 1e-12})
    assert closed == pytest.approx(math.exp(opt.x), rel=1e-6)
    # evaluate() snaps it to the log-nearest mesh point and charges ln 20
    r = prep.result()
    nearest = MESH[np.argmin(np.abs(np.log(MESH) - math.log(closed)))]
    assert r.parameters["sigma"] == nearest
    assert "closed form" in r.parameter_choice["sigma"]


def test_union_cost_charged_for_sigma(reg):
    r = bc.evaluate(reg.get("ls_truncated"), dict(E3, delta=0.1))
    assert r.union_bound_cost == {"sigma": pytest.approx(math.log(20))}
    assert r.delta == 0.1
    assert r.delta_effective == pytest.approx(0.1 / 20, rel=1e-12)
    s = r.parameters["sigma"]
    assert r.value == pytest.approx(thm2(s, l_v2(10, 2, 20), 15524, 10**6, 0.01, 0.1 / 20))
    assert r.value > thm2(s, l_v2(10, 2, 20), 15524, 10**6, 0.01, 0.1)  # the cost is real
    f = bc.evaluate(reg.get("ls_truncated_fine"), dict(E3, delta=0.1))
    assert f.union_bound_cost["sigma"] == pytest.approx(math.log(1000))
    assert f.delta_effective == pytest.approx(0.1 / 1000, rel=1e-12)
    # the truncation drops a remainder of unknown sign: conditional, never a certified bound
    assert r.kind == "conditional" and not r.is_bound and r.vacuous is None
    assert r.label.startswith("conditional: an upper bound only if ")
    assert "Taylor remainder" in r.label and "Taylor remainder" in r.conditions[0]


def test_sigma_off_grid_is_refused(reg):
    with pytest.raises(DomainError, match="sigma"):
        bc.evaluate(reg.get("ls_truncated"), E3, params={"sigma": 0.003})


def test_e3_truncated_optimum(reg):
    """E.3 setting (T=20, D_f=2, ω=10, m=1e6, Σ=0.01): grid optimum = independent grid minimum."""
    L = l_v2(10, 2, 20)
    for delta in (0.05, 0.2):
        r = bc.evaluate(reg.get("ls_truncated"), dict(E3, delta=delta))
        mesh_vals = [thm2(s, L, 15524, 10**6, 0.01, delta / 20) for s in MESH]
        assert r.value == pytest.approx(min(mesh_vals), rel=1e-12)
        assert r.parameters["sigma"] == pytest.approx(MESH[15])
        f = bc.evaluate(reg.get("ls_truncated_fine"), dict(E3, delta=delta))
        fine_vals = np.array([thm2(s, L, 15524, 10**6, 0.01, delta / 1000) for s in FINE])
        assert f.value == pytest.approx(fine_vals.min(), rel=1e-12)
        cont = minimize_scalar(lambda ls: thm2(math.exp(ls), L, 15524, 10**6, 0.01, delta / 1000),
                               bounds=(-10, -3), method="bounded", options={"xatol": 1e-12})
        assert f.value == pytest.approx(cont.fun, rel=1e-4)
        # §3.5: B(σ*) = 3 (G_u Σ² L /(4m))^{1/3} up to the ln(1/δ) term
        assert cont.fun == pytest.approx(3 * (15524 * 1e-4 * L / 4e6) ** (1 / 3), rel=2e-3)
        assert 0.238 < f.value < 0.241


# ---- semi-analytic ---------------------------------------------------------------------------

def test_semi_analytic_value_and_estimate_label(reg):
    e = reg.get("ls_semi_analytic")
    for k, P_hat in [(15, 0.0), (15, 250.0), (3, 1e4), (19, 3.3)]:
        r = bc.evaluate(e, dict(E3, P_hat=P_hat, delta=0.2), params={"sigma": MESH[k]})
        assert r.value == pytest.approx(
            thm2(MESH[k], l_v2(10, 2, 20), 15524, 10**6, 0.01, 0.2 / 20, P=P_hat), rel=1e-10)
    trunc = bc.evaluate(reg.get("ls_truncated"), E3, params={"sigma": MESH[15]}).value
    assert bc.evaluate(e, dict(E3, P_hat=0.0), params={"sigma": MESH[15]}).value == \
        pytest.approx(trunc, rel=1e-12)
    stats = Stats(scalars={"n": Quantity(1e6), "subgaussian_sigma": Quantity(0.01)},
                  curves={"perturbation_term": Curve("sigma", np.array([MESH[15]]),
                                                     np.array([120.0]), estimated=True,
                                                     method="90th percentile |Δ tr|")})
    r = bc.compute(e, stats, values=dict(omega=10, D_f=2, T=20), params={"sigma": MESH[15]},
                   registry=reg)
    assert r.estimated and not r.is_bound and r.label.startswith("estimated")
    # measured at one mesh point: still ln 20 (the declared mesh) is charged
    assert r.value == pytest.approx(thm2(MESH[15], l_v2(10, 2, 20), 15524, 10**6, 0.01,
                                         0.05 / 20, P=120.0), rel=1e-10)
    # a hand-set P̂ is an estimate at one σ: labelled, and σ must be given
    r = bc.compute(e, values=dict(E3, P_hat=120.0), params={"sigma": MESH[15]}, registry=reg)
    assert r.estimated and not r.is_bound
    with pytest.raises(DomainError, match="set by hand"):
        bc.compute(e, values=dict(E3, P_hat=120.0), registry=reg)
    with pytest.raises(MissingValueError, match="sigma"):
        bc.evaluate(e, dict(E3, P_hat=1.0))   # no closed form: σ must be where P̂ was measured


def test_estimated_sigma_from_stats_labels_result(reg):
    stats = Stats(scalars={"n": Quantity(1e6),
                           "subgaussian_sigma": Quantity(0.01, estimated=True, method="MGF")})
    r = bc.compute("ls_truncated", stats, values=dict(omega=10, D_f=2, T=20), registry=reg)
    assert r.estimated and r.label.startswith("estimated")
    r2 = bc.compute("ls_truncated", stats, values=dict(omega=10, D_f=2, T=20, Sigma=0.01),
                    registry=reg)
    assert not r2.estimated and not r2.is_bound and r2.label.startswith("conditional")


# ---- analytic -------------------------------------------------------------------------------

@pytest.mark.parametrize("w, D, T, d, j", [(10, 2, 20, 20, 250), (1, 1, 2, 1, 0), (20, 5, 50, 30, 999),
                                           (7, 3, 40, 12, 600)])
def test_analytic_pieces(reg, w, D, T, d, j):
    s = FINE[j]
    vals = dict(omega=w, D_f=D, T=T, m=10**6, Sigma=0.01, d=d)
    r = bc.evaluate(reg.get("ls_analytic"), vals, params={"sigma": s})
    ref = analytic_pieces(s, w, D, T, d)
    for k, v in ref.items():
        assert r.terms[k] == pytest.approx(v, rel=1e-10), k
    assert r.value == pytest.approx(
        thm2(s, l_v2(w, D, T), g_u(w, D), 10**6, 0.01, 0.05 / 1000, P=ref["P"]), rel=1e-10)
    c = bc.evaluate(reg.get("ls_analytic_c_code"), vals, params={"sigma": s})
    assert c.value == pytest.approx(thm2(s, math.sqrt(l_radicand(w, D, T)), g_u(w, D), 10**6, 0.01,
                                         0.05 / 1000, P=ref["P"]), rel=1e-10)


def test_analytic_closed_form_close_to_grid_minimum(reg):
    vals = dict(E3, d=20)
    r = bc.evaluate(reg.get("ls_analytic"), vals)
    L = l_v2(10, 2, 20)
    grid = np.array([thm2(s, L, 15524, 10**6, 0.01, 0.05 / 1000,
                          P=analytic_pieces(s, 10, 2, 20, 20)["P"]) for s in FINE])
    assert grid.min() <= r.value <= grid.min() * 1.001
    assert r.value > 100  # the analytic bound is vacuous at E.3 (the paper says so)
    assert r.parameters["sigma"] < 1e-5


def test_jl_dimension_assumption_checked(reg):
    r = bc.evaluate(reg.get("ls_analytic"), dict(E3, d=25), params={"sigma": FINE[250]})
    assert any("JL" in a for a in r.failed_assumptions) and not r.is_bound
    r = bc.evaluate(reg.get("ls_truncated"), dict(E3, omega=21), params={"sigma": MESH[15]})
    assert r.failed_assumptions and r.label == "not a bound: an assumption fails"


# ---- minimum sample size ---------------------------------------------------------------------

@pytest.mark.parametrize("w, D, T, S", [(10, 2, 20, 0.01), (1, 1, 20, 0.1), (20, 5, 20, 0.01)])
def test_min_samples_is_where_truncated_optimum_reaches_one(reg, w, D, T, S):
    r = bc.evaluate(reg.get("ls_min_samples_truncated"), dict(omega=w, D_f=D, T=T, m=1000, Sigma=S))
    G, L = g_u(w, D), l_v2(w, D, T)

    def min_b0(log_m):
        m = math.exp(log_m)
        f = lambda ls: G * math.exp(2 * ls) + math.sqrt(S**2 * L / m) / math.exp(ls)  # noqa: E731
        return minimize_scalar(f, bounds=(-40, 5), method="bounded",
                               options={"xatol": 1e-12}).fun - 1.0

    root = math.exp(brentq(min_b0, -10, 60, xtol=1e-12))
    assert r.value == pytest.approx(root, rel=1e-6)
    assert r.kind == "proxy"
    assert r.terms["m_ratio"] == pytest.approx(1000 / root, rel=1e-6)
    at = bc.evaluate(reg.get("ls_min_samples_truncated"),
                     dict(omega=w, D_f=D, T=T, m=math.ceil(r.value), Sigma=S))
    assert at.terms["bound_at_sigma_star"] <= 1.0 < 3 * (G * S**2 * L / (4 * (r.value - 1))) ** (1 / 3)


def test_min_samples_at_e3(reg):
    r = bc.evaluate(reg.get("ls_min_samples_truncated"), E3)
    assert r.value == pytest.approx(27 * 15524 * 1e-4 * l_v2(10, 2, 20) / 4, rel=1e-12)
    assert 13663 < r.value < 13664


# ---- parity: CoT vs one pass -------------------------------------------------------------------

def parity_logs(T, m, S, sigma, P=0.0):
    c = m * sigma**2 / (4 * S**2) * (2 * 1556 + P) + l_v2(1, 2, T) / (2 * sigma**2)
    base = -m / (8 * S**2)
    return math.log(4 * T) + base + c, math.log(4) + base + T * c, c


@pytest.mark.parametrize("m, S, sigma, P", [(10**5, 0.01, 0.004, 0.0), (10**7, 0.05, 0.002, 50.0),
                                            (10**9, 0.01, 0.001, 0.0)])
def test_parity_cot_linear_one_pass_exponential(reg, m, S, sigma, P):
    cot, op = reg.get("ls_parity_cot"), reg.get("ls_parity_one_pass")
    Ts = [2, 5, 10, 20, 40, 80]
    ln_cot, ln_op = [], []
    for T in Ts:
        vals = dict(T=T, m=m, Sigma=S, P_step=P)
        a = bc.evaluate(cot, vals, params={"sigma": sigma})
        b = bc.evaluate(op, vals, params={"sigma": sigma})
        ref_cot, ref_op, _ = parity_logs(T, m, S, sigma, P)
        assert a.log10_value * math.log(10) == pytest.approx(ref_cot, rel=1e-10)
        assert b.log10_value * math.log(10) == pytest.approx(ref_op, rel=1e-10)
        ln_cot.append(ref_cot)
        ln_op.append(ref_op)
    ln_cot, ln_op = np.array(ln_cot), np.array(ln_op)
    Ts = np.array(Ts, dtype=float)
    c = np.array([parity_logs(int(T), m, S, sigma, P)[2] for T in Ts])
    # ln δ_OP − ln δ_CoT + ln T = (T − 1)·c(T), c(T) > 0 and nondecreasing: exponential ratio
    growth = (ln_op - ln_cot + np.log(Ts)) / (Ts - 1)
    assert np.allclose(growth, c, rtol=1e-9)
    assert np.all(np.diff(growth) >= 0) and growth[0] > 0
    # CoT depends on T only through the factor T and L(1,2,T)/(2σ²): the rest is constant
    L = np.array([l_v2(1, 2, int(T)) for T in Ts])
    rest = ln_cot - np.log(Ts) - L / (2 * sigma**2)
    assert np.ptp(rest) <= 1e-9 * np.max(np.abs(rest))
    # one-pass: slope in T at least the T=2 exponent core, so log δ_OP is superlinear
    assert np.all(np.diff(ln_op) / np.diff(Ts) >= c[0] * (1 - 1e-12))


def test_parity_sigma_closed_form_minimises_exponent(reg):
    for T, m, S in [(20, 10**5, 0.01), (50, 10**8, 0.05)]:
        e = reg.get("ls_parity_cot")
        prep = bc.Prepared(e, dict(T=T, m=m, Sigma=S))
        closed = prep.eval_scalar(e.parameters["sigma"].closed_form)
        f = lambda ls: parity_logs(T, m, S, math.exp(ls))[0]  # noqa: E731
        opt = minimize_scalar(f, bounds=(-20, 0), method="bounded", options={"xatol": 1e-12})
        assert closed == pytest.approx(math.exp(opt.x), rel=1e-5)
        r = prep.result()
        assert r.parameters["sigma"] == pytest.approx(closed) and r.union_bound_cost == {}
        assert r.kind == "proxy" and r.delta is None


def test_parity_step_construction_is_pinned(reg):
    with pytest.raises(DomainError, match="omega"):
        bc.evaluate(reg.get("ls_parity_cot"), dict(T=20, m=10**5, Sigma=0.01, omega=2))
    r = bc.evaluate(reg.get("ls_parity_one_pass"), dict(T=20, m=10**5, Sigma=0.01))
    assert r.terms["G_u"] == 1556 and r.terms["L_norm"] == pytest.approx(l_v2(1, 2, 20))


# ---- kinds and metadata ---------------------------------------------------------------------

def test_kinds_and_variants(reg):
    ids = {e.id: e for e in reg.filter(family="lintilhac_shaikh")}
    assert set(ids) == {"ls_truncated", "ls_truncated_fine", "ls_truncated_c_radicand",
                        "ls_truncated_c_code", "ls_semi_analytic", "ls_semi_analytic_c_code",
                        "ls_analytic", "ls_analytic_c_code", "ls_min_samples_truncated",
                        "ls_parity_cot", "ls_parity_one_pass"}
    conditional = {"ls_truncated", "ls_truncated_fine", "ls_truncated_c_radicand",
                   "ls_semi_analytic", "ls_analytic"}
    for i, e in ids.items():
        assert e.family == "lintilhac_shaikh"
        assert e.kind == ("conditional" if i in conditional else "proxy"), i
        assert bool(e.conditions) == (i in conditional), i
        assert e.variant
        if "c_code" in i:
            assert "[C] code" in e.title or "[C] code" in e.variant
    assert ids["ls_parity_cot"].provenance.startswith("[N]")
