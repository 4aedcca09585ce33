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

No torch import (correlate uses it too): the plan is arithmetic on counts, run before the model is loaded (with lower
bounds for what is not known yet: one parameter, one row) and again once the model and the data
are known.
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
    data side builds it from its options record: :func:`boundcalc.measure.data.sizing.
    plan_counts`; the plan reads no options record itself, as it sits below them).

    ``sigmas``: distinct σ points of the Gibbs risk; ``draws`` passes per σ;
    ``hessian_probes`` on ``hessian_samples`` rows; ``perturbation_draws`` (P̂);
    ``batch_size``: rows per model call; ``gibbs_samples``: rows per Monte Carlo pass when each
    pass is evaluated on a subsample (``--gibbs-samples``), else None (every row);
    ``group_draws``, ``tune_draws``: the per-group σ measurement (``--group-draws`` passes over
    DATA at the chosen vector; at least one σ vector tried with ``--tune-draws`` passes over
    the tune rows); 0 when there is none."""

    sigmas: int
    draws: int
    hessian_probes: int
    hessian_samples: int
    perturbation_draws: int
    batch_size: int = 1
    gibbs_samples: int | None = None
    group_draws: int = 0
    tune_draws: int = 0


@dataclass(frozen=True)
class Sizes:
    """What is known of the model and the data when the plan is made; an unknown value is
    its lower bound, 1. ``rows``: samples of DATA; ``positions``: tokens (or patches) per
    sample; ``n_params``: trainable parameters; ``groups``: parameter groups of the Hessian
    trace; ``tune_rows``: rows of the tune data; ``device``: ``cpu`` or ``cuda``
    (:data:`FLOPS`)."""

    rows: int = 1
    positions: int = 1
    n_params: int = 1
    groups: int = 1
    tune_rows: int = 1
    device: str = "cpu"


def _sampled(gibbs_samples: int, what: str) -> str:
    """A Monte Carlo item's words: with ``gibbs_samples`` rows drawn per pass, that option
    first (it sets the rows of every pass: the one to lower when it is large)."""
    return f"{option('gibbs_samples', gibbs_samples)} × {what}" if gibbs_samples else what


def measure_plan(options: Counts, sizes: Sizes = Sizes()) -> list[Item]:
    """The work of ``measure --data`` asked for by ``options`` on data and a model of
    ``sizes`` (see the module docstring)."""
    c = options
    sigmas, draws, hessian_probes = c.sigmas, c.draws, c.hessian_probes
    hessian_samples, perturbation_draws = c.hessian_samples, c.perturbation_draws
    batch_size, gibbs_samples = c.batch_size, c.gibbs_samples
    group_draws, tune_draws = c.group_draws, c.tune_draws
    rows, positions, n_params = sizes.rows, sizes.positions, sizes.n_params
    groups, tune_rows, device = sizes.groups, sizes.tune_rows, sizes.device
    rows, positions, n_params = max(rows, 1), max(positions, 1), max(n_params, 1)
    batches = math.ceil(rows / max(batch_size, 1))
    hs = min(max(hessian_samples, 1), rows)
    hs_batches = math.ceil(hs / max(batch_size, 1))
    items = [Item(f"DATA ({rows:,} rows)", 0.0,
                  _seconds(rows, batches, n_params, positions, device))]
    if draws > 0 and sigmas > 0:
        passes = float(sigmas) * draws
        mc_rows = max(gibbs_samples, 1) if gibbs_samples else rows
        mc_batches = math.ceil(mc_rows / max(batch_size, 1))
        items.append(Item(
            _sampled(gibbs_samples, f"{option('draws', draws)} (× {sigmas} σ, "
                                    f"{mc_rows:,} rows each)"),
            8.0 * passes + 12.0 * n_params,  # losses per draw; saved weights + float64 noise
            _seconds(passes * mc_rows, passes * mc_batches, n_params, positions, device)))
    for count, name, n_rows in ((group_draws, "group_draws", rows),
                                (tune_draws, "tune_draws", max(tune_rows, 1))):
        if count > 0:
            mc_rows = max(gibbs_samples, 1) if gibbs_samples and n_rows == rows else n_rows
            items.append(Item(
                _sampled(gibbs_samples if n_rows == rows else 0,
                         f"{option(name, count)} ({mc_rows:,} rows each)"),
                8.0 * count + 12.0 * n_params,
                _seconds(float(count) * mc_rows, count * math.ceil(mc_rows / max(batch_size, 1)),
                         n_params, positions, device)))
    if hessian_probes > 0:
        hvps = float(hessian_probes) + 1
        items.append(Item(
            f"{option('hessian_probes', hessian_probes)} (on {hs:,} samples)",
            # quadratic forms, and one probe's four float32 copies (probe, tangent, gradient,
            # product): probes are drawn from seeds where used, and a batch of several (CUDA)
            # is sized to the memory budget by curvature.probe_batch
            8.0 * groups * hessian_probes + 16.0 * n_params,
            _seconds(hvps * HVP_FORWARDS * hs, hvps * hs_batches, n_params, positions, device)))
    if perturbation_draws > 0:
        probes = max(hessian_probes, 2)
        traces = float(LS_MESH_POINTS) * perturbation_draws + 1
        hvps = traces * (probes + 1)
        items.append(Item(
            f"{option('perturbation_draws', perturbation_draws)} (× {LS_MESH_POINTS} σ × {probes} "
            "Hutchinson probes)",
            32.0 * perturbation_draws + 8.0 * LS_MESH_POINTS + 12.0 * n_params,
            _seconds(hvps * HVP_FORWARDS * hs, hvps * hs_batches, n_params, positions, device)))
    return items


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
