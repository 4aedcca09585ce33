"""Evaluate a registry entry on concrete values: validation, δ accounting, terms, assumptions.

``evaluate(entry, values)`` is the one-call API. Optimizers use :class:`Prepared` directly:
validate once, then call :meth:`Prepared.value` many times with different free parameters.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

import numpy as np

from .engine import logspace as ls
from .engine.compile import Compiled, Context, axes_for
from .engine.tree import RELATIONS, Node, as_tree, limits
from .errors import BoundcalcError, DomainError, MissingValueError, one_line
from .limits import check_allocation
from .floor import zero_complexity_floor
from .registry.schema import Entry, ParameterSpec, PriorSpec, confidence_symbol
from .result import Result

LN10 = math.log(10.0)
# a signed-log value is three float64 arrays; one more for temporaries
BYTES_PER_ELEMENT = 32
# kinds whose value is a statement (checked to be a finite number in the output range)
CHECKED_KINDS = ("certified", "conditional")


# ---- compiled-entry cache ---------------------------------------------------------------------

def gridmin_params(entry: Entry) -> list[str]:
    """Names of grid parameters that the expression minimises with GridMin."""
    found = entry.__dict__.get("_gridmin_params")
    if found is None:
        found = sorted({g.args[1].name for g in as_tree(entry.expression).atoms("GridMin")})
        entry.__dict__["_gridmin_params"] = found
    return found


def compiled_for(entry: Entry) -> Compiled:
    comp = getattr(entry, "_compiled", None)
    if comp is None:
        axes = axes_for(list(entry.indices), gridmin_params(entry))
        comp = Compiled(axes, {n: s.indices for n, s in entry.symbols.items() if s.indexed},
                        set(gridmin_params(entry)))
        entry._compiled = comp  # type: ignore[attr-defined]
    return comp


# ---- preparation -----------------------------------------------------------------------------

class Prepared:
    """An entry with validated values, ready to be evaluated for many parameter choices."""

    def __init__(self, entry: Entry, values: Mapping[str, Any],
                 estimated: Mapping[str, str] | None = None, fixed: Iterable[str] = ()):
        self.entry = entry
        self.fixed = set(fixed)
        self.compiled = compiled_for(entry)
        self.estimated = dict(estimated or {})
        self.raw: dict[str, Any] = {}
        self.scalars: dict[str, float] = {}
        self.arrays: dict[str, np.ndarray] = {}
        self._validate(values)
        self.sizes = self._sizes()
        self._check_memory(False)
        self._ctx_scalars = {k: ls.from_float(v) for k, v in self.scalars.items()}
        self._ctx_arrays = {}
        for k, arr in self.arrays.items():
            lv = ls.from_float(arr)
            self._ctx_arrays[k] = lv
        self.grids: dict[str, np.ndarray] = {}
        self.grids = self._grids()
        self._check_memory(True)
        self.gridmin_cost = self._gridmin_costs()
        self._hand_set_gridmin()

    def _check_memory(self, with_grids: bool) -> None:
        """Refuse, before allocating, an evaluation whose largest intermediate array (one axis
        per free index and per GridMin grid of a sub-expression) would exceed the memory
        budget."""
        sizes: dict[str, int] = dict(self.sizes)
        if with_grids:
            sizes.update({g: len(self.grids[g]) for g in gridmin_params(self.entry)})
        memo: dict[Node, frozenset] = {}

        def axes(e: Node) -> frozenset:
            out = memo.get(e)
            if out is None:
                if e.op == "Symbol":
                    out = frozenset([e.name]) if e.name in sizes else frozenset()
                else:
                    out = frozenset().union(*[axes(a) for a in e.args])
                    if e.op in ("Sum", "Product"):
                        out = out - {lim[0].name for lim in limits(e)}
                    elif e.op == "GridMin":
                        out = out - {e.args[1].name}
                memo[e] = out
            return out

        try:
            axes(as_tree(self.entry.expression))
        except RecursionError:
            return  # parser limits keep real expressions far from this
        worst = max(memo.values(), key=lambda ax: math.prod(sizes[a] for a in ax))
        elements = math.prod(sizes[a] for a in worst)
        if elements > 1_000_000:
            dims = ", ".join(f"{a}={sizes[a]}" for a in sorted(worst))
            check_allocation(elements * BYTES_PER_ELEMENT,
                             f"entry '{self.entry.id}': evaluating over {dims}")

    # ---- validation ----------------------------------------------------------------------
    def _validate(self, values: Mapping[str, Any]) -> None:
        e = self.entry
        known = set(e.symbols) | set(e.parameters)
        unknown = [k for k in values if k not in known]
        if unknown:
            raise DomainError(f"entry '{e.id}': unknown symbol '{unknown[0]}' "
                              f"(declared: {', '.join(sorted(known))})")
        missing = []
        for name, spec in e.symbols.items():
            if name in values:
                raw = values[name]
            elif spec.default is not None:
                raw = spec.default
            elif spec.role == "size":
                continue  # inferred from array shapes below
            else:
                missing.append(name)
                continue
            self.raw[name] = raw
            if spec.indexed:
                arr = _as_array(raw, e.id, name)
                if arr.ndim != len(spec.indices):
                    raise DomainError(f"entry '{e.id}': symbol '{name}': expected an array with "
                                      f"{len(spec.indices)} indices {list(spec.indices)}, got "
                                      f"shape {arr.shape}")
                self._check_domain(name, arr)
                self.arrays[name] = arr
            else:
                x = _as_scalar(raw, e.id, name)
                self._check_domain(name, np.asarray(x))
                self.scalars[name] = x
        if missing:
            details = "; ".join(f"{m} ({e.symbols[m].meaning})" for m in missing[:6])
            raise MissingValueError(f"entry '{e.id}': missing value(s) for {details}"
                                    + ("" if len(missing) <= 6 else f" and {len(missing) - 6} more"))
        for name in values:
            if name in e.parameters:
                self.raw[name] = values[name]
        bad = sorted(self.fixed - set(values))
        if bad:
            raise DomainError(f"entry '{e.id}': '{bad[0]}' is declared fixed but has no "
                              f"hand-set value")

    def _check_domain(self, name: str, arr: np.ndarray) -> None:
        spec = self.entry.symbols[name]
        ok = spec.domain.contains(arr)
        if not np.all(ok):
            bad = arr[~ok].flat[0] if arr.ndim else float(arr)
            pos = "" if arr.ndim == 0 else f" at index {tuple(int(i) for i in np.argwhere(~ok)[0])}"
            what = "NaN" if np.isnan(bad) else f"{bad:g}"
            raise DomainError(f"entry '{self.entry.id}': symbol '{name}' ({spec.meaning}) = "
                              f"{what}{pos} lies outside its domain {spec.domain.text()}")

    def _sizes(self) -> dict[str, int]:
        e = self.entry
        sizes: dict[str, int] = {}
        for idx, size_sym in e.indices.items():
            if size_sym in self.scalars:
                sizes[idx] = count_value(e, size_sym, self.scalars[size_sym])
        for name, arr in self.arrays.items():
            for dim, idx in enumerate(e.symbols[name].indices):
                n = arr.shape[dim]
                size_sym = e.indices[idx]
                if idx in sizes and sizes[idx] != n and size_sym in self.scalars:
                    raise DomainError(f"entry '{e.id}': symbol '{name}' has {n} entries along "
                                      f"index '{idx}', but {size_sym} = {sizes[idx]}")
                if idx in sizes and sizes[idx] != n:
                    raise DomainError(f"entry '{e.id}': symbol '{name}' has {n} entries along "
                                      f"index '{idx}', other symbols have {sizes[idx]}")
                sizes[idx] = n
        known_sizes = {e.indices[i]: n for i, n in sizes.items()}
        for idx, size_sym in e.indices.items():
            if idx not in sizes and size_sym in known_sizes:
                sizes[idx] = known_sizes[size_sym]
            if idx not in sizes:
                raise MissingValueError(f"entry '{e.id}': size '{size_sym}' of index '{idx}' "
                                        f"is neither given nor implied by an array")
            if size_sym not in self.scalars:
                self.scalars[size_sym] = float(sizes[idx])
                self._check_domain(size_sym, np.asarray(float(sizes[idx])))
        # indices sharing a size symbol must agree
        by_size: dict[str, int] = {}
        for idx, size_sym in e.indices.items():
            if by_size.setdefault(size_sym, sizes[idx]) != sizes[idx]:
                raise DomainError(f"entry '{e.id}': inconsistent lengths for size '{size_sym}'")
        return sizes

    # ---- scalar helper evaluation ------------------------------------------------------------
    def context(self, params: Mapping[str, float] | None = None,
                delta_eff: float | None = None) -> Context:
        scalars = dict(self._ctx_scalars)
        for k, v in (params or {}).items():
            scalars[k] = ls.from_float(v)
        conf = confidence_symbol(self.entry)
        if delta_eff is not None and conf is not None:
            scalars[conf] = ls.from_float(delta_eff)
        return Context(scalars=scalars, arrays=self._ctx_arrays, sizes=self.sizes,
                       grids=self.grids)

    def eval_array(self, expr: Node | Any, ctx: Context) -> np.ndarray:
        return self.compiled.compile(expr)(ctx).to_float()

    def eval_scalar(self, expr: Node | Any, ctx: Context | None = None) -> float:
        ctx = ctx or self.context()
        lv = self._run(expr, ctx)
        arr = np.broadcast_to(lv.to_float(), lv.shape)
        if arr.size != 1:
            raise DomainError(f"entry '{self.entry.id}': '{str(expr)[:60]}' is not a scalar "
                              f"(free indices remain)")
        return float(arr.reshape(-1)[0])

    def _grids(self) -> dict[str, np.ndarray]:
        grids = {}
        for name, p in self.entry.parameters.items():
            if p.grid is None:
                continue
            try:
                grids[name] = p.grid.values(lambda ex: self.eval_scalar(ex))
            except (ValueError, DomainError) as exc:
                raise DomainError(f"entry '{self.entry.id}': grid of parameter '{name}': "
                                  f"{exc}") from None
        return grids

    def _gridmin_costs(self) -> dict[str, float]:
        costs = {}
        for name in gridmin_params(self.entry):
            p = self.entry.parameters[name]
            count = 1
            for idx in p.indices:
                count *= self.sizes[idx]
            costs[name] = count * math.log(len(self.grids[name]))
        return costs

    # ---- hand-set parameters -----------------------------------------------------------------
    # One rule for every parameter that the theorem lets the user choose (grid, prior, GridMin,
    # per-group σ on the Dziugaite–Roy grid): a value set by hand is used exactly. It is free
    # only if the user declares it fixed before seeing the data (``fixed``, --fixed NAME);
    # otherwise it counts as a choice made after seeing the data, so it must be a point of the
    # declared grid and its union-bound cost is charged, as if the optimizer had chosen it.

    def _hand_set_gridmin(self) -> None:
        """A GridMin parameter set by hand replaces its grid by that one point."""
        for name in gridmin_params(self.entry):
            if name not in self.raw:
                continue
            v = _as_scalar(self.raw[name], self.entry.id, name)
            grid = self.grids[name]
            if name not in self.fixed:
                self._on_grid(name, v, grid)
            else:
                self.gridmin_cost[name] = 0.0
            self.grids[name] = np.array([v])

    def _on_grid(self, name: str, v: float, grid: np.ndarray) -> int:
        j = _nearest(grid, v, self.entry.parameters[name].log_scale)
        if not math.isclose(grid[j], v, rel_tol=1e-9, abs_tol=1e-12):
            raise DomainError(f"entry '{self.entry.id}': parameter '{name}' = {v:g} is not on "
                              f"its declared grid (nearest point {grid[j]:g}); give a grid "
                              f"point, or --fixed {name} if it was chosen before seeing the data")
        return j

    def hand_set_prior_costs(self) -> dict[str, float]:
        """Costs of hand-set per-group σ_g on their Dziugaite–Roy grid (see :func:`dr_grids`)."""
        out: dict[str, float] = {}
        placeholders = self.__dict__.get("_placeholders", set())
        for name, (c_sym, b_sym) in dr_grids(self.entry).items():
            if name not in self.arrays or name in placeholders or name in self.fixed:
                continue
            c, b = self.scalars[c_sym], self.scalars[b_sym]
            sig = self.arrays[name]
            with np.errstate(all="ignore"):
                jf = b * np.log(c / sig ** 2)
            j = np.rint(jf)
            ok = (j >= 1) & np.isclose(jf, j, rtol=0, atol=1e-6 * np.maximum(1, np.abs(j)))
            if not np.all(ok):
                k = tuple(int(i) for i in np.argwhere(~ok)[0])
                raise DomainError(
                    f"entry '{self.entry.id}': {name}{list(k)} = {sig[k]:g} is not on the "
                    f"Dziugaite–Roy grid {name}² = {c:g}·e^(−j/{b:g}), j = 1, 2, ...; give grid "
                    f"points (charged 2 ln j + ln(π²/6) each), let `boundcalc optimize` choose, "
                    f"or --fixed {name} if it was chosen before seeing the data")
            out[name] = float(np.sum(2.0 * np.log(j) + math.log(math.pi ** 2 / 6.0)))
        return out

    # ---- parameters ----------------------------------------------------------------------------
    def scalar_params(self) -> list[ParameterSpec]:
        gm = set(gridmin_params(self.entry))
        return [p for p in self.entry.parameters.values() if p.name not in gm]

    def resolve(self, given: Mapping[str, float] | None = None,
                how: Mapping[str, str] | None = None
                ) -> tuple[dict[str, float], dict[str, str], dict[str, float]]:
        """Values, provenance and union-bound costs of every scalar free parameter.

        A given value (user or optimizer) is used as is for ``simultaneous``/``fixed``
        parameters, and must lie on the grid for ``grid``/``prior`` parameters (the nearest
        grid point is taken when the value came from a closed form or an optimizer).
        """
        given = dict(given or {})
        for k, v in self.raw.items():
            if k in self.entry.parameters and k not in given:
                given[k] = _as_scalar(v, self.entry.id, k)
        how = dict(how or {})
        values: dict[str, float] = {}
        choice: dict[str, str] = {}
        costs: dict[str, float] = dict(self.gridmin_cost)
        costs.update(self.hand_set_prior_costs())
        pending = self.scalar_params()
        for p in pending:
            if p.name in given:
                v, src = float(given[p.name]), how.get(p.name, "given")
            elif p.default is not None:
                v, src = p.default, "default"
            elif p.closed_form is not None:
                v, src = None, "closed form"
            else:
                raise MissingValueError(
                    f"entry '{self.entry.id}': free parameter '{p.name}' has no value; set it "
                    f"with --set {p.name}=... or choose it with `boundcalc optimize`")
            values[p.name] = v  # type: ignore[assignment]
            choice[p.name] = src
        self._closed_forms([p for p in pending if values[p.name] is None], values, choice)
        for p in pending:
            v = values[p.name]
            if p.name in self.fixed and choice[p.name] == "given":
                choice[p.name] = "given, declared fixed before seeing the data (not charged)"
            elif p.choice == "grid":
                grid = self.grids[p.name]
                j = _nearest(grid, v, p.log_scale)
                if choice[p.name] == "given" and not math.isclose(grid[j], v, rel_tol=1e-9,
                                                                    abs_tol=1e-12):
                    raise DomainError(f"entry '{self.entry.id}': parameter '{p.name}' = {v:g} is "
                                      f"not on its declared grid (nearest point {grid[j]:g})")
                if grid[j] != v:
                    choice[p.name] += f", snapped to grid point {j + 1}/{len(grid)}"
                values[p.name] = float(grid[j])
                costs[p.name] = math.log(len(grid))
            elif p.choice == "prior":
                assert p.prior is not None
                if not (math.isfinite(v) and v > 0):
                    raise DomainError(f"entry '{self.entry.id}': parameter '{p.name}' = {v:g} "
                                      f"is not a positive finite point of its prior grid")
                j = p.prior.index_of(v)
                snapped = float(p.prior.value(j))
                if choice[p.name] == "given" and not math.isclose(snapped, v, rel_tol=1e-9):
                    # the data (e.g. a Gibbs risk) were measured at v, not at the grid point
                    raise DomainError(f"entry '{self.entry.id}': parameter '{p.name}' = {v:g} is "
                                      f"not on its prior grid (nearest point j={j}: {snapped:g}); "
                                      f"give a grid point, or --fixed {p.name} if it was chosen "
                                      f"before seeing the data")
                if snapped != v:
                    choice[p.name] += f", snapped to prior grid point j={j}"
                values[p.name] = snapped
                costs[p.name] = PriorSpec.cost(j)
            if not bool(p.domain.contains(values[p.name])):
                raise DomainError(f"entry '{self.entry.id}': parameter '{p.name}' = "
                                  f"{values[p.name]:g} lies outside {p.domain.text()}")
        self._best_grid_points(pending, values, choice, costs)
        return values, choice, costs

    def _best_grid_points(self, pending: list[ParameterSpec], values: dict[str, float],
                          choice: dict[str, str], costs: dict[str, float]) -> None:
        """A closed form only says where to look: move each grid/prior parameter it placed to
        the best admissible point (coordinate search, each grid exhaustively, prior j on a
        coarse scan plus a window), so the value never gets worse when δ grows."""
        todo = [p for p in pending if choice[p.name].startswith("closed form")
                and p.choice in ("grid", "prior")]
        if not todo:
            return
        best = self._try(values, costs)
        for _ in range(2):
            moved = False
            for p in todo:
                if p.choice == "grid":
                    grid = self.grids[p.name]
                    j0 = _nearest(grid, values[p.name], p.log_scale)
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
                    val = self._try(trial_v, trial_c)
                    if val < best:
                        best, moved = val, True
                        values[p.name], costs[p.name] = v, cost
                        if "best admissible" not in choice[p.name]:
                            choice[p.name] = ("closed form as start, then the best admissible "
                                              "grid point")
            if not moved:
                return

    def _try(self, values: Mapping[str, float], costs: Mapping[str, float]) -> float:
        try:
            v = self.value(values, costs)
        except DomainError:
            return math.inf
        return v if not math.isnan(v) else math.inf

    def _closed_forms(self, todo: list[ParameterSpec], values: dict[str, float],
                      choice: dict[str, str]) -> None:
        """Evaluate closed forms, which may depend on data and on each other (even in a cycle,
        e.g. σ* needs λ and λ* needs KL(σ)): a fixed-point iteration from a seed."""
        if not todo:
            return
        for p in todo:
            values[p.name] = self._seed(p)
        for _ in range(100):
            moved = False
            for p in todo:
                v = self._tame(p, self.eval_scalar(p.closed_form, self.context(values)), choice)
                moved |= not math.isclose(v, values[p.name], rel_tol=1e-12, abs_tol=0.0)
                values[p.name] = v
            if not moved:
                return
        for p in todo:
            choice[p.name] += " (fixed-point iteration of the closed forms did not settle)"

    def _seed(self, p: ParameterSpec) -> float:
        if p.choice == "grid":
            grid = self.grids[p.name]
            return float(grid[len(grid) // 2])
        if p.choice == "prior":
            return float(p.prior.value(1))
        if p.bounds is not None:
            lo, hi = p.bounds
            return math.sqrt(lo * hi) if lo > 0 else (lo + hi) / 2
        return 1.0

    def _tame(self, p: ParameterSpec, v: float, choice: dict[str, str]) -> float:
        """A closed form is only a heuristic for where to evaluate a grid/prior parameter (any
        grid point is valid): an undefined, infinite or non-positive value goes to a grid end."""
        if math.isfinite(v) and (v > 0 or p.choice not in ("grid", "prior")):
            return v
        if p.choice == "grid":
            grid = self.grids[p.name]
            end = float(grid.max() if v == math.inf else grid.min() if v <= 0 else grid[0])
        elif p.choice == "prior":
            end = float(p.prior.value(p.prior.j_max if v <= 0 else 1))
        else:
            raise DomainError(f"entry '{self.entry.id}': closed form of '{p.name}' is not "
                              f"finite ({v})")
        if "(closed form" not in choice[p.name]:
            choice[p.name] += f" (closed form gave {v:g}; took the grid end {end:g})"
        return end

    def delta_effective(self, costs: Mapping[str, float]) -> float | None:
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

    # ---- evaluation --------------------------------------------------------------------------
    def value(self, params: Mapping[str, float], costs: Mapping[str, float] | None = None) -> float:
        """The entry's value for fully resolved parameters (fast path for optimizers)."""
        costs = self.gridmin_cost if costs is None else costs
        ctx = self.context(params, self.delta_effective(costs))
        return self._checked(ctx)

    def _run(self, expr: Node | Any, ctx: Context):
        """Evaluate ``expr``; engine errors are prefixed with this entry's id."""
        try:
            return self.compiled.compile(expr)(ctx)
        except DomainError as exc:
            if f"entry '{self.entry.id}'" in str(exc):
                raise
            raise DomainError(f"entry '{self.entry.id}': {exc}") from None

    def _checked(self, ctx: Context) -> float:
        lv = self._run(self.entry.expression, ctx)
        s = np.broadcast_to(lv.s, lv.shape).reshape(-1)
        a = np.broadcast_to(lv.a, lv.shape).reshape(-1)
        if s.size != 1:
            raise DomainError(f"entry '{self.entry.id}': expression has free indices; wrap them "
                              f"in Sum/Product")
        if np.isnan(s[0]) or np.isnan(a[0]):
            raise DomainError(f"entry '{self.entry.id}': evaluation is undefined for these "
                              f"values ({self._diagnose(ctx)})")
        self._last = (float(s[0]), float(a[0]))
        return float(np.broadcast_to(lv.to_float(), lv.shape).reshape(-1)[0])

    def _diagnose(self, ctx: Context) -> str:
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

    def result(self, params: Mapping[str, float] | None = None, method: str = "evaluate",
               how: Mapping[str, str] | None = None, rigorous: bool = True) -> Result:
        """Full :class:`Result` with terms, δ accounting and assumption checks.

        For a certified or conditional entry (and ``rigorous``) the value is the upper end of
        an outward-rounded interval evaluation at the same point (:meth:`enclosure`), so it is
        never below the exact value of the formula; searches pass ``rigorous=False``.
        """
        e = self.entry
        params = dict(params or {})
        late = [k for k in params if k in gridmin_params(e) and k not in self.raw]
        for k in late:
            self.raw[k] = params.pop(k)
        if late:
            self.grids = self._grids()
            self.gridmin_cost = self._gridmin_costs()
            self._hand_set_gridmin()
        values, choice, costs = self.resolve(params, how)
        delta_eff = self.delta_effective(costs)
        ctx = self.context(values, delta_eff)
        value = self._checked(ctx)
        s, a = self._last
        self._check_output(value, s, a)
        log10 = a / LN10 if s > 0 else (-math.inf if s == 0 else math.nan)
        extra: dict[str, Any] = {}
        interval_notes: list[str] = []
        if rigorous and e.kind in ("certified", "conditional"):
            value, log10, extra["interval"], interval_notes = self.enclosure(
                values, costs, value, log10, ctx.selected)
        floor = None
        if rigorous and e.kind == "certified":
            floor = zero_complexity_floor(self, values, costs)
        terms = {}
        for t in e.terms:
            expr = e.definitions[t].expr if t in e.definitions else e.symbols[t].symbol
            terms[t] = self.eval_scalar(expr, ctx)
        parameters: dict[str, Any] = dict(values)
        for name, sel in ctx.selected.items():
            parameters[name] = self._per_instance(name, sel)
            choice[name] = ("GridMin (per instance, arg-min on the grid)" if name not in self.raw
                            else "given, declared fixed before seeing the data (not charged)"
                            if name in self.fixed else "given, a grid point (grid cost charged)")
        conf_syms = [s for s in e.symbols.values() if s.role == "confidence"]
        delta_total = sum(self.scalars[s.name] for s in conf_syms) if conf_syms else None
        used_estimates = sorted(n for n in self.estimated if n in e.symbols
                                and n not in e.estimated_inputs_ok)
        notes = list(e.notes) + interval_notes
        if costs and confidence_symbol(e) is None:
            notes.append("union-bound costs are shown but not charged: this entry has no δ")
        return Result(
            id=e.id, title=e.title, family=e.family, kind=e.kind, variant=e.variant,
            value=value, log10_value=log10, estimated=bool(used_estimates),
            estimated_inputs=[f"{n}: {self.estimated[n]}" for n in used_estimates],
            parameters=parameters, parameter_choice=choice, terms=terms,
            delta=delta_total, delta_effective=delta_eff, union_bound_cost=costs,
            assumptions=self.check_assumptions(ctx),
            hidden_constants={s.name: self.scalars[s.name]
                              for s in e.symbols.values() if s.role == "hidden_constant"},
            inputs={k: v for k, v in self.scalars.items()},
            source=e.source, provenance=e.provenance, method=method, notes=notes,
            output=e.output, conditions=list(e.conditions), extra=extra, floor=floor,
        )

    def _per_group_prior_js(self, name: str, cost: float) -> list[int] | None:
        """The Dziugaite–Roy indices j_g of a per-group σ (an indexed symbol with NAME_prior_c
        and NAME_prior_b), if they reproduce the charged cost; else None."""
        c, b = self.scalars.get(f"{name}_prior_c"), self.scalars.get(f"{name}_prior_b")
        if c is None or b is None or name not in self.arrays:
            return None
        prior = PriorSpec(c=c, b=b)
        js = [prior.index_of(float(v)) for v in np.ravel(self.arrays[name])]
        if not math.isclose(sum(PriorSpec.cost(j) for j in js), cost, rel_tol=1e-9):
            return None
        return js

    def enclosure(self, values: Mapping[str, float], costs: Mapping[str, float], value: float,
                  log10: float, selected: Mapping[str, np.ndarray] | None = None
                  ) -> tuple[float, float, dict[str, Any] | None, list[str]]:
        """Evaluate the expression at the resolved point in interval arithmetic.

        Returns (printed value = the interval's upper end rounded up to a double, its log10,
        the interval record, notes). δ_eff enters as an interval around the float δ·e^{−cost}
        that covers its rounding. Where no enclosure is possible the float value is kept and
        a note says so.
        """
        from .engine.interval import (ChargedDelta, IntervalUnavailable, enclose, lower_float,
                                      upper_float)

        scalars: dict[str, Any] = {**self.scalars, **values}
        conf = confidence_symbol(self.entry)
        if conf is not None:
            grid_counts, prior_js, other = [], [], []
            for name, cost in costs.items():
                p = self.entry.parameters.get(name)
                js = self._per_group_prior_js(name, cost)
                j = (p.prior.index_of(values[name])
                     if p is not None and p.choice == "prior" else None)
                size = len(self.grids.get(name, ())) if p is not None and p.grid is not None else 0
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
            scalars[conf] = ChargedDelta(self.scalars[conf], grid_counts, prior_js, other)
        try:
            lo, hi = enclose(self.entry.expression, scalars, self.arrays, self.grids, selected)
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

    def _check_output(self, value: float, sign: float, log_abs: float) -> None:
        """A certified (or conditional) value must be a finite number (in signed-log form)
        inside the entry's declared ``output_range`` (default [0, ∞): a bound on a risk,
        divergence, count or probability is never negative). Anything else is a broken formula
        or input, never a bound."""
        if self.entry.kind not in CHECKED_KINDS:
            return
        what = f"entry '{self.entry.id}': the {self.entry.kind} {self.entry.output} value"
        if not math.isfinite(log_abs) and sign != 0:
            raise DomainError(f"{what} is not a finite number ({value:g}); refused")
        rng = self.entry.output_range
        # beyond double range but finite in signed-log form: only the sign can be checked
        inside = (bool(rng.contains(np.float64(value))) if math.isfinite(value)
                  else (rng.hi == math.inf if sign > 0 else rng.lo == -math.inf))
        if not inside:
            raise DomainError(f"{what} {value:.6g} lies outside its output range "
                              f"{rng.text()}; refused")

    def _per_instance(self, name: str, sel: np.ndarray) -> np.ndarray:
        """GridMin selections as an array over the parameter's declared indices."""
        keep = [self.compiled.axes[i] for i in self.entry.parameters[name].indices]
        index = tuple(slice(None) if ax in keep else 0 for ax in range(sel.ndim))
        return np.asarray(sel[index])

    def exact_value(self, params: Mapping[str, float] | None = None, digits: int = 30) -> Any:
        """The value by SymPy substitution and ``evalf`` at ``digits`` digits (slow; a check).

        Sums and products are expanded over the concrete index ranges, every indexed value is
        substituted, and ``GridMin`` becomes a ``Min`` over its grid. Use it to cross-check the
        fast evaluator; the grid and δ accounting are those of :meth:`resolve`.
        """
        import sympy as sp

        from .engine.functions import Cases, GridMin

        if isinstance(self.entry.expression, Node):
            raise BoundcalcError(f"entry '{self.entry.id}': exact_value needs the entry's SymPy "
                                 f"form; load the registry with symbolic=True (the default)")
        values, _, costs = self.resolve(params)
        subs: dict[sp.Basic, Any] = {}
        for name, x in {**self.scalars, **values}.items():
            sym = self.entry.symbols[name].symbol if name in self.entry.symbols \
                else self.entry.parameters[name].symbol
            subs[sym] = sp.Float(repr(float(x)), digits)
        conf = confidence_symbol(self.entry)
        if conf is not None:
            subs[self.entry.symbols[conf].symbol] = sp.Float(
                repr(self.delta_effective(costs)), digits)

        def expand(e: sp.Basic) -> sp.Basic:
            if isinstance(e, GridMin):
                body, p = e.args
                return sp.Min(*[expand(body.xreplace({p: sp.Float(repr(float(g)), digits)}))
                                for g in self.grids[p.name]])
            if isinstance(e, Cases):
                a = [expand(x) for x in e.args]
                pairs = [(a[i], a[i + 1]) for i in range(0, len(a) - 1, 2)] + [(a[-1], True)]
                return sp.Piecewise(*pairs)
            if isinstance(e, (sp.Sum, sp.Product)):
                body = e.function
                for var, lo, hi in e.limits:
                    lo_v, hi_v = (int(round(float(sp.sympify(x).xreplace(subs))))
                                  for x in (lo, hi))
                    # subs (unlike xreplace) leaves inner bound variables of the same name alone
                    parts = [body.subs(var, sp.Integer(i)) for i in range(lo_v, hi_v + 1)]
                    body = (sp.Add if isinstance(e, sp.Sum) else sp.Mul)(*parts)
                return expand(body)
            if isinstance(e, sp.Indexed):
                idx = tuple(int(round(float(expand(i).xreplace(subs)))) for i in e.indices)
                return sp.Float(repr(float(self.arrays[e.base.label.name][idx])), digits)
            if not e.args:
                return e.xreplace(subs)
            return e.func(*[expand(a) for a in e.args])

        return sp.N(expand(self.entry.expression).xreplace(subs), digits)

    def check_assumptions(self, ctx: Context) -> list[dict[str, Any]]:
        out = []
        for asm in self.entry.assumptions:
            status = "unchecked"
            if asm.check is not None:
                check = as_tree(asm.check)
                try:
                    sides = [self.compiled.compile(x)(ctx) for x in check.args[:2]]
                    if any(np.any(np.isnan(x.s)) for x in sides):
                        status = "unknown"  # a side is undefined: never report "holds"
                    else:
                        cond = self.compiled.condition(check)(ctx)
                        status = "holds" if bool(np.all(cond)) else "fails"
                except (DomainError, KeyError):
                    status = "unknown"
            out.append({"text": asm.text, "check": asm.check_text, "status": status})
        return out


# sub-trees that are not numbers (conditions, index tuples, bases): skipped by diagnostics
_NOT_VALUES = ("Indexed", "IndexedBase", "Tuple", "ExprCondPair", *RELATIONS, "And", "Or", "Not",
               "True", "False")


def dr_grids(entry: Entry) -> dict[str, tuple[str, str]]:
    """Indexed constants chosen per group on a Dziugaite–Roy grid: ``NAME`` (no stat, no
    default) with companions ``NAME_prior_c`` and ``NAME_prior_b`` → (c symbol, b symbol)."""
    out = {}
    for name, s in entry.symbols.items():
        if s.indexed and s.role == "constant" and not s.stat and s.default is None:
            c, b = f"{name}_prior_c", f"{name}_prior_b"
            if c in entry.symbols and b in entry.symbols:
                out[name] = (c, b)
    return out


def _nearest(grid: np.ndarray, v: float, log_scale: bool) -> int:
    if log_scale and v > 0 and np.all(grid > 0):
        return int(np.argmin(np.abs(np.log(grid) - math.log(v))))
    return int(np.argmin(np.abs(grid - v)))


def count_value(entry: Entry, size_sym: str, value: Any) -> int:
    """The value of the size symbol ``size_sym`` as a count (a whole number ≥ 0), else one
    :class:`DomainError` line naming the symbol as the user set it (never the index it sizes)."""
    spec = entry.symbols.get(size_sym)
    meaning = f" ({spec.meaning})" if spec is not None else ""
    try:
        x = float(np.asarray(value, dtype=np.float64))
    except (TypeError, ValueError, OverflowError):
        raise DomainError(f"entry '{entry.id}': size '{size_sym}'{meaning} must be a whole "
                          f"number >= 0, got {one_line(str(value))[:40]!r}") from None
    if not (math.isfinite(x) and x >= 0 and x.is_integer()):
        shown = "NaN" if math.isnan(x) else f"{x:g}"
        raise DomainError(f"entry '{entry.id}': size '{size_sym}'{meaning} = {shown} is not a "
                          f"count; sizes are whole numbers >= 0")
    return int(x)


def _as_scalar(raw: Any, entry: str, name: str) -> float:
    if isinstance(raw, bool):
        raise DomainError(f"entry '{entry}': symbol '{name}': expected a number, got a boolean")
    try:
        arr = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise DomainError(f"entry '{entry}': symbol '{name}': expected a finite number, got "
                          f"{str(raw)[:40]!r}") from None
    if arr.ndim != 0:
        raise DomainError(f"entry '{entry}': symbol '{name}': expected a single number, got an "
                          f"array of shape {arr.shape}")
    return float(arr)


def _as_array(raw: Any, entry: str, name: str) -> np.ndarray:
    try:
        return np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise DomainError(f"entry '{entry}': symbol '{name}': expected an array of numbers") \
            from None


def evaluate(entry: Entry, values: Mapping[str, Any], params: Mapping[str, float] | None = None,
             estimated: Mapping[str, str] | None = None, fixed: Iterable[str] = ()) -> Result:
    """Evaluate ``entry`` at ``values`` (symbol name -> number or array).

    Free parameters come from ``params`` (or the values), else their default, else their
    declared closed form. Grid and prior parameters are snapped to their grid and their
    union-bound cost is charged to δ. A parameter set by hand is used exactly: on its grid (and
    charged) unless named in ``fixed`` (chosen before seeing the data: any value, not charged).
    """
    return Prepared(entry, values, estimated, fixed).result(params)
