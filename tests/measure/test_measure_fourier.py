"""Fourier–Walsh spectra of constructed Boolean functions."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from _measure_helpers import one_thread  # noqa: F401  (autouse fixture)

from boundcalc.errors import DomainError
from boundcalc.measure.fourier import (all_points, degree, estimate_coefficients,
                                       fourier_spectrum, from_parity_indicators, fwht, sparsity,
                                       spectrum_summary, to_parity_indicators)


def chi(x: np.ndarray, S) -> np.ndarray:
    return (1 - 2 * (x[:, list(S)].sum(1) % 2)).astype(float) if S else np.ones(len(x))


def mask(S) -> int:
    return sum(1 << i for i in S)


def test_fwht_matches_brute_force():
    rng = np.random.default_rng(0)
    n = 6
    table = rng.normal(size=2**n)
    x = all_points(n)
    brute = np.array([np.mean(table * chi(x, [i for i in range(n) if (m >> i) & 1]))
                      for m in range(2**n)])
    np.testing.assert_allclose(fourier_spectrum(table), brute, atol=1e-12)
    # the unnormalised transform is its own inverse up to 2^n
    np.testing.assert_allclose(fwht(fwht(table)) / 2**n, table, atol=1e-12)


def test_two_term_function():
    f = lambda x: 0.6 * chi(x, (0, 1)) + 0.8 * chi(x, (2,))
    c = fourier_spectrum(f, 4)
    assert c[mask((0, 1))] == pytest.approx(0.6) and c[mask((2,))] == pytest.approx(0.8)
    assert degree(c) == 2 and sparsity(c) == 2
    assert spectrum_summary(c)["l2"] == pytest.approx(1.0)


def test_parity_and_majority():
    n = 5
    parity = fourier_spectrum(lambda x: chi(x, range(n)), n)
    assert degree(parity) == n and sparsity(parity) == 1
    maj = fourier_spectrum(lambda x: np.sign((1 - 2 * x).sum(1)).astype(float), 3)
    assert degree(maj) == 3 and sparsity(maj) == 4
    for S in ((0,), (1,), (2,)):
        assert maj[mask(S)] == pytest.approx(0.5)
    assert maj[mask((0, 1, 2))] == pytest.approx(-0.5)
    assert sparsity(np.zeros(8)) == 0 and degree(np.zeros(8)) == 0


def test_parity_indicator_conversion_round_trip():
    terms = {(0, 1): 0.6, (2,): 0.8}
    n = 4
    direct = fourier_spectrum(
        lambda x: sum(c * 0.5 * (1 + chi(x, S)) for S, c in terms.items()), n)
    np.testing.assert_allclose(from_parity_indicators(terms, n), direct, atol=1e-12)
    assert direct[0] == pytest.approx(0.7)  # ½ Σ c_t
    back = to_parity_indicators(direct, tol=1e-12)
    assert back.keys() == terms.keys()
    for S in terms:
        assert back[S] == pytest.approx(terms[S])
    assert sparsity(direct, 1e-12, include_constant=False) == 2


def test_sampled_coefficients_for_large_n():
    n = 30
    f = lambda x: 0.9 * chi(x, (3, 7)) + 0.3 * chi(x, (11,))
    est = estimate_coefficients(f, n, sets=[(3, 7), (11,), (0,), (1, 2)], n_samples=20_000)
    assert all(q.estimated and q.stderr > 0 for q in est.values())
    for S, true in (((3, 7), 0.9), ((11,), 0.3), ((0,), 0.0), ((1, 2), 0.0)):
        q = est[S]
        assert abs(q.value - true) < 4 * q.stderr + 1e-12 and abs(q.value - true) < 0.05
        assert q.ci[0] < q.value < q.ci[1] or q.stderr == 0
    g = lambda x: chi(x, (1, 5))
    low = estimate_coefficients(g, 8, max_degree=2, n_samples=2000)
    assert len(low) == sum(1 for d in range(3) for _ in itertools.combinations(range(8), d))
    assert low[(1, 5)].value == 1.0 and low[(1, 5)].stderr == 0.0
    assert max(abs(q.value) for S, q in low.items() if S != (1, 5)) < 0.15


def test_fourier_errors():
    with pytest.raises(DomainError, match="power of two"):
        fwht(np.ones(6))
    with pytest.raises(DomainError, match="estimate_coefficients"):
        fourier_spectrum(lambda x: x[:, 0], 40)
