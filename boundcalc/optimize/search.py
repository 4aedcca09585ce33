"""Search primitives: bounded 1-D Brent after a scan, multi-start L-BFGS-B, exhaustive grids.

All searches work on a batch objective ``f(X) -> values`` where X is a (K, d) array of points in
the search coordinates (log coordinates for scale-free parameters); NaN means undefined and is
treated as +inf. Failures to converge raise :class:`~boundcalc.errors.OptimizationError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import optimize as so

from ..errors import OptimizationError

BatchFn = Callable[[np.ndarray], np.ndarray]


@dataclass
class Axis:
    """One continuous search coordinate: bounds in search space and how to map back."""

    name: str
    lo: float
    hi: float
    log: bool
    lo_artificial: bool = False
    hi_artificial: bool = False

    def to_value(self, u: np.ndarray | float) -> np.ndarray | float:
        return np.exp(u) if self.log else u

    def to_search(self, x: float) -> float:
        return math.log(x) if self.log else x


@dataclass
class Found:
    """A minimum: the point in search coordinates, its value and how it was found."""

    u: np.ndarray
    value: float
    method: str
    converged: bool
    evaluations: int


def _clean(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    return np.where(np.isnan(v), np.inf, v)


def minimize_1d(f: BatchFn, axis: Axis, scan: int = 65) -> Found:
    """A uniform scan of the search interval, then bounded Brent between the neighbours of the
    best scan point (relative precision about 1e-10 in the search coordinate)."""
    u = np.linspace(axis.lo, axis.hi, scan)
    vals = _clean(f(u[:, None]))
    if not np.any(np.isfinite(vals)):
        raise OptimizationError(f"parameter '{axis.name}': the objective is undefined or "
                                f"infinite at every scanned point")
    i = int(np.argmin(vals))
    a, b = u[max(i - 1, 0)], u[min(i + 1, scan - 1)]
    best_u, best_v = u[i], vals[i]

    def scalar(x: float) -> float:
        return float(_clean(f(np.array([[x]])))[0])

    span = max(abs(a), abs(b), 1.0)
    res = so.minimize_scalar(scalar, bounds=(a, b), method="bounded",
                             options={"xatol": 1e-12 * span, "maxiter": 500})
    evals = scan + int(getattr(res, "nfev", 0))
    if not res.success:
        raise OptimizationError(f"parameter '{axis.name}': bounded Brent search did not "
                                f"converge ({res.message})")
    if res.fun <= best_v:
        best_u, best_v = float(res.x), float(res.fun)
    # Brent never evaluates the interval ends: keep an end point if it is the minimum
    return Found(np.array([best_u]), float(best_v),
                 f"scipy bounded Brent ({scan}-point scan)", bool(res.success), evals)


def minimize_nd(f: BatchFn, axes: list[Axis], x0: np.ndarray | None, starts: int = 4,
                seed: int = 0) -> Found:
    """Latin-hypercube scan, then L-BFGS-B from the ``starts`` best distinct scan points with
    central-difference gradients (one batch call per gradient)."""
    d = len(axes)
    lo = np.array([a.lo for a in axes])
    hi = np.array([a.hi for a in axes])
    rng = np.random.default_rng(seed)
    n_scan = 64 * d
    cube = (rng.permuted(np.tile(np.arange(n_scan), (d, 1)), axis=1).T
            + rng.random((n_scan, d))) / n_scan
    pts = lo + cube * (hi - lo)
    if x0 is not None:
        pts = np.vstack([np.clip(x0, lo, hi), pts])
    vals = _clean(f(pts))
    if not np.any(np.isfinite(vals)):
        raise OptimizationError(f"parameters {', '.join(a.name for a in axes)}: the objective "
                                f"is undefined or infinite at every scanned point")
    order = np.argsort(vals)
    chosen: list[np.ndarray] = []
    for i in order:
        if not math.isfinite(vals[i]):
            break
        if all(np.max(np.abs(pts[i] - c) / (hi - lo)) > 0.05 for c in chosen):
            chosen.append(pts[i])
        if len(chosen) == starts:
            break
    evals = len(pts)
    h = 1e-6 * np.maximum(1.0, np.maximum(np.abs(lo), np.abs(hi)))

    def fun(u: np.ndarray) -> tuple[float, np.ndarray]:
        nonlocal evals
        batch = np.vstack([u, u + np.diag(h), u - np.diag(h)])
        batch = np.clip(batch, lo, hi)
        v = _clean(f(batch))
        evals += len(batch)
        width = batch[1:d + 1, :].diagonal() - batch[d + 1:, :].diagonal()
        g = (v[1:d + 1] - v[d + 1:]) / np.where(width > 0, width, 1.0)
        if not math.isfinite(v[0]):
            return 1e300, np.zeros(d)
        return float(v[0]), np.where(np.isfinite(g), g, 0.0)

    best: Found | None = None
    n_ok = 0
    for start in chosen:
        res = so.minimize(fun, start, jac=True, method="L-BFGS-B", bounds=list(zip(lo, hi)),
                          options={"ftol": 1e-15, "gtol": 1e-10, "maxiter": 1000})
        ok = bool(res.success) or _stationary(fun, res.x, lo, hi)
        n_ok += ok
        if ok and (best is None or res.fun < best.value):
            best = Found(np.asarray(res.x), float(res.fun), "", True, 0)
    if best is None:
        raise OptimizationError(f"parameters {', '.join(a.name for a in axes)}: L-BFGS-B did not "
                                f"converge from any of {len(chosen)} starts")
    best.method = f"scipy L-BFGS-B ({len(chosen)} starts)"
    best.evaluations = evals
    return best


def _stationary(fun, u: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> bool:
    """Projected-gradient test for runs that stop on a line-search failure at a flat optimum."""
    v, g = fun(u)
    at_lo = (u <= lo) & (g > 0)
    at_hi = (u >= hi) & (g < 0)
    g = np.where(at_lo | at_hi, 0.0, g)
    return bool(np.max(np.abs(g) * (hi - lo)) <= 1e-7 * max(abs(v), 1e-300))


def argmin_batch(values: np.ndarray) -> int:
    """First index of the minimum (NaN counts as +inf); -1 when nothing is finite."""
    v = _clean(values)
    if not np.any(np.isfinite(v)):
        return -1
    return int(np.argmin(v))
