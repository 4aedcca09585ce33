"""Hybrid float / signed-log arithmetic on numpy arrays.

Each value carries its plain float64 ``v`` and its signed-log form x = s · exp(a). While ``v``
is representable it is exact float arithmetic (the same digits as a direct numpy computation);
where it overflows or underflows, the log form takes over. Products over many layers
(spectral norms multiplied across 96 layers, say) therefore stay finite in ``a`` long after
float64 gives up. Everything is element-wise and broadcasts like numpy.

Contract with float64 (tested in ``tests/engine/test_engine.py``):

* One operation on plain floats (``from_float``) gives, through ``to_float()``, numpy's float64
  result bit for bit wherever that result is finite: normal, subnormal, or zero, including a
  product that underflows to 0 (``0.5 * 5e-324 == 0.0``, a tie rounded to even).
* A value whose float underflowed to 0 is never used as 0 by a later operation: its log form
  carries it, so ``(0.5 * 5e-324) * 1e300`` is 2.47e-24, where float64 gives 0. Its float is
  replaced by ``s · exp(a)`` as soon as that is a normal number.
* A nonzero subnormal float is used as float64 would use it (with its reduced relative
  precision); overflow gives ``±inf`` from ``to_float()`` while ``a`` stays finite.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_ERR = dict(over="ignore", under="ignore", invalid="ignore", divide="ignore")
# log of the smallest normal float64: below it, exp(a) is no better than float's own underflow
_LOG_TINY = float(np.log(np.finfo(np.float64).tiny))


def _shown(s: np.ndarray, a: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Where the float ``v`` is the value to show: finite, and 0 only for a true zero or for a
    value below the normal range (where float64's own rounding of it is 0)."""
    return np.isfinite(v) & ((v != 0) | (s == 0) | (a < _LOG_TINY))


@dataclass(frozen=True)
class LV:
    """``s``: signs (NaN marks undefined); ``a``: log|x|; ``v``: the float value."""

    s: np.ndarray
    a: np.ndarray
    v: np.ndarray

    def valid(self) -> np.ndarray:
        """Where the plain float ``v`` is trustworthy (finite, and 0 only for a true zero)."""
        return np.isfinite(self.v) & ((self.v != 0) | (self.s == 0))

    def to_float(self) -> np.ndarray:
        with np.errstate(**_ERR):
            return np.where(_shown(self.s, self.a, self.v), self.v, self.s * np.exp(self.a))

    @property
    def shape(self) -> tuple[int, ...]:
        return np.broadcast_shapes(np.shape(self.s), np.shape(self.a), np.shape(self.v))


def from_float(x) -> LV:
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(**_ERR):
        return LV(np.sign(x), np.log(np.abs(x)), x)


def _fix(s: np.ndarray, a: np.ndarray, v: np.ndarray) -> LV:
    """Make ``v`` agree with (s, a) where ``v`` is not representable (see ``_shown``)."""
    with np.errstate(**_ERR):
        v = np.where(_shown(s, a, v), v, s * np.exp(a))
    return LV(s, a, v)


def mul(x: LV, y: LV) -> LV:
    with np.errstate(**_ERR):
        s = x.s * y.s
        a = np.where(s == 0, -np.inf, x.a + y.a)
        v = x.v * y.v
    return _fix(s, a, v)


def add(terms: list[LV]) -> LV:
    """Sum: exact float addition where all terms are representable, else stable log-sum."""
    if len(terms) == 1:
        return terms[0]
    with np.errstate(**_ERR):
        all_valid = terms[0].valid()
        v = terms[0].v
        for t in terms[1:]:
            all_valid = all_valid & t.valid()
            v = v + t.v
        plain = all_valid & np.isfinite(v)
        m = terms[0].a
        for t in terms[1:]:
            m = np.maximum(m, t.a)
        finite_m = np.where(np.isfinite(m), m, 0.0)
        total = 0.0
        inf_sign = 0.0
        for t in terms:
            total = total + t.s * np.exp(t.a - finite_m)
            inf_sign = inf_sign + np.where(t.a == np.inf, t.s, 0.0)
        s = np.where(m == np.inf, np.sign(inf_sign), np.sign(total))
        a = np.where(m == np.inf, np.inf, finite_m + np.log(np.abs(total)))
        a = np.where(m == -np.inf, -np.inf, a)
        s = np.where(m == -np.inf, 0.0, s)
        s = np.where((m == np.inf) & (inf_sign == 0), np.nan, s)
        # where the float sum is exact, its sign and log are the reference
        s = np.where(plain, np.sign(v), s)
        a = np.where(plain, np.log(np.abs(v)), a)
        nan_in = np.zeros(np.shape(s), dtype=bool)
        for t in terms:
            nan_in = nan_in | np.isnan(t.s)
        s = np.where(nan_in, np.nan, s)
    return _fix(s, a, np.where(plain, v, np.nan))


def reduce_add(x: LV, axis: int) -> LV:
    with np.errstate(**_ERR):
        valid = np.all(x.valid(), axis=axis, keepdims=True)
        v = np.sum(np.where(x.s == 0, 0.0, x.v), axis=axis, keepdims=True)
        plain = valid & np.isfinite(v)
        m = np.max(x.a, axis=axis, keepdims=True)
        fm = np.where(np.isfinite(m), m, 0.0)
        total = np.sum(x.s * np.exp(x.a - fm), axis=axis, keepdims=True)
        has_inf = np.any(x.a == np.inf, axis=axis, keepdims=True)
        inf_sign = np.sum(np.where(x.a == np.inf, x.s, 0.0), axis=axis, keepdims=True)
        s = np.where(has_inf, np.sign(inf_sign), np.sign(total))
        a = np.where(has_inf, np.inf, fm + np.log(np.abs(total)))
        a = np.where(m == -np.inf, -np.inf, a)
        s = np.where(m == -np.inf, 0.0, s)
        s = np.where(plain, np.sign(v), s)
        a = np.where(plain, np.log(np.abs(v)), a)
        s = np.where(np.any(np.isnan(x.s), axis=axis, keepdims=True), np.nan, s)
    return _fix(s, a, np.where(plain, v, np.nan))


def reduce_mul(x: LV, axis: int) -> LV:
    with np.errstate(**_ERR):
        s = np.prod(x.s, axis=axis, keepdims=True)
        a = np.where(s == 0, -np.inf, np.sum(np.where(x.s == 0, 0.0, x.a), axis=axis,
                                               keepdims=True))
        v = np.prod(x.v, axis=axis, keepdims=True)
    return _fix(s, a, v)


def power(base: LV, exponent: np.ndarray) -> LV:
    """base ** exponent with a real (plain float) exponent."""
    e = np.asarray(exponent, dtype=np.float64)
    with np.errstate(**_ERR):
        pos = base.s > 0
        zero = base.s == 0
        negb = base.s < 0
        is_int = np.isfinite(e) & (np.floor(e) == e)
        a = np.where(zero, np.where(e > 0, -np.inf, np.where(e == 0, 0.0, np.inf)), e * base.a)
        odd = is_int & (np.mod(e, 2) == 1)
        s = np.where(pos, 1.0, np.where(zero, np.where(e > 0, 0.0, np.where(e == 0, 1.0, np.nan)),
                                        np.where(negb & is_int, np.where(odd, -1.0, 1.0), np.nan)))
        s = np.where(np.isnan(base.s) | np.isnan(e), np.nan, s)
        v = np.where(base.valid(), np.power(np.where(base.valid(), base.v, 1.0), e), np.nan)
        v = np.where(zero & (e == 0), 1.0, v)
    return _fix(s, a, v)


def exp(x: LV) -> LV:
    t = x.to_float()
    with np.errstate(**_ERR):
        return _fix(np.where(np.isnan(t), np.nan, 1.0), t, np.exp(t))


def expm1_neg(y: LV) -> LV:
    """1 − exp(y), accurate for small |y| (catches the Catoni form 1 − e^{−x})."""
    with np.errstate(**_ERR):
        return from_float(-np.expm1(y.to_float()))


def log(x: LV) -> LV:
    with np.errstate(**_ERR):
        t = np.where(x.s > 0, np.where(x.valid(), np.log(np.where(x.valid(), x.v, 1.0)), x.a),
                     np.nan)
        t = np.where(x.s == 0, -np.inf, t)
    return from_float(t)


def absolute(x: LV) -> LV:
    return LV(np.abs(x.s), x.a, np.abs(x.v))


def less(x: LV, y: LV) -> np.ndarray:
    """Exact element-wise x < y (float comparison where both are representable)."""
    with np.errstate(**_ERR):
        logcmp = (x.s < y.s) | ((x.s == y.s) & (((x.s > 0) & (x.a < y.a))
                                                | ((x.s < 0) & (x.a > y.a))))
        both = x.valid() & y.valid()
        return np.where(both, x.v < y.v, logcmp)


def equal(x: LV, y: LV) -> np.ndarray:
    both = x.valid() & y.valid()
    return np.where(both, x.v == y.v, (x.s == y.s) & ((x.s == 0) | (x.a == y.a)))


def where(cond: np.ndarray, x: LV, y: LV) -> LV:
    return LV(np.where(cond, x.s, y.s), np.where(cond, x.a, y.a), np.where(cond, x.v, y.v))


def minimum(x: LV, y: LV) -> LV:
    return where(less(y, x), y, x)


def maximum(x: LV, y: LV) -> LV:
    return where(less(x, y), y, x)


def argmin(x: LV, axis: int) -> np.ndarray:
    """Index of the minimum along ``axis`` (first one on ties), keepdims."""
    s, a, v = np.broadcast_arrays(x.s, x.a, x.v)
    if np.all(np.isfinite(v) & ((v != 0) | (s == 0))):
        key = v
    elif np.all(s > 0):
        key = a
    else:
        with np.errstate(**_ERR):
            key = s * np.exp(a)
    return np.expand_dims(np.argmin(key, axis=axis), axis)


def take(x: LV, idx: np.ndarray, axis: int) -> LV:
    s, a, v = np.broadcast_arrays(x.s, x.a, x.v)
    return LV(np.take_along_axis(s, idx, axis=axis), np.take_along_axis(a, idx, axis=axis),
              np.take_along_axis(v, idx, axis=axis))


def integer(x: LV) -> np.ndarray:
    """Round values that are integers up to float noise (index arithmetic, Sum limits)."""
    return np.rint(x.to_float())
