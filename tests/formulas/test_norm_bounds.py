"""Norm-based families (Bartlett, Neyshabur, Edelman, Trauger–Tewari) against direct
implementations written here with loops over layers (norm_bounds.md §3.4, §4, §5.3, §6.3, §7)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

import boundcalc as bc
from boundcalc.errors import DomainError, MissingValueError
from boundcalc.stats import MatrixStats, Quantity, Stats

LOG10 = math.log(10.0)


# ---- independent reference implementations -----------------------------------------------------

def r_bar(s, b, rho):
    prod = 1.0
    for si, ri in zip(s, rho):
        prod *= si * ri
    tot = 0.0
    for si, bi in zip(s, b):
        tot += (bi / si) ** (2.0 / 3.0)
    return prod * tot ** 1.5


def log_r_bar(s, b, rho):
    """ln R̄ without ever forming the product."""
    log_prod = sum(math.log(si) + math.log(ri) for si, ri in zip(s, rho))
    tot = sum((bi / si) ** (2.0 / 3.0) for si, bi in zip(s, b))
    return log_prod + 1.5 * math.log(tot)


def bartlett_alpha_1n(v, ln2=False):
    """ramp + 8/n^{3/2} + 72‖X‖√ln(2W²) R̄ ln n/(γn) + 3√(ln(c/δ)/(2n)), c = 1 or 2."""
    n = v["n"]
    rb = r_bar(v["s"], v["b"], v["rho"])
    cplx = 8 / n ** 1.5 + 72 * v["X_fro"] * math.sqrt(math.log(2 * v["W"] ** 2)) * rb \
        * math.log(n) / (v["gamma"] * n)
    conf = 3 * math.sqrt(math.log((2 if ln2 else 1) / v["delta"]) / (2 * n))
    return v["ramp_risk"] + cplx + conf, cplx, conf


def dudley_k(v):
    return 2 / v["gamma"] * v["X_fro"] * math.sqrt(math.log(2 * v["W"] ** 2)) \
        * r_bar(v["s"], v["b"], v["rho"])


def dudley_numeric(K, n):
    """2·inf over α ∈ (0, √n/2) of 4α/√n + (12K/n) ln(√n/(2α)), by numerical minimisation."""
    if K == 0:
        return 0.0
    hi = math.sqrt(n) / 2
    f = lambda a: 4 * a / math.sqrt(n) + 12 * K / n * math.log(hi / a)  # noqa: E731
    res = minimize_scalar(f, bounds=(1e-12 * hi, hi), method="bounded",
                          options={"xatol": 1e-13 * hi})
    return 2 * min(res.fun, f(hi))


BASE = dict(s=[2.0, 3.0, 1.5], b=[1.0, 4.0, 0.5], rho=[1.0, 1.0, 1.0], ramp_risk=0.12,
            X_fro=30.0, W=64, n=50_000, gamma=5.0, delta=0.05)
POINTS = [
    BASE,
    {**BASE, "s": [1.2], "b": [0.7], "rho": [1.0], "n": 2, "delta": 0.3},
    {**BASE, "rho": [0.5, 2.0, 1.0], "W": 1, "gamma": 0.01, "ramp_risk": 0.0},
    {**BASE, "s": [1.0] * 8, "b": [0.1 * (i + 1) for i in range(8)], "rho": [1.0] * 8,
     "n": 10 ** 7, "X_fro": 3000.0, "gamma": 40.0},
]


def values(v):
    return {k: val for k, val in v.items()}


# ---- Bartlett, certified ---------------------------------------------------------------------

@pytest.mark.parametrize("point", range(len(POINTS)))
@pytest.mark.parametrize("entry_id,ln2", [("bartlett_spectral", False),
                                          ("bartlett_spectral_ln2", True)])
def test_bartlett_alpha_1n_matches_reference(registry, point, entry_id, ln2):
    v = POINTS[point]
    r = bc.evaluate(registry.get(entry_id), values(v))
    want, cplx, conf = bartlett_alpha_1n(v, ln2)
    assert r.value == pytest.approx(want, rel=1e-12)
    assert r.terms["complexity"] == pytest.approx(cplx, rel=1e-12)
    assert r.terms["confidence_term"] == pytest.approx(conf, rel=1e-12)
    assert r.terms["R_bar"] == pytest.approx(r_bar(v["s"], v["b"], v["rho"]), rel=1e-12)
    if ln2:
        assert r.kind == "certified" and r.is_bound
    else:  # ln(1/δ) as printed; the standard argument gives ln(2/δ): conditional
        assert r.kind == "conditional" and not r.is_bound and "ln(2/δ)" in r.label
    assert r.parameters["gamma"] == v["gamma"]


def test_bartlett_ln2_differs_only_in_confidence_term(registry):
    a = bc.evaluate(registry.get("bartlett_spectral"), BASE)
    b = bc.evaluate(registry.get("bartlett_spectral_ln2"), BASE)
    n, d = BASE["n"], BASE["delta"]
    diff = 3 * (math.sqrt(math.log(2 / d) / (2 * n)) - math.sqrt(math.log(1 / d) / (2 * n)))
    assert b.value - a.value == pytest.approx(diff, rel=1e-9)
    assert a.variant != b.variant and "ln(2/δ)" in b.variant and "ln(1/δ)" in a.variant


def test_bartlett_n_below_2_fails_its_check(registry):
    v = {**POINTS[1], "n": 1}
    r = bc.evaluate(registry.get("bartlett_spectral"), v)
    assert [a["status"] for a in r.assumptions if a["check"]] == ["fails"]
    assert not r.is_bound and r.label.startswith("not a bound")


@pytest.mark.parametrize("point", range(len(POINTS)))
@pytest.mark.parametrize("entry_id,ln2", [("bartlett_spectral_dudley", False),
                                          ("bartlett_spectral_dudley_ln2", True)])
def test_bartlett_dudley_optimal_alpha(registry, point, entry_id, ln2):
    v = POINTS[point]
    r = bc.evaluate(registry.get(entry_id), values(v))
    K, n = dudley_k(v), v["n"]
    closed = 24 * K / n * (1 + math.log(n / (6 * K))) if K < n / 6 else 4.0
    numeric = dudley_numeric(K, n)
    assert closed == pytest.approx(numeric, rel=1e-6)
    conf = 3 * math.sqrt(math.log((2 if ln2 else 1) / v["delta"]) / (2 * n))
    assert r.terms["K"] == pytest.approx(K, rel=1e-12)
    assert r.terms["complexity"] == pytest.approx(closed, rel=1e-12)
    assert r.value == pytest.approx(v["ramp_risk"] + closed + conf, rel=1e-12)
    # never worse than the α = 1/n form (for n ≥ 2 both are valid)
    if n >= 2:
        assert r.terms["complexity"] <= bartlett_alpha_1n(v, ln2)[1] + 1e-15


def test_bartlett_dudley_edge_cases(registry):
    e = registry.get("bartlett_spectral_dudley")
    # K = 0 (no deviation from the references): the class is one function, complexity 0
    r0 = bc.evaluate(e, {**BASE, "b": [0.0, 0.0, 0.0]})
    assert r0.terms["complexity"] == 0.0
    assert r0.value == pytest.approx(BASE["ramp_risk"] + 3 * math.sqrt(
        math.log(1 / BASE["delta"]) / (2 * BASE["n"])), rel=1e-12)
    # K ≥ n/6: the infimum is the limit α → √n/2, i.e. 2·2 = 4
    big = {**BASE, "n": 100, "gamma": 1e-3}
    assert dudley_k(big) >= 100 / 6
    assert bc.evaluate(e, big).terms["complexity"] == 4.0
    # exactly at the switch the two branches agree
    v = dict(BASE)
    v["gamma"] = dudley_k(BASE) * BASE["gamma"] / (BASE["n"] / 6)   # makes K = n/6
    assert bc.evaluate(e, v).terms["complexity"] == pytest.approx(4.0, rel=1e-9)


def test_bartlett_gamma_grid_charges_the_union_bound(registry):
    e = registry.get("bartlett_spectral_gamma_grid")
    grid = [2.0 ** k for k in range(-20, 21)]
    v = {**BASE, "gamma": 4.0}
    assert 4.0 in grid
    r = bc.evaluate(e, v)
    assert r.union_bound_cost == {"gamma": pytest.approx(math.log(41), rel=1e-12)}
    assert r.delta_effective == pytest.approx(BASE["delta"] / 41, rel=1e-12)
    K, n = dudley_k(v), v["n"]
    closed = 24 * K / n * (1 + math.log(n / (6 * K)))
    conf = 3 * math.sqrt(math.log(2 / (BASE["delta"] / 41)) / (2 * n))
    assert r.value == pytest.approx(v["ramp_risk"] + closed + conf, rel=1e-12)
    assert r.is_bound and r.parameters["gamma"] == 4.0 and r.parameter_choice["gamma"] == "given"
    # the grid costs exactly the extra confidence and nothing else
    fixed = bc.evaluate(registry.get("bartlett_spectral_dudley_ln2"), v)
    assert r.value - fixed.value == pytest.approx(
        conf - 3 * math.sqrt(math.log(2 / BASE["delta"]) / (2 * n)), rel=1e-9)
    with pytest.raises(DomainError, match="not on its declared grid"):
        bc.evaluate(e, {**BASE, "gamma": 5.0})


def test_bartlett_fixed_margin_must_be_given(registry):
    v = {k: val for k, val in BASE.items() if k != "gamma"}
    with pytest.raises(MissingValueError, match="gamma"):
        bc.evaluate(registry.get("bartlett_spectral"), v)


@pytest.mark.parametrize("spec", [50.0, 1e4])
def test_bartlett_96_layers_in_log_space(registry, spec):
    L = 96
    v = {**BASE, "s": [spec] * L, "b": [0.3 * spec] * L, "rho": [1.0] * L}
    # independent log-space computation of every term
    n = v["n"]
    log_big = (math.log(72 * v["X_fro"] * math.sqrt(math.log(2 * v["W"] ** 2)) * math.log(n)
                        / (v["gamma"] * n)) + log_r_bar(v["s"], v["b"], v["rho"]))
    small = v["ramp_risk"] + 8 / n ** 1.5 + 3 * math.sqrt(math.log(1 / v["delta"]) / (2 * n))
    want_log10 = (log_big + math.log1p(small * math.exp(-log_big))) / LOG10
    r = bc.evaluate(registry.get("bartlett_spectral"), v)
    assert math.isfinite(r.log10_value)
    assert r.log10_value == pytest.approx(want_log10, rel=1e-12)
    if spec == 1e4:   # 10^384: beyond float64, only the log is finite
        assert want_log10 > 308 and not math.isfinite(r.value)
    else:
        assert r.value == pytest.approx(10 ** want_log10, rel=1e-9)
    rd = bc.evaluate(registry.get("bartlett_spectral_dudley"), v)
    assert rd.terms["complexity"] == 4.0 and rd.value < 6   # vacuous but finite


def test_bartlett_spectral_complexity_proxy(registry):
    rng = np.random.default_rng(1)
    for L in (1, 4, 12):
        spec = rng.uniform(0.5, 3.0, L)
        n21 = rng.uniform(0.0, 10.0, L)
        rho = rng.uniform(0.5, 1.5, L)
        r = bc.evaluate(registry.get("bartlett_spectral_complexity"),
                        {"spec": spec, "n21": n21, "rho": rho})
        assert r.value == pytest.approx(r_bar(spec, n21, rho), rel=1e-12)
        assert r.kind == "proxy" and not r.is_bound


def test_bartlett_code_proxy_matches_measures_py(registry):
    rng = np.random.default_rng(2)
    Ws = [rng.normal(size=(20, 10)), rng.normal(size=(20, 20)), rng.normal(size=(3, 20))]
    W0s = [rng.normal(size=W.shape) for W in Ws]
    spec = [np.linalg.svd(W, compute_uv=False)[0] for W in Ws]
    dist21 = [np.sum(np.linalg.norm(W - W0, axis=1)) for W, W0 in zip(Ws, W0s)]
    m, nparams, margin = 5000, sum(W.size + W.shape[0] for W in Ws), 2.5
    # measures.py: beta · Π‖W‖σ/margin · (Σ (h⁰·dist/σ)^{2/3})^{3/2} / √m
    prod = 1.0
    for sv in spec:
        prod *= sv
    ratio = sum((d / sv) ** (2 / 3) for d, sv in zip(dist21, spec)) ** 1.5
    want = math.log(m) * math.log(nparams) * (prod / margin) * ratio / math.sqrt(m)
    r = bc.evaluate(registry.get("bartlett_code_proxy"),
                    {"spec": spec, "dist21": dist21, "margin": margin, "m": m,
                     "n_params": nparams})
    assert r.value == pytest.approx(want, rel=1e-12)


# ---- Neyshabur ---------------------------------------------------------------------------------

def neyshabur_ref(v):
    d = len(v["spec"])
    prod = 1.0
    for s in v["spec"]:
        prod *= s ** 2
    ratio = sum(f ** 2 / s ** 2 for f, s in zip(v["fro"], v["spec"]))
    inner = v["B"] ** 2 * d ** 2 * v["h"] * math.log(d * v["h"]) * prod * ratio \
        + math.log(d * v["m"] / v["delta"])
    return math.sqrt(inner / (v["gamma"] ** 2 * v["m"]))


NEY = dict(spec=[1.5, 2.0, 1.1], fro=[6.0, 9.0, 3.0], h=128, B=4.0, m=60_000, gamma=8.0,
           delta=0.05, emp_margin_loss=0.07)


@pytest.mark.parametrize("v", [
    NEY,
    {**NEY, "spec": [1.0], "fro": [1.0], "h": 1},     # d = h = 1: ln(dh) = 0
    {**NEY, "delta": 0.001, "m": 10, "emp_margin_loss": 0.0},
])
def test_neyshabur_rate_matches_reference(registry, v):
    r = bc.evaluate(registry.get("neyshabur_spectral_rate"), v)
    cap = neyshabur_ref(v)
    assert r.terms["capacity_term"] == pytest.approx(cap, rel=1e-12)
    assert r.value == pytest.approx(v["emp_margin_loss"] + cap, rel=1e-12)
    assert r.kind == "rate" and r.is_bound is False
    assert r.hidden_constants == {"C_hidden": 1.0}
    assert r.label.startswith("rate")


def test_neyshabur_rate_is_linear_in_hidden_constant(registry):
    e = registry.get("neyshabur_spectral_rate")
    base = {**NEY, "emp_margin_loss": 0.0}
    vals = {c: bc.evaluate(e, {**base, "C_hidden": c}).value for c in (0.25, 1.0, 7.0)}
    assert vals[7.0] == pytest.approx(7.0 * vals[1.0], rel=1e-12)
    assert vals[0.25] == pytest.approx(0.25 * vals[1.0], rel=1e-12)
    withemp = bc.evaluate(e, {**NEY, "C_hidden": 3.0}).value
    assert withemp - NEY["emp_margin_loss"] == pytest.approx(3 * vals[1.0], rel=1e-12)


def test_neyshabur_96_layers_no_overflow(registry):
    L = 96
    v = {**NEY, "spec": [50.0] * L, "fro": [400.0] * L}
    # ln of the big part: 2·Σ ln s + ln(B² d² h ln(dh) Σ f²/s²); ln(dm/δ) is negligible
    log_big = (2 * sum(math.log(s) for s in v["spec"])
               + math.log(v["B"] ** 2 * L ** 2 * v["h"] * math.log(L * v["h"])
                          * sum(f ** 2 / s ** 2 for f, s in zip(v["fro"], v["spec"]))))
    log_inner = log_big + math.log1p(math.log(L * v["m"] / v["delta"]) * math.exp(-log_big))
    log_cap = 0.5 * (log_inner - math.log(v["gamma"] ** 2 * v["m"]))
    assert log_cap / LOG10 > 160           # Π s² = 50^192 ≈ 10^326 overflows float64
    r = bc.evaluate(registry.get("neyshabur_spectral_rate"), v)
    assert math.isfinite(r.log10_value)
    assert r.log10_value == pytest.approx(log_cap / LOG10, rel=1e-12)


def test_neyshabur_code_proxy_matches_measures_py(registry):
    rng = np.random.default_rng(3)
    Ws = [rng.normal(size=(30, 12)), rng.normal(size=(30, 30)), rng.normal(size=(10, 30))]
    W0s = [W + 0.1 * rng.normal(size=W.shape) for W in Ws]
    spec = [np.linalg.svd(W, compute_uv=False)[0] for W in Ws]
    dist = [np.linalg.norm(W - W0) for W, W0 in zip(Ws, W0s)]
    h = [W.shape[0] for W in Ws]
    m, margin = 4000, 1.7
    prod = 1.0
    for s in spec:
        prod *= s
    ratio = math.sqrt(sum((math.sqrt(hi) * di / si) ** 2 for hi, di, si in zip(h, dist, spec)))
    want = len(Ws) * (prod / margin) * ratio / math.sqrt(m)
    r = bc.evaluate(registry.get("neyshabur_code_proxy"),
                    {"spec": spec, "dist_fro": dist, "h_out": h, "margin": margin, "m": m})
    assert r.value == pytest.approx(want, rel=1e-12)
    assert r.kind == "proxy" and not r.is_bound


# ---- Edelman -----------------------------------------------------------------------------------

EDL = dict(emp_margin_risk=0.05, C_norms=12.0, m=20_000, T=512, gamma=2.0, delta=0.01)


@pytest.mark.parametrize("v", [EDL, {**EDL, "T": 1, "m": 1}, {**EDL, "C_norms": 0.0}])
def test_edelman_rate_matches_reference(registry, v):
    r = bc.evaluate(registry.get("edelman_cor45_rate"), v)
    cap = v["C_norms"] * math.log(v["m"] * v["T"]) / (v["gamma"] * math.sqrt(v["m"]))
    conf = math.sqrt(math.log(1 / v["delta"]) / v["m"])
    assert r.value == pytest.approx(v["emp_margin_risk"] + cap + conf, rel=1e-12, abs=1e-15)
    assert r.kind == "rate" and r.is_bound is False
    assert set(r.hidden_constants) == {"C_hidden", "C_conf"}


def test_edelman_hidden_constants_scale_their_terms(registry):
    e = registry.get("edelman_cor45_rate")
    v0 = {**EDL, "emp_margin_risk": 0.0}
    cap = EDL["C_norms"] * math.log(EDL["m"] * EDL["T"]) / (EDL["gamma"] * math.sqrt(EDL["m"]))
    conf = math.sqrt(math.log(1 / EDL["delta"]) / EDL["m"])
    for ch, cc in [(1.0, 1.0), (3.0, 1.0), (1.0, 5.0), (0.1, 0.2)]:
        r = bc.evaluate(e, {**v0, "C_hidden": ch, "C_conf": cc})
        assert r.value == pytest.approx(ch * cap + cc * conf, rel=1e-12)
    # doubling both constants doubles the value exactly (no empirical term)
    one = bc.evaluate(e, v0).value
    assert bc.evaluate(e, {**v0, "C_hidden": 2.0, "C_conf": 2.0}).value == pytest.approx(
        2 * one, rel=1e-12)


def test_edelman_grows_like_log_T(registry):
    e = registry.get("edelman_cor45_rate")
    a = bc.evaluate(e, {**EDL, "T": 100}).value
    b = bc.evaluate(e, {**EDL, "T": 100 * 1000}).value
    want = EDL["C_norms"] * math.log(1000) / (EDL["gamma"] * math.sqrt(EDL["m"]))
    assert b - a == pytest.approx(want, rel=1e-9)


# ---- Trauger & Tewari --------------------------------------------------------------------------

def tt_stats(L=3, N=8, gated=False, seed=4):
    """A stats file with raw per-layer matrices and their entrywise l1 norms, plus the weights."""
    rng = np.random.default_rng(seed)
    shapes = {"q": (N, N), "k": (N, N), "v": (N, N), "o": (N, N), "ffn_in": (4 * N, N),
              "ffn_out": (N, 4 * N)}
    if gated:
        shapes["ffn_gate"] = (4 * N, N)
    weights, mats = {}, []
    for layer in range(L):
        for t, shp in shapes.items():
            W = rng.normal(size=shp)
            weights[(t, layer)] = W
            mats.append(MatrixStats(t, layer, None, f"layer{layer}.{t}", shp,
                                    {"norm_11": float(np.abs(W).sum())}))
    stats = Stats(model={"n_layers": L}, matrices=mats, scalars={"n": Quantity(100.0)})
    return stats, weights


def test_trauger_tewari_l11_sum_from_stats(registry):
    stats, weights = tt_stats()
    want = 0.0
    for (t, layer), W in weights.items():
        for row in W:
            for x in row:
                want += abs(x)
    r = bc.compute("trauger_tewari_l11_sum", stats, registry=registry)
    assert r.value == pytest.approx(want, rel=1e-12)
    attn = sum(np.abs(W).sum() for (t, _), W in weights.items() if t in ("q", "k", "v", "o"))
    assert r.terms["l11_attention"] == pytest.approx(attn, rel=1e-12)
    assert r.kind == "proxy" and not r.is_bound
    assert r.inputs["L"] == 3


def test_trauger_tewari_gated_variant(registry):
    stats, weights = tt_stats(L=2, gated=True)
    want = sum(np.abs(W).sum() for W in weights.values())
    r = bc.compute("trauger_tewari_l11_sum_gated", stats, registry=registry)
    assert r.value == pytest.approx(want, rel=1e-12)
    plain = bc.compute("trauger_tewari_l11_sum", stats, registry=registry)
    gate = sum(np.abs(W).sum() for (t, _), W in weights.items() if t == "ffn_gate")
    assert r.value - plain.value == pytest.approx(gate, rel=1e-9)
    stats_plain, _ = tt_stats(L=2)
    with pytest.raises(MissingValueError, match="n11_gate"):
        bc.compute("trauger_tewari_l11_sum_gated", stats_plain, registry=registry)


def test_trauger_tewari_has_no_invented_rate(registry):
    kinds = {e.id: e.kind for e in registry.filter(family="trauger_tewari")}
    assert kinds and set(kinds.values()) == {"proxy"}
