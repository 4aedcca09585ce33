"""Parameters measured at points: a free parameter whose inputs were measured at a few values.

A formula symbol bound to ``curves.NAME`` (for example the Monte Carlo Gibbs risk, or the
perturbed-loss term P̂) is a function of one free parameter (σ, γ) that was measured only at the
curve's ``at`` points. The entry declares that parameter with ``measured = true``. Then:

* with a stats file the parameter is chosen **only among the measured points** (all of the
  entry's curves must share them); each point is evaluated with its own measured values and the
  smallest value is kept;
* the choice is paid for: a ``grid`` parameter costs ln |declared grid| (a uniform union bound;
  the measured points must lie on the grid, and when they are all of it, as ``measure`` does for
  the Lintilhac–Shaikh mesh and Bartlett's γ grid, this is ln |points|; it is never less,
  because which points were measured may itself depend on the data); a ``prior`` parameter
  costs the Dziugaite–Roy weight of the chosen point, 2 ln j + ln(π²/6), valid for any
  data-dependent choice of j;
* every other confidence symbol of the entry (the δ′ of a Monte Carlo step) is split over the
  points: each point is evaluated at δ′/|points|, so that all the per-point statements hold
  together with probability ≥ 1 − δ − δ′ (union bound); the reported δ is the full δ + δ′;
* a curve symbol set by hand (``--set P_hat=17000``) holds at one point only: the parameter must
  then be given too, is used exactly (never moved by the optimizer), and the result is labelled
  estimated.

A per-group Gaussian posterior (curve ``gibbs_risk_groups``, ``measure --tune-data`` /
``--sigma-groups``) also takes its shape ρ_g and distances ‖w_g − w₀,g‖² from the stats file's
``provenance.gibbs_groups`` (:func:`tuned_inputs`); the bound-trained Gibbs posterior (curve
``gibbs_risk_learned``, ``certify --posterior bound``) takes them, its group sizes and its learned
σ_Q,g from ``provenance.gibbs_learned``. The shape is a per-group Dziugaite–Roy choice:
charged Σ_g [2 ln j_g + ln(π²/6)] through the evaluator's per-group prior rule, unless the record
says it was chosen on data disjoint from S with the prior weights only, which is free.
"""

from __future__ import annotations

import math
from decimal import Decimal
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .binding import bind
from .errors import BoundcalcError, DomainError, StatsError, one_line
from .evaluation import Prepared, confidence_symbol
from .files import as_finite_float
from .registry.schema import Entry, ParameterSpec
from .rounding import decimal_total, share
from .result import Result
from .stats import Curve, Stats
from .words import command, set_value

HAND_SET = "set by hand: a value measured at one point, with no confidence term of its own"

Runner = Callable[[Entry, dict[str, Any], dict[str, float], dict[str, str]], Result]


def measured_parameter(entry: Entry) -> ParameterSpec | None:
    """The entry's ``measured = true`` parameter, if any."""
    return next((p for p in entry.parameters.values() if getattr(p, "measured", False)), None)


def curve_symbols(entry: Entry) -> dict[str, str]:
    """``{symbol: curve name}`` for the symbols bound to ``curves.NAME``."""
    return {n: s.stat.split(".", 1)[1] for n, s in entry.symbols.items()
            if s.stat and s.stat.startswith("curves.")}


def hand_set(entry: Entry, values: Mapping[str, Any],
             params: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Estimated-labels for curve symbols set by hand; refuses them without their point."""
    p = measured_parameter(entry)
    hand = [s for s in curve_symbols(entry) if s in values]
    if p is None or not hand:
        return {}
    if p.name not in values and p.name not in (params or {}):
        raise DomainError(
            f"entry '{entry.id}': '{hand[0]}' was set by hand, so it holds at one {p.name} "
            f"only; give that point with {set_value(p.name)} ({p.name} is then used exactly, "
            f"never moved), or measure '{entry.symbols[hand[0]].stat}' at several points with "
            f"`{command('measure MODEL data=DATA')}`")
    return {s: HAND_SET for s in hand}


def _curves(entry: Entry, stats: Stats | None, values: Mapping[str, Any]) -> dict[str, Curve]:
    out = {}
    for sym, name in curve_symbols(entry).items():
        if sym in values or stats is None or name not in stats.curves:
            return {}
        out[sym] = stats.curves[name]
    return out


def _common_points(entry: Entry, p: ParameterSpec, curves: dict[str, Curve]) -> np.ndarray:
    at = None
    for sym, c in curves.items():
        if c.param != p.name:
            raise StatsError(f"curves.{curve_symbols(entry)[sym]}: measured against "
                             f"'{c.param}', but entry '{entry.id}' chooses '{p.name}'")
        pts = np.asarray(c.at, dtype=np.float64)
        at = pts if at is None else np.array([x for x in at
                                              if np.any(np.isclose(pts, x, rtol=1e-9, atol=0))])
    if at is None or at.size == 0:
        raise StatsError(f"entry '{entry.id}': its curves ({', '.join(curves)}) share no "
                         f"measured {p.name}")
    return np.sort(at)


def _value_at(c: Curve, x: float) -> float:
    j = int(np.argmin(np.abs(np.asarray(c.at) - x)))
    return float(c.value[j])


def _on_grid(entry: Entry, p: ParameterSpec, at: np.ndarray,
             declared: np.ndarray | None) -> np.ndarray:
    """The measured points that are points of the parameter's declared grid or prior (a curve
    may also hold points for other entries' grids; the choice is only among these)."""
    if p.choice == "prior":
        keep = [x for x in at if math.isclose(float(p.prior.value(p.prior.index_of(float(x)))),
                                              float(x), rel_tol=1e-9)]
    else:
        assert declared is not None
        keep = [x for x in at if np.any(np.isclose(declared, x, rtol=1e-9, atol=1e-15))]
    if not keep:
        where = "prior grid" if p.choice == "prior" else "declared grid"
        raise StatsError(f"entry '{entry.id}': none of the measured {p.name} "
                         f"({', '.join(f'{x:g}' for x in at[:6])}) is a point of its {where}")
    return np.asarray(keep, dtype=np.float64)


GROUPS_CURVE = "gibbs_risk_groups"
# the curves whose entries read per-group inputs from a provenance record, and that record
RECORDS = {GROUPS_CURVE: "gibbs_groups", "gibbs_risk_learned": "gibbs_learned"}
_SHAPE, _DIST = "rho", "dist_sq"
# further per-group inputs: {symbol: (record key, positive)}, read when the entry has the symbol
_PER_GROUP = {"d": ("n_params", True), "sigma_post": ("sigma_post", True)}


def _record_list(rec: Mapping[str, Any], key: str, n: int | None, positive: bool,
                 record: str = "gibbs_groups") -> list[float]:
    v = rec.get(key)
    if not isinstance(v, list) or not v or (n is not None and len(v) != n):
        raise StatsError(f"provenance.{record}.{key}: expected a list of "
                         f"{n if n is not None else 'one or more'} numbers")
    out = []
    for i, x in enumerate(v):
        f = as_finite_float(x)
        if f is None or f < 0 or (positive and f == 0):
            raise StatsError(f"provenance.{record}.{key}[{i}]: expected a "
                             f"{'positive' if positive else 'non-negative'} finite number, "
                             f"got {str(x)[:30]}")
        out.append(f)
    return out


def tuned_inputs(entry: Entry, stats: Stats | None, values: Mapping[str, Any]
                 ) -> tuple[Entry, dict[str, Any], str] | None:
    """For an entry on the ``gibbs_risk_groups`` (or ``gibbs_risk_learned``) curve: (the entry
    to evaluate, the values of ρ and ‖w_g − w₀,g‖² (and of d_g, σ_Q,g where the entry has
    them) from ``provenance.gibbs_groups`` (``gibbs_learned``), how ρ was chosen). A ρ chosen
    on data disjoint from S is free: the entry is evaluated without ρ's Dziugaite–Roy grid, so
    nothing is charged for it; any other ρ stays on that grid and is charged per group."""
    import dataclasses

    curve = next((c for c in curve_symbols(entry).values() if c in RECORDS), None)
    if stats is None or curve is None:
        return None
    name = RECORDS[curve]
    rec = stats.provenance.get(name)
    if rec is None:
        return None
    if not isinstance(rec, dict):
        raise StatsError(f"provenance.{name}: expected an object")
    groups = rec.get("groups")
    if not isinstance(groups, list) or not groups or not all(isinstance(g, str) for g in groups):
        raise StatsError(f"provenance.{name}.groups: expected a list of group names")
    G = len(groups)
    extra: dict[str, Any] = {}
    if _DIST in entry.symbols and _DIST not in values:
        extra[_DIST] = np.array(_record_list(rec, "dist_sq", G, False, name))
    for sym, (key, positive) in _PER_GROUP.items():
        if sym in entry.symbols and sym not in values:
            extra[sym] = np.array(_record_list(rec, key, G, positive, name))
    free = rec.get("shape_disjoint_from_S")
    if not isinstance(free, bool):
        raise StatsError(f"provenance.{name}.shape_disjoint_from_S: expected true or false")
    if _SHAPE not in entry.symbols or _SHAPE in values:
        return entry, extra, "given by hand: a Dziugaite–Roy grid point per group, charged"
    extra[_SHAPE] = np.array(_record_list(rec, "shape", G, True, name))
    where = str(rec.get("shape_chosen_on", "?"))[:200]
    if not free:
        return entry, extra, (f"chosen on {where}: Dziugaite–Roy weight per group charged "
                              "(union_bound_cost.rho)")
    drop = {f"{_SHAPE}_prior_c", f"{_SHAPE}_prior_b"}
    variant = dataclasses.replace(entry, symbols={k: v for k, v in entry.symbols.items()
                                                  if k not in drop})
    return variant, extra, f"chosen on {where}, disjoint from S: no union-bound cost"


SIGMA_RECORD = "gibbs_sigma"  # provenance of an isotropic σ chosen on the tune split


def chosen_off_sample(entry: Entry, p: ParameterSpec, stats: Stats | None,
                      curves: Mapping[str, Curve]) -> tuple[Entry, str] | None:
    """For an entry whose ``prior`` parameter σ is measured on ``curves.gibbs_risk_mean``: when
    ``provenance.gibbs_sigma`` says that σ was chosen on a split disjoint from S with the prior
    weights only (``measure --tune-data``; :mod:`boundcalc.measure.data.sizing`), the entry
    with σ ``fixed`` (nothing depends on S, so no Dziugaite–Roy weight is charged) and the line
    that says so. The file's checks (:mod:`boundcalc.stats_checks`) hold the curve to that one
    point. None otherwise: σ stays on its grid and pays 2 ln j + ln(π²/6)."""
    import dataclasses

    names = {curve_symbols(entry)[s] for s in curves}
    if stats is None or p.choice != "prior" or "gibbs_risk_mean" not in names:
        return None
    rec = stats.provenance.get(SIGMA_RECORD)
    if not isinstance(rec, dict) or rec.get("disjoint_from_S") is not True:
        return None
    spec = dataclasses.replace(p, choice="fixed", prior=None)
    variant = dataclasses.replace(entry, parameters={**entry.parameters, p.name: spec})
    where = str(rec.get("chosen_on", "?"))[:200]
    return variant, f"chosen on {where}, disjoint from S: fixed before S was read, not charged"


def over_points(entry: Entry, stats: Stats | None, values: Mapping[str, Any],
                params: Mapping[str, Any] | None, estimated: Mapping[str, str] | None,
                run: Runner) -> Result | None:
    """Evaluate (or optimise, through ``run``) at every measured point and keep the smallest.

    Returns None when the entry has no measured parameter or its curves are not in ``stats``
    (the caller then evaluates as usual, e.g. with hand-set values).
    """
    p = measured_parameter(entry)
    if p is None:
        return None
    values = dict(values)
    params = dict(params or {})
    curves = _curves(entry, stats, values)
    if not curves:
        return None
    tuned = tuned_inputs(entry, stats, values)
    variant, shape_note = entry, None
    if tuned is not None:
        variant, extra, shape_note = tuned
        values = {**extra, **values}
    off_sample = chosen_off_sample(entry, p, stats, curves)
    if off_sample is not None:
        variant = off_sample[0]
    at = _common_points(entry, p, curves)
    given = values.pop(p.name, params.pop(p.name, None))
    if given is not None:
        x = float(given)
        if not np.any(np.isclose(at, x, rtol=1e-9, atol=0)):
            raise DomainError(f"entry '{entry.id}': {p.name} = {x:g} is not a point where "
                              f"{', '.join(curves)} was measured (points: "
                              f"{', '.join(f'{a:g}' for a in at[:8])})")
    n_points = len(at)
    loose = bind(entry, stats, values, strict=False)
    first = {**loose.values, **{s: _value_at(c, float(at[0])) for s, c in curves.items()}}
    declared = None
    if p.choice == "grid":
        probe = Prepared(entry, {k: v for k, v in first.items() if k in entry.symbols})
        declared = probe.grids[p.name]
    at = _on_grid(entry, p, at, declared)
    n_points = len(at)
    charged = confidence_symbol(entry)
    split: dict[str, float] = {}
    for name, spec in entry.symbols.items():
        if spec.role == "confidence" and name != charged:
            full = float(loose.values.get(name, spec.default if spec.default is not None
                                          else math.nan))
            if math.isfinite(full):
                split[name] = full
    est = dict(estimated or {})
    for sym, c in curves.items():
        if c.estimated and sym not in entry.estimated_inputs_ok:
            est[sym] = (c.method or "estimated") + (
                f" ({c.confidence:.0%} CI given per point)" if c.ci is not None else "")
    targets = [float(given)] if given is not None else [float(a) for a in at]
    best: Result | None = None
    rows = []
    errors: list[str] = []
    for x in targets:
        vals = dict(values)
        vals.update({s: _value_at(c, x) for s, c in curves.items()})
        vals.update({s: share(v, n_points) for s, v in split.items()})
        try:
            r = run(variant, vals, {**params, p.name: x}, est)
        except BoundcalcError as exc:
            errors.append(one_line(str(exc)) if str(exc) else type(exc).__name__)
            rows.append({p.name: x, "value": None, "error": errors[-1]})
            continue
        rows.append({p.name: x, "value": r.value if math.isfinite(r.value) else None,
                     **{s: vals[s] for s in curves}})
        if best is None or (math.isfinite(r.value) and not r.value >= best.value):
            best = r
    if best is None:
        raise DomainError(errors[0] if errors else f"entry '{entry.id}': no measured point")
    cost_rule = (f"ln {len(declared)} (uniform over the declared grid)" if p.choice == "grid"
                 else f"none ({off_sample[1]})" if off_sample is not None
                 else "the Dziugaite–Roy weight of the chosen point")
    best.parameter_choice[p.name] = (
        f"best of {len(targets)} of the {n_points} points where {', '.join(curves)} was "
        f"measured; cost {cost_rule}")
    if split:
        if best.delta is not None:  # the row's δ with each split share replaced by its whole
            best.delta = decimal_total([best.delta, *split.values(),
                                        *(-Decimal(repr(share(v, n_points)))
                                          for v in split.values())])
        best.notes.append(
            "union bound over the measured points: " + ", ".join(
                f"{s} = {v:g} split into {n_points} × {share(v, n_points):.4g}"
                for s, v in split.items())
            + "; the reported δ is the full total")
    if shape_note is not None:
        best.parameter_choice[_SHAPE] = shape_note
    best.extra["measured_points"] = {"param": p.name, "choice": p.choice, "points": rows,
                                     "split": {s: share(v, n_points) for s, v in split.items()}}
    return best
