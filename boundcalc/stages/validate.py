"""Stage 1, validate: an entry plus values → a :class:`ValidatedEntry`, or one clear error.

Contract: after construction every symbol has a value (given, default, or a size implied by an
array) inside its declared domain; arrays have one axis per declared index and agree on every
index size; every grid is built and finite; the largest intermediate array fits the memory
budget; a GridMin parameter set by hand is pinned to that one point (it must be a grid point,
and is charged, unless declared ``fixed``). The object then evaluates the entry's expression at
a point in floats (:class:`~.float_eval.FloatEvaluator`, which it is: :meth:`value`,
:meth:`eval_scalar`, :meth:`context`), which the later stages use.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

import numpy as np

from ..engine import logspace as ls
from ..engine.tree import Node, as_tree, limits
from ..errors import DomainError, MissingValueError, one_line
from ..limits import check_allocation
from ..registry.schema import Entry, ParameterSpec, PriorSpec
from ..words import command, option
from .float_eval import FloatEvaluator
from .forms import compiled_for, gridmin_params

# a signed-log value is three float64 arrays; one more for temporaries
BYTES_PER_ELEMENT = 32

# ---- facts of an entry ------------------------------------------------------------------------

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


# ---- one value --------------------------------------------------------------------------------

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


def as_scalar(raw: Any, entry: str, name: str) -> float:
    """``raw`` as one float, else a :class:`DomainError` naming the symbol."""
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


def as_array(raw: Any, entry: str, name: str) -> np.ndarray:
    """``raw`` as a float64 array, else a :class:`DomainError` naming the symbol."""
    try:
        return np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise DomainError(f"entry '{entry}': symbol '{name}': expected an array of numbers") \
            from None


def nearest_index(grid: np.ndarray, v: float, log_scale: bool) -> int:
    """Index of the grid point nearest to ``v`` (in log space for positive log-scale grids)."""
    if log_scale and v > 0 and np.all(grid > 0):
        return int(np.argmin(np.abs(np.log(grid) - math.log(v))))
    return int(np.argmin(np.abs(grid - v)))


class ValidatedEntry(FloatEvaluator):
    """An entry with validated values, ready to be evaluated for many parameter choices.

    ``placeholders`` names indexed symbols filled with a stand-in for the optimizer to choose
    (per-group σ_g); they are not charged as hand-set values.
    """

    def __init__(self, entry: Entry, values: Mapping[str, Any],
                 estimated: Mapping[str, str] | None = None, fixed: Iterable[str] = ()):
        self.entry = entry
        self.fixed = set(fixed)
        self.placeholders: set[str] = set()
        self.compiled = compiled_for(entry)
        self.estimated = dict(estimated or {})
        self.raw: dict[str, Any] = {}
        self.scalars: dict[str, float] = {}
        self.arrays: dict[str, np.ndarray] = {}
        self._take_values(values)
        self.sizes = self._index_sizes()
        self._check_memory(False)
        self._ctx_scalars = {k: ls.from_float(v) for k, v in self.scalars.items()}
        self._ctx_arrays = {k: ls.from_float(arr) for k, arr in self.arrays.items()}
        self.grids: dict[str, np.ndarray] = {}
        self.grids = self._build_grids()
        self._check_memory(True)
        self.gridmin_cost = self._gridmin_costs()
        self._pin_hand_set_gridmin()

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

    # ---- values ------------------------------------------------------------------------------
    def _take_values(self, values: Mapping[str, Any]) -> None:
        """Every symbol's value (given or default) into ``raw``/``scalars``/``arrays``, each
        checked against its domain; unknown names, missing values and undeclared ``fixed``
        names are refused."""
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
                arr = as_array(raw, e.id, name)
                if arr.ndim != len(spec.indices):
                    raise DomainError(f"entry '{e.id}': symbol '{name}': expected an array with "
                                      f"{len(spec.indices)} indices {list(spec.indices)}, got "
                                      f"shape {arr.shape}")
                self._check_domain(name, arr)
                self.arrays[name] = arr
            else:
                x = as_scalar(raw, e.id, name)
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

    def _index_sizes(self) -> dict[str, int]:
        """The length of every index, from its size symbol or the arrays along it (which must
        agree); a size symbol without a value gets the implied length."""
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

    # ---- grids ---------------------------------------------------------------------------------
    def _build_grids(self) -> dict[str, np.ndarray]:
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

    def take_late_gridmin(self, params: dict[str, float]) -> None:
        """GridMin parameters handed in with the free parameters (not with the values) are
        hand-set values too: move them from ``params`` and pin them like those."""
        late = [k for k in params if k in gridmin_params(self.entry) and k not in self.raw]
        for k in late:
            self.raw[k] = params.pop(k)
        if late:
            self.grids = self._build_grids()
            self.gridmin_cost = self._gridmin_costs()
            self._pin_hand_set_gridmin()

    # ---- hand-set parameters -----------------------------------------------------------------
    # One rule for every parameter that the theorem lets the user choose (grid, prior, GridMin,
    # per-group σ on the Dziugaite–Roy grid): a value set by hand is used exactly. It is free
    # only if the user declares it fixed before seeing the data (``fixed``, --fixed NAME);
    # otherwise it counts as a choice made after seeing the data, so it must be a point of the
    # declared grid and its union-bound cost is charged, as if the optimizer had chosen it.

    def _pin_hand_set_gridmin(self) -> None:
        """A GridMin parameter set by hand replaces its grid by that one point."""
        for name in gridmin_params(self.entry):
            if name not in self.raw:
                continue
            v = as_scalar(self.raw[name], self.entry.id, name)
            grid = self.grids[name]
            if name not in self.fixed:
                self._require_on_grid(name, v, grid)
            else:
                self.gridmin_cost[name] = 0.0
            self.grids[name] = np.array([v])

    def _require_on_grid(self, name: str, v: float, grid: np.ndarray) -> int:
        j = nearest_index(grid, v, self.entry.parameters[name].log_scale)
        if not math.isclose(grid[j], v, rel_tol=1e-9, abs_tol=1e-12):
            raise DomainError(f"entry '{self.entry.id}': parameter '{name}' = {v:g} is not on "
                              f"its declared grid (nearest point {grid[j]:g}); give a grid "
                              f"point, or {option('fixed', name)} if it was chosen before seeing "
                              "the data")
        return j

    def hand_set_prior_costs(self) -> dict[str, float]:
        """Costs of hand-set per-group σ_g on their Dziugaite–Roy grid (see :func:`dr_grids`)."""
        out: dict[str, float] = {}
        for name, (c_sym, b_sym) in dr_grids(self.entry).items():
            if name not in self.arrays or name in self.placeholders or name in self.fixed:
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
                    f"points (charged {PriorSpec.COST_TEXT} each), let `{command('optimize ID')}` "
                    f"choose, or {option('fixed', name)} if it was chosen before seeing the data")
            out[name] = float(np.sum(PriorSpec.cost(j)))
        return out

    def scalar_params(self) -> list[ParameterSpec]:
        """The free parameters chosen as one number each (every one but GridMin's)."""
        gm = set(gridmin_params(self.entry))
        return [p for p in self.entry.parameters.values() if p.name not in gm]
