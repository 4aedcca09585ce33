"""Evaluate a registry entry on concrete values: validate → choose parameters → certify → annotate.

``evaluate(entry, values)`` is the one-call API. Optimizers use :class:`Prepared` directly:
validate once, then call :meth:`Prepared.value` many times with different free parameters.
The stages live in :mod:`boundcalc.stages` (each states its contract); :meth:`Prepared.result`
runs them in order and assembles the :class:`Result`.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

import numpy as np

from .stages import choose, enclose
from .stages.forms import compiled_for, gridmin_params
from .stages.validate import ValidatedEntry, count_value, dr_grids
from .floor import zero_complexity_floor
from .registry.schema import Entry, confidence_symbol
from .result import Result
from .rounding import decimal_total

LN10 = math.log(10.0)

__all__ = ["Prepared", "Result", "compiled_for", "confidence_symbol", "count_value", "dr_grids",
           "evaluate", "gridmin_params"]


class Prepared(ValidatedEntry):
    """An entry with validated values (stage 1, :mod:`.stages.validate`), ready to be
    evaluated for many parameter choices; :meth:`result` runs the later stages."""

    def resolve(self, given: Mapping[str, float] | None = None,
                how: Mapping[str, str] | None = None
                ) -> tuple[dict[str, float], dict[str, str], dict[str, float]]:
        """Stage 2: values, provenance and union-bound costs of every scalar free parameter
        (see :func:`boundcalc.stages.choose.resolve_parameters`)."""
        return choose.resolve_parameters(self, given, how)

    def enclosure(self, values: Mapping[str, float], costs: Mapping[str, float], value: float,
                  log10: float, selected: Mapping[str, np.ndarray] | None = None
                  ) -> tuple[float, float, dict[str, Any] | None, list[str]]:
        """Stage 3: the interval value (see :func:`boundcalc.stages.enclose.enclose_value`)."""
        return enclose.enclose_value(self, values, costs, value, log10, selected)

    def exact_value(self, params: Mapping[str, float] | None = None, digits: int = 30) -> Any:
        """The value by SymPy substitution and ``evalf`` at ``digits`` digits (slow; a check),
        with the grid and δ accounting of :meth:`resolve`."""
        values, _, costs = self.resolve(params)
        return enclose.exact_value(self, values, costs, digits)

    def check_assumptions(self, ctx: Any) -> list[dict[str, Any]]:
        """Stage 3: each assumption's status at ``ctx``."""
        return enclose.check_assumptions(self, ctx)

    def result(self, params: Mapping[str, float] | None = None, method: str = "evaluate",
               how: Mapping[str, str] | None = None, rigorous: bool = True) -> Result:
        """Full :class:`Result` with terms, δ accounting and assumption checks.

        For a certified or conditional entry (and ``rigorous``) the value is the upper end of
        an outward-rounded interval evaluation at the same point (:meth:`enclosure`), so it is
        never below the exact value of the formula; searches pass ``rigorous=False``.
        """
        e = self.entry
        params = dict(params or {})
        self.take_late_gridmin(params)
        values, choice, costs = self.resolve(params, how)
        delta_eff = self.delta_effective(costs)
        ctx = self.context(values, delta_eff)
        value, s, a = self.point_value(ctx)
        enclose.check_output(self, value, s, a)
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
        # the decimal sum of the shares (rounding.decimal_total): 0.05 + 0.01 is 0.06
        delta_total = decimal_total(self.scalars[s.name] for s in conf_syms) if conf_syms else None
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

    def _per_instance(self, name: str, sel: np.ndarray) -> np.ndarray:
        """GridMin selections as an array over the parameter's declared indices."""
        keep = [self.compiled.axes[i] for i in self.entry.parameters[name].indices]
        index = tuple(slice(None) if ax in keep else 0 for ax in range(sel.ndim))
        return np.asarray(sel[index])


def evaluate(entry: Entry, values: Mapping[str, Any], params: Mapping[str, float] | None = None,
             estimated: Mapping[str, str] | None = None, fixed: Iterable[str] = ()) -> Result:
    """Evaluate ``entry`` at ``values`` (symbol name -> number or array).

    Free parameters come from ``params`` (or the values), else their default, else their
    declared closed form. Grid and prior parameters are snapped to their grid and their
    union-bound cost is charged to δ. A parameter set by hand is used exactly: on its grid (and
    charged) unless named in ``fixed`` (chosen before seeing the data: any value, not charged).
    """
    return Prepared(entry, values, estimated, fixed).result(params)
