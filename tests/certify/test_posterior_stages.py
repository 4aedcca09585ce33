"""certify's measure step picks the stages run after the data side (issue 53 item 1): the
compression with ``compress``, the bound-trained or the subspace posterior with ``posterior``;
their counts join the data side's (the plan, the estimate and the sizing read them)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace

import pytest

from boundcalc import plan
from boundcalc.certify.config import CertifyConfig, MeasureSettings
from boundcalc.certify.pipeline import picked_stages
from boundcalc.errors import BoundcalcError
from boundcalc.measure.data import stages, work_plan
from boundcalc.measure.data.options import MeasureOptions

CTX = SimpleNamespace(device="cpu", progress=None, loaded=SimpleNamespace(forget=lambda n: None))


def _picked(**cfg):
    m = MeasureSettings.of(CertifyConfig(**cfg))
    return picked_stages(Path("/nonexistent"), m, CTX)


@pytest.mark.parametrize("cfg,names", [
    ({}, []),
    ({"compress": True}, ["compression"]),
    ({"posterior": "bound"}, ["bound-trained posterior"]),
    ({"posterior": "subspace", "compress": True}, ["compression", "subspace posterior"]),
])
def test_the_measure_step_picks_its_stages_from_its_settings(cfg, names):
    picked = _picked(**cfg)
    assert [s.name for s in picked] == names
    for s in picked:
        assert not s.inside and set(s.options) <= {f.name for f in fields(s.record)}


def test_the_picked_stages_counts_join_the_plan_estimate_and_check():
    """By hand: the compression on levels 1,4,16 is 1 + 3 plain passes over S; the
    bound-trained posterior its 6 (``group_draws``, given: the default is certify's) Monte
    Carlo passes over S."""
    picked = _picked(compress=True, levels=(1, 4, 16), posterior="bound", group_draws=6)
    every = stages.listed(picked)
    opts = MeasureOptions(sigmas=(0.01,), draws=2, hessian_probes=0)
    got = work_plan.stages(opts, 100, listed=every)
    assert [(w.what.split(",")[0], w.passes, w.rows, w.kind) for w in got] == [
        ("data pass", 1, 100, "plain"), ("Monte Carlo", 2, 100, "noisy"),
        ("compression", 4, 100, "plain"), ("bound-trained posterior", 6, 100, "noisy")]
    speed = {"rows": 8, "plain": 0.01, "noisy": 0.1}
    assert work_plan.estimate(got, speed) == pytest.approx(
        (1 + 4) * 100 * 0.01 + (2 + 6) * 100 * 0.1, rel=1e-12)
    items = stages.measure_plan(stages.counts(opts), plan.Sizes(rows=100), every)
    assert len(items) == 4 and items[3].option.startswith("bound-trained posterior: 6 ")
    # a stage of the data side's own list cannot be added again, nor one named twice
    with pytest.raises(BoundcalcError, match="not a stage run after the data side"):
        stages.listed([stages.STAGES[0]])
    with pytest.raises(BoundcalcError, match="named twice"):
        stages.listed(picked + picked[:1])


def test_certify_and_measure_declare_the_level_counts_once():
    """--levels: one type (a tuple of level counts, given as 1,16), one declaration."""
    from boundcalc.measure.compress.options import CompressOptions
    from boundcalc.options import declared

    mine = {f.name: s for f, s in declared(CertifyConfig)}["levels"]
    theirs = {f.name: s for f, s in declared(CompressOptions)}["levels_grid"]
    assert (mine.kind, mine.many, mine.sep, mine.low, mine.high) == \
        (theirs.kind, theirs.many, theirs.sep, theirs.low, theirs.high)
    assert CertifyConfig().levels == (1, 16)
    with pytest.raises(BoundcalcError, match="levels='4,4': expected distinct level counts"):
        CertifyConfig(levels=(4, 4))
    with pytest.raises(BoundcalcError, match="levels_grid='4,4': expected distinct"):
        CompressOptions(levels_grid=(4, 4))
