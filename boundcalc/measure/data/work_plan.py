"""The data side's plan, said before any pass over the data starts (issue 44 item 3).

``measure --data`` multiplies work: σ points × draws passes over S, a σ search on the tune rows,
passes at the per-group σ, Hessian probes. :mod:`boundcalc.plan` refuses counts that cannot
finish on *any* machine (optimistic speeds, before the model is loaded); this module says what
*this* run will do and how long it should take *here*:

* :func:`stages`: the passes, as the stages of :mod:`.stages` count them from the options and
  the sizes (rows of S and of the tune data, σ points, parameter groups): each stage with its
  rows and whether its forwards carry a posterior draw per row (the Monte Carlo) or not (the
  data pass), or are gradient passes (Hessian-vector products);
* :func:`calibrate`: the seconds per row of one plain and one per-row-noise forward, measured
  on the first batch (the noisy one only when a stage needs it), and of one whole-model draw
  (the σ searches draw once per evaluation: for MiniLM-L6 on 2 cores ≈ 0.15 s, a quarter of an
  evaluation on 64 rows);
* :func:`estimate` and :func:`plan_text`: their product plus the seconds the command spent
  before the plan (``speed["spent"]``: loading the model and the prior, the weights side,
  reading the data; measured, not estimated), so that the estimate is the whole command's;
  and one line that states it.

Contract: the estimate is a measurement of this machine now (another load later changes it),
not a bound; it is said, never used in a certificate. :func:`check` refuses a plan whose
estimate exceeds the time budget (:func:`boundcalc.limits.time_budget`, the option
``time_budget``) in one line naming the options that shrink it, before any pass.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any

import torch

from ...errors import ResourceError
from ...limits import duration_text, time_budget
from ...plan import Work
from ...words import option

HVP_COST = 8.5  # a Hessian-vector product in plain forwards, for the estimate: measured on
# MiniLM-L6, 64-token rows, 2 cores (8.6 in the acceptance run of issue 44: 37 s for 2 probes
# x 256 rows at 0.0084 s a forward; 8.3 in a run of 2 probes x 64 rows); never a bound

Stage = Work  # one stage's work (:class:`boundcalc.plan.Work`), counted by :mod:`.stages`


def stages(opts: Any, n: int, sigma_points: int | None = None, tune_rows: int | None = None,
           n_groups: int = 0, isotropic_search: bool = False,
           listed: Any = None) -> list[Work]:
    """The work of the stages ``listed`` (default :data:`.stages.STAGES`) for concrete
    options ``opts`` on ``n`` rows of S (``sigma_points``: distinct σ points, default those
    of ``opts.sigmas``; ``tune_rows`` None without tune data; ``n_groups`` σ groups), read
    from the stages' own counts."""
    from ...plan import Sizes
    from .stages import STAGES, counts, works

    c = counts(opts, isotropic_search)
    if sigma_points is not None:
        c = replace(c, sigmas=sigma_points)
    return works(c, Sizes(rows=n, tune_rows=tune_rows, groups=n_groups),
                 STAGES if listed is None else listed)


CALIBRATION_SECONDS = 0.5  # on a CPU, each kind of row is timed on about this long of rows
CALIBRATION_MIN_ROWS = 4  # ... and on at least this many (the tiny GPT-2 of issue 51, 0.1 s a
# row: 5 rows instead of its first batch of 32, 2.4 s of a 31 s command saved; MiniLM-L6,
# 0.012 s a row: its whole first batch, as before)


def calibration_rows(warm_seconds: float, batch: int) -> int:
    """Rows a CPU calibration times after a one-row warm-up that took ``warm_seconds``: about
    :data:`CALIBRATION_SECONDS` worth (the warm-up's first-call costs make it an over-estimate
    of a row, so rather fewer), at least :data:`CALIBRATION_MIN_ROWS`, at most ``batch``."""
    want = CALIBRATION_SECONDS / max(warm_seconds, 1e-9)
    return max(1, min(batch, max(CALIBRATION_MIN_ROWS, math.ceil(want))))


def calibrate(tm: Any, batched: Any, device: torch.device, noisy: bool,
              draw: bool = False, plain: tuple[float, int] | None = None) -> dict[str, Any]:
    """Seconds per row of the data pass and (``noisy``) of a Monte Carlo step with a posterior
    draw per row, each timed after one untimed warm-up (the code the work runs, loss and
    log-softmax included: :mod:`.batch_rows`), and (``draw``) the seconds of one whole-model
    draw and its restore (:class:`.gibbs.Perturber`, as the σ searches draw). On a card the
    warm-up and the timing run the first batch (kernel choices and the allocator's blocks
    follow the shapes); on a CPU the warm-up is one row and the timing
    :func:`calibration_rows` rows of the first batch (first-call costs do not grow with the
    rows, and a batch of a large-vocabulary language model costs as much as half its data
    pass: issue 51). ``plain``: (seconds per row, rows) of the data pass already timed here at
    these threads (:func:`faster_threads`), not timed again. ``rows`` in the result: the
    rows timed. A Hessian-vector product is not timed: on a few rows its fixed costs dwarf it
    (MiniLM-L6: 2.5 s per row from 8 rows, 0.69 s per row in the trace itself), and on a batch
    it costs seconds; the estimate counts :data:`HVP_COST` plain forwards."""
    from .batch_rows import first_monte_carlo_step, first_data_pass

    per_row, rows = plain if plain is not None else _timed_rows(tm, first_data_pass, batched,
                                                                device)
    out: dict[str, Any] = {"plain": per_row, "rows": rows}
    out["noisy"] = (_timed_rows(tm, first_monte_carlo_step, batched, device, rows)[0]
                    if noisy else per_row)
    if draw:
        out["draw"] = rows * _timed_rows(tm, _whole_model_draw, batched, device, rows)[0]
    return out


def faster_threads(tm: Any, batched: Any, device: torch.device,
                   choice: tuple[int, ...]) -> tuple[int, dict[int, float], int]:
    """The thread count of ``choice`` (:func:`boundcalc.measure.threads.timed_choice`) under
    which the data pass runs fastest here now, the seconds per row under each, and the rows
    timed: each timed on :data:`CALIBRATION_MIN_ROWS` rows of the first batch after a one-row
    warm-up (the faster's seconds are the calibration's plain speed, :func:`calibrate`'s
    ``plain``). A fact of this machine at this moment, like the calibration; the values
    measured do not depend on it (the same per-row losses on one thread and on two: the
    tests)."""
    from ..threads import blas_threads
    from .batch_rows import first_data_pass

    n = min(CALIBRATION_MIN_ROWS, _batch_rows(batched))
    seconds: dict[int, float] = {}
    for threads in choice:
        with blas_threads(threads):
            seconds[threads] = _timed_rows(tm, first_data_pass, batched, device, n)[0]
    return min(seconds, key=seconds.__getitem__), seconds, n


def _timed_rows(tm: Any, run: Any, batched: Any, device: torch.device,
                rows: int | None = None) -> tuple[float, int]:
    """Seconds per row of ``run(tm, part, device)`` on the first ``rows`` rows of the first
    batch, after one untimed warm-up (first-call allocations and kernel choices: on a card the
    first batch, on a CPU one row), and the rows timed; ``rows`` None: the first batch on a
    card, :func:`calibration_rows` from the warm-up's seconds on a CPU."""
    cuda = device.type == "cuda"
    t0 = time.perf_counter()
    run(tm, batched if cuda else _first_rows(batched, 1), device)
    _sync(device)
    if rows is None:
        batch = _batch_rows(batched)
        rows = batch if cuda else calibration_rows(time.perf_counter() - t0, batch)
    part = _first_rows(batched, rows)
    t0 = time.perf_counter()
    run(tm, part, device)
    _sync(device)
    return (time.perf_counter() - t0) / rows, rows


def _batch_rows(batched: Any) -> int:
    return int(next(iter(batched.batches[0][0].values())).shape[0])


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _first_rows(batched: Any, n: int) -> Any:
    """``batched`` cut to the first ``n`` rows of its first batch (itself when that is the
    whole of it)."""
    inputs, y = batched.batches[0]
    if n >= _batch_rows(batched) and len(batched.batches) == 1:
        return batched
    return replace(batched, batches=[({k: v[:n] for k, v in inputs.items()},
                                      None if y is None else y[:n])],
                   n=min(n, _batch_rows(batched)))


def _whole_model_draw(tm: Any, batched: Any, device: torch.device) -> None:
    """One whole-model posterior draw at σ = 10⁻³ and its restore (``batched`` unused)."""
    from .gibbs import Perturber

    pert = Perturber(tm.model)
    try:
        pert.draw(1e-3)
    finally:
        pert.restore()


def estimate(plan: list[Stage], speed: dict[str, Any]) -> float:
    """Seconds of the whole command: those spent before the plan (``speed["spent"]``, 0 when
    absent) and those the stages take at the calibrated speeds (their forwards, and their
    whole-model draws at ``speed["draw"]``, 0 when not calibrated)."""
    return speed.get("spent", 0.0) + sum(_stage_seconds(s, speed) for s in plan)


def _stage_seconds(s: Stage, speed: dict[str, Any]) -> float:
    """One stage's seconds: its row forwards at the calibrated speed (a Hessian-vector product
    as :data:`HVP_COST` plain forwards) and its whole-model draws at ``speed["draw"]``."""
    forwards = s.passes * s.rows * HVP_COST if s.kind == "hvp" else s.row_forwards
    return forwards * speed["noisy" if s.kind == "noisy" else "plain"] \
        + s.draws * speed.get("draw", 0.0)


def plan_text(plan: list[Stage], speed: dict[str, Any], seconds: float) -> str:
    """'plan: data pass 1 × 1000 rows; Monte Carlo, 7 σ × 20 draws 140 × 1000 rows; … ≈ 2.1 h
    here (calibrated on 32 rows: 0.012 s per row, 0.031 s with a draw per row)'."""
    parts = [f"{s.what}: {s.passes} × {s.rows} rows" for s in plan]
    spent = speed.get("spent")
    before = ("" if spent is None else f"{duration_text(spent)} spent before the plan "
              "(loading, the weights side, reading the data), ")
    draw = f", {speed['draw']:.3g} s a whole-model draw" if "draw" in speed else ""
    return (f"plan: {'; '.join(parts)}; ≈ {duration_text(seconds)} here in all ({before}"
            f"calibrated on {speed['rows']} rows: {speed['plain']:.3g} s per row, "
            f"{speed['noisy']:.3g} s with a draw per row{draw}; an estimate, not a bound)")


def check(plan: list[Stage], seconds: float) -> None:
    """Refuse a plan whose estimate exceeds the time budget, naming what shrinks it."""
    budget = time_budget()
    if seconds <= budget:
        return
    shrink = []
    names = " ".join(s.what for s in plan)
    if "Monte Carlo" in names:
        shrink += [option("draws"), option("sigma")]
    if "σ search" in names:
        shrink += [option("tune_draws"), option("group_draws")]
    if "Hessian" in names or "P̂" in names:
        shrink += [option("hessian_probes")]
    shrink.append(option("gibbs_samples"))
    raise ResourceError(f"the plan would take about {duration_text(seconds)} on this machine "
                        f"(calibrated), more than the time budget of {duration_text(budget)}: "
                        f"lower {', '.join(shrink)}, or raise {option('time_budget')}")
