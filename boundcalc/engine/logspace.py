"""Signed-log arithmetic on numpy arrays: x = s · exp(a), s ∈ {−1, 0, 1}.

Products over many layers (spectral norms multiplied across 96 layers, say) overflow float64
long before the bound itself is meaningless; in this representation they are sums of logs and
stay finite. Everything here is element-wise and broadcasts like numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LV:
    """A signed-log array: ``s`` holds the signs (NaN marks undefined), ``a`` holds log|x|."""

    s: np.ndarray
    a: np.ndarray

    def to_float(self) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):
            return self.s * np.exp(self.a)

    @property
    def shape(self) -> tuple[int, ...]:
        return np.broadcast_shapes(np.shape(self.s), np.shape(self.a))


def from_float(x) -> LV:
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return LV(np.sign(x), np.log(np.abs(x)))


ONE = LV(np.float64(1.0), np.float64(0.0))
ZERO = LV(np.float64(0.0), np.float64(-np.inf))


def mul(x: LV, y: LV) -> LV:
    s = x.s * y.s
    with np.errstate(invalid="ignore"):
        a = np.where(s == 0, -np.inf, x.a + y.a)
    return LV(s, a)


def neg(x: LV) -> LV:
    return LV(-x.s, x.a)


def add(terms: list[LV]) -> LV:
    """Sum of signed-log arrays, stable (the largest magnitude is factored out)."""
    if len(terms) == 1:
        return terms[0]
    with np.errstate(invalid="ignore", over="ignore"):
        m = terms[0].a
        for t in terms[1:]:
            m = np.maximum(m, t.a)
        finite_m = np.where(np.isfinite(m), m, 0.0)
        total = 0.0
        for t in terms:
            total = total + t.s * np.exp(t.a - finite_m)
        # +inf magnitudes (overflow) dominate: their signs decide the result.
        inf_sign = 0.0
        for t in terms:
            inf_sign = inf_sign + np.where(t.a == np.inf, t.s, 0.0)
        s = np.where(m == np.inf, np.sign(inf_sign), np.sign(total))
        a = np.where(m == np.inf, np.inf, finite_m + np.log(np.abs(total)))
        a = np.where(m == -np.inf, -np.inf, a)
        s = np.where(m == -np.inf, 0.0, s)
        # opposite infinities are undefined
        bad = (m == np.inf) & (inf_sign == 0)
        s = np.where(bad, np.nan, s)
    return LV(s, a)


def reduce_add(x: LV, axis: int) -> LV:
    with np.errstate(invalid="ignore", over="ignore"):
        m = np.max(x.a, axis=axis, keepdims=True)
        fm = np.where(np.isfinite(m), m, 0.0)
        total = np.sum(x.s * np.exp(x.a - fm), axis=axis, keepdims=True)
        has_inf = np.any(x.a == np.inf, axis=axis, keepdims=True)
        inf_sign = np.sum(np.where(x.a == np.inf, x.s, 0.0), axis=axis, keepdims=True)
        s = np.where(has_inf, np.sign(inf_sign), np.sign(total))
        a = np.where(has_inf, np.inf, fm + np.log(np.abs(total)))
        a = np.where(m == -np.inf, -np.inf, a)
        s = np.where(m == -np.inf, 0.0, s)
        s = np.where(np.any(np.isnan(x.s), axis=axis, keepdims=True), np.nan, s)
    return LV(s, a)


def reduce_mul(x: LV, axis: int) -> LV:
    s = np.prod(x.s, axis=axis, keepdims=True)
    with np.errstate(invalid="ignore"):
        a = np.where(s == 0, -np.inf, np.sum(np.where(x.s == 0, 0.0, x.a), axis=axis,
                                               keepdims=True))
    return LV(s, a)


def power(base: LV, exponent: np.ndarray) -> LV:
    """base ** exponent with a real (plain float) exponent."""
    e = np.asarray(exponent, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        pos = base.s > 0
        zero = base.s == 0
        negb = base.s < 0
        is_int = np.isfinite(e) & (np.floor(e) == e)
        a = np.where(zero, np.where(e > 0, -np.inf, np.where(e == 0, 0.0, np.inf)), e * base.a)
        odd = is_int & (np.mod(e, 2) == 1)
        s = np.where(pos, 1.0, np.where(zero, np.where(e > 0, 0.0, np.where(e == 0, 1.0, np.nan)),
                                        np.where(negb & is_int, np.where(odd, -1.0, 1.0), np.nan)))
        s = np.where(np.isnan(base.s) | np.isnan(e), np.nan, s)
    return LV(s, a)


def exp(x: LV) -> LV:
    v = x.to_float()
    return LV(np.where(np.isnan(v), np.nan, 1.0), v)


def expm1_neg(y: LV) -> LV:
    """1 − exp(y), accurate for small |y| (catches the Catoni form 1 − e^{−x})."""
    v = y.to_float()
    with np.errstate(over="ignore"):
        return from_float(-np.expm1(v))


def log(x: LV) -> LV:
    with np.errstate(invalid="ignore"):
        v = np.where(x.s > 0, x.a, np.nan)
        v = np.where(x.s == 0, -np.inf, v)
    return from_float(v)


def absolute(x: LV) -> LV:
    return LV(np.abs(x.s), x.a)


def less(x: LV, y: LV) -> np.ndarray:
    """Exact element-wise x < y in the signed-log representation."""
    with np.errstate(invalid="ignore"):
        return (x.s < y.s) | ((x.s == y.s) & (((x.s > 0) & (x.a < y.a))
                                              | ((x.s < 0) & (x.a > y.a))))


def equal(x: LV, y: LV) -> np.ndarray:
    return (x.s == y.s) & ((x.s == 0) | (x.a == y.a))


def where(cond: np.ndarray, x: LV, y: LV) -> LV:
    return LV(np.where(cond, x.s, y.s), np.where(cond, x.a, y.a))


def minimum(x: LV, y: LV) -> LV:
    return where(less(y, x), y, x)


def maximum(x: LV, y: LV) -> LV:
    return where(less(x, y), y, x)


def argmin(x: LV, axis: int) -> np.ndarray:
    """Index of the minimum along ``axis`` (first one on ties), keepdims."""
    s, a = np.broadcast_arrays(x.s, x.a)
    if np.all(s > 0):
        key = a
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            key = s * np.exp(a)
    return np.expand_dims(np.argmin(key, axis=axis), axis)


def take(x: LV, idx: np.ndarray, axis: int) -> LV:
    s, a = np.broadcast_arrays(x.s, x.a)
    return LV(np.take_along_axis(s, idx, axis=axis), np.take_along_axis(a, idx, axis=axis))
