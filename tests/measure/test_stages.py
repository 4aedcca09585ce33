"""The data side's stages (issue 53 item 1): listed once, each with its options sub-record and
one count of work that the count check (plan), the calibrated estimate (work_plan) and the
sizing all read; change one stage's count and all three move; a count of 0 is absent from all
three."""

from __future__ import annotations

import dataclasses
import math

import pytest

from boundcalc import plan
from boundcalc.measure.data import sizing, stages, work_plan
from boundcalc.measure.data.options import MeasureOptions
from boundcalc.measure.data.tune import search_evaluations

SPEED = {"rows": 32, "plain": 0.001, "noisy": 0.02}  # seconds per row, as calibrated


def _by_name(items, word):
    return [it for it in items if it.option.split()[0].startswith(word)]


def test_every_stage_is_listed_once_with_a_declared_sub_record():
    names = [s.name for s in stages.STAGES]
    kinds = [type(s) for s in stages.STAGES]
    assert len(set(names)) == len(names) == len(set(kinds)) == 7
    assert names == ["σ search", "isotropic σ search", "data pass", "Monte Carlo",
                     "Hessian trace", "per-group σ", "P̂"]
    fields = {f.name for f in dataclasses.fields(MeasureOptions)}
    for s in stages.STAGES:
        assert isinstance(s, stages.DataStage) and s.options, s.name
        assert set(s.options) <= fields, (s.name, set(s.options) - fields)
    # every stage class of the module is in the list (none defined and forgotten)
    defined = {c for c in vars(stages).values() if isinstance(c, type)
               and issubclass(c, stages.DataStage) and c is not stages.DataStage}
    assert defined == set(kinds)
    # the sub-record's values, read from the options
    mc = next(s for s in stages.STAGES if s.name == "Monte Carlo")
    got = mc.settings(MeasureOptions(sigmas=(0.01,), draws=3))
    assert got["draws"] == 3 and got["sigmas"] == (0.01,) and set(got) == set(mc.options)


def test_the_counts_by_hand_and_the_three_readers_read_them():
    """One count per stage (by hand), read by the count check at its optimistic speeds, by
    the calibrated estimate and (through work_plan.stages) by the sizing's plan."""
    opts = MeasureOptions(sigmas=(0.01, 0.02), draws=3, hessian_probes=4, hessian_samples=50,
                          tune_data="t.csv", tune_draws=2, group_draws=5, batch_size=10)
    n, tune_rows, groups = 200, 40, 3
    evals = search_evaluations(groups) * 2
    want = [("σ search", evals, 40, "plain", evals), ("data pass", 1, 200, "plain", 0),
            ("Monte Carlo", 6, 200, "noisy", 0), ("Hessian trace", 4, 50, "hvp", 0),
            ("per-group σ", 5, 200, "noisy", 0)]
    got = work_plan.stages(opts, n, None, tune_rows, groups)
    assert [(w.what.split(",")[0], w.passes, w.rows, w.kind, w.draws) for w in got] == want
    # the sizing's plan is the same list (nothing left to size here)
    assert sizing.plan_of(opts, n, tune_rows, groups, False) == got
    # the estimate: the passes at the calibrated speeds, a Hessian-vector product as HVP_COST
    est = (evals * 40 * 0.001 + 200 * 0.001 + 6 * 200 * 0.02 + 4 * 50 * 8.5 * 0.001
           + 5 * 200 * 0.02)
    assert work_plan.estimate(got, SPEED) == pytest.approx(est, rel=1e-12)
    # the count check: 2·params·positions FLOPs a forward at 10^12/s, 10 µs a call
    sizes = plan.Sizes(rows=n, positions=8, n_params=1000, groups=groups, tune_rows=tune_rows)
    items = stages.measure_plan(stages.counts(opts), sizes)
    f = 2 * 1000 * 8 / 1e12
    secs = [evals * 40 * f + evals * 4 * 1e-5, 200 * f + 20 * 1e-5,
            6 * 200 * f + 6 * 20 * 1e-5, 4 * 4 * 50 * f + 4 * 5 * 1e-5,
            5 * 200 * f + 5 * 20 * 1e-5]
    assert [it.seconds for it in items] == pytest.approx(secs, rel=1e-12)
    assert [it.option.split()[0] for it in items] == [
        "tune_draws=2", "DATA", "draws=3", "hessian_probes=4", "group_draws=5"]


def _doubled(cls):
    """``cls.work`` with twice the passes (and draws)."""
    original = cls.work

    def work(self, c, s):
        w = original(self, c, s)
        return None if w is None else dataclasses.replace(w, passes=2 * w.passes,
                                                          draws=2 * w.draws)
    return work


def _three(opts, n=1000):
    """What the three readers say for ``opts`` on ``n`` rows: the count check's seconds
    (rows of 8 positions, 1000 parameters), the calibrated estimate of the concrete options
    and the draws the sizing picks when they are left to it (target: 480 s)."""
    items = stages.measure_plan(stages.counts(opts),
                                plan.Sizes(rows=n, positions=8, n_params=1000))
    estimate = work_plan.estimate(work_plan.stages(opts, n), SPEED)
    sized = sizing.size(MeasureOptions.of(opts, draws=None), n, None, 0, SPEED, True, False)
    return sum(it.seconds for it in items), estimate, sized.options.draws


def test_one_stage_count_changed_moves_the_plan_the_estimate_and_the_sizing(monkeypatch):
    monkeypatch.setattr(sizing, "target_seconds", lambda: 480.0)
    opts = MeasureOptions(sigmas=(0.01,), draws=20, hessian_probes=0)
    check, est, draws = _three(opts)
    f, call = 2 * 1000 * 8 / 1e12, 1e-5
    assert check == pytest.approx(1000 * f + 32 * call + 20 * (1000 * f + 32 * call))
    assert est == pytest.approx(1000 * 0.001 + 20 * 1000 * 0.02)  # 401 s: 20 draws fit 480 s
    assert draws == 20
    monkeypatch.setattr(stages.MonteCarlo, "work", _doubled(stages.MonteCarlo))
    check2, est2, draws2 = _three(opts)
    assert check2 == pytest.approx(1000 * f + 32 * call + 40 * (1000 * f + 32 * call))
    assert est2 == pytest.approx(1000 * 0.001 + 40 * 1000 * 0.02)
    assert draws2 == 10  # 40 passes (801 s) no longer fit; 10 draws, doubled: 401 s


def test_a_stage_with_no_work_is_absent_from_all_three(monkeypatch):
    monkeypatch.setattr(sizing, "target_seconds", lambda: 480.0)
    opts = MeasureOptions(sigmas=(0.01,), draws=20, hessian_probes=6, hessian_samples=100)
    with_h = work_plan.stages(opts, 1000)
    assert [w.what.split(",")[0] for w in with_h] == ["data pass", "Monte Carlo",
                                                      "Hessian trace"]
    check, est, _ = _three(opts)
    assert est == pytest.approx(1 + 400 + 6 * 100 * 8.5 * 0.001)

    def none(self, c, s):
        return None

    monkeypatch.setattr(stages.HessianTrace, "work", none)
    assert [w.what.split(",")[0] for w in work_plan.stages(opts, 1000)] == ["data pass",
                                                                           "Monte Carlo"]
    items = stages.measure_plan(stages.counts(opts), plan.Sizes(rows=1000))
    assert not _by_name(items, "hessian_probes") and len(items) == 2
    check0, est0, draws0 = _three(opts)
    assert est0 == pytest.approx(1 + 400) and check0 < check
    # the sizing read the same list: without the Hessian, 20 draws fit
    assert draws0 == 20
    # and a count of 0 from the options themselves: no Hessian probes, no Hessian stage
    monkeypatch.undo()
    zero = MeasureOptions.of(opts, hessian_probes=0)
    assert not any(w.kind == "hvp" for w in work_plan.stages(zero, 1000))
    assert not _by_name(stages.measure_plan(stages.counts(zero), plan.Sizes(rows=1000)),
                        "hessian_probes")


def test_measure_task_runs_the_listed_stages_in_order(monkeypatch, tmp_path):
    """On a tiny classifier: measure_task runs each wanted stage of the list, in its order,
    and records each one's seconds under its name."""
    import pandas as pd

    from boundcalc.measure.data.task_measure import measure_task
    from tests._measure_helpers import TEXT_LABELS, TEXTS, tiny_text_checkpoints

    tiny_text_checkpoints(tmp_path)
    pd.DataFrame({"text": TEXTS, "label": TEXT_LABELS}).to_csv(tmp_path / "d.csv", index=False)
    ran = []
    for s in stages.STAGES:
        original = type(s).run

        def run(self, loaded, stats, original=original):
            ran.append(self.name)
            return original(self, loaded, stats)

        monkeypatch.setattr(type(s), "run", run)
    stats = measure_task(str(tmp_path / "cls"), str(tmp_path / "d.csv"), sigmas=(0.01,),
                         draws=2, hessian_probes=2, hessian_samples=4, batch_size=2)
    assert ran == ["data pass", "Monte Carlo", "Hessian trace"]
    took = stats.provenance["plan"]["measured_seconds"]
    assert set(ran) <= set(took) and all(took[k] >= 0 for k in ran)
    rec = stats.provenance["plan"]["stages"]
    assert [(s["what"].split(",")[0], s["passes"], s["rows"]) for s in rec] == [
        ("data pass", 1, len(TEXTS)), ("Monte Carlo", 2, len(TEXTS)),
        ("Hessian trace", 2, min(4, len(TEXTS)))]
    assert stats.scalars["gibbs_passes"].value == 2 and "hessian_trace" in stats.scalars
    assert math.isfinite(stats.scalars["emp_risk"].value)
