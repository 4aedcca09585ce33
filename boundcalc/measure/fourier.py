"""Fourier–Walsh spectra of Boolean functions f: {0,1}ⁿ → ℝ.

Convention: χ_S(x) = (−1)^{Σ_{i∈S} x_i} (±1 characters), f = Σ_S f̂(S) χ_S with
f̂(S) = 2⁻ⁿ Σ_x f(x) χ_S(x). A point x is the integer Σ_i x_i 2^i (bit i is coordinate i) and a
set S is the bitmask Σ_{i∈S} 2^i, so the spectrum is an array indexed by masks.

The Lintilhac–Shaikh target is written with even-parity indicators ½(1 + χ_S):
:func:`from_parity_indicators` and :func:`to_parity_indicators` convert between the two bases.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from ..errors import BoundcalcError, DomainError
from ..stats import Quantity

MAX_EXACT_N = 24
BoolFn = Callable[[np.ndarray], np.ndarray]  # (M, n) array of 0/1 -> (M,) values


def all_points(n: int) -> np.ndarray:
    """The 2ⁿ points as rows of 0/1, row x holding the bits of the integer x."""
    idx = np.arange(2**n, dtype=np.int64)
    return ((idx[:, None] >> np.arange(n)) & 1).astype(np.int8)


def fwht(values: np.ndarray) -> np.ndarray:
    """Unnormalised Walsh–Hadamard transform, in place on a float64 copy, O(n 2ⁿ)."""
    a = np.array(values, dtype=np.float64)
    size = a.size
    if size == 0 or size & (size - 1):
        raise DomainError(f"fwht: length must be a power of two, got {size}")
    h = 1
    while h < size:
        blocks = a.reshape(-1, 2, h)
        top = blocks[:, 0, :].copy()
        blocks[:, 0, :] += blocks[:, 1, :]
        blocks[:, 1, :] = top - blocks[:, 1, :]
        h *= 2
    return a


def fourier_spectrum(f: BoolFn | np.ndarray, n: int | None = None) -> np.ndarray:
    """Exact coefficients f̂(S) for every mask S (length 2ⁿ), from a function or a value table."""
    if callable(f):
        if n is None:
            raise BoundcalcError("fourier_spectrum: n is required when f is a function")
        if not 0 <= n <= MAX_EXACT_N:
            raise DomainError(f"fourier_spectrum: exact transform limited to n <= {MAX_EXACT_N}, "
                              f"got n={n}; use estimate_coefficients")
        table = np.asarray(f(all_points(n)), dtype=np.float64).reshape(-1)
    else:
        table = np.asarray(f, dtype=np.float64).reshape(-1)
    if n is not None and table.size != 2**n:
        raise DomainError(f"fourier_spectrum: expected 2^{n} values, got {table.size}")
    if not np.all(np.isfinite(table)):
        raise DomainError("fourier_spectrum: function values must be finite")
    return fwht(table) / table.size


def _popcount(masks: np.ndarray) -> np.ndarray:
    return np.array([bin(int(m)).count("1") for m in masks], dtype=np.int64)


def support(coeffs: np.ndarray, tol: float = 1e-9) -> np.ndarray:
    """Masks S with |f̂(S)| > tol."""
    return np.flatnonzero(np.abs(np.asarray(coeffs)) > tol)


def degree(coeffs: np.ndarray, tol: float = 1e-9) -> int:
    """max |S| over the support (0 for a constant or zero function)."""
    s = support(coeffs, tol)
    return int(_popcount(s).max()) if s.size else 0


def sparsity(coeffs: np.ndarray, tol: float = 1e-9, include_constant: bool = True) -> int:
    """Number of nonzero coefficients (optionally not counting f̂(∅))."""
    s = support(coeffs, tol)
    return int(s.size if include_constant else np.count_nonzero(s))


def spectrum_summary(coeffs: np.ndarray, tol: float = 1e-9) -> dict[str, float]:
    """Degree, sparsity (with and without the constant), spectral l1 and l2 norms."""
    c = np.asarray(coeffs, dtype=np.float64)
    return {"degree": degree(c, tol), "sparsity": sparsity(c, tol),
            "sparsity_nonconstant": sparsity(c, tol, include_constant=False),
            "l1": float(np.abs(c).sum()), "l2": float(np.sqrt((c**2).sum()))}


def _mask(S: Iterable[int]) -> int:
    m = 0
    for i in S:
        m |= 1 << int(i)
    return m


def from_parity_indicators(terms: Mapping[tuple[int, ...], float], n: int) -> np.ndarray:
    """±1 spectrum of f = Σ_t c_t · ½(1 + χ_{S_t}): f̂(∅) gets ½Σc_t, f̂(S_t) gets c_t/2."""
    out = np.zeros(2**n)
    for S, c in terms.items():
        out[0] += c / 2
        out[_mask(S)] += c / 2
    return out


def to_parity_indicators(coeffs: np.ndarray, tol: float = 0.0) -> dict[tuple[int, ...], float]:
    """Write f in the basis {1 = ½(1+χ_∅)} ∪ {½(1+χ_S)}.

    c_S = 2 f̂(S) for S ≠ ∅ and c_∅ = f̂(∅) − Σ_{S≠∅} f̂(S); keys are sorted index tuples.
    """
    c = np.asarray(coeffs, dtype=np.float64)
    n = int(math.log2(c.size))
    out: dict[tuple[int, ...], float] = {}
    for m in support(c, tol):
        if m:
            out[tuple(i for i in range(n) if (m >> i) & 1)] = 2 * float(c[m])
    const = float(c[0]) - float(sum(c[m] for m in support(c, tol) if m))
    if abs(const) > tol:
        out[()] = const
    return out


def estimate_coefficients(f: BoolFn, n: int, sets: Sequence[Sequence[int]] | None = None,
                          max_degree: int | None = None, n_samples: int = 10_000, seed: int = 0,
                          confidence: float = 0.95) -> dict[tuple[int, ...], Quantity]:
    """Monte Carlo f̂(S) ≈ mean_x f(x) χ_S(x) over uniform x, for ``sets`` or all |S| ≤ max_degree.

    Every set shares the same samples. Each value is labelled estimated, with its standard error
    and a normal interval at ``confidence``.
    """
    if sets is None:
        if max_degree is None:
            raise BoundcalcError("estimate_coefficients: give sets or max_degree")
        sets = [S for d in range(max_degree + 1) for S in itertools.combinations(range(n), d)]
    if n_samples < 2:
        raise BoundcalcError("estimate_coefficients: n_samples must be >= 2")
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 2, size=(n_samples, n), dtype=np.int8)
    fx = np.asarray(f(x), dtype=np.float64).reshape(-1)
    if fx.size != n_samples or not np.all(np.isfinite(fx)):
        raise DomainError("estimate_coefficients: f must return one finite value per sample")
    z = float(np.sqrt(2) * _erfinv(confidence))
    out = {}
    for S in sets:
        S = tuple(sorted(int(i) for i in S))
        if any(not 0 <= i < n for i in S):
            raise DomainError(f"estimate_coefficients: set {S} has indices outside [0, {n})")
        chi = 1 - 2 * (x[:, list(S)].sum(1) % 2) if S else np.ones(n_samples)
        v = fx * chi
        mean, se = float(v.mean()), float(v.std(ddof=1) / np.sqrt(n_samples))
        out[S] = Quantity(mean, estimated=True, stderr=se, ci=(mean - z * se, mean + z * se),
                          confidence=confidence,
                          method=f"Monte Carlo over {n_samples} uniform points, seed {seed}")
    return out


def _erfinv(p: float) -> float:
    from scipy.special import erfinv

    return float(erfinv(p))
