"""Plan the work before doing it: refuse counts that cannot finish within the budgets.

Every option that multiplies work (``--draws`` per σ, ``--hessian-probes``,
``--perturbation-draws``, the rows of DATA, ``correlate --bootstrap``) is turned into an
estimate of the memory it needs and the time it takes *before* any of it starts. A plan item is
refused with one :class:`~boundcalc.errors.ResourceError` line naming its option when

* its memory exceeds the memory budget (:func:`boundcalc.limits.memory_budget`, or the
  work budget that follows the machine's free memory, :func:`boundcalc.limits.work_budget`), or
* its time, estimated at an optimistic speed, exceeds the time budget
  (:func:`boundcalc.limits.time_budget`, default one hour, ``--time-budget``).

The time estimates are deliberately optimistic (lower bounds): what is refused cannot finish
within the budget on any machine boundcalc targets; what is accepted may still take longer.

* a forward pass of one sample costs 2 · parameters · positions floating-point operations,
  run at :data:`FLOPS` (10¹² per second on a CPU, 10¹⁵ on a GPU, both above what the hardware
  reaches on these models);
* every model call (one batch) costs at least :data:`CALL_SECONDS` (10 µs) of Python and
  framework overhead, whatever the model;
* a Hessian-vector product costs :data:`HVP_FORWARDS` (4) forward passes.

No torch import (correlate uses it too): the plan is arithmetic on counts, run before the model
is loaded (with lower bounds for what is not known yet: one parameter, one row) and again once
the model and the data are known. The data side's work is not counted here: each of its stages
states its own as a :class:`Work` (:mod:`boundcalc.measure.data.stages`, which sits above and
hands them to :func:`items`), the one count the calibrated estimate and the sizing read too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .limits import check_allocation, check_time
from .words import option

FLOPS = {"cpu": 1e12, "cuda": 1e15}
CALL_SECONDS = 1e-5
HVP_FORWARDS = 4.0
LS_MESH_POINTS = 20  # σ points of the Lintilhac–Shaikh mesh (data_pass.LS_MESH)


@dataclass
class Item:
    """One piece of planned work: the option that drives it (in the caller's words,
    :mod:`boundcalc.words`), its memory and its time."""

    option: str
    nbytes: float
    seconds: float


def _seconds(forwards: float, calls: float, n_params: float, positions: float,
             device: str) -> float:
    flops = 2.0 * forwards * max(n_params, 1.0) * max(positions, 1.0)
    return flops / FLOPS.get(device, FLOPS["cpu"]) + calls * CALL_SECONDS


@dataclass(frozen=True)
class Counts:
    """What one ``measure --data`` is asked to do, as the counts that multiply its work (the
    data side builds it from its options record: :func:`boundcalc.measure.data.stages.
    counts`; the plan reads no options record itself, as it sits below them).

    ``sigmas``: distinct σ points of the Gibbs risk; ``draws`` passes per σ;
    ``hessian_probes`` on ``hessian_samples`` rows; ``perturbation_draws`` (P̂);
    ``batch_size``: rows per model call; ``gibbs_samples``: rows per Monte Carlo pass when each
    pass is evaluated on a subsample (``--gibbs-samples``), else None (every row);
    ``group_draws``, ``tune_draws``: the per-group σ measurement (``--group-draws`` passes over
    DATA at the chosen vector; σ vectors tried with ``--tune-draws`` passes each over the tune
    rows); 0 when there is none; ``per_group``: the search tries per-group shapes (else the
    isotropic σ only); ``isotropic_search``: the isotropic σ is also bisected with
    the model's weights on the tune rows (a prior without a task head of its own)."""

    sigmas: int
    draws: int
    hessian_probes: int
    hessian_samples: int
    perturbation_draws: int
    batch_size: int = 1
    gibbs_samples: int | None = None
    group_draws: int = 0
    tune_draws: int = 0
    isotropic_search: bool = False
    per_group: bool = True


@dataclass(frozen=True)
class Sizes:
    """What is known of the model and the data when the plan is made; an unknown value is
    its lower bound, 1. ``rows``: samples of DATA; ``positions``: tokens (or patches) per
    sample; ``n_params``: trainable parameters; ``groups``: parameter groups of the Hessian
    trace and of the per-group σ; ``tune_rows``: rows of the tune data the σ searches read
    (None: there is none, and they read DATA); ``device``: ``cpu`` or ``cuda``
    (:data:`FLOPS`)."""

    rows: int = 1
    positions: int = 1
    n_params: int = 1
    groups: int = 1
    tune_rows: int | None = 1
    device: str = "cpu"


@dataclass
class Work:
    """One stage's work, the one count that the count check (:func:`items`), the calibrated
    estimate (:func:`boundcalc.measure.data.work_plan.estimate`) and the sizing all read:
    ``passes`` passes over ``rows`` rows whose forwards are ``kind`` "plain", "noisy" (a
    posterior draw per row) or "hvp" (Hessian-vector products), ``draws`` whole-model
    posterior draws beside them (one per evaluation of a σ search); ``what``: its words in
    the plan line; ``option``: the count check's words, naming the option that drives it;
    ``nbytes``: the memory it holds at once (:func:`boundcalc.limits.check_allocation`)."""

    what: str
    passes: int
    rows: int
    kind: str
    draws: int = 0
    option: str = ""
    nbytes: float = 0.0

    @property
    def row_forwards(self) -> float:
        """Forwards of one sample, a Hessian-vector product counted as :data:`HVP_FORWARDS`."""
        return float(self.passes) * self.rows * (HVP_FORWARDS if self.kind == "hvp" else 1.0)

    def record(self) -> dict[str, object]:
        """The stage as ``provenance.plan.stages`` records it."""
        return {"what": self.what, "passes": self.passes, "rows": self.rows,
                "kind": self.kind, "draws": self.draws}


def items(works: list[Work], sizes: Sizes, batch_size: int = 1) -> list[Item]:
    """The count check's items of ``works`` (the data side's stages,
    :func:`boundcalc.measure.data.stages.measure_plan`) on a model and data of ``sizes``, at
    the optimistic speeds of the module docstring, ``batch_size`` rows per model call."""
    out = []
    for w in works:
        calls = float(w.passes) * math.ceil(max(w.rows, 1) / max(batch_size, 1))
        out.append(Item(w.option or w.what, w.nbytes,
                        _seconds(w.row_forwards, calls, sizes.n_params, sizes.positions,
                                 sizes.device)))
    return out


def bootstrap_plan(resamples: int, entries: int, seconds_per_resample: float) -> list[Item]:
    """The work of ``correlate --bootstrap``: two float64 arrays of ``resamples`` per entry
    (one entry at a time) and ``resamples · entries`` resamples at the measured speed."""
    return [Item(f"{option('n_bootstrap', resamples)} (× {entries} entries)", 16.0 * resamples,
                 float(resamples) * entries * seconds_per_resample)]


def check(items: list[Item], budget: int | None = None) -> None:
    """Refuse the first item over the memory budget (``budget``, else
    :func:`boundcalc.limits.memory_budget`; measure passes the work budget of its device,
    :func:`boundcalc.limits.work_budget`) or the time budget (one line naming its option);
    then the whole plan against the time budget."""
    for it in items:
        check_allocation(it.nbytes, it.option, budget)
        check_time(it.seconds, it.option)
    total = sum(it.seconds for it in items)
    if items:
        worst = max(items, key=lambda it: it.seconds)
        check_time(total, f"the whole plan (mostly {worst.option})")
