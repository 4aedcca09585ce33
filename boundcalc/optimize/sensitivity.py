"""Sensitivity of an optimised bound to its inputs, and where the value comes from.

* :func:`sensitivities`: ∂B/∂c and the elasticity ∂ln B/∂ln c for every statistic and data
  constant at the optimum. By the envelope theorem the optimal parameters are held fixed
  (GridMin selections included). For an indexed statistic the elasticity is with respect to
  scaling the whole array (c[…] → t·c[…], d/dt at t = 1). δ enters at δ_eff = δ·e^{−cost}.
* :func:`contributions`: the value of each additive part of the expression (named after the
  definitions it matches), with per-index breakdowns (layer, head, group, …) of every Sum.
* :func:`selections`: the grid value GridMin chose for every instance (Schatten index per matrix).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np
import sympy as sp

from ..engine.compile import Context
from ..engine.functions import GridMin
from ..evaluation import Prepared, confidence_symbol
from ..stages.forms import form
from .derivatives import (NotDifferentiable, derivative, derivative_compiled, evaluate_scalar)

SENSITIVE_ROLES = ("measured", "data_size", "constant", "confidence", "hidden_constant")


def _derivative_cached(prepared: Prepared, name: str) -> sp.Expr:
    """∂(expression)/∂``name``, built once per entry (:func:`~boundcalc.stages.forms.form`);
    a symbol it is not differentiable in raises :class:`NotDifferentiable` each time."""
    def build() -> Any:
        try:
            return derivative(prepared.entry.expression, prepared.entry.symbols[name].symbol)
        except NotDifferentiable as exc:
            return exc

    hit = form(prepared.entry, ("derivative", name), build)
    if isinstance(hit, Exception):
        raise hit
    return hit


def sensitivities(prepared: Prepared, params: Mapping[str, float], delta_eff: float | None,
                  exclude: tuple[str, ...] = (), ctx: Context | None = None
                  ) -> list[dict[str, Any]]:
    """Derivatives and elasticities at ``params`` (ranked by |elasticity|, largest first).

    ``ctx``: an evaluation context at the same point to share (its memo is reused)."""
    entry = prepared.entry
    comp = derivative_compiled(prepared)
    ctx = ctx or prepared.context(dict(params), delta_eff)
    value = evaluate_scalar(comp, entry.expression, ctx)
    conf = confidence_symbol(entry)
    rows = []
    for name, spec in entry.symbols.items():
        if spec.role not in SENSITIVE_ROLES or name in exclude:
            continue
        if spec.indexed and name not in prepared.arrays:
            continue
        row: dict[str, Any] = {"symbol": name, "role": spec.role, "meaning": spec.meaning,
                               "indexed": spec.indexed}
        try:
            dexpr = _derivative_cached(prepared, name)
            d = evaluate_scalar(comp, dexpr, ctx) if dexpr != 0 else 0.0
        except NotDifferentiable as exc:
            row.update({"value": None if spec.indexed else prepared.scalars.get(name),
                        "derivative": None, "elasticity": None, "note": str(exc)})
            rows.append(row)
            continue
        if spec.indexed:
            row["value"] = None
            row["derivative"] = None
            row["scale_derivative"] = _finite_or_none(d)
            row["elasticity"] = _finite_or_none(d / value) if value else None
        else:
            c = prepared.scalars[name]
            if name == conf and delta_eff is not None:
                # the formula sees δ_eff = δ·e^{−cost}: ∂B/∂δ = ∂B/∂δ_eff · δ_eff/δ
                row["value"] = c
                row["value_effective"] = delta_eff
                row["derivative"] = _finite_or_none(d * delta_eff / c)
                row["elasticity"] = _finite_or_none(d * delta_eff / value) if value else None
            else:
                row["value"] = c
                row["derivative"] = _finite_or_none(d)
                row["elasticity"] = _finite_or_none(d * c / value) if value else None
        if row.get("elasticity") is None and "note" not in row:
            row["note"] = "not differentiable at this point"
        rows.append(row)
    rows.sort(key=lambda r: -abs(r["elasticity"]) if r.get("elasticity") is not None else 1.0)
    for k, r in enumerate(rows, 1):
        r["rank"] = k
    return rows


def _finite_or_none(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


# ---- contributions --------------------------------------------------------------------------

def _names(prepared: Prepared) -> dict[sp.Basic, str]:
    return {d.expr: name for name, d in prepared.entry.definitions.items() if not d.indices}


def _sum_breakdown(prepared: Prepared, s: sp.Sum, ctx: Context, coeff: float = 1.0
                   ) -> dict[str, Any] | None:
    """The summand of a Sum as an array over its summation indices (masked to the limits)."""
    comp = prepared.compiled
    try:
        with np.errstate(all="ignore"):
            arr = np.asarray(comp.compile(s.function)(ctx).to_float(), dtype=np.float64)
    except Exception:  # noqa: BLE001 - a breakdown is optional
        return None
    arr = np.broadcast_to(arr, np.broadcast_shapes(arr.shape, (1,) * comp.ndim))
    names = []
    shape = list(arr.shape)
    mask = np.ones((1,) * comp.ndim, dtype=bool)
    for var, lo, hi in s.limits:
        axis = comp.axes.get(var.name)
        if axis is None:
            return None
        try:
            lo_v = prepared.eval_scalar(lo, ctx)
            hi_v = prepared.eval_scalar(hi, ctx)
        except Exception:  # noqa: BLE001 - limits depending on outer indices
            return None
        n = prepared.sizes[var.name]
        shape[axis] = n
        rng = comp.shape_axis(np.arange(n, dtype=np.float64), axis)
        mask = mask & (rng >= lo_v) & (rng <= hi_v)
        names.append((axis, var.name))
    full = np.where(mask, np.broadcast_to(arr, shape), 0.0)
    keep = sorted(a for a, _ in names)
    for axis in range(comp.ndim):
        if axis not in keep and full.shape[axis] != 1:
            return None
    index = tuple(slice(None) if a in keep else 0 for a in range(comp.ndim))
    values = coeff * full[index]
    return {"indices": [n for _, n in sorted(names)], "values": values}


def _outer_sums(e: sp.Basic) -> list[sp.Sum]:
    if isinstance(e, sp.Sum):
        return [e]
    if isinstance(e, GridMin):
        return []
    out = []
    for a in e.args:
        if isinstance(a, sp.Basic):
            out.extend(_outer_sums(a))
    return out


def contributions(prepared: Prepared, params: Mapping[str, float], delta_eff: float | None,
                  ctx: Context | None = None) -> dict[str, Any]:
    """Additive parts of the expression with per-index breakdowns (see the module docstring)."""
    entry = prepared.entry
    ctx = ctx or prepared.context(dict(params), delta_eff)
    total = prepared.eval_scalar(entry.expression, ctx)
    names = _names(prepared)
    parts = []
    by_index: dict[str, dict[str, Any]] = {}
    for part in sp.Add.make_args(entry.expression):
        coeff, core = part.as_coeff_Mul()
        name = names.get(part) or names.get(core) or _short(part)
        value = prepared.eval_scalar(part, ctx)
        item: dict[str, Any] = {"name": name, "value": value,
                                "share": value / total if total else None}
        if isinstance(core, sp.Sum):
            bd = _sum_breakdown(prepared, core, ctx, float(coeff))
            if bd is not None:
                item.update(bd)
                _accumulate(by_index, name, bd, prepared)
        else:
            inner = []
            for s in _outer_sums(part):
                bd = _sum_breakdown(prepared, s, ctx)
                if bd is None:
                    continue
                sval = float(np.sum(bd["values"]))
                inner.append({"name": names.get(s) or _short(s), "value": sval, **bd})
            if inner:
                item["inner_sums"] = inner
        parts.append(item)
    return {"total": total, "parts": parts, "by_index": by_index}


def _accumulate(by_index: dict[str, dict[str, Any]], part: str, bd: dict[str, Any],
                prepared: Prepared) -> None:
    values = np.asarray(bd["values"])
    for k, idx in enumerate(bd["indices"]):
        other = tuple(a for a in range(values.ndim) if a != k)
        series = values.sum(axis=other) if other else values
        size_sym = prepared.entry.indices[idx]
        slot = by_index.setdefault(idx, {"size_symbol": size_sym,
                                         "meaning": prepared.entry.symbols[size_sym].meaning,
                                         "values": np.zeros(len(series)), "by_part": {}})
        if len(slot["values"]) == len(series):
            slot["values"] = slot["values"] + series
            slot["by_part"][part] = series


def _short(e: sp.Basic) -> str:
    text = str(e)
    return text if len(text) <= 40 else text[:37] + "..."


# ---- GridMin selections ---------------------------------------------------------------------

def selections(prepared: Prepared, parameters: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per-instance choices of every GridMin parameter, with a histogram over its grid."""
    out = []
    for name in sorted(prepared.compiled.grid_params):
        if name not in parameters:
            continue
        spec = prepared.entry.parameters[name]
        values = np.asarray(parameters[name], dtype=float)
        grid = prepared.grids[name]
        uniq, counts = np.unique(values, return_counts=True)
        out.append({"parameter": name, "indices": list(spec.indices), "note": spec.note,
                    "values": values, "grid_size": int(len(grid)),
                    "grid_min": float(grid.min()), "grid_max": float(grid.max()),
                    "histogram": {f"{u:g}": int(c) for u, c in zip(uniq, counts)},
                    "union_bound_cost": prepared.gridmin_cost.get(name)})
    return out
