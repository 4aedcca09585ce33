"""Spectrum-adaptive and Edelman-style proxies vs a direct numpy implementation of the
authors' code (dense SVD of every per-head product), as spectrum_adaptive.md §4 defines it."""

from __future__ import annotations

import math

import numpy as np
import pytest

import boundcalc as bc

L_PHI = 1.13


def random_bert(L=3, A=2, N=16, dh=8, seed=0, decay=0.0):
    """Random weights in torch (out, in) layout; ``decay`` makes spectra fall off."""
    rng = np.random.default_rng(seed)
    scale = (np.arange(1, N + 1) ** -decay)[None, :]

    def w(shape, s):
        return rng.normal(size=shape) * s * (scale if shape[1] == N else 1.0)
    q, k, v, o = (np.stack([w((N, N), 0.3) for _ in range(L)]) for _ in range(4))
    fin = np.stack([w((4 * N, N), 0.2) for _ in range(L)])
    fout = np.stack([rng.normal(size=(N, 4 * N)) * 0.2 for _ in range(L)])
    mats = {}
    for l in range(L):
        for h in range(A):
            hs = slice(h * dh, (h + 1) * dh)
            mats[("QK", l, h)] = q[l][hs, :].T @ k[l][hs, :]
            mats[("V", l, h)] = v[l][hs, :].T @ o[l].T[hs, :]
        mats[("in", l)] = fin[l].T
        mats[("out", l)] = fout[l].T
    return mats


def rank(s, shape):
    return int(np.sum(s > 1e-10 * min(shape) * max(s[0], 1)))


def reference(mats, L, A, N):
    """Direct implementation: loops, dense float64 SVD of every matrix."""
    sv = {key: np.linalg.svd(M, compute_uv=False) for key, M in mats.items()}
    spec = {key: s[0] for key, s in sv.items()}
    rk = {key: rank(s, mats[key].shape) for key, s in sv.items()}

    def alpha(l):
        out = 1.0
        for kk in range(l + 1, L):
            out *= L_PHI * spec[("in", kk)] * spec[("out", kk)] * sum(
                spec[("V", kk, h)] * (1 + 4 * spec[("QK", kk, h)]) for h in range(A))
        return out

    m = math.ceil(L + math.log(N))
    grid = [j / m for j in range(2 * m + 1)]

    def best(key, gamma, l):
        vals = []
        for p in grid:
            # S_p sums the singular values S_0 counts: a dense SVD's round-off values of a
            # rank-d_h product would otherwise add ~(1e-16)^p each (see the entry's notes)
            S = rk[key] if p == 0 else float(np.sum(sv[key][: rk[key]] ** p))
            vals.append(S ** (1 / (p + 2)) * (gamma * alpha(l) * L) ** (p / (p + 2))
                        * N ** ((p + 1) / (p + 2)))
        j = int(np.argmin(vals))
        return vals[j], grid[j]

    ours, chosen = 0.0, {}
    for l in range(L):
        for h in range(A):
            g_qk = 2 * spec[("V", l, h)] * spec[("out", l)] * spec[("in", l)]
            t, chosen[("QK", l, h)] = best(("QK", l, h), g_qk, l)
            ours += t
            t, chosen[("V", l, h)] = best(("V", l, h), spec[("out", l)] * spec[("in", l)], l)
            ours += t
        t, chosen[("in", l)] = best(("in", l), spec[("out", l)], l)
        ours += t
        t, chosen[("out", l)] = best(("out", l), 1.0, l)
        ours += t
    ours += math.sqrt(L)

    def n21(M):
        return float(np.sum(np.linalg.norm(M, axis=0)))
    total = 1.0
    for l in range(L):
        co, ci = spec[("out", l)], spec[("in", l)]
        xi = sum((co * ci * spec[("V", l, h)] * n21(mats[("QK", l, h)])) ** (2 / 3)
                 + (co * ci * n21(mats[("V", l, h)])) ** (2 / 3) for h in range(A))
        xi += (co * n21(mats[("in", l)])) ** (2 / 3) + n21(mats[("out", l)]) ** (2 / 3)
        total += alpha(l) ** (2 / 3) * xi
    edel = total ** 1.5
    return ours, edel, chosen, sv, spec, rk


def values_for(mats, L, A, N, dh):
    sv = {key: np.linalg.svd(M, compute_uv=False) for key, M in mats.items()}
    rk = {key: rank(s, mats[key].shape) for key, s in sv.items()}

    def trunc(key, width):
        out = np.zeros(width)
        out[: rk[key]] = sv[key][: rk[key]]
        return out

    def per_head(t, f):
        return np.array([[f((t, l, h)) for h in range(A)] for l in range(L)])

    def per_layer(t, f):
        return np.array([f((t, l)) for l in range(L)])

    def n21(key):
        return float(np.sum(np.linalg.norm(mats[key], axis=0)))
    return dict(
        N=N,
        C_QK=per_head("QK", lambda k: sv[k][0]), C_V=per_head("V", lambda k: sv[k][0]),
        C_in=per_layer("in", lambda k: sv[k][0]), C_out=per_layer("out", lambda k: sv[k][0]),
        sv_QK=per_head("QK", lambda k: trunc(k, dh)), sv_V=per_head("V", lambda k: trunc(k, dh)),
        sv_in=per_layer("in", lambda k: trunc(k, N)), sv_out=per_layer("out", lambda k: trunc(k, N)),
        rank_QK=per_head("QK", lambda k: rk[k]), rank_V=per_head("V", lambda k: rk[k]),
        rank_in=per_layer("in", lambda k: rk[k]), rank_out=per_layer("out", lambda k: rk[k]),
        N21_QK=per_head("QK", n21), N21_V=per_head("V", n21),
        N21_in=per_layer("in", n21), N21_out=per_layer("out", n21),
    )


def subset(entry, values):
    return {k: v for k, v in values.items() if k in entry.symbols}


@pytest.mark.parametrize("L, A, N, dh, decay, seed", [
    (3, 2, 16, 8, 0.0, 0), (2, 4, 32, 8, 1.5, 1), (4, 2, 16, 8, 3.0, 2), (1, 1, 8, 8, 0.5, 3),
])
def test_proxies_match_direct_numpy_implementation(L, A, N, dh, decay, seed):
    reg = bc.load_registry()
    mats = random_bert(L, A, N, dh, seed, decay)
    ours_ref, edel_ref, chosen, *_ = reference(mats, L, A, N)
    vals = values_for(mats, L, A, N, dh)
    ours = reg.get("spectrum_adaptive_ours")
    r = bc.evaluate(ours, subset(ours, vals))
    assert r.value == pytest.approx(ours_ref, rel=1e-9)
    assert r.kind == "proxy" and not r.is_bound
    p_qk = np.asarray(r.parameters["p_QK"])
    assert p_qk.shape == (L, A)
    for l in range(L):
        for h in range(A):
            assert p_qk[l, h] == pytest.approx(chosen[("QK", l, h)], abs=1e-12)
        assert float(np.asarray(r.parameters["p_in"])[l]) == pytest.approx(chosen[("in", l)])
    m = math.ceil(L + math.log(N))
    assert r.union_bound_cost["p_QK"] == pytest.approx(L * A * math.log(2 * m + 1))
    assert sum(r.terms.values()) == pytest.approx(r.value, rel=1e-12)
    edel = reg.get("spectrum_adaptive_edelman")
    assert bc.evaluate(edel, subset(edel, vals)).value == pytest.approx(edel_ref, rel=1e-9)


def test_decaying_spectra_select_positive_schatten_indices():
    L, A, N, dh = 2, 4, 32, 8
    mats = random_bert(L, A, N, dh, seed=5, decay=3.0)
    for key in mats:  # shrink norms so the scale factor favours p > 0
        mats[key] = mats[key] * 1e-3
    _, _, chosen, *_ = reference(mats, L, A, N)
    r = bc.evaluate(bc.load_registry().get("spectrum_adaptive_ours"),
                    subset(bc.load_registry().get("spectrum_adaptive_ours"),
                           values_for(mats, L, A, N, dh)))
    sel = np.concatenate([np.ravel(r.parameters[p]) for p in ("p_QK", "p_V", "p_in", "p_out")])
    assert np.any(sel > 0), "expected some matrix to prefer a positive Schatten index"
    assert sorted(np.ravel(r.parameters["p_QK"])) == sorted(
        chosen[("QK", l, h)] for l in range(L) for h in range(A))


def test_deep_model_product_does_not_overflow():
    """96 layers with spectral norms 50: the depth factor is ~10^800, far beyond float64."""
    L, A = 96, 2
    edel = bc.load_registry().get("spectrum_adaptive_edelman")
    C = np.full((L, A), 50.0)
    vals = dict(C_QK=C, C_V=C, C_in=np.full(L, 50.0), C_out=np.full(L, 50.0),
                N21_QK=C, N21_V=C, N21_in=np.full(L, 50.0), N21_out=np.full(L, 50.0))
    r = bc.evaluate(edel, vals)
    # independent log-space computation
    log_f = math.log(L_PHI * 50 * 50 * A * 50 * (1 + 4 * 50))
    xi = A * ((50 ** 4) ** (2 / 3) + (50 ** 3) ** (2 / 3)) + (50 ** 2) ** (2 / 3) + 50 ** (2 / 3)
    logs = [(2 / 3) * (L - 1 - l) * log_f + math.log(xi) for l in range(L)]
    m = max(logs)
    log_total = m + math.log(sum(math.exp(x - m) for x in logs) + math.exp(-m))
    assert math.isfinite(r.log10_value)
    assert r.log10_value == pytest.approx(1.5 * log_total / math.log(10), rel=1e-10)
    assert r.value == math.inf  # too large for a float, reported through log10_value
    assert "e+" in r.value_text()
