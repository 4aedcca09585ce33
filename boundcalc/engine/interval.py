"""Rigorous evaluation of an instantiated expression in interval arithmetic (mpmath ``iv``).

The fast engine (:mod:`.compile`) rounds to nearest, so a certified value can land a few ulps
below the exact real value of its formula. This module evaluates the same SymPy expression at
the same inputs with outward-rounded intervals, so the exact real value provably lies inside
the returned interval; the caller prints its upper end. It walks the expression once, with
sums and products expanded over their concrete index ranges: meant for the one final point,
not for a search. ``kl_inv`` enters as the interval function it is: it is increasing in both
arguments, so its upper end is the outward-rounded inverse at the upper ends.

mpmath is imported on first use only (it costs a noticeable fraction of a CLI start).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np
import sympy as sp

from .functions import Cases, GridMin, kl, kl_inv, kl_inv_lower, kl_inv_upper, var_ratio_div

PREC = 160
"""Working precision in bits: wide enough that the cancellations left in the registry's formulas
(1 − e^{−x} for tiny x, sums of terms of opposite sign) cost nothing visible at double precision."""

MAX_NODES = 50_000
"""Evaluations of single nodes after which the walk gives up (huge per-element sums)."""


_EXP_ARG_MAX = 1e15


class ChargedDelta:
    """δ·e^{−cost} with the union-bound cost given by its parts, so that the interval walk
    computes δ_eff at its own precision (near δ = 1, ln(1/δ_eff) is all cancellation, and a
    δ_eff rounded to a double would cost digits). ``grid_counts``: (count, |grid|) pairs, each
    costing count·ln|grid|; ``prior_js``: Dziugaite–Roy indices j, each costing 2 ln j + ln(π²/6);
    ``other``: costs known only as doubles, widened by 1e-12 relative (far more than their
    rounding).
    """

    def __init__(self, delta: float, grid_counts: list[tuple[int, int]], prior_js: list[int],
                 other: list[float] | None = None):
        self.delta, self.grid_counts, self.prior_js = delta, grid_counts, prior_js
        self.other = list(other or [])

    def interval(self, iv) -> Any:
        cost = iv.mpf(0)
        for c in self.other:
            cost += iv.mpf([c - 1e-12 * abs(c), c + 1e-12 * abs(c)])
        for count, size in self.grid_counts:
            cost += count * iv.log(size)
        for j in self.prior_js:
            cost += 2 * iv.log(j) + iv.log(iv.pi ** 2 / 6)
        return iv.mpf(self.delta) * iv.exp(-cost)


class IntervalUnavailable(Exception):
    """The expression uses something the interval walk cannot enclose; the reason says what."""


def enclose(expr: sp.Basic, scalars: Mapping[str, float], arrays: Mapping[str, np.ndarray],
            grids: Mapping[str, np.ndarray], selected: Mapping[str, np.ndarray] | None = None,
            prec: int = PREC) -> tuple[Any, Any]:
    """Lower and upper end (mpmath ``mpf``) of an interval holding the exact value of ``expr``.

    ``scalars``: symbol name -> float (an exact binary value), (lo, hi) or a
    :class:`ChargedDelta`; ``arrays``: indexed symbol name ->
    array in declared index order; ``grids``: GridMin parameter -> grid values; ``selected``:
    GridMin parameter -> the arg-min the float path chose. A scalar GridMin (one instance) is
    enclosed at that point only: the exact minimum over the grid is ≤ the value there, so the
    upper end stays rigorous, and the walk is |grid| times cheaper. Raises
    :class:`IntervalUnavailable` when the value cannot be enclosed.
    """
    from mpmath import iv

    old = iv.prec
    iv.prec = prec
    try:
        walk = _Walk(iv, scalars, arrays, grids, selected or {})
        out = walk.value(expr, ())
        if _isnan(out):
            raise IntervalUnavailable("the interval is undefined")
        return out.a, out.b
    except (ZeroDivisionError, ValueError, OverflowError, TypeError) as exc:
        raise IntervalUnavailable(f"{type(exc).__name__}: {exc}") from None
    finally:
        iv.prec = old


def upper_float(x: Any) -> float:
    """The smallest double ≥ the mpf ``x`` (+inf beyond the double range)."""
    f = float(x)
    if math.isnan(f):
        return f
    if math.isfinite(f) and _mpf(f) < x:
        f = math.nextafter(f, math.inf)
    return f


def lower_float(x: Any) -> float:
    """The largest double ≤ the mpf ``x`` (−inf beyond the double range)."""
    f = float(x)
    if math.isnan(f):
        return f
    if math.isfinite(f) and _mpf(f) > x:
        f = math.nextafter(f, -math.inf)
    return f


def _mpf(f: float) -> Any:
    from mpmath import mpf

    return mpf(f)


def _isnan(x: Any) -> bool:
    from mpmath import isnan

    return bool(isnan(x.a) or isnan(x.b))


class _Walk:
    def __init__(self, iv, scalars, arrays, grids, selected):
        self.iv = iv
        self.selected = selected
        self.scalars = scalars
        self.arrays = arrays
        self.grids = grids
        self.memo: dict = {}
        self.count = 0

    # env: tuple of (name, value) for bound index variables and GridMin parameters
    def value(self, e: sp.Basic, env: tuple) -> Any:
        key = (e, env)
        hit = self.memo.get(key)
        if hit is None:
            self.count += 1
            if self.count > MAX_NODES:
                raise IntervalUnavailable(f"more than {MAX_NODES} node evaluations")
            hit = self._value(e, env)
            self.memo[key] = hit
        return hit

    def _point(self, e: sp.Basic, env: tuple) -> int:
        """An index or limit: must come out as one exact integer."""
        x = self.value(e, env)
        if x.a != x.b or x.a != int(x.a):
            raise IntervalUnavailable(f"index '{e}' is not an exact integer")
        return int(x.a)

    def _value(self, e: sp.Basic, env: tuple) -> Any:  # noqa: C901 - a dispatcher
        iv = self.iv
        if isinstance(e, sp.Integer):
            return iv.mpf(int(e))
        if isinstance(e, sp.Rational):
            return iv.mpf(int(e.p)) / iv.mpf(int(e.q))
        if isinstance(e, sp.Float):
            # a literal such as 0.01 in a formula file means the decimal number
            return iv.mpf(str(e))
        if e is sp.pi:
            return iv.pi
        if e is sp.E:
            return iv.e
        if isinstance(e, sp.Symbol):
            for name, v in env:
                if name == e.name:
                    return iv.mpf(v)
            if e.name not in self.scalars:
                raise IntervalUnavailable(f"no value for '{e.name}'")
            v = self.scalars[e.name]
            if isinstance(v, ChargedDelta):
                return v.interval(iv)
            return iv.mpf([float(v[0]), float(v[1])] if isinstance(v, tuple) else float(v))
        if isinstance(e, sp.Indexed):
            idx = tuple(self._point(i, env) for i in e.indices)
            arr = self.arrays[e.base.label.name]
            if any(i < 0 or i >= n for i, n in zip(idx, arr.shape)):
                raise IntervalUnavailable(f"index {idx} outside '{e.base.label.name}'")
            return iv.mpf(float(arr[idx]))
        if isinstance(e, sp.Add):
            special = self._one_minus_exp(e, env)
            if special is not None:
                return special
            out = self.value(e.args[0], env)
            for a in e.args[1:]:
                out = out + self.value(a, env)
            return out
        if isinstance(e, sp.Mul):
            out = self.value(e.args[0], env)
            for a in e.args[1:]:
                out = out * self.value(a, env)
            return out
        if isinstance(e, sp.Pow):
            return self._pow(e, env)
        if isinstance(e, sp.exp):
            return self._exp(self.value(e.args[0], env))
        if isinstance(e, sp.log):
            x = self.value(e.args[0], env)
            if not x.a > 0:
                raise IntervalUnavailable(f"log of an interval reaching {x.a}")
            return iv.log(x)
        if isinstance(e, sp.Abs):
            return abs(self.value(e.args[0], env))
        if isinstance(e, (sp.Min, sp.Max)):
            vals = [self.value(a, env) for a in e.args]
            pick = min if isinstance(e, sp.Min) else max
            return iv.mpf([pick(v.a for v in vals), pick(v.b for v in vals)])
        if isinstance(e, (sp.ceiling, sp.floor)):
            from mpmath import ceil, floor

            x = self.value(e.args[0], env)
            f = ceil if isinstance(e, sp.ceiling) else floor
            return iv.mpf([f(x.a), f(x.b)])
        if isinstance(e, kl_inv):
            q, c = (self.value(a, env) for a in e.args)
            if q.a < 0 or q.b > 1 or c.a < 0:
                raise IntervalUnavailable("kl_inv outside q ∈ [0, 1], c ≥ 0")
            hi = kl_inv_upper(upper_float(q.b), upper_float(c.b))
            lo = kl_inv_lower(lower_float(q.a), lower_float(c.a))
            return iv.mpf([lo, hi])
        if isinstance(e, kl):
            raise IntervalUnavailable("kl(q, p) has no interval form here")
        if isinstance(e, var_ratio_div):
            a, b = (self.value(x, env) for x in e.args)
            return self._var_ratio_div(a, b)
        if isinstance(e, sp.Piecewise):
            return self._cases([(v, c) for v, c in e.args], env)
        if isinstance(e, Cases):
            a = e.args
            return self._cases([(a[i], a[i + 1]) for i in range(0, len(a) - 1, 2)]
                               + [(a[-1], sp.true)], env)
        if isinstance(e, (sp.Sum, sp.Product)):
            return self._reduction(e, env)
        if isinstance(e, GridMin):
            body, p = e.args
            sel = self.selected.get(p.name)
            points = self.grids[p.name] if sel is None or np.size(sel) != 1 \
                else np.ravel(sel)
            vals = [self.value(body, env + ((p.name, float(g)),)) for g in points]
            return iv.mpf([min(v.a for v in vals), min(v.b for v in vals)])
        raise IntervalUnavailable(f"cannot enclose {type(e).__name__}")

    def _one_minus_exp(self, e: sp.Add, env: tuple) -> Any | None:
        if len(e.args) != 2 or sp.S.One not in e.args:
            return None
        other = e.args[0] if e.args[1] == sp.S.One else e.args[1]
        coeff, rest = other.as_coeff_Mul()
        if coeff == -1 and isinstance(rest, sp.exp):
            y = self.value(rest.args[0], env)
            if abs(y.a) > _EXP_ARG_MAX or abs(y.b) > _EXP_ARG_MAX:
                raise IntervalUnavailable("exponent too large to enclose")
            return -self.iv.expm1(y)
        return None

    def _pow(self, e: sp.Pow, env: tuple) -> Any:
        iv = self.iv
        base = self.value(e.args[0], env)
        expo = e.args[1]
        if expo == sp.Rational(1, 2):
            if base.a < 0:
                raise IntervalUnavailable("square root of an interval reaching below 0")
            return iv.sqrt(base)
        if expo.is_Integer and abs(int(expo)) <= 64:
            k = int(expo)
            if k >= 0:
                return base ** k
            if base.a <= 0 <= base.b:
                raise IntervalUnavailable("negative power of an interval containing 0")
            return 1 / (base ** (-k))
        if not base.a > 0:
            if base.a == 0 and base.b == 0 and self.value(expo, env).a > 0:
                return iv.mpf(0)
            raise IntervalUnavailable("non-integer power of an interval reaching 0 or below")
        return self._exp(self.value(expo, env) * iv.log(base))

    def _exp(self, x: Any) -> Any:
        # mpmath's exponents are unbounded: e^(1e300) is a number with a 1000-bit exponent,
        # e^(e^(1e300)) would exhaust memory. Past |x| = 1e15 the value is far outside
        # anything a double or the log-space engine can carry anyway.
        if abs(x.a) > _EXP_ARG_MAX or abs(x.b) > _EXP_ARG_MAX:
            raise IntervalUnavailable("exponent too large to enclose")
        return self.iv.exp(x)

    def _var_ratio_div(self, a: Any, b: Any) -> Any:
        """g(r) = r² − 1 − ln r², r = a/b: decreasing below 1, increasing above, g(1) = 0."""
        iv = self.iv
        if not (a.a > 0 and b.a > 0):
            raise IntervalUnavailable("var_ratio_div needs positive arguments")
        t = (a - b) / b
        if max(abs(t.a), abs(t.b)) < 0.25:
            # 2(t − ln(1 + t)) + t² = 2 Σ_{k≥2} (−t)^k/k + t²; tail after K terms bounded below
            k_max = 40
            s = iv.mpf(0)
            for k in range(2, k_max + 1):
                s = s + (-t) ** k / k
            tmax = max(abs(t.a), abs(t.b))
            tail = tmax ** (k_max + 1) / ((k_max + 1) * (1 - tmax))
            out = 2 * (s + iv.mpf([-tail, tail])) + t ** 2
        else:
            r = a / b
            out = r ** 2 - 1 - 2 * iv.log(r)
        return iv.mpf([max(out.a, 0), max(out.b, 0)])  # g ≥ 0 exactly

    def _cases(self, pairs: list, env: tuple) -> Any:
        iv = self.iv
        hull = None
        for val, cond in pairs:
            truth = self._truth(cond, env)
            if truth is False:
                continue
            v = self.value(val, env)
            hull = v if hull is None else iv.mpf([min(hull.a, v.a), max(hull.b, v.b)])
            if truth is True:
                return hull
        if hull is None:
            raise IntervalUnavailable("no branch of a piecewise expression applies")
        return hull

    def _truth(self, c: sp.Basic, env: tuple) -> bool | None:
        """True / False when certain for the whole interval, None when undecided."""
        if c is sp.true or c is True:
            return True
        if c is sp.false or c is False:
            return False
        if isinstance(c, sp.core.relational.Relational):
            x, y = self.value(c.lhs, env), self.value(c.rhs, env)
            if isinstance(c, sp.StrictLessThan):
                return True if x.b < y.a else False if x.a >= y.b else None
            if isinstance(c, sp.LessThan):
                return True if x.b <= y.a else False if x.a > y.b else None
            if isinstance(c, sp.StrictGreaterThan):
                return True if x.a > y.b else False if x.b <= y.a else None
            if isinstance(c, sp.GreaterThan):
                return True if x.a >= y.b else False if x.b < y.a else None
            if isinstance(c, sp.Equality):
                if x.a == x.b == y.a == y.b:
                    return True
                return False if (x.b < y.a or y.b < x.a) else None
            if isinstance(c, sp.Unequality):
                eq = self._truth(sp.Eq(c.lhs, c.rhs, evaluate=False), env)
                return None if eq is None else not eq
        if isinstance(c, (sp.And, sp.Or)):
            vals = [self._truth(a, env) for a in c.args]
            if isinstance(c, sp.And):
                return False if False in vals else True if all(v is True for v in vals) else None
            return True if True in vals else False if all(v is False for v in vals) else None
        raise IntervalUnavailable(f"cannot decide condition '{c}'")

    def _reduction(self, e: sp.Sum | sp.Product, env: tuple) -> Any:
        is_sum = isinstance(e, sp.Sum)
        limits = list(e.limits)

        def loop(level: int, env_in: tuple) -> Any:
            if level == len(limits):
                return self.value(e.function, env_in)
            var, lo, hi = limits[level]
            lo_v, hi_v = self._point(lo, env_in), self._point(hi, env_in)
            total = self.iv.mpf(0 if is_sum else 1)
            for i in range(lo_v, hi_v + 1):
                inner = tuple(kv for kv in env_in if kv[0] != var.name) + ((var.name, i),)
                part = loop(level + 1, inner)
                total = total + part if is_sum else total * part
            return total

        return loop(0, env)
