"""Optimizer and sensitivity reports: choose free parameters honestly, explain the number.

Public API::

    from boundcalc.optimize import optimize
    r = optimize("mcallester", values={...})          # or optimize(entry, stats_file)
    r.method, r.extra["certified_optimum"], r.extra["sensitivity"]

Modules: :mod:`.entry_points` (``optimize``, ``what_it_takes``, ...), :mod:`.core` (closed
forms, grids, priors, SciPy, GP cross-checks), :mod:`.gp` (SymPy → CVXPY), :mod:`.per_instance` (per-group σ_g on the Dziugaite–Roy grid),
:mod:`.derivatives` and :mod:`.sensitivity` (envelope-theorem sensitivities, contributions),
:mod:`.whatif` (smallest n, shrink factors, bound against n and δ), :mod:`.batch`
(vectorised evaluation along a batch axis).
"""

from __future__ import annotations

from .entry_points import (applicable, optimize, optimize_prepared, prepare_entry, quick_value,
                           what_it_takes)
from .core import Choice, Options, choose
from .derivatives import derivative
from .gp import GPOutcome, Translator, solve_gp
from .per_instance import ChargedPrepared, per_instance_symbols
from .sensitivity import contributions, selections, sensitivities
from .whatif import bound_table, shrink_factor, smallest_n

__all__ = [
    "ChargedPrepared", "Choice", "GPOutcome", "Options", "Translator", "applicable",
    "bound_table", "choose", "contributions", "derivative", "optimize", "optimize_prepared",
    "per_instance_symbols", "prepare_entry", "quick_value", "selections", "sensitivities",
    "shrink_factor", "smallest_n", "solve_gp", "what_it_takes",
]
