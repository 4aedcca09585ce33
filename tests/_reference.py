"""Independent high-precision references shared by the tests (mpmath only, nothing from
boundcalc): the binary kl divergence and its upper inverse."""

from __future__ import annotations

import mpmath as mp


def kl_exact(q, p):
    """kl(q‖p) at the current mpmath precision; log1p keeps tiny p − q and tiny p exact."""
    q, p = mp.mpf(q), mp.mpf(p)
    if p >= 1:
        return mp.inf if q < 1 else mp.mpf(0)
    out = mp.mpf(0)
    if q > 0:
        out += q * mp.log(q / p)
    if q < 1:
        out += (1 - q) * (mp.log1p(-q) - mp.log1p(-p))
    return out


def kl_inv_exact(q, c, dps: int = 60):
    """sup{p ∈ [q, 1] : kl(q‖p) ≤ c} as an mpf, at ``dps`` digits: bisection on ln(p − q), so
    tiny roots are resolved too; 1 when the root lies within 10^−(dps−5) of 1."""
    with mp.workdps(dps):
        q, c = mp.mpf(q), mp.mpf(c)
        if q >= 1 or kl_exact(q, 1 - mp.mpf(10) ** -(dps - 5)) <= c:
            return mp.mpf(1)
        if c == 0:
            return q
        lo, hi = mp.mpf(-1500), mp.log(1 - q)
        for _ in range(260):
            mid = (lo + hi) / 2
            p = q + mp.exp(mid)
            if p < 1 and kl_exact(q, p) <= c:
                lo = mid
            else:
                hi = mid
        return q + mp.exp(hi)
