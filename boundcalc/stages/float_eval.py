"""The float evaluator of an entry with validated values: its expression, or any sub-expression,
at a point, in floats (signed-log form inside, :mod:`boundcalc.engine.logspace`).

:class:`FloatEvaluator` is what every stage after validation calls — the choice of free
parameters (:mod:`.choose`), the interval value and its checks (:mod:`.enclose`), the floor
(:mod:`boundcalc.floor`, through its ``Evaluator`` protocol) and the optimizer. It is a base
class of :class:`~.validate.ValidatedEntry`, which fills in what it reads: ``entry``,
``compiled`` (:func:`~.forms.compiled_for`), ``scalars`` (float values by name),
``_ctx_scalars``/``_ctx_arrays`` (the values in signed-log form), ``sizes`` (index lengths),
``grids`` and ``gridmin_cost``.

Contract: every value is computed from those alone; an undefined value is a
:class:`~boundcalc.errors.DomainError` naming the entry (and the smallest undefined
sub-expression), never a NaN.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from ..engine import logspace as ls
from ..engine.compile import Compiled, Context
from ..engine.tree import RELATIONS, Node, as_tree
from ..errors import DomainError
from ..registry.schema import Entry, confidence_symbol

# sub-trees that are not numbers (conditions, index tuples, bases): skipped by diagnostics
_NOT_VALUES = ("Indexed", "IndexedBase", "Tuple", "ExprCondPair", *RELATIONS, "And", "Or", "Not",
               "True", "False")


class FloatEvaluator:
    """Evaluation at a point, in floats (module docstring: what it reads of ``self``)."""

    entry: Entry
    compiled: Compiled
    scalars: dict[str, float]
    sizes: dict[str, int]
    grids: dict[str, np.ndarray]
    gridmin_cost: dict[str, float]
    _ctx_scalars: dict[str, Any]
    _ctx_arrays: dict[str, Any]

    def delta_effective(self, costs: Mapping[str, float]) -> float | None:
        """δ·e^(−Σ costs), the confidence left after the union-bound costs (None without δ)."""
        conf = confidence_symbol(self.entry)
        if conf is None:
            return None
        total = sum(costs.values())
        eff = self.scalars[conf] * math.exp(-total)
        if eff <= 0.0:
            raise DomainError(f"entry '{self.entry.id}': δ·e^(−{total:.4g}) underflows to 0 "
                              f"(δ = {self.scalars[conf]:g}, union-bound cost {total:.4g}); "
                              f"use a larger δ or smaller grids")
        return eff

    def context(self, params: Mapping[str, float] | None = None,
                delta_eff: float | None = None) -> Context:
        """The evaluation context: the values, ``params`` and δ replaced by ``delta_eff``."""
        scalars = dict(self._ctx_scalars)
        for k, v in (params or {}).items():
            scalars[k] = ls.from_float(v)
        conf = confidence_symbol(self.entry)
        if delta_eff is not None and conf is not None:
            scalars[conf] = ls.from_float(delta_eff)
        return Context(scalars=scalars, arrays=self._ctx_arrays, sizes=self.sizes,
                       grids=self.grids)

    def eval_array(self, expr: Node | Any, ctx: Context) -> np.ndarray:
        """``expr`` (free indices allowed) as a float array."""
        return self.compiled.compile(expr)(ctx).to_float()

    def eval_scalar(self, expr: Node | Any, ctx: Context | None = None) -> float:
        """``expr`` as one float; free indices left are an error."""
        ctx = ctx or self.context()
        lv = self.run_expression(expr, ctx)
        arr = np.broadcast_to(lv.to_float(), lv.shape)
        if arr.size != 1:
            raise DomainError(f"entry '{self.entry.id}': '{str(expr)[:60]}' is not a scalar "
                              f"(free indices remain)")
        return float(arr.reshape(-1)[0])

    def run_expression(self, expr: Node | Any, ctx: Context):
        """Evaluate ``expr`` in signed-log form; engine errors are prefixed with the entry id."""
        try:
            return self.compiled.compile(expr)(ctx)
        except DomainError as exc:
            if f"entry '{self.entry.id}'" in str(exc):
                raise
            raise DomainError(f"entry '{self.entry.id}': {exc}") from None

    def value(self, params: Mapping[str, float], costs: Mapping[str, float] | None = None) -> float:
        """The entry's value for fully resolved parameters (fast path for optimizers)."""
        costs = self.gridmin_cost if costs is None else costs
        ctx = self.context(params, self.delta_effective(costs))
        return self.point_value(ctx)[0]

    def point_value(self, ctx: Context) -> tuple[float, float, float]:
        """(value, sign, ln|value|) of the entry's expression in ``ctx``; an undefined value
        is a :class:`DomainError` naming the smallest undefined sub-expression."""
        lv = self.run_expression(self.entry.expression, ctx)
        s = np.broadcast_to(lv.s, lv.shape).reshape(-1)
        a = np.broadcast_to(lv.a, lv.shape).reshape(-1)
        if s.size != 1:
            raise DomainError(f"entry '{self.entry.id}': expression has free indices; wrap them "
                              f"in Sum/Product")
        if np.isnan(s[0]) or np.isnan(a[0]):
            raise DomainError(f"entry '{self.entry.id}': evaluation is undefined for these "
                              f"values ({self._name_undefined(ctx)})")
        value = float(np.broadcast_to(lv.to_float(), lv.shape).reshape(-1)[0])
        return value, float(s[0]), float(a[0])

    def _name_undefined(self, ctx: Context) -> str:
        """Name the smallest sub-expression whose value is undefined."""
        def visit(e: Node) -> str | None:
            for arg in e.args:
                if arg.op not in _NOT_VALUES:
                    found = visit(arg)
                    if found:
                        return found
            if e.op in ("Sum", "Product"):
                return None
            try:
                lv = self.compiled.compile(e)(Context(ctx.scalars, ctx.arrays, ctx.sizes,
                                                      ctx.grids))
            except Exception:  # noqa: BLE001 - diagnostics only
                return None
            if np.any(np.isnan(lv.s)) and e.op not in ("Symbol", "Indexed"):
                return f"undefined at '{str(e)[:70]}'"
            return None
        return visit(as_tree(self.entry.expression)) or "check the inputs"
