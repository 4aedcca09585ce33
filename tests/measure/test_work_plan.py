"""The data side's plan said before any pass (issue 44 item 3): the passes counted by hand,
the estimate as their product with a calibration, and a refusal above the time budget before
the data side runs."""

from __future__ import annotations

import json

import pytest

from boundcalc.errors import ResourceError
from boundcalc.measure.data import work_plan
from boundcalc.measure.data.options import MeasureOptions
from boundcalc.measure.data.tune import search_evaluations


def test_stages_by_hand():
    opts = MeasureOptions(sigmas=(0.01, 0.02, 0.05), draws=4, hessian_probes=6,
                          hessian_samples=100, tune_data="t.csv", tune_draws=2, group_draws=3)
    plan = work_plan.stages(opts, n=1000, sigma_points=3, tune_rows=200, n_groups=5)
    got = [(s.passes, s.rows, s.kind) for s in plan]
    # in the order they run (stages.STAGES): the σ search before any pass over S
    assert got == [(search_evaluations(5) * 2, 200, "plain"), (1, 1000, "plain"),
                   (12, 1000, "noisy"), (6, 100, "hvp"), (3, 1000, "noisy")]
    speed = {"rows": 32, "plain": 0.01, "noisy": 0.03}
    # the σ search draws once per evaluation and runs plain forwards (tune.risk_draws)
    expect = (1000 * 0.01 + search_evaluations(5) * 2 * 200 * 0.01
              + (12 * 1000 + 3 * 1000) * 0.03 + 6 * 100 * work_plan.HVP_COST * 0.01)
    assert work_plan.estimate(plan, speed) == pytest.approx(expect)
    text = work_plan.plan_text(plan, speed, expect)
    assert text.startswith(f"plan: σ search, ≤ {search_evaluations(5) * 2} evaluations: "
                           f"{search_evaluations(5) * 2} × 200 rows; data pass: 1 × 1000 rows; "
                           "Monte Carlo, 3 σ × 4 draws: 12 × 1000 rows;")
    assert "an estimate, not a bound" in text
    # sampled Monte Carlo rows (gibbs_samples) and no groups
    few = MeasureOptions(sigmas=(0.01,), draws=2, gibbs_samples=50, hessian_probes=0)
    assert [(s.passes, s.rows) for s in work_plan.stages(few, 1000, 1, None, 0)] == \
        [(1, 1000), (2, 50)]


def test_a_plan_over_the_time_budget_is_refused_naming_what_shrinks_it(monkeypatch):
    opts = MeasureOptions(sigmas=(0.01,), draws=20, hessian_probes=0)
    plan = work_plan.stages(opts, 1000, 7, None, 0)
    monkeypatch.setattr(work_plan, "time_budget", lambda: 600.0)
    work_plan.check(plan, 599.0)  # within: nothing said
    with pytest.raises(ResourceError, match=r"about 16.7 min on this machine \(calibrated\), more "
                                            r"than the time budget of 10 min: lower draws, "
                                            r"sigma, gibbs_samples, or raise time_budget"):
        work_plan.check(plan, 1000.0)


def test_measure_says_the_plan_first_and_refuses_before_the_data_side(tmp_path):
    """Through the CLI on a tiny classifier: the plan is said (on stderr) and kept in
    provenance.plan, and a budget of 1 s refuses 5,000
    draws with exit 8 and no stats file (the optimistic count check of boundcalc.plan lets
    them pass: 5,000 passes over 6 rows are 0.05 s at its speeds)."""
    import pandas as pd

    from tests._cli_helpers import invoke
    from tests._measure_helpers import TEXT_LABELS, TEXTS, single_thread, tiny_text_checkpoints

    tiny_text_checkpoints(tmp_path)
    pd.DataFrame({"text": TEXTS, "label": TEXT_LABELS}).to_csv(tmp_path / "d.csv", index=False)
    out = tmp_path / "s.json"
    with single_thread():
        res = invoke("measure", tmp_path / "cls", "--init", "random:1", "--data",
                     tmp_path / "d.csv", "--sigma", "0.01", "--draws", "2",
                     "--hessian-probes", "0", "-o", out)
        assert res.exit_code == 0, res.output[-2000:]
        err = res.stderr if hasattr(res, "stderr") else res.output
        assert "plan: data pass: 1 × 6 rows; Monte Carlo, 1 σ × 2 draws: 2 × 6 rows" in err
        rec = json.loads(out.read_text())["provenance"]["plan"]
        assert [s["passes"] for s in rec["stages"]] == [1, 2] and rec["seconds"] > 0
        never = tmp_path / "never.json"
        try:
            res = invoke("--time-budget", "1s", "measure", tmp_path / "cls", "--init",
                         "random:1", "--data", tmp_path / "d.csv", "--sigma", "0.01", "--draws",
                         "5000", "--hessian-probes", "0", "-o", never)
        finally:  # the CLI's budget outlives the call in this process: not for the next test
            from boundcalc.limits import set_time_budget

            set_time_budget(None)
    assert res.exit_code == 8 and not never.exists(), res.output[-1000:]
    assert "the plan would take about" in res.output and "--draws" in res.output



def test_the_estimate_counts_the_time_spent_and_a_hessian_product_at_its_measured_cost():
    """By hand: a Hessian stage at HVP_COST plain forwards per row (8.5: measured on MiniLM,
    where the count check's 4 forwards made the acceptance run's Hessian twice the plan), a
    σ search's whole-model draws at the calibrated draw, and the seconds spent before it."""
    opts = MeasureOptions(sigmas=(0.01,), draws=0, hessian_probes=3, hessian_samples=4,
                          tune_data="t.csv", tune_draws=1, group_draws=1)
    plan = work_plan.stages(opts, n=6, sigma_points=1, tune_rows=5, n_groups=2)
    evals = search_evaluations(2)
    assert [(s.passes, s.rows, s.kind, s.draws) for s in plan] == [
        (evals, 5, "plain", evals), (1, 6, "plain", 0), (3, 4, "hvp", 0), (1, 6, "noisy", 0)]
    speed = {"rows": 6, "plain": 0.01, "noisy": 0.03, "draw": 0.2, "spent": 7.5}
    want = 7.5 + 6 * 0.01 + evals * (5 * 0.01 + 0.2) + 6 * 0.03 + 3 * 4 * 8.5 * 0.01
    assert work_plan.HVP_COST == 8.5
    assert work_plan.estimate(plan, speed) == pytest.approx(want, rel=1e-12)
