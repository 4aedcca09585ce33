"""Evaluate an entry for many parameter choices at once (one numpy call per node).

The engine gives every index variable and every GridMin parameter its own axis. Here one more
trailing axis, the *batch* axis, is added: scalar parameters (and the confidence δ_eff) become
vectors along it, and selected indexed symbols (per-group σ_g, say) get it as an extra last index.
A grid search over K points is then a single evaluation with arrays K times longer.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import sympy as sp

from ..engine import logspace as ls
from ..engine.compile import Compiled, Context
from ..evaluation import Prepared, confidence_symbol
from ..stages.forms import form

BATCH = "_batch"
_BATCH_SYMBOL = sp.Symbol(BATCH, integer=True)
_MAX_ELEMENTS = 4_000_000  # per node and chunk; keeps memory bounded for big entries


class BatchEvaluator:
    """Vectorised evaluation of ``prepared.entry`` along a batch axis.

    ``batch_arrays`` names indexed symbols whose values are given per batch point (an array
    with one more trailing dimension than declared).
    """

    def __init__(self, prepared: Prepared, batch_arrays: tuple[str, ...] = ()):
        self.prepared = prepared
        entry = prepared.entry
        key = tuple(sorted(batch_arrays))

        def build() -> tuple[Compiled, Any]:
            base = prepared.compiled
            axes = dict(base.axes)
            axes[BATCH] = len(axes)
            index_of = dict(base.index_of_symbol)
            expr = entry.expression
            for name in key:
                index_of[name] = (*index_of[name], BATCH)
                sym = entry.symbols[name].symbol
                expr = expr.replace(
                    lambda x, _s=sym: isinstance(x, sp.Indexed) and x.base == _s,
                    lambda x: sp.Indexed(x.base, *x.indices, _BATCH_SYMBOL))
            return Compiled(axes, index_of, set(base.grid_params)), expr

        self.compiled, self.expression = form(entry, ("batch", key), build)
        self.batch_axis = self.compiled.axes[BATCH]
        self.conf = confidence_symbol(entry)
        # rough size of the largest node: the biggest array times the longest GridMin grid
        biggest = max((a.size for a in prepared.arrays.values()), default=1)
        longest = max((len(prepared.grids[g]) for g in prepared.compiled.grid_params), default=1)
        self._elements = max(1, biggest * longest)

    def __call__(self, params: Mapping[str, Any] | None = None, delta_eff: Any = None,
                 arrays: Mapping[str, np.ndarray] | None = None, size: int | None = None
                 ) -> np.ndarray:
        """Values for K batch points (NaN where the formula is undefined).

        ``params``: scalar parameters, each a float or a length-K vector; ``delta_eff``: float or
        length-K vector (charged costs already applied); ``arrays``: batch indexed symbols with
        a trailing axis of length K.
        """
        params = dict(params or {})
        arrays = dict(arrays or {})
        k = size or _batch_length(params, delta_eff, arrays)
        chunk = max(1, _MAX_ELEMENTS // self._elements)
        if k <= chunk:
            return self._eval(params, delta_eff, arrays, k)
        out = np.empty(k)
        for lo in range(0, k, chunk):
            hi = min(k, lo + chunk)
            out[lo:hi] = self._eval(
                {n: _slice(v, lo, hi) for n, v in params.items()}, _slice(delta_eff, lo, hi),
                {n: v[..., lo:hi] for n, v in arrays.items()}, hi - lo)
        return out

    def _eval(self, params: dict[str, Any], delta_eff: Any, arrays: dict[str, np.ndarray],
              k: int) -> np.ndarray:
        p = self.prepared
        base = p.context()
        scalars = dict(base.scalars)
        for name, v in params.items():
            scalars[name] = self._scalar(v)
        if delta_eff is not None and self.conf is not None:
            scalars[self.conf] = self._scalar(delta_eff)
        arrs = dict(base.arrays)
        for name, v in arrays.items():
            arrs[name] = ls.from_float(np.asarray(v, dtype=np.float64))
        sizes = dict(base.sizes)
        sizes[BATCH] = k
        ctx = Context(scalars=scalars, arrays=arrs, sizes=sizes, grids=base.grids)
        with np.errstate(all="ignore"):
            lv = self.compiled.compile(self.expression)(ctx)
            shape = [1] * self.compiled.ndim
            shape[self.batch_axis] = k
            full = np.broadcast_shapes(lv.shape, tuple(shape))
            s = np.broadcast_to(lv.s, full)
            v = np.broadcast_to(lv.to_float(), full)
            if v.size != k:
                raise ValueError("batch evaluation left free indices")
            out = np.where(np.isnan(s.reshape(k)), np.nan, v.reshape(k))
        return out

    def _scalar(self, v: Any) -> ls.LV:
        arr = np.asarray(v, dtype=np.float64)
        if arr.ndim == 0:
            return ls.from_float(arr)
        return ls.from_float(self.compiled.shape_axis(arr.reshape(-1), self.batch_axis))


def _batch_length(params: Mapping[str, Any], delta_eff: Any,
                  arrays: Mapping[str, np.ndarray]) -> int:
    k = 1
    for v in [*params.values(), delta_eff]:
        arr = np.asarray(v if v is not None else 0.0)
        if arr.ndim:
            k = max(k, arr.shape[0])
    for v in arrays.values():
        k = max(k, np.shape(v)[-1])
    return k


def _slice(v: Any, lo: int, hi: int) -> Any:
    arr = np.asarray(v if v is not None else np.nan)
    if v is None:
        return None
    return arr[lo:hi] if arr.ndim else v
