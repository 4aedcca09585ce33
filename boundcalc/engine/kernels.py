"""Numeric kernels of the special functions (no SymPy): the binary kl divergence, its upper
and lower inverse, and the Gaussian variance-ratio divergence.

``kl_inv_upper(q, c)`` is the upper inverse of the binary kl divergence,
sup{p ∈ [q, 1] : kl(q‖p) ≤ c}. It rounds outward: it returns the upper end of a bisection
bracket whose lower end is feasible and whose upper end is not, so the value is never below the
true root.
"""

from __future__ import annotations

import math
import struct


def kl_bernoulli(q: float, p: float) -> float:
    """kl(q‖p) = q ln(q/p) + (1−q) ln((1−q)/(1−p)) with the conventions 0 ln 0 = 0."""
    if not (0.0 <= q <= 1.0 and 0.0 <= p <= 1.0):
        raise ValueError("kl arguments must lie in [0, 1]")
    out = 0.0
    if q > 0:
        out += math.inf if p == 0 else q * math.log(q / p)
    if q < 1:
        out += math.inf if p == 1 else (1 - q) * math.log((1 - q) / (1 - p))
    return out


def kl_inv_upper(q: float, c: float) -> float:
    """Upper kl inverse: the smallest double ``p ≥ q`` certified to satisfy ``kl(q‖p) ≥ c``.

    Returns 1.0 when no p < 1 has kl(q‖p) > c (saturation). For q = 0 the exact value is
    1 − e^{−c}; it is computed by the same bisection (so rounding is outward there too).
    """
    q = float(q)
    c = float(c)
    if math.isnan(q) or math.isnan(c):
        raise ValueError("kl_inv got NaN")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"kl_inv: q must lie in [0, 1], got {q}")
    if c < 0:
        raise ValueError(f"kl_inv: c must be non-negative, got {c}")
    if q >= 1.0 or c == math.inf:
        return 1.0
    if c == 0.0:
        return q
    q = abs(q)  # -0.0 -> 0.0, so that bit patterns order like values
    # Bisection on the bit patterns of non-negative doubles (ordered like the values): at
    # most 64 steps to adjacent doubles, however small the root (a value-space bisection
    # needs ~1000 steps to resolve a root near 1e-300).
    lo, hi = _bits(q), _bits(1.0)  # kl(q||q) = 0 <= c ; kl(q||1) = inf > c
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _kl_le(q, _double(mid), c):
            lo = mid
        else:
            hi = mid
    return _double(hi)


def kl_inv_lower(q: float, c: float) -> float:
    """A double ``p ≤ kl⁻¹(q, c)``: the lower end of the bracket of :func:`kl_inv_upper`, with
    the rounding margin turned the other way (used as the lower end of an interval)."""
    q, c = float(q), float(c)
    if math.isnan(q) or math.isnan(c) or not 0.0 <= q <= 1.0 or c < 0:
        raise ValueError("kl_inv_lower: q must lie in [0, 1] and c ≥ 0")
    if q >= 1.0:
        return 1.0
    if c == 0.0:
        return q
    q = abs(q)
    lo, hi = _bits(q), _bits(1.0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _kl_stable(q, _double(mid)) < c * (1.0 - _KL_REL_MARGIN):
            lo = mid
        else:
            hi = mid
    return _double(lo)


def _bits(x: float) -> int:
    return struct.unpack("<q", struct.pack("<d", x))[0]


def _double(b: int) -> float:
    return struct.unpack("<d", struct.pack("<q", b))[0]


# Relative error allowed for the computed kl before "kl > c" counts as certified; the
# cancellation-free evaluation below is accurate to about 20 ulps (4.4e-15), so 1e-14 is safe
# and keeps the inverse within ~1e-14 relative of the exact root.
_KL_REL_MARGIN = 1e-14


def _kl_le(q: float, p: float, c: float) -> bool:
    """False only when kl(q‖p) > c is certain despite rounding (for q ≤ p ≤ 1)."""
    return _kl_stable(q, p) <= c * (1.0 + _KL_REL_MARGIN)


def _kl_stable(q: float, p: float) -> float:
    """kl(q‖p) for q ≤ p as a sum of non-negative terms (no cancellation near p = q).

    With u = (p − q)/q and v = (q − p)/(1 − q), q·u + (1 − q)·v = 0, so
    kl = q·φ(u) + (1 − q)·φ(v) with φ(x) = x − ln(1 + x) ≥ 0.
    """
    if p >= 1.0:
        return math.inf if q < 1.0 else 0.0
    out = 0.0
    if q == 0:
        out += p  # the limit of q·φ(u) = (p − q) − q·ln(p/q) as q → 0
    else:
        u = (p - q) / q
        if u < 1e15:
            out += q * _phi(u)
        else:  # u may overflow; here q·ln(p/q) is negligible next to p − q
            out += (p - q) - q * (math.log(p) - math.log(q))
    if q < 1:
        v = (q - p) / (1.0 - q)
        if v > -0.5:
            out += (1.0 - q) * _phi(v)
        else:  # 1 + v is tiny: take ln(1 + v) = ln((1 − p)/(1 − q)) from p and q directly
            out += (1.0 - q) * (v - (math.log1p(-p) - math.log1p(-q)))
    return out


def _phi(x: float) -> float:
    """x − ln(1 + x), accurate also for small |x| (series there)."""
    if abs(x) < 0.1:
        # sum_{k>=2} (−x)^k / k, stopped once a term is below 1e-18 of the sum (≤ 22 terms);
        # above 0.1 the direct form loses at most ~2/|x| ≤ 20 ulps, inside the margin
        total, power = 0.0, x * x
        for k in range(2, 40):
            term = power / k
            total += term if k % 2 == 0 else -term
            if abs(term) <= 1e-18 * total:
                break
            power *= x
        return total
    return x - math.log1p(x)


def var_ratio_div_float(a, b):
    """(a/b)² − 1 − ln((a/b)²) for a, b > 0, without cancellation (numpy, element-wise).

    With t = (a − b)/b the value is 2·(t − ln(1 + t)) + t², a sum of two non-negative terms,
    so it keeps full relative precision when a ≈ b (where the textbook form cancels to noise
    or even goes negative). Far below b (t < −½) the ratio form has no cancellation to fear.
    Returns NaN where a or b is not a positive finite number; +inf where the value overflows.
    """
    import numpy as np

    a, b = np.broadcast_arrays(np.asarray(a, float), np.asarray(b, float))
    with np.errstate(all="ignore"):
        ok = (a > 0) & (b > 0) & np.isfinite(a) & np.isfinite(b)
        t = (a - b) / b
        small = np.abs(t) < 0.01
        phi = t - np.log1p(t)
        series = np.zeros_like(t)
        power = t * t
        for k in range(2, 14):  # |t| < 0.01: the tail after k = 13 is below 1e-24 relative
            series = series + (power / k if k % 2 == 0 else -power / k)
            power = power * t
        phi = np.where(small, series, phi)
        near = 2.0 * phi + t * t
        r = a / b
        log_r = np.where(r > 0, np.log(np.where(r > 0, r, 1.0)), np.log(a) - np.log(b))
        far = r * r - 1.0 - 2.0 * log_r
        out = np.where(t < -0.5, far, near)
    return np.where(ok, out, np.nan)
