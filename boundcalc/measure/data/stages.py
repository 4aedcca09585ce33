"""The contract of one stage of ``measure --data`` and the list that runs them (issue 53 item
1; in the manner of certify's steps, :mod:`boundcalc.certify.steps`, and CVXPY's
``reductions/``: each stage a class, listed once in :data:`STAGES`).

A :class:`DataStage` states

* ``name``: its name in the plan line and in ``provenance.plan.measured_seconds``;
* ``record`` and ``options``: the sub-record it reads, as field names of ``record``
  (:class:`~.options.MeasureOptions` for the data side's own stages; a stage a caller adds
  names its own record, e.g. the compression's ``CompressOptions``);
  :meth:`DataStage.settings` gives their values;
* :meth:`DataStage.work` (``Counts, Sizes → Work | None``): its work as **one count**
  (:class:`boundcalc.plan.Work`: passes over rows of a kind, whole-model draws, memory),
  None when it does nothing. Three readers read that count and no other arithmetic: the
  count check before and after loading (:func:`measure_plan` → :func:`boundcalc.plan.items`,
  optimistic speeds), the estimate here (:func:`.work_plan.estimate`, calibrated speeds) and
  the sizing of the automatic choices (:func:`.sizing.size`, which tries candidates through
  :func:`works`);
* :meth:`DataStage.wanted` and :meth:`DataStage.run` (``(loaded, stats) → None``): whether it
  runs, and its run on the one loaded model, data and choices of the call
  (:class:`DataRun`), writing into ``stats``; ``precision``: whether it runs in the data
  side's arithmetic (``--precision``) or in fp32 (curvature); ``inside``: whether it runs
  inside the data side's thread count and arithmetic (the data side's own stages), or after
  them and after the data side's records, on the model and batches as it left them (the
  stages a caller adds: the compression of ``measure --compress``, and certify's
  bound-trained and subspace posteriors, :mod:`boundcalc.certify.pipeline`).

:func:`.task_measure.measure_task` sizes the list :data:`STAGES` followed by the stages its
caller picks (``stages=``; their counts read by the plan and the sizing alike), then runs each
wanted stage in that order (the order of the plan line) and records its seconds. Contract: a
stage whose count is 0 is absent from the count check, the estimate and the sizing alike
(:func:`works` drops it); what a stage runs is what its count says (a test changes one count and sees all three readers move:
``tests/measure/test_stages.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ...plan import LS_MESH_POINTS, Counts, Item, Sizes, Work, items
from ...words import option
from .options import MeasureOptions
from .sigma_grid import snapped_sigmas


@dataclass
class DataRun:
    """One call of ``measure_task`` as the stages see it: the loaded task model ``tm``, the
    batches of S (``batched``) and of the tune rows the σ searches read (``tune``, or None),
    the device, the concrete options ``opts`` (the isotropic σ stage replaces its σ), the
    sources ``data`` and ``init``, the prior as a predictor (``prior``, ``prior_record``),
    the tune rows shared with S (``shared``), whether the isotropic σ is chosen on the tune
    rows (``on_tune``), ``report`` (progress) and ``say``; ``found``: the per-group search's
    result, for the stages after it."""

    tm: Any
    batched: Any
    device: Any
    opts: MeasureOptions
    data: str
    init: str | None
    tune: Any = None
    prior: Any = None
    prior_record: dict[str, Any] | None = None
    shared: int = 0
    on_tune: bool = False
    report: Callable[..., Any] | None = None
    say: Callable[[str], Any] | None = None
    found: Any = None


class DataStage:
    """One stage of the data side (module docstring); subclasses set ``name`` and
    ``options`` and define :meth:`work`, :meth:`wanted` and :meth:`run`."""

    name: str = ""
    record: type = MeasureOptions
    options: tuple[str, ...] = ()
    precision: bool = True
    inside: bool = True

    def settings(self, opts: Any) -> dict[str, Any]:
        """The values of this stage's sub-record of ``opts`` (a ``record``)."""
        return {k: getattr(opts, k) for k in self.options}

    def work(self, c: Counts, s: Sizes) -> Work | None:
        """Its work for counts ``c`` on sizes ``s`` (None: nothing to do)."""
        raise NotImplementedError

    def wanted(self, run: DataRun) -> bool:
        """Whether it runs in this call."""
        raise NotImplementedError

    def run(self, loaded: DataRun, stats: Any) -> None:
        """Measure into ``stats`` with what ``loaded`` holds."""
        raise NotImplementedError


def _sampled(gibbs_samples: int | None, what: str) -> str:
    """A Monte Carlo item's words: with ``gibbs_samples`` rows drawn per pass, that option
    first (it sets the rows of every pass: the one to lower when it is large)."""
    return f"{option('gibbs_samples', gibbs_samples)} × {what}" if gibbs_samples else what


def _mc_rows(c: Counts, s: Sizes) -> int:
    """Rows of one Monte Carlo pass over S: ``gibbs_samples``, else every row."""
    return max(c.gibbs_samples, 1) if c.gibbs_samples else max(s.rows, 1)


def _search_rows(s: Sizes) -> int:
    """Rows the σ searches read: the tune rows, else S's."""
    return max(s.tune_rows if s.tune_rows is not None else s.rows, 1)


class GroupSearch(DataStage):
    """The per-group σ search (:func:`.tune.search_groups`) on the tune rows (or on S,
    charged): at most :func:`.tune.search_evaluations` evaluations, each a whole-model draw
    and ``tune_draws`` plain passes over the rows it reads."""

    name = "σ search"
    options = ("sigma_groups", "tune_data", "tune_draws", "tune_slack", "tune_shape",
               "search_rows",
               "allow_overlap", "seed", "smoothing")

    def work(self, c: Counts, s: Sizes) -> Work | None:
        from .tune import search_evaluations

        if c.tune_draws <= 0:
            return None
        evals = search_evaluations(s.groups, c.per_group) * c.tune_draws
        rows = _search_rows(s)
        return Work(f"σ search, ≤ {evals} evaluations", evals, rows, "plain", evals,
                    f"{option('tune_draws', c.tune_draws)} (≤ {evals} evaluations, {rows:,} "
                    "rows each)", 8.0 * c.tune_draws + 12.0 * s.n_params)

    def wanted(self, run: DataRun) -> bool:
        return run.opts.groups

    def run(self, loaded: DataRun, stats: Any) -> None:
        from .tune import Tuning, search_groups

        r = loaded
        r.found = search_groups(r.tm, r.batched, r.device, r.opts,
                                Tuning(r.prior, r.init, r.tune, r.shared), progress=r.report)


class IsotropicSearch(DataStage):
    """The isotropic σ chosen on the tune rows (:func:`.stage_runs.isotropic_sigma`): taken from
    the per-group search where the prior predicts (no work), else bisected with the model's
    weights (:data:`.tune.ISOTROPIC_EVALUATIONS` evaluations of ``tune_draws`` passes)."""

    name = "isotropic σ search"
    options = ("tune_data", "tune_draws", "tune_slack", "seed", "smoothing")

    def work(self, c: Counts, s: Sizes) -> Work | None:
        from .tune import ISOTROPIC_EVALUATIONS

        if not (c.isotropic_search and c.tune_draws > 0 and s.tune_rows):
            return None
        evals = ISOTROPIC_EVALUATIONS * c.tune_draws
        return Work(f"isotropic σ search, ≤ {evals} evaluations", evals, s.tune_rows, "plain",
                    evals, f"{option('tune_draws', c.tune_draws)} (isotropic, ≤ {evals} "
                    f"evaluations, {s.tune_rows:,} rows each)",
                    8.0 * c.tune_draws + 12.0 * s.n_params)

    def wanted(self, run: DataRun) -> bool:
        return run.on_tune and run.found is not None and run.opts.draws > 0

    def run(self, loaded: DataRun, stats: Any) -> None:
        from .stage_runs import isotropic_sigma

        r = loaded
        sigma, stats.provenance["gibbs_sigma"] = isotropic_sigma(
            r.tm, r.tune, r.device, r.opts, r.found, r.prior_record or {}, r.shared, r.report)
        r.opts = MeasureOptions.of(r.opts, sigmas=(sigma,))


class DataPass(DataStage):
    """One pass over S with the trained weights: the risks, margins, B_X, T
    (:func:`.stage_runs.data_pass`)."""

    name = "data pass"
    options = ("smoothing", "seed", "text_column", "label_column", "max_length", "batch_size")

    def work(self, c: Counts, s: Sizes) -> Work | None:
        rows = max(s.rows, 1)
        return Work("data pass", 1, rows, "plain", 0, f"DATA ({rows:,} rows)")

    def wanted(self, run: DataRun) -> bool:
        return True

    def run(self, loaded: DataRun, stats: Any) -> None:
        from .stage_runs import data_pass

        data_pass(stats, loaded)


class MonteCarlo(DataStage):
    """The Gibbs risk on S at each σ point: ``draws`` noisy passes per point
    (:func:`.stage_runs.monte_carlo`)."""

    name = "Monte Carlo"
    options = ("sigmas", "draws", "delta_mc", "gibbs_mode", "gibbs_samples", "seed",
               "smoothing")

    def work(self, c: Counts, s: Sizes) -> Work | None:
        if c.draws <= 0 or c.sigmas <= 0:
            return None
        passes, rows = c.sigmas * c.draws, _mc_rows(c, s)
        return Work(f"Monte Carlo, {c.sigmas} σ × {c.draws} draws", passes, rows, "noisy", 0,
                    _sampled(c.gibbs_samples, f"{option('draws', c.draws)} (× {c.sigmas} σ, "
                                              f"{rows:,} rows each)"),
                    8.0 * passes + 12.0 * s.n_params)  # losses; saved weights + float64 noise

    def wanted(self, run: DataRun) -> bool:
        return run.opts.draws > 0 and bool(run.opts.sigmas)

    def run(self, loaded: DataRun, stats: Any) -> None:
        from .stage_runs import monte_carlo

        monte_carlo(stats, loaded)


class HessianTrace(DataStage):
    """The Hutchinson trace of the loss Hessian on the first ``hessian_samples`` rows, in
    fp32 (:func:`.stage_runs.hessian`)."""

    name = "Hessian trace"
    options = ("hessian_probes", "hessian_samples", "seed", "batch_size")

    def work(self, c: Counts, s: Sizes) -> Work | None:
        p = c.hessian_probes
        if p <= 0:
            return None
        hs = min(max(c.hessian_samples, 1), max(s.rows, 1))
        # quadratic forms, and one probe's four float32 copies (probe, tangent, gradient,
        # product): probes are drawn from seeds where used, and a batch of several (CUDA) is
        # sized to the memory budget by curvature.probe_batch
        return Work(f"Hessian trace, {p} probes", p, hs, "hvp", 0,
                    f"{option('hessian_probes', p)} (on {hs:,} samples)",
                    8.0 * s.groups * p + 16.0 * s.n_params)

    def wanted(self, run: DataRun) -> bool:
        return run.opts.hessian_probes >= 2

    def run(self, loaded: DataRun, stats: Any) -> None:
        from .stage_runs import hessian

        hessian(stats, loaded)


class GroupPasses(DataStage):
    """The Gibbs risk on S at the chosen per-group σ vector: ``group_draws`` noisy passes
    (:func:`.tune.finish_groups`)."""

    name = "per-group σ"
    options = ("group_draws", "draws", "gibbs_mode", "gibbs_samples", "delta_mc", "seed")

    def work(self, c: Counts, s: Sizes) -> Work | None:
        g = c.group_draws
        if g <= 0:
            return None
        rows = _mc_rows(c, s)
        return Work(f"per-group σ, {g} pass(es)", g, rows, "noisy", 0,
                    _sampled(c.gibbs_samples, f"{option('group_draws', g)} ({rows:,} rows "
                                              "each)"), 8.0 * g + 12.0 * s.n_params)

    def wanted(self, run: DataRun) -> bool:
        return run.found is not None

    def run(self, loaded: DataRun, stats: Any) -> None:
        from .stage_runs import group_passes

        group_passes(stats, loaded)


class Perturbation(DataStage):
    """P̂ of Lintilhac–Shaikh at each σ of their mesh: ``perturbation_draws`` Hessian traces
    of ``max(hessian_probes, 2)`` probes per σ, in fp32 (:func:`.stage_runs.perturbation`)."""

    name = "P̂"
    options = ("perturbation_draws", "hessian_probes", "hessian_samples", "seed", "batch_size")
    precision = False

    def work(self, c: Counts, s: Sizes) -> Work | None:
        d = c.perturbation_draws
        if d <= 0:
            return None
        probes = max(c.hessian_probes, 2)
        hs = min(max(c.hessian_samples, 1), max(s.rows, 1))
        return Work(f"P̂, {LS_MESH_POINTS} σ × {d} draws", LS_MESH_POINTS * d * probes, hs,
                    "hvp", 0, f"{option('perturbation_draws', d)} (× {LS_MESH_POINTS} σ × "
                              f"{probes} Hutchinson probes)",
                    32.0 * d + 8.0 * LS_MESH_POINTS + 12.0 * s.n_params)

    def wanted(self, run: DataRun) -> bool:
        return run.opts.perturbation_draws > 0

    def run(self, loaded: DataRun, stats: Any) -> None:
        from .stage_runs import perturbation

        perturbation(stats, loaded)


# the data side's stages, in the order they run (and the plan line says them)
STAGES: tuple[DataStage, ...] = (GroupSearch(), IsotropicSearch(), DataPass(), MonteCarlo(),
                                 HessianTrace(), GroupPasses(), Perturbation())


def counts(opts: MeasureOptions, isotropic_search: bool = False) -> Counts:
    """The counts of concrete ``opts`` (every automatic choice made: :func:`.sizing.
    provisional` or :func:`.sizing.size`; no σ: no σ point); the per-group counts only where
    the per-group σ posterior is measured; ``isotropic_search``: the isotropic σ is bisected
    with the model's weights on the tune rows."""
    from .batch_rows import DEFAULT_ROWS

    groups = dict(group_draws=opts.group_passes, tune_draws=opts.tune_draws) \
        if opts.groups else {}
    points = len({p["j"] for p in snapped_sigmas(opts.sigmas)}) if opts.sigmas else 0
    return Counts(sigmas=points, draws=opts.draws,
                  hessian_probes=opts.hessian_probes, hessian_samples=opts.hessian_samples,
                  perturbation_draws=opts.perturbation_draws,
                  gibbs_samples=opts.gibbs_samples, batch_size=opts.batch_size or DEFAULT_ROWS,
                  isotropic_search=isotropic_search and opts.groups,
                  per_group=opts.tune_shape == "per-group", **groups)


def works(c: Counts, s: Sizes, stages: Sequence[DataStage] = STAGES) -> list[Work]:
    """The work of each stage with a count, in the order of ``stages``."""
    return [w for w in (st.work(c, s) for st in stages) if w is not None and w.passes > 0]


def measure_plan(c: Counts, s: Sizes = Sizes(),
                 stages: Sequence[DataStage] = STAGES) -> list[Item]:
    """The count check's items of ``measure --data`` for counts ``c`` on sizes ``s``
    (:func:`boundcalc.plan.items` of :func:`works`; :func:`boundcalc.plan.check` refuses)."""
    return items(works(c, s, stages), s, c.batch_size)


def listed(added: Sequence[DataStage] = ()) -> tuple[DataStage, ...]:
    """:data:`STAGES` and the stages a caller adds, refused if one is not a
    :class:`DataStage`, repeats a name, or is a data-side stage run after the others."""
    from ...errors import BoundcalcError

    out = STAGES + tuple(added)
    for st in added:
        if not isinstance(st, DataStage) or st.inside:
            raise BoundcalcError(f"measure_task(stages=...): {st!r} is not a stage run after "
                                 "the data side (a DataStage with inside = False)")
    names = [st.name for st in out]
    if len(set(names)) != len(names):
        raise BoundcalcError(f"measure_task(stages=...): a stage named twice in {names}")
    return out
