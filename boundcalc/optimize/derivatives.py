"""Symbolic derivatives of an entry's expression, evaluated by the engine.

``derivative(expr, wrt)`` differentiates with SymPy's ``diff`` wherever the expression is plain
arithmetic, and by explicit rules through the constructs SymPy cannot see into:

* ``GridMin(f, p)`` (minimum over a grid): by the envelope theorem the derivative is ∂f at the
  selected grid point, written ``GridAt(∂f, f, p)`` and evaluated by :class:`DerivativeCompiled`;
* ``Cases``/``Piecewise``: branch by branch (conditions are locally constant);
* ``Min``/``Max``/``Abs``: the active branch; ``ceiling``/``floor``: 0;
* ``Sum``/``Product``: under the sign (products as Π · Σ ∂f/f);
* ``kl(q, p)`` and ``kl_inv(q, c)``: analytic partial derivatives (implicit function theorem).

``wrt`` is a scalar ``Symbol`` (∂B/∂c) or an ``IndexedBase`` (the derivative of B along
c[…] → t·c[…] at t = 1, i.e. Σ_i c_i ∂B/∂c_i, whose ratio to B is the elasticity of B with
respect to scaling the whole array).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import sympy as sp

from ..engine import logspace as ls
from ..engine.compile import Compiled, Context
from ..engine.functions import Cases, GridMin, kl, kl_inv
from ..evaluation import Prepared
from ..stages.forms import form


class GridAt(sp.Function):  # noqa: N801 - SymPy naming convention
    """``GridAt(g, f, p)``: g evaluated at the grid point of p that minimises f (per instance)."""

    nargs = 3


class NotDifferentiable(Exception):
    """The expression has a construct without a derivative rule."""


_SPECIAL = (GridMin, GridAt, Cases, kl, kl_inv, sp.Sum, sp.Product, sp.Min, sp.Max, sp.Abs,
            sp.ceiling, sp.floor, sp.Piecewise)


def derivative(expr: sp.Expr, wrt: sp.Symbol | sp.IndexedBase) -> sp.Expr:
    """d expr / d wrt (see the module docstring for the indexed case)."""
    return _Diff(wrt)(expr)


class _Diff:
    def __init__(self, wrt: sp.Symbol | sp.IndexedBase):
        self.wrt = wrt
        self.indexed = isinstance(wrt, sp.IndexedBase)
        self.t = sp.Dummy("t", positive=True)
        self._deps: dict[sp.Basic, bool] = {}

    def depends(self, e: sp.Basic) -> bool:
        hit = self._deps.get(e)
        if hit is None:
            if self.indexed:
                hit = any(a.base == self.wrt for a in e.atoms(sp.Indexed))
            else:
                hit = self.wrt in e.free_symbols
            self._deps[e] = hit
        return hit

    def __call__(self, e: sp.Basic) -> sp.Expr:  # noqa: C901 - a dispatcher
        if not self.depends(e):
            return sp.S.Zero
        if not e.has(*_SPECIAL):
            return self.plain(e)
        d = self
        if isinstance(e, sp.Add):
            return sp.Add(*[d(a) for a in e.args])
        if isinstance(e, sp.Mul):
            terms = []
            for i, a in enumerate(e.args):
                da = d(a)
                if da != 0:
                    terms.append(sp.Mul(da, *e.args[:i], *e.args[i + 1:]))
            return sp.Add(*terms)
        if isinstance(e, sp.Pow):
            b, x = e.args
            if not self.depends(x):
                return x * b ** (x - 1) * d(b)
            return e * (d(x) * sp.log(b) + x * d(b) / b)
        if isinstance(e, sp.exp):
            return e * d(e.args[0])
        if isinstance(e, sp.log):
            return d(e.args[0]) / e.args[0]
        if isinstance(e, GridMin):
            f, p = e.args
            df = d(f)
            return sp.S.Zero if df == 0 else GridAt(df, f, p)
        if isinstance(e, Cases):
            a = e.args
            out = []
            for i in range(0, len(a) - 1, 2):
                out.extend([d(a[i]), a[i + 1]])
            out.append(d(a[-1]))
            return Cases(*out)
        if isinstance(e, sp.Piecewise):
            return sp.Piecewise(*[(d(v), c) for v, c in e.args])
        if isinstance(e, (sp.Sum, sp.Product)):
            for _, lo, hi in e.limits:
                if self.depends(lo) or self.depends(hi):
                    raise NotDifferentiable(f"summation limits depend on the variable in "
                                            f"'{str(e)[:60]}'")
            df = d(e.function)
            if isinstance(e, sp.Sum):
                return sp.Sum(df, *e.limits)
            return e * sp.Sum(df / e.function, *e.limits)
        if isinstance(e, (sp.Min, sp.Max)):
            args = list(e.args)
            cur, dcur = args[0], d(args[0])
            for b in args[1:]:
                cond = sp.Le(cur, b) if isinstance(e, sp.Min) else sp.Ge(cur, b)
                dcur = Cases(dcur, cond, d(b))
                cur = type(e)(cur, b, evaluate=False)
            return dcur
        if isinstance(e, sp.Abs):
            u = e.args[0]
            du = d(u)
            return Cases(-du, sp.Lt(u, 0), du)
        if isinstance(e, (sp.ceiling, sp.floor)):
            return sp.S.Zero
        if isinstance(e, kl):
            q, p = e.args
            out = sp.S.Zero
            if self.depends(q):
                out += d(q) * (sp.log(q / p) - sp.log((1 - q) / (1 - p)))
            if self.depends(p):
                out += d(p) * (p - q) / (p * (1 - p))
            return out
        if isinstance(e, kl_inv):
            q, c = e.args
            slope = e * (1 - e) / (e - q)  # 1 / (∂kl(q‖P)/∂P) at P = kl_inv(q, c)
            out = sp.S.Zero
            if self.depends(c):
                out += d(c) * slope
            if self.depends(q):
                out -= d(q) * (sp.log(q / e) - sp.log((1 - q) / (1 - e))) * slope
            return out
        raise NotDifferentiable(f"no derivative rule for {type(e).__name__}")

    def plain(self, e: sp.Basic) -> sp.Expr:
        """SymPy's own ``diff`` for plain arithmetic."""
        if not self.indexed:
            return sp.diff(e, self.wrt)
        t = self.t
        scaled = e.replace(lambda x: isinstance(x, sp.Indexed) and x.base == self.wrt,
                           lambda x: t * x)
        return sp.diff(scaled, t).subs(t, 1)


class DerivativeCompiled(Compiled):
    """The engine's compiler plus ``GridAt`` (the envelope-theorem pick of a GridMin)."""

    def _build_inner(self, e):
        if e.op == "GridAt":
            g_fn = self.compile(e.args[0])
            f_fn = self.compile(e.args[1])
            name = e.args[2].name
            axis = self.axes[name]

            def grid_at(ctx: Context):
                f, g = f_fn(ctx), g_fn(ctx)
                shape = list(np.broadcast_shapes(f.shape, g.shape, (1,) * self.ndim))
                shape[axis] = len(ctx.grids[name])
                full_f = _broadcast(f, shape)
                full_g = _broadcast(g, shape)
                return ls.take(full_g, ls.argmin(full_f, axis), axis)
            return grid_at
        return super()._build_inner(e)


def _broadcast(x: ls.LV, shape: list[int]) -> ls.LV:
    return ls.LV(*(np.broadcast_to(getattr(x, f.name), shape) for f in dataclasses.fields(x)))


def derivative_compiled(prepared: Prepared) -> DerivativeCompiled:
    """A :class:`DerivativeCompiled` sharing the entry's axes (built once per entry:
    :func:`boundcalc.stages.forms.form`)."""
    base = prepared.compiled
    return form(prepared.entry, "derivative_compiled", lambda: DerivativeCompiled(
        base.axes, base.index_of_symbol, set(base.grid_params)))


def evaluate_scalar(comp: Compiled, expr: sp.Basic, ctx: Context) -> float:
    """Evaluate a scalar expression (NaN when undefined, ±inf on overflow)."""
    with np.errstate(all="ignore"):
        lv = comp.compile(expr)(ctx)
        s = np.broadcast_to(lv.s, lv.shape).reshape(-1)
        v = np.broadcast_to(lv.to_float(), lv.shape).reshape(-1)
    if v.size != 1:
        raise NotDifferentiable("derivative has free indices")
    if np.isnan(s[0]):
        return float("nan")
    return float(v[0])
