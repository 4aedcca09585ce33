"""Compile a formula tree into a vectorised signed-log evaluator with named axes.

Every index variable (l, h, k, ...) and every parameter minimised by ``GridMin`` owns one numpy
axis. A sub-expression evaluates to one array broadcast over the axes it depends on, so
``Sum(x[l, h], (h, 0, A - 1))`` is a masked reduction along h's axis and the value of a node
never depends on where it is used: each node is evaluated once per call (memoised).

The compiled form is built once per entry and cached; calling it costs a few numpy operations
per node, independent of the number of layers and heads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..errors import DomainError
from . import logspace as ls
from .kernels import kl_bernoulli, kl_inv_upper, var_ratio_div_float
from .logspace import LV
from .tree import Node, as_tree, body, indexed_name, indices, limits, one_minus_exp_arg, pairs

Fn = Callable[["Context"], LV]


@dataclass
class Context:
    """Values for one evaluation.

    ``scalars``: symbol name -> LV (0-d); ``arrays``: indexed symbol name -> (s, a) arrays in
    declared index order; ``sizes``: index name -> length; ``grids``: GridMin parameter ->
    grid values; ``selected``: filled with each GridMin parameter's arg-min grid values.
    """

    scalars: dict[str, LV]
    arrays: dict[str, LV]
    sizes: dict[str, int]
    grids: dict[str, np.ndarray] = field(default_factory=dict)
    selected: dict[str, np.ndarray] = field(default_factory=dict)
    memo: dict = field(default_factory=dict)


class Compiled:
    """A compiled expression. ``axes`` maps each index/grid name to its numpy axis."""

    def __init__(self, axes: dict[str, int], index_of_symbol: dict[str, tuple[str, ...]],
                 grid_params: set[str]):
        self.axes = axes
        self.ndim = len(axes)
        self.index_of_symbol = index_of_symbol  # indexed symbol -> its declared index names
        self.grid_params = grid_params
        self._cache: dict[Node, Fn] = {}

    # ---- public --------------------------------------------------------------------------
    def compile(self, expr: Node | Any) -> Fn:
        """The evaluator of a tree (a SymPy expression is converted first, see :func:`as_tree`)."""
        node = as_tree(expr)
        fn = self._cache.get(node)
        if fn is None:
            fn = self._build(node)
            self._cache[node] = fn
        return fn

    def shape_axis(self, values: np.ndarray, axis: int) -> np.ndarray:
        shape = [1] * self.ndim
        shape[axis] = values.shape[0]
        return values.reshape(shape)

    # ---- builders ------------------------------------------------------------------------
    def _build(self, e: Node) -> Fn:
        inner = self._build_inner(e)

        def memoised(ctx: Context, _e=e, _f=inner) -> LV:
            hit = ctx.memo.get(_e)
            if hit is None:
                hit = _f(ctx)
                ctx.memo[_e] = hit
            return hit

        return memoised

    def _build_inner(self, e: Node) -> Fn:  # noqa: C901 - a dispatcher
        op = e.op
        if e.is_number:
            val = ls.from_float(float(e))
            return lambda ctx, v=val: v
        if op == "Symbol":
            name = e.name
            if name in self.axes and name not in self.grid_params:
                axis = self.axes[name]
                return lambda ctx: ls.from_float(self.shape_axis(
                    np.arange(ctx.sizes[name], dtype=np.float64), axis))
            if name in self.grid_params:
                axis = self.axes[name]
                return lambda ctx: ls.from_float(self.shape_axis(ctx.grids[name], axis))
            return lambda ctx: _scalar(ctx, name)
        if op == "Indexed":
            return self._indexed(e)
        if op == "Add":
            y = one_minus_exp_arg(e)
            if y is not None:  # 1 − e^y as −expm1(y): exact for tiny y (Catoni, kl⁻¹(0, c))
                y_fn = self.compile(y)
                return lambda ctx: ls.expm1_neg(y_fn(ctx))
            parts = [self.compile(a) for a in e.args]
            return lambda ctx: ls.add([p(ctx) for p in parts])
        if op == "Mul":
            return _fold([self.compile(a) for a in e.args], ls.mul)
        if op == "Pow":
            base = self.compile(e.args[0])
            expo = self.compile(e.args[1])
            return lambda ctx: ls.power(base(ctx), expo(ctx).to_float())
        if op in _UNARY:
            arg = self.compile(e.args[0])
            f = _UNARY[op]
            return lambda ctx: f(arg(ctx))
        if op in ("Min", "Max"):
            return _fold([self.compile(a) for a in e.args],
                         ls.minimum if op == "Min" else ls.maximum)
        if op in ("ceiling", "floor"):
            arg = self.compile(e.args[0])
            f = np.ceil if op == "ceiling" else np.floor
            return lambda ctx: ls.from_float(f(arg(ctx).to_float()))  # v is exact float
        if op == "kl_inv":
            q, c = (self.compile(a) for a in e.args)
            return lambda ctx: ls.from_float(_kl_inv_vec(q(ctx).to_float(), c(ctx).to_float()))
        if op == "kl":
            q, p = (self.compile(a) for a in e.args)
            return lambda ctx: ls.from_float(_kl_vec(q(ctx).to_float(), p(ctx).to_float()))
        if op == "var_ratio_div":
            a, b = (self.compile(x) for x in e.args)
            return lambda ctx: _var_ratio_div_lv(a(ctx), b(ctx))
        if op in ("Piecewise", "Cases"):
            return self._piecewise(pairs(e))
        if op in ("Sum", "Product"):
            return self._reduction(e)
        if op == "GridMin":
            return self._gridmin(e)
        raise DomainError(f"cannot evaluate {op} in '{str(e)[:80]}'")

    def _indexed(self, e: Node) -> Fn:
        name = indexed_name(e)
        idx_fns = [self.compile(i) for i in indices(e)]

        def gather(ctx):
            arr = ctx.arrays[name]
            s_full, a_full, v_full = arr.s, arr.a, arr.v
            idx = [ls.integer(f(ctx)) for f in idx_fns]
            idx = np.broadcast_arrays(*idx) if len(idx) > 1 else idx
            inside = np.ones(idx[0].shape, dtype=bool)
            clipped = []
            for dim, ix in enumerate(idx):
                n = s_full.shape[dim]
                inside &= (ix >= 0) & (ix < n)
                clipped.append(np.clip(np.nan_to_num(ix), 0, n - 1).astype(np.int64))
            s = np.where(inside, s_full[tuple(clipped)], np.nan)
            a = np.where(inside, a_full[tuple(clipped)], np.nan)
            v = np.where(inside, v_full[tuple(clipped)], np.nan)
            return LV(s, a, v)
        return gather

    def _piecewise(self, branches_in: list[tuple[Node, Node]]) -> Fn:
        branches = [(self.compile(v), self.condition(c)) for v, c in branches_in]

        def pw(ctx):
            out = branches[-1][0](ctx)
            for val, cond in reversed(branches[:-1]):
                out = ls.where(cond(ctx), val(ctx), out)
            return out
        return pw

    def condition(self, c: Node | Any) -> Callable[[Context], np.ndarray]:
        """The evaluator of a condition (a relation, And/Or of relations, True or False)."""
        c = as_tree(c)
        if c.op == "True":
            return lambda ctx: np.bool_(True)
        if c.op == "False":
            return lambda ctx: np.bool_(False)
        if c.op in _RELATIONS:
            lhs, rhs = self.compile(c.args[0]), self.compile(c.args[1])
            op = _RELATIONS[c.op]
            return lambda ctx: op(lhs(ctx), rhs(ctx))
        if c.op in ("And", "Or"):
            return _fold([self.condition(a) for a in c.args],
                         np.logical_and if c.op == "And" else np.logical_or)
        raise DomainError(f"cannot evaluate condition '{c}'")

    def _reduction(self, e: Node) -> Fn:
        summand = self.compile(body(e))
        lims = [(v.name, self.compile(lo), self.compile(hi)) for v, lo, hi in limits(e)]
        is_sum = e.op == "Sum"

        def reduce(ctx):
            out = summand(ctx)
            for name, lo_f, hi_f in lims:
                axis = self.axes[name]
                rng = self.shape_axis(np.arange(ctx.sizes[name], dtype=np.float64), axis)
                lo, hi = ls.integer(lo_f(ctx)), ls.integer(hi_f(ctx))
                mask = (rng >= lo) & (rng <= hi)
                shape = np.broadcast_shapes(out.shape, mask.shape)
                s, a, v = (np.broadcast_to(x, shape) for x in (out.s, out.a, out.v))
                if is_sum:
                    masked = LV(np.where(mask, s, 0.0), np.where(mask, a, -np.inf),
                                np.where(mask, v, 0.0))
                    out = ls.reduce_add(masked, axis)
                else:
                    masked = LV(np.where(mask, s, 1.0), np.where(mask, a, 0.0),
                                np.where(mask, v, 1.0))
                    out = ls.reduce_mul(masked, axis)
            return out
        return reduce

    def _gridmin(self, e: Node) -> Fn:
        inner = self.compile(e.args[0])
        name = e.args[1].name
        axis = self.axes[name]

        def gridmin(ctx):
            val = inner(ctx)
            shape = list(np.broadcast_shapes(val.shape, (1,) * self.ndim))
            shape[axis] = len(ctx.grids[name])
            full = LV(*(np.broadcast_to(x, shape) for x in (val.s, val.a, val.v)))
            idx = ls.argmin(full, axis)
            ctx.selected[name] = np.take_along_axis(
                np.broadcast_to(self.shape_axis(ctx.grids[name], axis), shape), idx, axis=axis)
            return ls.take(full, idx, axis)
        return gridmin


_UNARY = {"exp": ls.exp, "log": ls.log, "Abs": ls.absolute}
_RELATIONS = {
    "StrictLessThan": lambda x, y: ls.less(x, y),
    "LessThan": lambda x, y: ~ls.less(y, x),
    "StrictGreaterThan": lambda x, y: ls.less(y, x),
    "GreaterThan": lambda x, y: ~ls.less(x, y),
    "Equality": ls.equal,
    "Unequality": lambda x, y: ~ls.equal(x, y),
}


def _fold(parts: list[Callable[[Context], object]], op: Callable) -> Callable[[Context], object]:
    """Left fold of a binary ``op`` over the values of ``parts`` (products, Min/Max, And/Or)."""
    def folded(ctx: Context):
        out = parts[0](ctx)
        for p in parts[1:]:
            out = op(out, p(ctx))
        return out
    return folded


def _scalar(ctx: Context, name: str) -> LV:
    try:
        return ctx.scalars[name]
    except KeyError:
        raise DomainError(f"no value for '{name}'") from None


def _kl_inv_vec(q: np.ndarray, c: np.ndarray) -> np.ndarray:
    q, c = np.broadcast_arrays(np.asarray(q, float), np.asarray(c, float))
    out = np.empty(q.shape)
    for i in np.ndindex(q.shape):
        if np.isnan(q[i]) or np.isnan(c[i]) or not 0 <= q[i] <= 1 or c[i] < 0:
            out[i] = np.nan
        else:
            out[i] = kl_inv_upper(q[i], c[i])
    return out


def _var_ratio_div_lv(a: LV, b: LV) -> LV:
    fa, fb = a.to_float(), b.to_float()
    out = from_float_or_log(var_ratio_div_float(fa, fb), fa, fb)
    return out


def from_float_or_log(v: np.ndarray, a: np.ndarray, b: np.ndarray) -> LV:
    """``v`` as an LV; where it overflowed, the log form 2·ln(a/b) of (a/b)² − 1 − ln (a/b)²."""
    lv = ls.from_float(v)
    if np.all(np.isfinite(lv.v) | np.isnan(lv.v)):
        return lv
    with np.errstate(all="ignore"):
        big = np.isinf(v)
        log_big = 2.0 * (np.log(a) - np.log(b))  # the −1 − ln x correction is below 1e-300
        return LV(lv.s, np.where(big, log_big, lv.a), np.where(big, np.inf, lv.v))


def _kl_vec(q: np.ndarray, p: np.ndarray) -> np.ndarray:
    q, p = np.broadcast_arrays(np.asarray(q, float), np.asarray(p, float))
    out = np.empty(q.shape)
    for i in np.ndindex(q.shape):
        try:
            out[i] = kl_bernoulli(q[i], p[i])
        except ValueError:
            out[i] = np.nan
    return out


def axes_for(index_names: list[str], grid_params: list[str]) -> dict[str, int]:
    """Assign one axis per index variable and per GridMin parameter."""
    names = list(dict.fromkeys([*index_names, *grid_params]))
    return {n: i for i, n in enumerate(names)}
