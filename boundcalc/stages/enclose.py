"""Stage 3, enclose: at a chosen point, the value that may be printed as a bound, enclosed in
an outward-rounded interval (named for what it does; "certify" is the kind and the recipe).

* :func:`enclose_value`: the expression in outward-rounded interval arithmetic; the printed
  value is the interval's upper end, so it is never below the formula's exact value.
* :func:`check_output`: a certified (or conditional) value is a finite number inside the entry's
  ``output_range``; anything else is refused.
* :func:`exact_value`: the value by SymPy at many digits (slow; a cross-check).
* :func:`check_assumptions`: each assumption's status (holds / fails / unknown / unchecked).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from ..engine.compile import Context
from ..engine.tree import Node, as_tree
from ..errors import BoundcalcError, DomainError
from ..registry.schema import PriorSpec, confidence_symbol
from ..rounding import at_most_decimal
from .validate import ValidatedEntry

# kinds whose value is a statement (checked to be a finite number in the output range)
CHECKED_KINDS = ("certified", "conditional")


def check_output(entry: ValidatedEntry, value: float, sign: float, log_abs: float) -> None:
    """A certified (or conditional) value must be a finite number (in signed-log form)
    inside the entry's declared ``output_range`` (default [0, ∞): a bound on a risk,
    divergence, count or probability is never negative). Anything else is a broken formula
    or input, never a bound."""
    e = entry.entry
    if e.kind not in CHECKED_KINDS:
        return
    what = f"entry '{e.id}': the {e.kind} {e.output} value"
    if not math.isfinite(log_abs) and sign != 0:
        raise DomainError(f"{what} is not a finite number ({value:g}); refused")
    rng = e.output_range
    # beyond double range but finite in signed-log form: only the sign can be checked
    inside = (bool(rng.contains(np.float64(value))) if math.isfinite(value)
              else (rng.hi == math.inf if sign > 0 else rng.lo == -math.inf))
    if not inside:
        raise DomainError(f"{what} {value:.6g} lies outside its output range "
                          f"{rng.text()}; refused")


def per_group_prior_js(entry: ValidatedEntry, name: str, cost: float) -> list[int] | None:
    """The Dziugaite–Roy indices j_g of a per-group σ (an indexed symbol with NAME_prior_c
    and NAME_prior_b), if they reproduce the charged cost; else None."""
    c, b = entry.scalars.get(f"{name}_prior_c"), entry.scalars.get(f"{name}_prior_b")
    if c is None or b is None or name not in entry.arrays:
        return None
    prior = PriorSpec(c=c, b=b)
    js = [prior.index_of(float(v)) for v in np.ravel(entry.arrays[name])]
    if not math.isclose(sum(PriorSpec.cost(j) for j in js), cost, rel_tol=1e-9):
        return None
    return js


def enclose_value(entry: ValidatedEntry, values: Mapping[str, float],
                  costs: Mapping[str, float], value: float, log10: float,
                  selected: Mapping[str, np.ndarray] | None = None
                  ) -> tuple[float, float, dict[str, Any] | None, list[str]]:
    """Evaluate the expression at the resolved point in interval arithmetic.

    Returns (printed value = the interval's upper end rounded up to a double, its log10,
    the interval record, notes). δ_eff enters as an interval around the float δ·e^{−cost}
    that covers its rounding; δ and every other confidence share are first taken at
    :func:`~boundcalc.rounding.at_most_decimal` (0.05 at the largest double below the decimal
    0.05), so "probability ≥ 1 − δ" holds of the decimal δ is written as. Where no enclosure is possible the float value is kept and
    a note says so.
    """
    from ..engine.interval import (ChargedDelta, IntervalUnavailable, enclose, lower_float,
                                   upper_float)

    e = entry.entry
    scalars: dict[str, Any] = {**entry.scalars, **values}
    conf = confidence_symbol(e)
    if conf is not None:
        grid_counts, prior_js, other = [], [], []
        for name, cost in costs.items():
            p = e.parameters.get(name)
            js = per_group_prior_js(entry, name, cost)
            j = (p.prior.index_of(values[name])
                 if p is not None and p.choice == "prior" else None)
            size = len(entry.grids.get(name, ())) if p is not None and p.grid is not None else 0
            count = round(cost / math.log(size)) if size > 1 else 0
            # exact forms only where they reproduce the charged cost (a hand-set value may
            # have been charged on the declared grid); else the cost enters as a float
            if j is not None and math.isclose(PriorSpec.cost(j), cost, rel_tol=1e-12):
                prior_js.append(j)
            elif count > 0 and math.isclose(count * math.log(size), cost, rel_tol=1e-12):
                grid_counts.append((count, size))
            elif js is not None:
                prior_js.extend(js)
            elif cost != 0:
                other.append(cost)
        scalars[conf] = ChargedDelta(at_most_decimal(entry.scalars[conf]), grid_counts,
                                     prior_js, other)
    for name, spec in e.symbols.items():  # every δ share at most the decimal it is written as
        if spec.role == "confidence" and name != conf and name in scalars:
            scalars[name] = at_most_decimal(scalars[name])
    try:
        lo, hi = enclose(e.expression, scalars, entry.arrays, entry.grids, selected)
    except IntervalUnavailable as exc:
        return value, log10, None, [f"interval evaluation unavailable ({exc}); the value "
                                    f"is the float result, which may lie a few ulps low"]
    import mpmath

    up, down = upper_float(hi), lower_float(lo)
    fin = lambda x: x if math.isfinite(x) else None  # noqa: E731 - JSON has no inf
    record: dict[str, Any] = {"lower": fin(down), "upper": fin(up),
                              "float_value": fin(value), "agrees": True}
    notes: list[str] = []
    tol = 1e-12 * max(abs(down), abs(up)) if math.isfinite(up) else math.inf
    if math.isfinite(value) and not (down - tol <= value <= up + tol):
        record["agrees"] = False
        notes.append(f"the float evaluation ({value!r}) lies outside the interval "
                     f"[{down!r}, {up!r}] by more than rounding; the printed value is the "
                     f"interval's upper end")
    elif up > 0 and math.isfinite(up) and (up - down) > 1e-9 * up:
        notes.append(f"the interval [{down:.17g}, {up:.17g}] is wider than 1e-9 relative; "
                     f"the printed value is its upper end")
    log_up = float(mpmath.log10(hi)) if hi > 0 else (-math.inf if hi == 0 else math.nan)
    return up, (log_up if hi > 0 else log10), record, notes


def exact_value(entry: ValidatedEntry, values: Mapping[str, float],
                costs: Mapping[str, float], digits: int = 30) -> Any:
    """The value at the resolved point (``values``, ``costs``) by SymPy substitution and
    ``evalf`` at ``digits`` digits.

    Sums and products are expanded over the concrete index ranges, every indexed value is
    substituted, and ``GridMin`` becomes a ``Min`` over its grid.
    """
    import sympy as sp

    from ..engine.functions import Cases, GridMin

    e = entry.entry
    if isinstance(e.expression, Node):
        raise BoundcalcError(f"entry '{e.id}': exact_value needs the entry's SymPy "
                             f"form; load the registry with symbolic=True (the default)")
    subs: dict[sp.Basic, Any] = {}
    for name, x in {**entry.scalars, **values}.items():
        sym = e.symbols[name].symbol if name in e.symbols else e.parameters[name].symbol
        subs[sym] = sp.Float(repr(float(x)), digits)
    conf = confidence_symbol(e)
    if conf is not None:
        subs[e.symbols[conf].symbol] = sp.Float(repr(entry.delta_effective(costs)), digits)

    def expand(x: sp.Basic) -> sp.Basic:
        if isinstance(x, GridMin):
            body, p = x.args
            return sp.Min(*[expand(body.xreplace({p: sp.Float(repr(float(g)), digits)}))
                            for g in entry.grids[p.name]])
        if isinstance(x, Cases):
            a = [expand(y) for y in x.args]
            pairs = [(a[i], a[i + 1]) for i in range(0, len(a) - 1, 2)] + [(a[-1], True)]
            return sp.Piecewise(*pairs)
        if isinstance(x, (sp.Sum, sp.Product)):
            body = x.function
            for var, lo, hi in x.limits:
                lo_v, hi_v = (int(round(float(sp.sympify(y).xreplace(subs)))) for y in (lo, hi))
                # subs (unlike xreplace) leaves inner bound variables of the same name alone
                parts = [body.subs(var, sp.Integer(i)) for i in range(lo_v, hi_v + 1)]
                body = (sp.Add if isinstance(x, sp.Sum) else sp.Mul)(*parts)
            return expand(body)
        if isinstance(x, sp.Indexed):
            idx = tuple(int(round(float(expand(i).xreplace(subs)))) for i in x.indices)
            return sp.Float(repr(float(entry.arrays[x.base.label.name][idx])), digits)
        if not x.args:
            return x.xreplace(subs)
        return x.func(*[expand(a) for a in x.args])

    return sp.N(expand(e.expression).xreplace(subs), digits)


def check_assumptions(entry: ValidatedEntry, ctx: Context) -> list[dict[str, Any]]:
    """Each assumption's text, check and status at ``ctx``: ``holds``/``fails`` where its
    check evaluates, ``unknown`` where a side is undefined, ``unchecked`` without a check."""
    out = []
    for asm in entry.entry.assumptions:
        status = "unchecked"
        if asm.check is not None:
            check = as_tree(asm.check.expr)
            try:
                sides = [entry.compiled.compile(x)(ctx) for x in check.args[:2]]
                if any(np.any(np.isnan(x.s)) for x in sides):
                    status = "unknown"  # a side is undefined: never report "holds"
                else:
                    cond = entry.compiled.condition(check)(ctx)
                    status = "holds" if bool(np.all(cond)) else "fails"
            except (DomainError, KeyError):
                status = "unknown"
        out.append({"text": asm.text, "check": asm.check.text if asm.check else None,
                    "status": status})
    return out
