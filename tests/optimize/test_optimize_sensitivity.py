"""Sensitivities against central finite differences; contributions and per-matrix selections
against an independent numpy computation of the spectrum-adaptive proxy."""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pytest

import boundcalc as bc
from boundcalc.engine import logspace as ls
from boundcalc.engine.compile import Context
from boundcalc.evaluation import Prepared
from boundcalc.optimize import optimize
from boundcalc.stats import MatrixStats, Quantity, Stats

MIX = """
family = "senstest"
title = "derivative rules"
[symbols]
n = { meaning = "sample size", role = "data_size", domain = "[1, inf)", integer = true }
delta = { meaning = "confidence", role = "confidence", domain = "(0, 1)", default = 0.05 }
emp = { meaning = "empirical risk", role = "measured", domain = "[0, 1]" }
KL = { meaning = "KL divergence", role = "measured", domain = "[0, inf)" }
a = { meaning = "a", role = "measured", domain = "(0, inf)" }
b = { meaning = "b", role = "measured", domain = "(0, inf)" }
x = { meaning = "x", role = "constant", domain = "(-inf, inf)" }
L = { meaning = "number of layers", role = "size", domain = "[1, inf)", integer = true }
w = { meaning = "per-layer weight", role = "measured", domain = "(0, inf)", indices = ["l"] }
v = { meaning = "per-layer norm", role = "measured", domain = "(0, inf)", indices = ["l"] }

[[entry]]
id = "t_mix"
title = "every derivative rule at once"
source = "test"
provenance = "test"
kind = "certified"
expression = "kl_inv(emp, (KL + log(2*sqrt(n)/delta))/n) + Min(a, b)*Max(a, 2*b) + Abs(x - 1) + Piecewise((x**2, x > 2), (3*x, True)) + Sum(GridMin(w[l]**p * v[l]**(1 - p) * exp(p), p) * Product(v[k], (k, 0, l)), (l, 0, L - 1)) + kl(emp, 0.5)*a"
[entry.indices]
l = "L"
k = "L"
[entry.parameters]
p = { choice = "grid", domain = "[0, 1]", indices = ["l"], grid = { linspace = [0, 1, 11] } }
"""


def fd_elasticities(prepared: Prepared, result, h: float = 1e-5) -> dict[str, float]:
    """Central differences of ln B in ln c with the chosen parameters (and grids) held fixed.

    The input is perturbed in the evaluation context, so integer symbols (n, N) can move by a
    relative 1e-5 too; δ is perturbed at δ_eff (costs held fixed)."""
    params = {k: v for k, v in result.parameters.items()
              if k in prepared.entry.parameters and np.ndim(v) == 0}
    expr = prepared.compiled.compile(prepared.entry.expression)
    out = {}
    for row in result.extra["sensitivity"]:
        name = row["symbol"]
        vals = []
        for f in (1 + h, 1 - h):
            ctx = prepared.context(params, result.delta_effective)
            scalars, arrays = dict(ctx.scalars), dict(ctx.arrays)
            if name in prepared.arrays:
                arrays[name] = ls.from_float(prepared.arrays[name] * f)
            elif name == "delta":
                scalars[name] = ls.from_float(result.delta_effective * f)
            else:
                scalars[name] = ls.from_float(prepared.scalars[name] * f)
            lv = expr(Context(scalars, arrays, ctx.sizes, ctx.grids))
            vals.append(float(np.asarray(lv.to_float()).reshape(-1)[0]))
        out[name] = (vals[0] - vals[1]) / (2 * h) / result.value
    return out


def check_against_fd(prepared: Prepared, result, tol: float = 1e-4) -> int:
    fd = fd_elasticities(prepared, result)
    checked = 0
    for row in result.extra["sensitivity"]:
        el, ref = row["elasticity"], fd[row["symbol"]]
        assert el is not None, row
        if abs(ref) < 1e-12:
            assert abs(el) < 1e-9, row
        else:
            assert abs(el - ref) <= tol * abs(ref), (row["symbol"], el, ref)
            checked += 1
        if not row["indexed"]:  # the derivative itself: elasticity · B / c
            c = prepared.scalars[row["symbol"]]
            assert row["derivative"] == pytest.approx(el * result.value / c, rel=1e-9)
    return checked


@pytest.fixture(scope="module")
def mix(tmp_path_factory):
    path = tmp_path_factory.mktemp("f") / "mix.toml"
    path.write_text(textwrap.dedent(MIX), encoding="utf-8")
    return bc.load_registry([path]).get("t_mix")


@pytest.mark.parametrize("vals", [
    {"emp": 0.05, "KL": 300.0, "n": 10 ** 6, "a": 0.7, "b": 0.4, "x": 3.0,
     "w": [0.5, 2.0, 1.3], "v": [1.5, 0.3, 0.9]},
    {"emp": 0.3, "KL": 2.0, "n": 5 * 10 ** 5, "a": 0.2, "b": 0.9, "x": -0.5,
     "w": [4.0, 0.2], "v": [0.7, 2.5]},
])
def test_derivative_rules_match_finite_differences(mix, vals):
    prepared = Prepared(mix, vals)
    result = optimize(mix, values=vals)
    assert check_against_fd(prepared, result) >= 7


def test_bundled_entries_match_finite_differences(registry):
    cases = [("mcallester", {"emp_risk": 0.05, "KL": 5000.0, "n": 10 ** 6}),
             ("pac_bayes_kl", {"emp_risk": 0.05, "KL": 5000.0, "n": 10 ** 6}),
             ("pac_bayes_lambda", {"emp_risk": 0.05, "KL": 5000.0, "n": 10 ** 6}),
             ("catoni", {"emp_risk": 0.05, "KL": 5000.0, "n": 10 ** 6}),
             ("alquier_subgaussian", {"emp_risk": 0.05, "KL": 5000.0, "n": 10 ** 6, "s": 0.5})]
    done = 0
    for ident, vals in cases:
        if ident not in registry:
            continue
        e = registry.get(ident)
        check_against_fd(Prepared(e, vals), optimize(e, values=vals))
        done += 1
    if not done:
        pytest.skip("no generic PAC-Bayes entries yet")


def test_layerwise_sensitivities(registry):
    rng = np.random.default_rng(3)
    G = 5
    vals = {"train_loss": 0.04, "n": 10 ** 6, "s": 0.5, "hess_trace": rng.gamma(1, 40, G),
            "dist_sq": rng.gamma(2, 10, G)}
    for ident in ("pac_bayes_layerwise", "pac_bayes_single_sigma"):
        e = registry.get(ident)
        r = optimize(e, values=vals)
        pvals = dict(vals)
        if ident == "pac_bayes_layerwise":
            pvals["sigma"] = r.parameters["sigma"]
            names = {row["symbol"] for row in r.extra["sensitivity"]}
            assert not names & {"sigma", "sigma_prior_c", "sigma_prior_b"}
        assert check_against_fd(Prepared(e, pvals), r) >= 5
        el = {row["symbol"]: row["elasticity"] for row in r.extra["sensitivity"]}
        assert el["n"] < 0 < el["hess_trace"] and el["dist_sq"] > 0 and el["delta"] < 0


# ---- spectrum-adaptive proxy: stats, independent numpy computation ----------------------------

def spectrum_stats(L=2, A=2, N=16, dh=4, F=64, seed=0, scale=(0.05, 3.0), n=1000) -> Stats:
    """Random singular values per matrix; spectral norm, rank and (2,1)-norm stand-ins."""
    rng = np.random.default_rng(seed)
    mats = []

    def mk(t, layer, head, shape, k):
        s = math.exp(rng.uniform(math.log(scale[0]), math.log(scale[1])))
        sv = np.sort(rng.gamma(2.0, 0.5, size=k))[::-1] * s
        sv[-1] = 0.0  # a zero-padded singular value: rank < k
        stats = {"spectral": float(sv[0]), "rank": float(np.sum(sv > 1e-10)),
                 "frobenius": float(np.sqrt((sv ** 2).sum())), "norm_21": float(sv.sum())}
        mats.append(MatrixStats(type=t, layer=layer, head=head, name=f"{t}.{layer}.{head}",
                                shape=shape, stats=stats, singular_values=sv))

    for layer in range(L):
        for h in range(A):
            mk("QK", layer, h, (N, N), dh)
            mk("V", layer, h, (N, N), dh)
        mk("M_in", layer, None, (N, F), N)
        mk("M_out", layer, None, (F, N), N)
    return Stats(model={"n_layers": L, "n_heads": A, "hidden": N}, matrices=mats,
                 scalars={"n": Quantity(float(n))})


def numpy_T_QK(st: Stats, L_phi: float = 1.13):
    """T_QK[l, h](p) for every grid p, computed from the stats with plain numpy."""
    L, A, N = st.model["n_layers"], st.model["n_heads"], st.model["hidden"]
    get = {t: {(m.layer, m.head): m for m in st.of_type(t)} for t in ("QK", "V", "M_in", "M_out")}
    C = lambda t, layer, h=None: get[t][(layer, h)].stats["spectral"]  # noqa: E731
    alpha = np.ones(L)
    for layer in range(L):
        for k in range(layer + 1, L):
            alpha[layer] *= L_phi * C("M_in", k) * C("M_out", k) * sum(
                C("V", k, h) * (1 + 4 * C("QK", k, h)) for h in range(A))
    step = 1 / math.ceil(L + math.log(N))
    grid = step * np.arange(int(math.floor(2 / step + 1e-9)) + 1)
    T = np.empty((L, A, len(grid)))
    for layer in range(L):
        for h in range(A):
            m = get["QK"][(layer, h)]
            for k, p in enumerate(grid):
                S = m.stats["rank"] if p == 0 else float(np.sum(m.singular_values ** p))
                gam = 2 * C("V", layer, h) * C("M_out", layer) * C("M_in", layer) * alpha[layer] * L
                T[layer, h, k] = S ** (1 / (p + 2)) * gam ** (p / (p + 2)) * N ** ((p + 1) / (p + 2))
    return grid, T


def test_spectrum_contributions_and_selections(registry):
    e = registry.get("spectrum_adaptive_ours")
    st = spectrum_stats(L=3, A=2, seed=4)
    r = optimize(e, st)
    grid, T = numpy_T_QK(st)
    best = T.min(axis=2)
    chosen = grid[T.argmin(axis=2)]
    sel = {s["parameter"]: s for s in r.extra["selections"]}
    np.testing.assert_allclose(sel["p_QK"]["values"], chosen, rtol=0, atol=1e-12)
    assert sel["p_QK"]["indices"] == ["l", "h"] and sel["p_QK"]["grid_size"] == len(grid)
    assert len(set(np.ravel(chosen))) > 1  # the test data exercise more than one grid value
    c = r.extra["contributions"]
    parts = {p["name"]: p for p in c["parts"]}
    np.testing.assert_allclose(parts["B_QK"]["values"], best, rtol=1e-12)
    assert parts["B_QK"]["indices"] == ["l", "h"]
    assert parts["B_QK"]["value"] == pytest.approx(best.sum(), rel=1e-12)
    assert sum(p["value"] for p in c["parts"]) == pytest.approx(r.value, rel=1e-12)
    assert sum(p["share"] for p in c["parts"]) == pytest.approx(1.0, rel=1e-12)
    by_layer = c["by_index"]["l"]
    assert by_layer["by_part"]["B_QK"] == pytest.approx(best.sum(axis=1), rel=1e-12)
    layer_parts = ("B_QK", "B_V", "B_in", "B_out")
    assert np.sum(by_layer["values"]) == pytest.approx(
        sum(parts[n]["value"] for n in layer_parts), rel=1e-12)
    assert r.union_bound_cost["p_QK"] == pytest.approx(3 * 2 * math.log(len(grid)))
    assert r.kind == "proxy" and r.vacuous is None


def test_spectrum_sensitivities_match_finite_differences(registry):
    e = registry.get("spectrum_adaptive_ours")
    st = spectrum_stats(L=3, A=2, seed=4)
    r = optimize(e, st)
    prepared = bc.prepare(e, st)
    assert check_against_fd(prepared, r) >= 8
    indexed = {row["symbol"] for row in r.extra["sensitivity"] if row["indexed"]}
    assert {"sv_QK", "C_V", "C_in"} <= indexed
