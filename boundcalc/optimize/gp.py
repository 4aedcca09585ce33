"""SymPy → CVXPY translation and geometric programming (log-log convex bounds).

A bound that is log-log convex in its free parameters (a posynomial, square roots and positive
powers of posynomials, 1/(1 − x) factors, …) has a global optimum that CVXPY finds as a
geometric program (``problem.solve(gp=True)``). Every sub-expression free of the variables is
evaluated numerically by the engine (so indexed statistics, Sums over layers and GridMin
selections all become constants); only the parts that contain a variable are translated.
``problem.is_dgp()`` decides whether the translated problem is a geometric program.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import sympy as sp

from ..engine.compile import Context
from ..evaluation import Prepared

_MAX_TERMS = 20_000  # unrolled Sum terms


class Unsupported(Exception):
    """The expression (or a part of it) has no CVXPY translation."""


@dataclass
class GPOutcome:
    """What the geometric program gave: status, optimum and the optimal point."""

    ok: bool
    status: str
    reason: str = ""
    value: float | None = None
    point: dict[str, Any] = field(default_factory=dict)
    solver: str | None = None


class Translator:
    """Translate a SymPy expression into CVXPY for fixed data (the context ``ctx``).

    ``scalars``: free scalar parameter name → ``cp.Variable(pos=True)``; ``indexed``: indexed
    symbol name → ``cp.Variable(shape, pos=True)`` (used as ``name[i, ...]``).
    """

    def __init__(self, prepared: Prepared, ctx: Context, scalars: Mapping[str, Any],
                 indexed: Mapping[str, Any] | None = None):
        self.p = prepared
        self.ctx = ctx
        self.scalars = dict(scalars)
        self.indexed = dict(indexed or {})
        self._has_var_cache: dict[sp.Basic, bool] = {}
        self._arrays: dict[sp.Basic, np.ndarray] = {}
        self.terms = 0

    # ---- helpers ------------------------------------------------------------------------
    def has_var(self, e: sp.Basic) -> bool:
        hit = self._has_var_cache.get(e)
        if hit is None:
            hit = any(s.name in self.scalars for s in e.free_symbols if isinstance(s, sp.Symbol)) \
                or any(a.base.label.name in self.indexed for a in e.atoms(sp.Indexed))
            self._has_var_cache[e] = hit
        return hit

    def const(self, e: sp.Basic, env: Mapping[str, int]) -> float:
        """The value of a variable-free sub-expression at the index values ``env``."""
        arr = self._arrays.get(e)
        if arr is None:
            arr = np.asarray(self.p.compiled.compile(e)(self.ctx).to_float(), dtype=np.float64)
            arr = np.broadcast_to(arr, np.broadcast_shapes(arr.shape, (1,) * self.p.compiled.ndim))
            self._arrays[e] = arr
        index = []
        for name, axis in sorted(self.p.compiled.axes.items(), key=lambda kv: kv[1]):
            n = arr.shape[axis]
            if n == 1:
                index.append(0)
            elif name in env:
                index.append(env[name])
            else:
                raise Unsupported(f"'{str(e)[:40]}' depends on index '{name}' outside a Sum")
        value = float(arr[tuple(index)])
        if not math.isfinite(value):
            raise Unsupported(f"'{str(e)[:40]}' is not finite")
        return value

    # ---- translation --------------------------------------------------------------------
    def __call__(self, e: sp.Basic, env: Mapping[str, int] | None = None) -> Any:
        return self.tr(e, dict(env or {}))

    def tr(self, e: sp.Basic, env: dict[str, int]) -> Any:  # noqa: C901 - a dispatcher
        import cvxpy as cp

        if not self.has_var(e):
            return self.const(e, env)
        if isinstance(e, sp.Symbol):
            return self.scalars[e.name]
        if isinstance(e, sp.Indexed):
            idx = tuple(int(self.const(i, env)) for i in e.indices)
            var = self.indexed[e.base.label.name]
            return var[idx if len(idx) > 1 else idx[0]]
        if isinstance(e, sp.Add):
            return self._add(e, env)
        if isinstance(e, sp.Mul):
            const = 1.0
            out = None
            for a in e.args:
                t = self.tr(a, env)
                if isinstance(t, float):
                    const *= t
                else:
                    out = t if out is None else out * t
            if const < 0:
                raise Unsupported(f"negative factor in '{str(e)[:50]}'")
            if const == 0 or out is None:
                return const
            return out if const == 1 else const * out
        if isinstance(e, sp.Pow):
            base, expo = e.args
            if self.has_var(expo):
                raise Unsupported("variable exponent")
            k = self.const(expo, env)
            b = self.tr(base, env)
            if isinstance(b, float):
                return b ** k
            if k == 1:
                return b
            if k == 0.5:
                return cp.sqrt(b) if _is_scalarish(b) else cp.power(b, 0.5)
            return cp.power(b, k)
        if isinstance(e, sp.Sum):
            return self._sum(e, env)
        if isinstance(e, sp.Product):
            return self._product(e, env)
        if isinstance(e, (sp.Max, sp.Min)):
            parts = [self.tr(a, env) for a in e.args]
            fn = cp.maximum if isinstance(e, sp.Max) else cp.minimum
            return fn(*[cp.Constant(p) if isinstance(p, float) else p for p in parts])
        raise Unsupported(f"{type(e).__name__} of a free parameter ('{str(e)[:50]}')")

    def _add(self, e: sp.Add, env: dict[str, int]) -> Any:
        import cvxpy as cp

        const = 0.0
        pos: list[Any] = []
        neg: list[Any] = []
        for a in e.args:
            coeff, rest = a.as_coeff_Mul()
            if coeff < 0 and self.has_var(rest):
                neg.append(self.tr(-a, env))
                continue
            t = self.tr(a, env)
            if isinstance(t, float):
                const += t
            else:
                pos.append(t)
        if neg:
            # c − m (a positive constant minus monomials): c·(1 − m/c), log-log concave
            if pos or const <= 0:
                raise Unsupported(f"difference of terms in '{str(e)[:50]}'")
            m = neg[0] if len(neg) == 1 else cp.sum(cp.hstack(neg))
            return const * cp.one_minus_pos(m / const)
        if const < 0:
            raise Unsupported(f"negative constant in '{str(e)[:50]}'")
        if const > 0:
            pos.append(const)
        if not pos:
            return 0.0
        out = pos[0]
        for t in pos[1:]:
            out = out + t
        return out

    def _range(self, limit: tuple, env: dict[str, int]) -> tuple[str, range]:
        var, lo, hi = limit
        lo_v, hi_v = self.const(lo, env), self.const(hi, env)
        return var.name, range(int(round(lo_v)), int(round(hi_v)) + 1)

    def _unrolled(self, body: sp.Basic, limits: tuple, env: dict[str, int]) -> list[Any]:
        if not limits:
            self.terms += 1
            if self.terms > _MAX_TERMS:
                raise Unsupported(f"more than {_MAX_TERMS} unrolled terms")
            return [self.tr(body, env)]
        name, rng = self._range(limits[0], env)
        out = []
        for v in rng:
            out.extend(self._unrolled(body, limits[1:], {**env, name: v}))
        return out

    def _sum(self, e: sp.Sum, env: dict[str, int]) -> Any:
        parts = self._unrolled(e.function, e.limits, env)
        const = sum(t for t in parts if isinstance(t, float))
        rest = [t for t in parts if not isinstance(t, float)]
        if const < 0:
            raise Unsupported("negative constant in a Sum")
        if const > 0:
            rest.append(const)
        out = rest[0] if rest else 0.0
        for t in rest[1:]:
            out = out + t
        return out

    def _product(self, e: sp.Product, env: dict[str, int]) -> Any:
        parts = self._unrolled(e.function, e.limits, env)
        out: Any = 1.0
        for t in parts:
            out = out * t
        return out


def _is_scalarish(x: Any) -> bool:
    return getattr(x, "size", 1) == 1


def solve_gp(prepared: Prepared, ctx: Context, expr: sp.Expr,
             scalar_bounds: Mapping[str, tuple[float, float]],
             indexed_bounds: Mapping[str, tuple[tuple[int, ...], np.ndarray, np.ndarray]]
             | None = None) -> GPOutcome:
    """Minimise ``expr`` over positive variables within bounds as a geometric program.

    ``scalar_bounds``: name → (lo, hi); ``indexed_bounds``: name → (shape, lo array, hi array).
    Returns ``ok=False`` with a reason when the expression does not translate, the problem is not
    DGP, or the solver does not report an optimum.
    """
    try:
        import cvxpy as cp
    except ImportError:  # pragma: no cover - cvxpy is a dependency
        return GPOutcome(False, "unavailable", "cvxpy is not installed")
    indexed_bounds = dict(indexed_bounds or {})
    svars = {n: cp.Variable(pos=True, name=n) for n in scalar_bounds}
    ivars = {n: cp.Variable(shape, pos=True, name=n) for n, (shape, _, _) in indexed_bounds.items()}
    try:
        objective = Translator(prepared, ctx, svars, ivars)(expr)
    except Unsupported as exc:
        return GPOutcome(False, "not translatable", str(exc))
    if isinstance(objective, float):
        return GPOutcome(False, "constant", "the objective does not depend on the parameters")
    cons = []
    for n, (lo, hi) in scalar_bounds.items():
        if lo > 0:
            cons.append(svars[n] >= lo)
        if math.isfinite(hi):
            cons.append(svars[n] <= hi)
    for n, (_, lo, hi) in indexed_bounds.items():
        cons.append(ivars[n] >= np.asarray(lo, dtype=float))
        cons.append(ivars[n] <= np.asarray(hi, dtype=float))
    problem = cp.Problem(cp.Minimize(objective), cons)
    if not problem.is_dgp():
        return GPOutcome(False, "not log-log convex",
                         "the bound is not log-log convex in its free parameters (not a GP)")
    solver = "CLARABEL" if "CLARABEL" in cp.installed_solvers() else None
    try:
        problem.solve(gp=True, solver=solver)
    except (cp.error.SolverError, cp.error.DGPError, ValueError, ArithmeticError) as exc:
        return GPOutcome(False, "solver failed", str(exc).splitlines()[0][:200], solver=solver)
    used = problem.solver_stats.solver_name if problem.solver_stats else solver
    if problem.status != cp.OPTIMAL:
        return GPOutcome(False, str(problem.status), f"solver status {problem.status}",
                         solver=used)
    point: dict[str, Any] = {n: float(v.value) for n, v in svars.items()}
    point.update({n: np.asarray(v.value, dtype=float) for n, v in ivars.items()})
    return GPOutcome(True, "optimal", value=float(problem.value), point=point, solver=used)

