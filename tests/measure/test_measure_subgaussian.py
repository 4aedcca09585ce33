"""Sub-Gaussian estimator (Lintilhac–Shaikh Appendix A procedure)."""

from __future__ import annotations

import numpy as np
import pytest

from _measure_helpers import one_thread  # noqa: F401  (autouse fixture)

from boundcalc.errors import DomainError
from boundcalc.measure.subgaussian import subgaussian_constant


def _passes(losses, sigma):
    x = np.asarray(losses, float)
    t_max = np.log(2.0**32 - 1) / x.max()
    t = np.linspace(-t_max, t_max, 41)
    mgf = np.array([np.mean(np.exp(ti * (x - x.mean()))) for ti in t])
    return bool(np.all(np.exp(sigma**2 * t**2 / 2) >= mgf))


def test_smallest_passing_candidate_of_the_default_grid():
    rng = np.random.default_rng(0)
    losses = 1.0 + 0.04 * rng.standard_normal(2000)
    q = subgaussian_constant(losses)
    grid = np.linspace(0.01, 0.1, 21)
    assert q.estimated and q.note == "heuristic, not a certificate"
    assert q.value in grid
    i = int(np.flatnonzero(grid == q.value)[0])
    assert _passes(losses, q.value)
    assert i == 0 or not _passes(losses, grid[i - 1])
    assert 0.03 <= q.value <= 0.06  # close to the generating std


def test_grid_is_extended_when_nothing_passes():
    rng = np.random.default_rng(1)
    losses = rng.uniform(0, 4, size=500)
    q = subgaussian_constant(losses)
    assert "extended" in q.note and "heuristic" in q.note
    assert 0.1 < q.value <= (losses.max() - losses.min()) / 2 + 1e-9
    assert _passes(losses, q.value)


def test_custom_candidates_and_bad_input():
    losses = np.array([0.1, 0.2, 0.3, 0.25])
    q = subgaussian_constant(losses, candidates=[0.5, 0.2, 0.3])
    assert q.value == 0.2  # sorted, smallest passing
    with pytest.raises(DomainError, match="positive"):
        subgaussian_constant(np.zeros(10))
    with pytest.raises(DomainError, match="at least 2"):
        subgaussian_constant([0.3])
    with pytest.raises(DomainError, match="NaN"):
        subgaussian_constant([0.3, np.nan])
