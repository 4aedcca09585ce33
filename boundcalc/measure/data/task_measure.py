"""``measure MODEL --data DATA`` for a task-head checkpoint: weights side + data side.

The weights side is :func:`.pipeline.measure` (layer map, norms, distances from ``init``). The
data side adds, on the sample DATA (the training sample the bounds are about):

scalars  ``n``, ``emp_risk`` (0-1 error of the trained weights), ``loss_mean`` (mean
         cross-entropy / per-token NLL), ``cross_entropy``, ``margin_q{01,05,10,25,50}``,
         ``input_token_norm_max`` (B_X: max token norm of the embedding output, i.e. the input
         of layer 0, positions included), ``input_fro_max``, ``seq_len`` (T), ``gibbs_draws``
         (N, the count of independent Monte Carlo losses behind Ê: k·n in ``sample`` mode, k in
         ``whole`` mode), ``gibbs_passes`` (k),
         ``hessian_trace`` (Hutchinson, with its t interval), ``smoothing_alpha`` (LMs);
curves   ``ramp_risk`` and ``margin_below`` over Bartlett's γ grid 2^k (k = −20…20);
         ``gibbs_risk_mean`` over σ on the Dziugaite–Roy grid σ² = 0.1·e^{−j/100}, each point
         with its loss count N and the one-sided kl interval [Ê, kl⁻¹(Ê, ln(2|points|/δ′)/N)];
         ``perturbation_term`` (P̂ of Lintilhac–Shaikh) at each σ of their 20-point mesh, when
         ``perturbation_draws`` > 0 (expensive: 20 × draws Hutchinson estimates);
groups   ``hessian_trace`` per stats group (estimated).
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Any, Sequence

import torch

from ...errors import BoundcalcError
from ...stats import Stats
from ...words import keyword, option
from .dataset_io import read_batches
from .batch_rows import DEFAULT_ROWS, batch_rows
from .gibbs import resolve_mode
from ... import plan
from ..device import (default_precision, precision as data_precision, precision_record,
                      resolve_device, work_budget_for)
from ..threads import SMALL_DATA_WIDTH, blas_threads, data_threads, timed_choice
from .hf import load_task_model
from .options import MeasureOptions
from .stages import DataRun, DataStage, listed, measure_plan
from .sigma_grid import DEFAULT_SIGMAS, SNAP_TOLERANCE, dr_point, snapped_sigmas  # noqa: F401

__all__ = ["DEFAULT_SIGMAS", "MeasureOptions", "SNAP_TOLERANCE", "dr_point", "measure_task",
           "snapped_sigmas"]


def measure_task(model: str, data: str, init: str | None = None,
                 options: MeasureOptions | None = None, *, progress: Any = None,
                 say: Any = None, stages: Sequence[DataStage] = (), load: Any = None,
                 **keywords: Any) -> Stats:
    """Measure a task-head Hugging Face folder on a data set (see the module docstring).

    ``options`` (:class:`~.options.MeasureOptions`, checked when built) says what to measure;
    ``keywords`` are its fields given one by one (``draws=5``, ``sigmas=(0.01,)``; ``alpha`` is
    ``smoothing``), in place of the values of ``options`` when both are given. ``progress``:
    True for a terminal bar, a callable ``(done, total, what)``, or None. ``say(line)``
    gets the plan (:mod:`.work_plan`: the passes and their time here, from a one-batch
    calibration) before the first pass over the data; a plan longer than the time budget is
    refused then.

    ``sigma_groups`` (implied by ``tune_data``) adds the per-group Gaussian posterior of
    :mod:`.tune`: σ_g searched on ``tune_data`` (disjoint from DATA, e.g. the split the prior
    ``init`` was trained on: free) or, without it, on DATA (charged), then the Gibbs risk on
    DATA at the chosen vector with ``group_draws`` passes (default ``draws``) in ``gibbs_mode``
    (auto: a draw per sample where exact, N = passes·n; curve ``gibbs_risk_groups``,
    ``provenance.gibbs_groups``). ``threads``: torch threads for the data side (default
    :func:`~boundcalc.measure.threads.data_threads`; recorded in ``provenance.threads``, as
    sums may differ in the last bits with the thread count). ``precision``: the arithmetic of
    the data pass and the Monte Carlo passes (``fp32``, ``tf32``, ``bf16``; default
    :func:`~boundcalc.measure.device.default_precision`: fp32 on a CPU, tf32 on CUDA; the
    Hessian trace is fp32 whatever it is), recorded in ``provenance.precision``.

    Disjointness is checked by content (:func:`~.dataset_io.row_digests`: each row's inputs
    and label), never by path: a ``tune_data`` row that is a row of DATA is refused, unless
    ``allow_overlap``, which charges the shape as if it were chosen on S; the count of shared
    rows is recorded (``provenance.gibbs_groups.tune_shared_rows``). ``init_data``, the data
    ``init`` was trained on when the user names it, must share no row with DATA (a prior fit on
    S is not a prior); recorded in ``provenance.init_data``.

    ``stages``: the stages the caller picks to run after the data side's own
    (:data:`.stages.STAGES`), on the task model and the batches of DATA loaded here, so that a
    measurement on top of this one loads and reads nothing twice (the compression of ``measure
    --compress``: :class:`boundcalc.measure.compress.compression.CompressionStage`; certify's
    posteriors); their counts join the plan, the estimate and the sizing (:mod:`.stages`).

    ``load(path, device)``: the loader of the model folder and of a prior folder with a task
    head (default :func:`~.hf.load_task_model`); certify passes its run's cache
    (:class:`boundcalc.certify.loaded.Loaded`), so that later steps reuse what is loaded here.
    """
    from ..weights.pipeline import measure

    from . import sizing

    started = time.monotonic()  # the plan counts what the command spent before it
    opts = MeasureOptions.of(options, **keywords)
    every = listed(stages)  # the data side's stages, then the caller's
    counts = sizing.plan_counts(opts)  # automatic choices at their cheapest: lower bounds
    dev = resolve_device(opts.device)
    budget = work_budget_for(dev)  # follows the machine's free memory unless set

    def check(**sizes: Any) -> None:  # the stages' counts, at optimistic speeds
        if opts.tune_data is None:  # the σ searches (if any) read S
            sizes["tune_rows"] = None
        plan.check(measure_plan(counts, plan.Sizes(**sizes), every), budget)

    check(device="cuda")  # lower bounds, before loading
    if opts.groups:
        _check_tune(data, init, opts.tune_data)
    load = load or load_task_model
    tm = load(model, dev)
    prior = prior_record = None
    if opts.groups:  # the prior as a predictor, built (or refused) before any pass over data
        from .prior_model import prior_task_model

        prior, prior_record = prior_task_model(init, tm, opts.head_init, dev, load=load)
    n_params = sum(p.numel() for p in tm.model.parameters())
    check(n_params=n_params, device=dev.type)

    def read(source: str, rows: int | None = None):
        return read_batches(source, tm, text_column=opts.text_column,
                            label_column=opts.label_column, max_length=opts.max_length,
                            batch_size=rows or opts.batch_size or DEFAULT_ROWS)

    batched = read(data)
    check(n_params=n_params, rows=batched.n, positions=batched.seq_len, device=dev.type)
    tune, shared = None, 0
    if opts.groups and opts.tune_data is not None:  # read and checked before any Monte Carlo
        tune = read(opts.tune_data)
        shared = _overlap(batched, tune, data, opts.tune_data, "tune_data", opts.allow_overlap)
        check(n_params=n_params, rows=batched.n, positions=max(batched.seq_len, tune.seq_len),
              device=dev.type, tune_rows=tune.n)
    init_rows = None
    if opts.init_data is not None:
        init_rows = read(opts.init_data)
        _overlap(batched, init_rows, data, opts.init_data, "init_data", False)
    stats = measure(model, init=init, device=opts.device, progress=progress or False,
                    head_init=opts.head_init)
    if progress is True:
        from ..weights.pipeline import _rich_progress

        report, stop = _rich_progress()
    else:
        report, stop = (progress if callable(progress) else None), (lambda: None)
    threads = opts.threads
    n_threads = data_threads(tm.model, dev, threads)
    prec = opts.precision or default_precision(dev)
    stats.provenance["precision"] = precision_record(prec, dev)
    rule = (f"requested ({keyword('threads')})" + (
        f", capped at the {n_threads} core(s) this process may use"
        if n_threads != threads else "")) if threads is not None else (
        f"one for a model no wider than {SMALL_DATA_WIDTH} on a CPU, else torch's default")
    timed = None  # (seconds per row, rows) of the data pass at the threads chosen by timing
    choice = timed_choice(tm.model, dev) if threads is None else None
    if choice:
        from .work_plan import faster_threads

        with data_precision(prec, dev):
            n_threads, per_row, timed_rows = faster_threads(tm, batched, dev, choice)
        timed = (per_row[n_threads], timed_rows)
        rule = ("timed on the first rows of DATA (a language model narrower than "
                f"{SMALL_DATA_WIDTH} but for its vocabulary head): " + ", ".join(
                    f"{k} thread{'s' * (k > 1)} {v:.3g} s per row" for k, v in per_row.items())
                + "; the faster")
    stats.provenance["threads"] = {"data_side": n_threads or torch.get_num_threads(),
                                   "rule": rule}
    try:
        with blas_threads(n_threads):
            with data_precision(prec, dev):
                rows, stats.provenance["batch_size"] = batch_rows(
                    tm, batched, dev, opts.batch_size, per_sample=opts.draws != 0
                    and resolve_mode(tm, opts.gibbs_mode)[1] == "hooks")
                if rows != (opts.batch_size or DEFAULT_ROWS):  # sized to the card: read again
                    batched = read(data, rows)
                    tune = read(opts.tune_data, rows) if tune is not None else None
                on_tune = sizing.on_tune(opts)  # the isotropic σ chosen on the tune rows
                opts = _say_plan(stats, tm, batched, dev, opts, tune, say, prior_record,
                                 started, every, timed)
            run = DataRun(tm, batched, dev, opts, data, init,
                          tune=sizing.search_split(tune, opts),  # the rows the searches read
                          prior=prior, prior_record=prior_record, shared=shared,
                          on_tune=on_tune, report=report, say=say)
            laps = _Laps(stats, started)
            for stage in every:  # the list the plan counted, in its order
                if stage.inside and stage.wanted(run):
                    with data_precision(prec, dev) if stage.precision else nullcontext():
                        stage.run(run, stats)
                    laps(stage.name)
            opts = run.opts
            sizing.say_more_draws(stats, opts, batched.n, say)
    finally:
        stop()
    stats.provenance["sigma_snapped"] = snapped_sigmas(opts.sigmas) if opts.sigmas else []
    if init_rows is not None:
        stats.provenance["init_data"] = {"source": str(opts.init_data), "rows": init_rows.n,
                                         "shared_rows_with_S": 0}
    for stage in every:  # the caller's, on the model and batches as the data side left them
        if not stage.inside and stage.wanted(run):
            stage.run(run, stats)
            laps(stage.name)
    if "plan" in stats.provenance:
        stats.provenance["plan"]["measured_seconds"]["all"] = time.monotonic() - started
    return stats


class _Laps:
    """The seconds each phase took, recorded beside the plan's estimate
    (``provenance.plan.measured_seconds``: the phase's name -> seconds; ``all``: the call)."""

    def __init__(self, stats: Stats, started: float) -> None:
        self.record = stats.provenance.setdefault("plan", {}).setdefault(
            "measured_seconds", {"before the passes": time.monotonic() - started})
        self.last = time.monotonic()

    def __call__(self, what: str) -> None:
        now = time.monotonic()
        self.record[what] = now - self.last
        self.last = now


def _say_plan(stats: Stats, tm, batched, dev, opts: MeasureOptions, tune, say,
              prior_record: dict[str, Any] | None, started: float,
              every: Sequence[DataStage],
              timed: tuple[float, int] | None = None) -> MeasureOptions:
    """The data side's passes and, where more than the data pass runs, their time here from
    a one-batch calibration (:mod:`.work_plan`), with the seconds spent since ``started``
    (the call's start: loading, the weights side, reading, the calibration) counted in: said,
    recorded in ``provenance.plan``, and refused above the time budget, before any pass over
    the data. Choices left to the data side (:mod:`.sizing`) are made here, from the same
    calibration; returns the options with every count concrete."""
    from . import sizing, work_plan
    from .gibbs import resolve_mode
    from .tune import sigma_groups

    n_groups = len(set(sigma_groups(tm.model).values())) if opts.groups else 0
    tune_rows = tune.n if tune is not None else None
    left = any(sizing.auto(opts).values())
    posterior_search = (sizing.on_tune(opts) and opts.groups
                        and (prior_record or {}).get("kind") != "checkpoint with a task head")
    plan_ = sizing.plan_of(sizing.provisional(opts), batched.n, tune_rows, n_groups,
                           posterior_search, every)
    record: dict[str, Any] = {}
    text = f"plan: {plan_[0].what}: 1 × {plan_[0].rows} rows"
    mode, engine = resolve_mode(tm, opts.gibbs_mode)
    if len(plan_) > 1:
        # the row-wise hooks are timed; a whole-model draw per pass (tied weights) costs a
        # plain forward per row
        speed = work_plan.calibrate(tm, batched, dev, noisy=engine == "hooks" and any(
            st.kind == "noisy" for st in plan_), draw=any(st.draws for st in plan_),
            plain=timed)
        speed["spent"] = time.monotonic() - started
        if left:
            sized = sizing.size(opts, batched.n, tune_rows, n_groups, speed, mode == "sample",
                                posterior_search, every)
            opts, plan_, seconds = sized.options, sized.plan, sized.seconds
            stats.provenance["sizing"] = sized.record
            if say is not None:
                say(sizing.sizing_text(sized))
        else:
            seconds = work_plan.estimate(plan_, speed)
        record.update(calibration=speed, seconds=seconds)
        text = work_plan.plan_text(plan_, speed, seconds)
    elif left:
        opts = sizing.provisional(opts)
    record["stages"] = [st.record() for st in plan_]
    stats.provenance["plan"] = record
    if say is not None:
        say(text)
    if "seconds" in record:
        work_plan.check(plan_, record["seconds"])
    return opts


def _overlap(S, other, data: str, other_source: str, name: str, allow: bool) -> int:
    """Rows of ``other`` (the option ``name``: tune_data or init_data) that are rows of S, by
    content; refused unless ``allow``."""
    from .dataset_io import DataError, shared_rows

    shared = shared_rows(S, other)
    if shared and not allow:
        hint = (f"; pass a disjoint split, or {option('allow_overlap')} to pay for the shape as "
                "if it were chosen on S" if name == "tune_data" else
                "; a prior trained on rows of S is not a PAC-Bayes prior: train "
                f"{option('init')} on a disjoint split")
        raise DataError(f"{option(name, other_source)}: {shared} of its {other.n} rows are rows "
                        f"of DATA {data} (same inputs and label), so it is not disjoint from "
                        f"DATA{hint}")
    return shared


def _check_tune(data: str, init: str | None, tune_data: str | None) -> None:
    from pathlib import Path

    from ...prior_spec import is_keyword

    groups = f"{option('tune_data')} / {option('sigma_groups')}"
    if init is None or is_keyword(init):
        raise BoundcalcError(f"{groups} need {option('init')}: a checkpoint (the prior trained "
                             "on the tune split, or the pretrained base the model was "
                             "fine-tuned from, with or without a task head), where the "
                             "per-group prior N(w_init, diag σ_g²) is centred")
    if tune_data is not None and Path(tune_data).resolve() == Path(data).resolve():
        raise BoundcalcError(f"{option('tune_data', tune_data)}: is DATA itself; it must be a "
                             f"split disjoint from DATA (without {option('tune_data')}, "
                             f"{option('sigma_groups')} searches on DATA and pays for it)")
