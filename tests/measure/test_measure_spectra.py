"""Spectra and norms against numpy, including the per-head QR core and Schatten sums."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from _measure_helpers import one_thread  # noqa: F401  (autouse fixture)

from boundcalc.measure.weights.spectra import (core_singular_values, matrix_stats, numerical_rank,
                                       product_stats, schatten_grid, schatten_sum)


def test_schatten_sum_and_grid():
    s = np.array([3.0, 2.0, 0.5, 0.0])
    assert schatten_sum(s, 1) == pytest.approx(5.5)
    assert schatten_sum(s, 2) == pytest.approx(13.25)
    assert schatten_sum(s, 0.5) == pytest.approx(np.sqrt(3) + np.sqrt(2) + np.sqrt(0.5))
    assert schatten_sum(s, 0) == 3  # numerical rank
    assert schatten_sum(s, 0, rank=7) == 7
    np.testing.assert_allclose(schatten_grid(s, [0, 1, 2]), [3, 5.5, 13.25])
    with pytest.raises(ValueError):
        schatten_sum(s, -1)


def test_numerical_rank_threshold_uses_full_size():
    # threshold 1e-10 * k * max(sigma_1, 1): with k = 10 a value of 5e-10 counts, with k = 100 not
    s = np.array([1.0, 5e-10])
    assert numerical_rank(s, k=2) == 2
    assert numerical_rank(s, k=100) == 1
    assert numerical_rank(np.array([1e-3, 1e-12]), k=2) == 1  # max(sigma_1, 1) = 1


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 6), st.integers(1, 8), st.integers(8, 40), st.integers(0, 2**31 - 1))
def test_core_singular_values_match_dense(H, d, N, seed):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(H, d, N, generator=g, dtype=torch.float64)
    B = torch.randn(H, d, N, generator=g, dtype=torch.float64)
    core = core_singular_values(A, B).numpy()
    assert core.shape == (H, min(d, N))
    for h in range(H):
        dense = np.linalg.svd(A[h].numpy().T @ B[h].numpy(), compute_uv=False)[: min(d, N)]
        np.testing.assert_allclose(core[h], dense, rtol=1e-9, atol=1e-12 * dense[0])


def test_product_stats_rank_deficient_head_and_distances():
    g = torch.Generator().manual_seed(3)
    A = torch.randn(2, 4, 20, generator=g, dtype=torch.float64)
    B = torch.randn(2, 4, 20, generator=g, dtype=torch.float64)
    A[1, 3] = A[1, 0] + A[1, 1]  # head 1 has rank 3
    A0 = A + 0.1 * torch.randn(A.shape, generator=g, dtype=torch.float64)
    B0 = B + 0.1 * torch.randn(B.shape, generator=g, dtype=torch.float64)
    out = product_stats(A, B, A0, B0)
    for h, (stats, sv) in enumerate(out):
        P = A[h].numpy().T @ B[h].numpy()
        D = P - A0[h].numpy().T @ B0[h].numpy()
        s = np.linalg.svd(P, compute_uv=False)
        assert stats["rank"] == (4 if h == 0 else 3)
        assert stats["spectral"] == pytest.approx(s[0])
        assert stats["nuclear"] == pytest.approx(s.sum())
        assert stats["stable_rank"] == pytest.approx((s**2).sum() / s[0] ** 2)
        assert stats["dist_init_spectral"] == pytest.approx(np.linalg.norm(D, 2))
        assert stats["dist_init_21"] == pytest.approx(np.linalg.norm(D, axis=0).sum())
        assert stats["dist_init_fro"] == pytest.approx(np.linalg.norm(D))


def test_matrix_stats_wide_and_tall():
    g = torch.Generator().manual_seed(5)
    for shape in ((7, 19), (19, 7)):
        W = torch.randn(shape, generator=g, dtype=torch.float64)
        stats, sv = matrix_stats(W)
        Wn = W.numpy()
        np.testing.assert_allclose(sv.numpy(), np.linalg.svd(Wn, compute_uv=False), rtol=1e-12)
        assert stats["norm_21"] == pytest.approx(np.linalg.norm(Wn, axis=0).sum())
        assert stats["norm_11"] == pytest.approx(np.abs(Wn).sum())
        assert stats["rank"] == 7
    zero, _ = matrix_stats(torch.zeros(3, 3, dtype=torch.float64))
    assert zero["rank"] == 0 and zero["stable_rank"] == 0.0 and zero["spectral"] == 0.0
