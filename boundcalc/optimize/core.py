"""Choose an entry's free parameters: closed forms, grids, priors, SciPy and geometric programs.

Each parameter is chosen the way its theorem allows (``choice`` in the formula file):

* ``simultaneous``: continuous search on its bounds (log coordinates when scale-free): a scan
  and bounded Brent in 1-D, multi-start L-BFGS-B otherwise; when the bound is log-log convex
  in these parameters, also a geometric program (CVXPY) for a certified global optimum;
* ``grid``: exhaustive over the declared grid (one vectorised evaluation), ln|grid| charged;
* ``prior``: exhaustive over j = 1..J of the Dziugaite–Roy grid, the value at j evaluated at
  δ·6/(π²j²) so the search sees its own cost;
* ``fixed`` (or given with ``--set``): never optimised.

Several free parameters are optimised alternately (block coordinate descent) until nothing
changes. Declared closed forms are evaluated and cross-checked against the numeric optimum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from ..errors import DomainError, MissingValueError, OptimizationError
from ..stages.choose import discrete_start
from ..stages.validate import nearest_index
from ..evaluation import Prepared, Result, confidence_symbol
from ..registry.schema import ParameterSpec, PriorSpec
from ..options import Record, Spec, spec
from ..words import set_value
from .batch import BatchEvaluator
from .gp import solve_gp
from .search import Axis, Found, argmin_batch, minimize_1d, minimize_nd

PRIOR_J_CAP = 20_000
_SPAN = 1e10  # artificial search range around a scale when a domain end is 0 or infinite


@dataclass(frozen=True)
class Options(Record):
    """Knobs of :func:`optimize_prepared` (defaults are what the CLI uses), declared
    (:mod:`boundcalc.options`: checked when built, in one wording)."""

    starts: int = spec(4, Spec(int, low=1, help=(
        "starts of the local search over two or more continuous parameters")))
    scan: int = spec(65, Spec(int, low=2, unit="points", help="points of the first scan of a "
                                                             "continuous parameter"))
    prior_j_cap: int = spec(PRIOR_J_CAP, Spec(int, low=1, help=(
        "the largest index j of a Dziugaite–Roy prior grid searched")))
    use_gp: bool = spec(True, Spec(bool, help="search the index parameters by a Gaussian "
                                              "process"))
    sensitivity: bool = spec(True, Spec(bool, help="the derivatives of the bound at the "
                                                   "chosen point"))
    contributions: bool = spec(True, Spec(bool, help="each term's share of the bound"))
    # on, as the optimize command explains one entry; a comparison of many entries turns it
    # off (optimize.compare, certify.model_rows)
    what_if: bool = spec(True, Spec(bool, help=(
        "what it would take: the smallest n and the shrink factor of a statistic that would "
        "bring the bound to the target, and the n/δ tables")))
    # None: the vacuity level (floor.vacuity_level), set by optimize
    target: float | None = spec(None, Spec(float, low=0, open_low=True, none=True, help=(
        "the level the what-if asks for; None (not given): the vacuity level, the trivial "
        "predictor's error for a 0-1 risk where the stats file gives it, else 1")))
    target_rule: str | None = spec(None, Spec(str, none=True, help=(
        "what the target is, in words (set with it)")))
    shrink: str | None = spec(None, Spec(str, none=True, help=(
        "the statistic whose shrink factor the what-if finds; None (not given): the most "
        "sensitive measured one")))


@dataclass
class Choice:
    """The chosen parameters with the story of how they were chosen."""

    values: dict[str, float]
    how: dict[str, str]
    method: str
    certified: bool
    certified_reason: str
    value: float
    details: dict[str, Any] = field(default_factory=dict)


class ScalarProblem:
    """The scalar free parameters of one prepared entry and their search."""

    def __init__(self, prepared: Prepared, options: Options):
        self.p = prepared
        self.o = options
        self.entry = prepared.entry
        self.batch = BatchEvaluator(prepared)
        self.conf = confidence_symbol(self.entry)
        self.fixed: dict[str, float] = {}
        self.how: dict[str, str] = {}
        self.cont: list[ParameterSpec] = []
        self.grid: list[ParameterSpec] = []
        self.prior: list[ParameterSpec] = []
        self.evaluations = 0
        given = {k: v for k, v in prepared.raw.items() if k in self.entry.parameters}
        for spec in prepared.scalar_params():
            if spec.name in given:
                self.fixed[spec.name] = float(np.asarray(given[spec.name], dtype=float))
                self.how[spec.name] = "given"
            elif spec.choice == "fixed" or not getattr(spec, "optimize", True):
                if spec.default is None:
                    why = ("must be fixed before seeing the data" if spec.choice == "fixed" else
                           "is not optimised (optimize = false: inputs are measured at it)")
                    raise MissingValueError(
                        f"entry '{self.entry.id}': parameter '{spec.name}' {why}; give it with "
                        f"{set_value(spec.name)}")
                self.fixed[spec.name] = spec.default
                self.how[spec.name] = "fixed (default)"
            elif spec.choice == "simultaneous":
                self.cont.append(spec)
            elif spec.choice == "grid":
                self.grid.append(spec)
            else:
                self.prior.append(spec)
        self.prior_j: dict[str, int] = {}

    # ---- costs and evaluation ----------------------------------------------------------
    def costs(self, state: Mapping[str, float], prior_j: Mapping[str, int]) -> dict[str, float]:
        out = dict(self.p.gridmin_cost)
        for spec in self.p.scalar_params():
            if spec.choice == "grid":
                out[spec.name] = math.log(len(self.p.grids[spec.name]))
            elif spec.choice == "prior":
                j = prior_j.get(spec.name)
                if j is None:
                    j = spec.prior.index_of(state[spec.name])
                out[spec.name] = PriorSpec.cost(j)
        return out

    def delta_eff(self, costs: Mapping[str, float]) -> float | None:
        return self.p.delta_effective(costs)

    def evaluate(self, params: Mapping[str, Any], delta_eff: Any) -> np.ndarray:
        values = self.batch(params, delta_eff)
        self.evaluations += len(values)
        return values

    def point_value(self, state: Mapping[str, float], prior_j: Mapping[str, int]) -> float:
        v = self.evaluate(dict(state), self.delta_eff(self.costs(state, prior_j)))
        return float(v[0])

    # ---- initial point -----------------------------------------------------------------
    def axis(self, spec: ParameterSpec, scale: float | None) -> Axis:
        d = spec.domain
        lo, hi = (spec.bounds if spec.bounds is not None else (d.lo, d.hi))
        log = spec.log_scale or lo >= 0
        base = abs(scale) if scale is not None and scale != 0 and math.isfinite(scale) else 1.0
        lo_art = hi_art = False
        if log:
            if lo <= 0 or (d.lo_open and lo == d.lo and lo == 0):
                lo, lo_art = base / _SPAN, True
            if not math.isfinite(hi):
                hi, hi_art = base * _SPAN, True
            if spec.bounds is None and d.hi_open and math.isfinite(hi) and not hi_art:
                hi = hi * (1 - 1e-12)
            if spec.bounds is None and d.lo_open and not lo_art:
                lo = lo * (1 + 1e-12)
            return Axis(spec.name, math.log(lo), math.log(hi), True, lo_art, hi_art)
        if not math.isfinite(lo):
            lo, lo_art = (scale or 0.0) - _SPAN * base, True
        if not math.isfinite(hi):
            hi, hi_art = (scale or 0.0) + _SPAN * base, True
        eps = 1e-12 * max(1.0, abs(lo), abs(hi))
        if spec.bounds is None and d.lo_open and not lo_art:
            lo += eps
        if spec.bounds is None and d.hi_open and not hi_art:
            hi -= eps
        return Axis(spec.name, lo, hi, False, lo_art, hi_art)

    def closed_form(self, spec: ParameterSpec, state: Mapping[str, float]) -> float | None:
        if spec.closed_form is None:
            return None
        try:
            v = self.p.eval_scalar(spec.closed_form, self.p.context(dict(state)))
        except (DomainError, KeyError, ValueError):
            return None
        return v if math.isfinite(v) else None

    def initial(self) -> tuple[dict[str, float], dict[str, int]]:
        state: dict[str, float] = dict(self.fixed)
        prior_j: dict[str, int] = {}
        for spec in self.p.scalar_params():
            if spec.choice == "prior" and spec.name in self.fixed:
                prior_j[spec.name] = spec.prior.index_of(self.fixed[spec.name])
        free = [*self.cont, *self.grid, *self.prior]
        for spec in free:  # placeholders so closed forms that use other parameters evaluate
            state[spec.name] = spec.default if spec.default is not None else self._middle(spec)
        for _ in range(2):
            for spec in free:
                cf = self.closed_form(spec, state)
                if cf is not None:
                    state[spec.name] = cf
        for spec in self.grid:
            grid = self.p.grids[spec.name]
            state[spec.name] = float(grid[nearest_index(grid, state[spec.name], spec.log_scale)])
        for spec in self.prior:
            v = state[spec.name]
            j = spec.prior.index_of(v) if v > 0 else 1
            prior_j[spec.name] = j
            state[spec.name] = float(spec.prior.value(j))
        for spec in self.cont:
            ax = self.axis(spec, state[spec.name])
            u = ax.to_search(state[spec.name]) if (not ax.log or state[spec.name] > 0) else ax.lo
            state[spec.name] = float(ax.to_value(min(max(u, ax.lo), ax.hi)))
        return state, prior_j

    def _middle(self, spec: ParameterSpec) -> float:
        """A placeholder while closed forms are evaluated: the shared discrete start, else the
        middle of the search axis."""
        start = discrete_start(spec, self.p.grids)
        if start is not None:
            return start
        ax = self.axis(spec, None)
        return float(ax.to_value((ax.lo + ax.hi) / 2))

    # ---- blocks ------------------------------------------------------------------------
    def grid_step(self, spec: ParameterSpec, state: dict[str, float],
                  prior_j: dict[str, int]) -> None:
        grid = self.p.grids[spec.name]
        params = {**state, spec.name: grid}
        vals = self.evaluate(params, self.delta_eff(self.costs(state, prior_j)))
        i = argmin_batch(vals)
        if i < 0:
            raise OptimizationError(f"entry '{self.entry.id}': parameter '{spec.name}': the "
                                    f"bound is undefined or infinite at every grid point")
        state[spec.name] = float(grid[i])

    def prior_step(self, spec: ParameterSpec, state: dict[str, float],
                   prior_j: dict[str, int]) -> None:
        """j = 1..J: every ``step``-th j first (the bound is smooth in j: σ² changes by a factor
        e^{step/b} between neighbours), then every j in the window around the best."""
        cap = self.prior_cap(spec)
        step = self.prior_stride(spec)
        others = self.costs(state, prior_j)
        others.pop(spec.name, None)
        base = self.delta_eff(others)

        def best_of(j: np.ndarray) -> tuple[int, float]:
            costs = PriorSpec.cost(j)
            delta = None if base is None else base * np.exp(-costs)
            vals = self.evaluate({**state, spec.name: spec.prior.value(j)}, delta)
            i = argmin_batch(vals)
            return (int(j[i]), float(vals[i])) if i >= 0 else (-1, math.inf)

        j_best, _ = best_of(np.unique(np.r_[np.arange(1, cap + 1, step), cap]))
        if j_best < 0:
            raise OptimizationError(f"entry '{self.entry.id}': parameter '{spec.name}': the "
                                    f"bound is undefined or infinite at every prior grid point")
        if step > 1:
            j_best, _ = best_of(np.arange(max(1, j_best - step), min(cap, j_best + step) + 1))
        prior_j[spec.name] = j_best
        state[spec.name] = float(spec.prior.value(j_best))

    def prior_cap(self, spec: ParameterSpec) -> int:
        return int(min(spec.prior.j_max, self.o.prior_j_cap))

    def prior_stride(self, spec: ParameterSpec) -> int:
        """Coarse step in j: at most ~1000 coarse points, and σ² within a factor e^{0.25}."""
        return max(1, min(math.ceil(self.prior_cap(spec) / 1000), int(spec.prior.b // 4) or 1))

    def cont_step(self, state: dict[str, float], prior_j: dict[str, int]) -> Found:
        specs = self.cont
        axes = [self.axis(s, state[s.name]) for s in specs]
        delta = self.delta_eff(self.costs(state, prior_j))

        def f(U: np.ndarray) -> np.ndarray:
            params = dict(state)
            for k, ax in enumerate(axes):
                params[ax.name] = ax.to_value(U[:, k])
            return self.evaluate(params, delta)

        for attempt in range(2):
            if len(axes) == 1:
                found = minimize_1d(f, axes[0], self.o.scan)
            else:
                x0 = np.array([ax.to_search(state[ax.name]) if (not ax.log or state[ax.name] > 0)
                               else ax.lo for ax in axes])
                found = minimize_nd(f, axes, x0, self.o.starts)
            edge = [ax for k, ax in enumerate(axes)
                    if (ax.lo_artificial and found.u[k] <= ax.lo + 1e-6 * (ax.hi - ax.lo))
                    or (ax.hi_artificial and found.u[k] >= ax.hi - 1e-6 * (ax.hi - ax.lo))]
            if not edge:
                break
            if attempt == 1:
                ax = edge[0]
                side = "0" if found.u[axes.index(ax)] <= ax.lo + 1e-6 * (ax.hi - ax.lo) \
                    else "infinity"
                raise OptimizationError(
                    f"entry '{self.entry.id}': parameter '{ax.name}': the bound keeps "
                    f"decreasing towards {side}; no minimum inside its domain (declare bounds)")
            for ax in edge:  # widen the artificial ends and search again
                width = ax.hi - ax.lo
                if ax.lo_artificial:
                    ax.lo -= width
                if ax.hi_artificial:
                    ax.hi += width
        for k, ax in enumerate(axes):
            state[ax.name] = float(ax.to_value(found.u[k]))
        for spec in specs:  # integer parameters: the better neighbour of the continuous optimum
            if spec.domain.integer:
                x = state[spec.name]
                cands = np.array([c for c in (math.floor(x), math.ceil(x))
                                  if spec.domain.contains(float(c))], dtype=float)
                if not len(cands):
                    raise OptimizationError(f"entry '{self.entry.id}': no integer value of "
                                            f"'{spec.name}' near {x:g} lies in its domain")
                vals = self.evaluate({**state, spec.name: cands}, delta)
                state[spec.name] = float(cands[max(argmin_batch(vals), 0)])
                found.value = float(np.nanmin(vals))
        self.last_axes = axes
        return found

    # ---- driver ------------------------------------------------------------------------
    def solve(self) -> Choice:
        state, prior_j = self.initial()
        discrete = [*self.grid, *self.prior]
        found: Found | None = None
        rounds = 0
        if discrete or self.cont:
            for rounds in range(1, 31):
                before = (dict(state), dict(prior_j))
                for spec in discrete:
                    (self.grid_step if spec.choice == "grid" else self.prior_step)(
                        spec, state, prior_j)
                if self.cont:
                    found = self.cont_step(state, prior_j)
                if not discrete or not self.cont and len(discrete) == 1:
                    break
                # the continuous step depends only on the discrete choices: stop when they settle
                if all(before[0][s.name] == state[s.name] for s in discrete) \
                        and before[1] == prior_j:
                    break
            else:
                raise OptimizationError(
                    f"entry '{self.entry.id}': the alternating search over "
                    f"{', '.join(s.name for s in [*discrete, *self.cont])} did not settle in 30 "
                    f"rounds")
            if len(discrete) >= 2:
                before = (dict(state), dict(prior_j))
                self._polish_discrete(state, prior_j)
                if self.cont and (before[1] != prior_j or any(
                        before[0][s.name] != state[s.name] for s in discrete)):
                    found = self.cont_step(state, prior_j)
        # with nothing to choose, the final evaluation (result_for) gives the value
        value = self.point_value(state, prior_j) if discrete or self.cont else math.nan
        how = dict(self.how)
        details: dict[str, Any] = {"rounds": rounds, "parameters": {}}
        parts: list[str] = []
        for spec in self.grid:
            n = len(self.p.grids[spec.name])
            how[spec.name] = f"grid search (exhaustive over {n} points)"
            parts.append(f"grid search ({spec.name}: {n} points)")
        for spec in self.prior:
            cap, stride = self.prior_cap(spec), self.prior_stride(spec)
            scan = "every j" if stride == 1 else f"every {stride}th j, then every j near the best"
            how[spec.name] = (f"prior grid search (j = 1..{cap}, {scan}; chose "
                              f"j = {prior_j[spec.name]}, cost {PriorSpec.COST_TEXT})")
            parts.append(f"prior grid search ({spec.name}: j ≤ {cap})")
        if self.cont and found is not None:
            names = ", ".join(s.name for s in self.cont)
            for spec in self.cont:
                how[spec.name] = found.method
            parts.append(f"{found.method} ({names})")
        certified, reason = self._certified_discrete(prior_j)
        if self.cont:
            value, gp_ok, gp_reason = self._closed_forms_and_gp(state, prior_j, value, how,
                                                                details, found, parts)
            if not gp_ok:
                certified = False
                reason = gp_reason
            elif certified:
                reason = "global optimum: " + reason
        else:
            self._closed_form_checks(state, prior_j, value, details)
        if self.p.gridmin_cost:
            parts.append("GridMin per instance (exhaustive)")
        if not (discrete or self.cont):
            reason = ("GridMin minimises exhaustively per instance" if self.p.gridmin_cost
                      else "nothing to optimise")
        if not parts:
            parts.append("no free parameters to choose")
        details["evaluations"] = self.evaluations
        for spec in [*self.cont, *self.grid, *self.prior]:
            details["parameters"][spec.name] = {"choice": spec.choice, "value": state[spec.name],
                                                "how": how[spec.name]}
        self.prior_j = prior_j
        return Choice(values=state, how=how, method=" + ".join(parts), certified=certified,
                      certified_reason=reason, value=value, details=details)

    def _certified_discrete(self, prior_j: Mapping[str, int]) -> tuple[bool, str]:
        if self.prior:
            return False, (f"prior grid searched for j ≤ {self.prior_cap(self.prior[0])} only, "
                           f"coarse to fine")
        if len(self.grid) >= 2 or (self.grid and self.cont):
            return False, "several parameters chosen by alternating searches"
        if self.grid:
            return True, "exhaustive search of the declared grid"
        return True, "no discrete parameters"

    def _polish_discrete(self, state: dict[str, float], prior_j: dict[str, int]) -> None:
        """Joint ±2-step neighbourhood of the discrete parameters (up to 4), one batch per
        round, until no neighbour is better."""
        specs = [*self.grid, *self.prior][:4]
        best = self.point_value(state, prior_j)
        for _ in range(100):
            cols: dict[str, list[float]] = {s.name: [] for s in specs}
            js: list[dict[str, int]] = []
            for delta in np.ndindex(*([5] * len(specs))):
                trial_state, trial_j, ok = {}, dict(prior_j), True
                for s, dlt in zip(specs, delta):
                    if s.choice == "grid":
                        grid = self.p.grids[s.name]
                        k = int(nearest_index(grid, state[s.name], False)) + dlt - 2
                        ok = ok and 0 <= k < len(grid)
                        trial_state[s.name] = float(grid[min(max(k, 0), len(grid) - 1)])
                    else:
                        k = prior_j[s.name] + dlt - 2
                        ok = ok and 1 <= k <= s.prior.j_max
                        trial_j[s.name] = max(k, 1)
                        trial_state[s.name] = float(s.prior.value(max(k, 1)))
                if ok:
                    for name, v in trial_state.items():
                        cols[name].append(v)
                    js.append(trial_j)
            deltas = [self.delta_eff(self.costs({**state, **{n: c[i] for n, c in cols.items()}},
                                                js[i])) for i in range(len(js))]
            params = {**state, **{n: np.asarray(c) for n, c in cols.items()}}
            vals = self.evaluate(params, None if deltas[0] is None else np.asarray(deltas))
            i = argmin_batch(vals)
            if i < 0 or not vals[i] < best:
                return
            best = float(vals[i])
            state.update({n: c[i] for n, c in cols.items()})
            prior_j.update(js[i])

    def _closed_form_checks(self, state: dict[str, float], prior_j: dict[str, int],
                            value: float, details: dict[str, Any]) -> None:
        checks = {}
        for spec in [*self.grid, *self.prior]:
            cf = self.closed_form(spec, state)
            if cf is None:
                continue
            trial, tj = dict(state), dict(prior_j)
            if spec.choice == "grid":
                grid = self.p.grids[spec.name]
                trial[spec.name] = float(grid[nearest_index(grid, cf, spec.log_scale)])
            else:
                j = spec.prior.index_of(cf) if cf > 0 else 1
                tj[spec.name] = j
                trial[spec.name] = float(spec.prior.value(j))
            v_cf = self.point_value(trial, tj)
            checks[spec.name] = {"closed_form": cf, "snapped": trial[spec.name],
                                 "value_at_closed_form": v_cf, "value_at_optimum": value,
                                 "optimum": state[spec.name],
                                 "relative_gap": _rel(v_cf, value)}
        if checks:
            details["closed_form_check"] = checks

    def _closed_forms_and_gp(self, state: dict[str, float], prior_j: dict[str, int], value: float,
                             how: dict[str, str], details: dict[str, Any], found: Found | None,
                             parts: list[str]) -> tuple[float, bool, str]:
        """Cross-check the continuous optimum with declared closed forms and a GP."""
        self._closed_form_checks(state, prior_j, value, details)
        checks = details.get("closed_form_check", {})
        # closed forms of continuous parameters: take them when they are at least as good
        cf_state = dict(state)
        have_cf = False
        for spec in self.cont:
            cf = self.closed_form(spec, state)
            if cf is None:
                continue
            ax = self.axis(spec, cf)
            if not (math.exp(ax.lo) if ax.log else ax.lo) <= cf <= \
                    (math.exp(ax.hi) if ax.log else ax.hi):
                continue
            cf_state[spec.name] = cf
            have_cf = True
        if have_cf:
            v_cf = self.point_value(cf_state, prior_j)
            for spec in self.cont:
                if spec.closed_form is not None:
                    checks[spec.name] = {"closed_form": cf_state[spec.name],
                                         "numeric": state[spec.name],
                                         "value_at_closed_form": v_cf,
                                         "value_at_numeric": value,
                                         "relative_gap": _rel(v_cf, value)}
            details["closed_form_check"] = checks
            if v_cf <= value:
                gap = _rel(v_cf, value)
                for spec in self.cont:
                    if spec.closed_form is not None:
                        how[spec.name] = (f"closed form (numeric {found.method if found else ''} "
                                          f"agrees to {gap:.1e})")
                parts[-1] = "closed form" + (f" (checked by {found.method})" if found else "")
                state.update(cf_state)
                value = v_cf
        if not self.o.use_gp:
            return value, False, "no geometric program tried"
        axes = getattr(self, "last_axes", [self.axis(s, state[s.name]) for s in self.cont])
        bounds = {ax.name: (float(ax.to_value(ax.lo)), float(ax.to_value(ax.hi))) for ax in axes}
        if any(not ax.log for ax in axes):
            details["gp"] = {"status": "not tried", "reason": "a parameter may be ≤ 0"}
            return value, False, "not a geometric program (parameter not positive)"
        fixed = {k: v for k, v in state.items() if k not in bounds}
        costs = self.costs(state, prior_j)
        ctx = self.p.context(fixed, self.delta_eff(costs))
        gp = solve_gp(self.p, ctx, self.entry.expression, bounds)
        info: dict[str, Any] = {"status": gp.status, "reason": gp.reason, "solver": gp.solver}
        details["gp"] = info
        if not gp.ok:
            return value, False, f"no certificate: {gp.reason or gp.status}"
        gp_state = {**state, **gp.point}
        v_gp = self.point_value(gp_state, prior_j)
        gap = _rel(v_gp, value)
        info.update({"value": gp.value, "value_engine": v_gp, "point": gp.point,
                     "scipy_value": value, "agreement": gap})
        at_edge = [ax.name for ax in axes
                   if (ax.lo_artificial and math.log(gp.point[ax.name]) <= ax.lo + 1e-6)
                   or (ax.hi_artificial and math.log(gp.point[ax.name]) >= ax.hi - 1e-6)]
        names = ", ".join(s.name for s in self.cont)
        label = f"cvxpy GP ({gp.solver})"
        if v_gp < value:
            state.update(gp.point)
            for spec in self.cont:
                how[spec.name] = f"{label}, global optimum; scipy agrees to {gap:.1e}"
            parts[-1] = f"{label} ({names}), cross-checked with " + (found.method if found
                                                                     else "scipy")
            value = v_gp
        else:
            parts[-1] += f", certified by {label} (agrees to {gap:.1e})"
        if at_edge:
            return value, False, f"GP optimum at the artificial search bound of {at_edge[0]}"
        if gap > 1e-6:
            return value, False, f"GP and SciPy disagree ({gap:.1e} relative)"
        return value, True, "geometric program (log-log convex), SciPy agrees"


def _rel(a: float, b: float) -> float:
    if a == b:
        return 0.0
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


def choose(prepared: Prepared, options: Options | None = None) -> Choice:
    """Choose every scalar free parameter of ``prepared`` (see the module docstring)."""
    return ScalarProblem(prepared, options or Options()).solve()


def result_for(prepared: Prepared, choice: Choice) -> Result:
    """The full Result at the chosen point, with the optimizer's story attached."""
    result = prepared.result(choice.values, method=choice.method, how=choice.how)
    if math.isnan(choice.value):
        choice.value = result.value
    elif not math.isclose(result.value, choice.value, rel_tol=1e-9, abs_tol=1e-300) \
            and math.isfinite(choice.value):
        result.notes.append(f"optimizer value {choice.value:.10g} and final evaluation "
                            f"{result.value:.10g} differ")
    result.extra["certified_optimum"] = choice.certified
    result.extra["certified_optimum_reason"] = choice.certified_reason
    result.extra["optimizer"] = choice.details
    return result
