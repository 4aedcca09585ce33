"""Stage 2, choose parameters: every scalar free parameter gets a value, a story and a cost.

Contract of :func:`resolve_parameters`: returns ``(values, choice, costs)`` where ``values``
holds every scalar free parameter, inside its domain and, for ``grid``/``prior`` parameters, a
point of the grid; ``choice`` says how each was chosen; ``costs`` holds the union-bound cost in
nats of every choice made after seeing the data (GridMin grids, hand-set per-group σ_g, every
grid/prior parameter not declared ``fixed``). A value is taken, in order, from the caller
(user or optimizer), the parameter's default, or its closed form, which only says where to
look: the best admissible grid/prior point near it is taken (:func:`improve_grid_points`).

The starting points and grid snapping here are shared with the optimizer
(:mod:`boundcalc.optimize.core`).
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from ..errors import DomainError, MissingValueError
from ..registry.schema import ParameterSpec, PriorSpec
from ..words import command, option, set_value
from .validate import ValidatedEntry, as_scalar, nearest_index


def discrete_start(spec: ParameterSpec, grids: Mapping[str, np.ndarray]) -> float | None:
    """Where a search over a grid or prior parameter starts: the grid's middle point, or the
    prior's first point j = 1; None for a continuous parameter."""
    if spec.choice == "grid":
        grid = grids[spec.name]
        return float(grid[len(grid) // 2])
    if spec.choice == "prior":
        return float(spec.prior.value(1))
    return None


def closed_form_seed(spec: ParameterSpec, grids: Mapping[str, np.ndarray]) -> float:
    """Where the fixed-point iteration of the closed forms starts: :func:`discrete_start`, else
    the middle of the declared bounds (geometric when positive), else 1."""
    start = discrete_start(spec, grids)
    if start is not None:
        return start
    if spec.bounds is not None:
        lo, hi = spec.bounds
        return math.sqrt(lo * hi) if lo > 0 else (lo + hi) / 2
    return 1.0


def resolve_parameters(entry: ValidatedEntry, given: Mapping[str, float] | None = None,
                       how: Mapping[str, str] | None = None
                       ) -> tuple[dict[str, float], dict[str, str], dict[str, float]]:
    """Values, provenance and union-bound costs of every scalar free parameter.

    A given value (user or optimizer) is used as is for ``simultaneous``/``fixed``
    parameters, and must lie on the grid for ``grid``/``prior`` parameters (the nearest
    grid point is taken when the value came from a closed form or an optimizer).
    """
    e = entry.entry
    given = dict(given or {})
    for k, v in entry.raw.items():
        if k in e.parameters and k not in given:
            given[k] = as_scalar(v, e.id, k)
    how = dict(how or {})
    values: dict[str, float] = {}
    choice: dict[str, str] = {}
    costs: dict[str, float] = dict(entry.gridmin_cost)
    costs.update(entry.hand_set_prior_costs())
    pending = entry.scalar_params()
    for p in pending:
        if p.name in given:
            v, src = float(given[p.name]), how.get(p.name, "given")
        elif p.default is not None:
            v, src = p.default, "default"
        elif p.closed_form is not None:
            v, src = None, "closed form"
        else:
            raise MissingValueError(
                f"entry '{e.id}': free parameter '{p.name}' has no value; set it "
                f"with {set_value(p.name, '...')} or choose it with `{command('optimize ID')}`")
        values[p.name] = v  # type: ignore[assignment]
        choice[p.name] = src
    iterate_closed_forms(entry, [p for p in pending if values[p.name] is None], values, choice)
    for p in pending:
        v = values[p.name]
        if p.name in entry.fixed and choice[p.name] == "given":
            choice[p.name] = "given, declared fixed before seeing the data (not charged)"
        elif p.choice == "grid":
            grid = entry.grids[p.name]
            j = nearest_index(grid, v, p.log_scale)
            if choice[p.name] == "given" and not math.isclose(grid[j], v, rel_tol=1e-9,
                                                                abs_tol=1e-12):
                raise DomainError(f"entry '{e.id}': parameter '{p.name}' = {v:g} is "
                                  f"not on its declared grid (nearest point {grid[j]:g})")
            if grid[j] != v:
                choice[p.name] += f", snapped to grid point {j + 1}/{len(grid)}"
            values[p.name] = float(grid[j])
            costs[p.name] = math.log(len(grid))
        elif p.choice == "prior":
            assert p.prior is not None
            if not (math.isfinite(v) and v > 0):
                raise DomainError(f"entry '{e.id}': parameter '{p.name}' = {v:g} "
                                  f"is not a positive finite point of its prior grid")
            j = p.prior.index_of(v)
            snapped = float(p.prior.value(j))
            if choice[p.name] == "given" and not math.isclose(snapped, v, rel_tol=1e-9):
                # the data (e.g. a Gibbs risk) were measured at v, not at the grid point
                raise DomainError(f"entry '{e.id}': parameter '{p.name}' = {v:g} is "
                                  f"not on its prior grid (nearest point j={j}: {snapped:g}); "
                                  f"give a grid point, or {option('fixed', p.name)} if it was "
                                  f"chosen before seeing the data")
            if snapped != v:
                choice[p.name] += f", snapped to prior grid point j={j}"
            values[p.name] = snapped
            costs[p.name] = PriorSpec.cost(j)
        if not bool(p.domain.contains(values[p.name])):
            raise DomainError(f"entry '{e.id}': parameter '{p.name}' = "
                              f"{values[p.name]:g} lies outside {p.domain.text()}")
    improve_grid_points(entry, pending, values, choice, costs)
    return values, choice, costs


def improve_grid_points(entry: ValidatedEntry, pending: list[ParameterSpec],
                        values: dict[str, float], choice: dict[str, str],
                        costs: dict[str, float]) -> None:
    """A closed form only says where to look: move each grid/prior parameter it placed to
    the best admissible point (coordinate search, each grid exhaustively, prior j on a
    coarse scan plus a window), so the value never gets worse when δ grows."""
    todo = [p for p in pending if choice[p.name].startswith("closed form")
            and p.choice in ("grid", "prior")]
    if not todo:
        return
    best = value_or_inf(entry, values, costs)
    for _ in range(2):
        moved = False
        for p in todo:
            if p.choice == "grid":
                grid = entry.grids[p.name]
                j0 = nearest_index(grid, values[p.name], p.log_scale)
                idx = np.unique(np.r_[np.linspace(0, len(grid) - 1, min(len(grid), 64))
                                      .astype(int),
                                      np.arange(max(0, j0 - 32), min(len(grid), j0 + 33))])
                cands = [(float(grid[i]), costs[p.name]) for i in idx]
            else:
                j0 = p.prior.index_of(values[p.name])
                js = np.arange(max(1, j0 - 60), min(p.prior.j_max, j0 + 60) + 1, 3)
                cands = [(float(p.prior.value(int(j))), PriorSpec.cost(int(j))) for j in js]
            for v, cost in cands:
                trial_v, trial_c = {**values, p.name: v}, {**costs, p.name: cost}
                val = value_or_inf(entry, trial_v, trial_c)
                if val < best:
                    best, moved = val, True
                    values[p.name], costs[p.name] = v, cost
                    if "best admissible" not in choice[p.name]:
                        choice[p.name] = ("closed form as start, then the best admissible "
                                          "grid point")
        if not moved:
            return


def value_or_inf(entry: ValidatedEntry, values: Mapping[str, float],
                 costs: Mapping[str, float]) -> float:
    """The float value at a point, +∞ where it is undefined (a search never picks it)."""
    try:
        v = entry.value(values, costs)
    except DomainError:
        return math.inf
    return v if not math.isnan(v) else math.inf


def iterate_closed_forms(entry: ValidatedEntry, todo: list[ParameterSpec],
                         values: dict[str, float], choice: dict[str, str]) -> None:
    """Evaluate closed forms, which may depend on data and on each other (even in a cycle,
    e.g. σ* needs λ and λ* needs KL(σ)): a fixed-point iteration from a seed."""
    if not todo:
        return
    for p in todo:
        values[p.name] = closed_form_seed(p, entry.grids)
    for _ in range(100):
        moved = False
        for p in todo:
            raw = entry.eval_scalar(p.closed_form, entry.context(values))
            v = tame_closed_form(entry, p, raw, choice)
            moved |= not math.isclose(v, values[p.name], rel_tol=1e-12, abs_tol=0.0)
            values[p.name] = v
        if not moved:
            return
    for p in todo:
        choice[p.name] += " (fixed-point iteration of the closed forms did not settle)"


def tame_closed_form(entry: ValidatedEntry, p: ParameterSpec, v: float,
                     choice: dict[str, str]) -> float:
    """A closed form is only a heuristic for where to evaluate a grid/prior parameter (any
    grid point is valid): an undefined, infinite or non-positive value goes to a grid end."""
    if math.isfinite(v) and (v > 0 or p.choice not in ("grid", "prior")):
        return v
    if p.choice == "grid":
        grid = entry.grids[p.name]
        end = float(grid.max() if v == math.inf else grid.min() if v <= 0 else grid[0])
    elif p.choice == "prior":
        end = float(p.prior.value(p.prior.j_max if v <= 0 else 1))
    else:
        raise DomainError(f"entry '{entry.entry.id}': closed form of '{p.name}' is not "
                          f"finite ({v})")
    if "(closed form" not in choice[p.name]:
        choice[p.name] += f" (closed form gave {v:g}; took the grid end {end:g})"
    return end
