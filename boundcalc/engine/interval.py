"""Rigorous evaluation of an instantiated expression in interval arithmetic (mpmath ``iv``).

The fast engine (:mod:`.compile`) rounds to nearest, so a certified value can land a few ulps
below the exact real value of its formula. This module evaluates the same formula tree at
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

from .kernels import kl_inv_lower, kl_inv_upper
from .tree import (RELATIONS, Node, as_tree, body, indexed_name, indices, limits,
                   one_minus_exp_arg, pairs)

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


def enclose(expr: Node | Any, scalars: Mapping[str, float], arrays: Mapping[str, np.ndarray],
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
        out = walk.value(as_tree(expr), ())
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
    def value(self, e: Node, env: tuple) -> Any:
        key = (e, env)
        hit = self.memo.get(key)
        if hit is None:
            self.count += 1
            if self.count > MAX_NODES:
                raise IntervalUnavailable(f"more than {MAX_NODES} node evaluations")
            hit = self._value(e, env)
            self.memo[key] = hit
        return hit

    def _point(self, e: Node, env: tuple) -> int:
        """An index or limit: must come out as one exact integer."""
        x = self.value(e, env)
        if x.a != x.b or x.a != int(x.a):
            raise IntervalUnavailable(f"index '{e}' is not an exact integer")
        return int(x.a)

    def _value(self, e: Node, env: tuple) -> Any:  # noqa: C901 - a dispatcher
        iv = self.iv
        op = e.op
        if op == "Integer":
            return iv.mpf(e.value)
        if op == "Rational":
            return iv.mpf(e.value[0]) / iv.mpf(e.value[1])
        if op == "Float":
            # a literal such as 0.01 in a formula file means the decimal number
            return iv.mpf(e.value)
        if op == "Pi":
            return iv.pi
        if op == "E":
            return iv.e
        if op == "Symbol":
            for name, v in env:
                if name == e.name:
                    return iv.mpf(v)
            if e.name not in self.scalars:
                raise IntervalUnavailable(f"no value for '{e.name}'")
            v = self.scalars[e.name]
            if isinstance(v, ChargedDelta):
                return v.interval(iv)
            return iv.mpf([float(v[0]), float(v[1])] if isinstance(v, tuple) else float(v))
        if op == "Indexed":
            idx = tuple(self._point(i, env) for i in indices(e))
            name = indexed_name(e)
            arr = self.arrays[name]
            if any(i < 0 or i >= n for i, n in zip(idx, arr.shape)):
                raise IntervalUnavailable(f"index {idx} outside '{name}'")
            return iv.mpf(float(arr[idx]))
        if op == "Add":
            y = one_minus_exp_arg(e)
            if y is not None:
                return self._one_minus_exp(y, env)
            out = self.value(e.args[0], env)
            for a in e.args[1:]:
                out = out + self.value(a, env)
            return out
        if op == "Mul":
            out = self.value(e.args[0], env)
            for a in e.args[1:]:
                out = out * self.value(a, env)
            return out
        if op == "Pow":
            return self._pow(e, env)
        if op == "exp":
            return self._exp(self.value(e.args[0], env))
        if op == "log":
            x = self.value(e.args[0], env)
            if not x.a > 0:
                raise IntervalUnavailable(f"log of an interval reaching {x.a}")
            return iv.log(x)
        if op == "Abs":
            return abs(self.value(e.args[0], env))
        if op in ("Min", "Max"):
            vals = [self.value(a, env) for a in e.args]
            pick = min if op == "Min" else max
            return iv.mpf([pick(v.a for v in vals), pick(v.b for v in vals)])
        if op in ("ceiling", "floor"):
            from mpmath import ceil, floor

            x = self.value(e.args[0], env)
            f = ceil if op == "ceiling" else floor
            return iv.mpf([f(x.a), f(x.b)])
        if op == "kl_inv":
            q, c = (self.value(a, env) for a in e.args)
            if q.a < 0 or q.b > 1 or c.a < 0:
                raise IntervalUnavailable("kl_inv outside q ∈ [0, 1], c ≥ 0")
            hi = kl_inv_upper(upper_float(q.b), upper_float(c.b))
            lo = kl_inv_lower(lower_float(q.a), lower_float(c.a))
            return iv.mpf([lo, hi])
        if op == "kl":
            raise IntervalUnavailable("kl(q, p) has no interval form here")
        if op == "var_ratio_div":
            a, b = (self.value(x, env) for x in e.args)
            return self._var_ratio_div(a, b)
        if op in ("Piecewise", "Cases"):
            return self._cases(pairs(e), env)
        if op in ("Sum", "Product"):
            return self._reduction(e, env)
        if op == "GridMin":
            inner, p = e.args
            sel = self.selected.get(p.name)
            points = self.grids[p.name] if sel is None or np.size(sel) != 1 \
                else np.ravel(sel)
            vals = [self.value(inner, env + ((p.name, float(g)),)) for g in points]
            return iv.mpf([min(v.a for v in vals), min(v.b for v in vals)])
        raise IntervalUnavailable(f"cannot enclose {op}")

    def _one_minus_exp(self, y_node: Node, env: tuple) -> Any:
        y = self.value(y_node, env)
        if abs(y.a) > _EXP_ARG_MAX or abs(y.b) > _EXP_ARG_MAX:
            raise IntervalUnavailable("exponent too large to enclose")
        return -self.iv.expm1(y)

    def _pow(self, e: Node, env: tuple) -> Any:
        iv = self.iv
        base = self.value(e.args[0], env)
        expo = e.args[1]
        if expo.op == "Rational" and expo.value == (1, 2):
            if base.a < 0:
                raise IntervalUnavailable("square root of an interval reaching below 0")
            return iv.sqrt(base)
        if expo.op == "Integer" and abs(expo.value) <= 64:
            k = expo.value
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

    def _truth(self, c: Node, env: tuple) -> bool | None:
        """True / False when certain for the whole interval, None when undecided."""
        op = c.op
        if op == "True":
            return True
        if op == "False":
            return False
        if op in RELATIONS:
            x, y = self.value(c.args[0], env), self.value(c.args[1], env)
            if op == "StrictLessThan":
                return True if x.b < y.a else False if x.a >= y.b else None
            if op == "LessThan":
                return True if x.b <= y.a else False if x.a > y.b else None
            if op == "StrictGreaterThan":
                return True if x.a > y.b else False if x.b <= y.a else None
            if op == "GreaterThan":
                return True if x.a >= y.b else False if x.b < y.a else None
            if x.a == x.b == y.a == y.b:
                equal = True
            else:
                equal = False if (x.b < y.a or y.b < x.a) else None
            return equal if op == "Equality" or equal is None else not equal
        if op in ("And", "Or"):
            vals = [self._truth(a, env) for a in c.args]
            if op == "And":
                return False if False in vals else True if all(v is True for v in vals) else None
            return True if True in vals else False if all(v is False for v in vals) else None
        raise IntervalUnavailable(f"cannot decide condition '{c}'")

    def _reduction(self, e: Node, env: tuple) -> Any:
        is_sum = e.op == "Sum"
        lims = limits(e)

        def loop(level: int, env_in: tuple) -> Any:
            if level == len(lims):
                return self.value(body(e), env_in)
            var, lo, hi = lims[level]
            lo_v, hi_v = self._point(lo, env_in), self._point(hi, env_in)
            total = self.iv.mpf(0 if is_sum else 1)
            for i in range(lo_v, hi_v + 1):
                inner = tuple(kv for kv in env_in if kv[0] != var.name) + ((var.name, i),)
                part = loop(level + 1, inner)
                total = total + part if is_sum else total * part
            return total

        return loop(0, env)
