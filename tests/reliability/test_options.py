"""Options (issue 32, 6 cases): every count in the work plan, --threads capped at the cores the
process may use, a δ′ whose confidence rounds to 1 refused, options that do nothing alone
refused, and compare failing when every bound it evaluated failed."""

from __future__ import annotations

import json

import pytest

from boundcalc.measure.threads import available_cores
from tests._cli_helpers import invoke
from tests._measure_helpers import single_thread
from tests.reliability._rel_helpers import one_line_error


def _measure(tiny, *extra, out):
    with single_thread():
        return invoke("-q", "measure", tiny / "cls", "--init", tiny / "prior", "--data",
                      tiny / "d.csv", "--text-column", "sentence", "--sigma", "0.01",
                      "--draws", "1", "--hessian-probes", "0", *extra, "-o", out)


@pytest.mark.parametrize("option", ["--group-draws", "--tune-draws"])
def test_group_counts_are_in_the_work_plan(tiny, tmp_path, option, monkeypatch):
    from boundcalc.measure.data import task_measure

    def never(*a, **k):
        raise AssertionError("the model was loaded: the count was not planned up front")

    monkeypatch.setattr(task_measure, "load_task_model", never)
    out = tmp_path / "s.json"
    res = _measure(tiny, "--tune-data", tiny / "t.csv", option, str(10 ** 9), out=out)
    err = one_line_error(res, 8)
    assert f"{option} {10 ** 9:,}" in err or f"{option} {10 ** 9}" in err, err
    assert not out.exists()


def test_threads_are_capped_at_the_available_cores(tiny, tmp_path):
    out = tmp_path / "s.json"
    res = _measure(tiny, "--draws", "0", "--threads", "10000", out=out)
    assert res.exit_code == 0, res.output[-1500:]
    cores = available_cores()
    assert (f"warning: --threads 10000: this process may use {cores} core(s); running "
            f"{cores} thread(s)") in res.stderr
    assert json.loads(out.read_text())["provenance"]["threads"]["data_side"] == cores


def test_a_delta_mc_whose_confidence_rounds_to_one(tiny, tmp_path):
    out = tmp_path / "s.json"
    err = one_line_error(_measure(tiny, "--delta-mc", "1e-300", out=out), 2)
    assert "--delta-mc 1e-300" in err and "rounds to 1" in err
    assert not out.exists()


@pytest.mark.parametrize("extra, needs", [
    (["--max-changed", "0.1"], "--compress"),
    (["--levels", "4,16"], "--compress"),
    (["--tune-draws", "3"], "--tune-data or --sigma-groups"),
    (["--group-draws", "3"], "--tune-data or --sigma-groups"),
    (["--allow-overlap"], "--tune-data"),
])
def test_an_option_that_does_nothing_alone_is_refused(tiny, tmp_path, extra, needs):
    out = tmp_path / "s.json"
    err = one_line_error(_measure(tiny, *extra, out=out), 2)
    assert f"{extra[0]} does nothing without {needs}" in err
    assert not out.exists()


def test_compare_fails_when_every_bound_failed(group_stats):
    path, _ = group_stats
    res = invoke("-q", "compare", "--stats", path, "--set", "delta=0")
    err = one_line_error(res, 4)
    assert "no bound computed" in err and "'delta'" in err and "(0, 1)" in err
    ok = invoke("-q", "compare", "--stats", path, "--set", "delta=0.05")
    assert ok.exit_code == 0, ok.output[-1000:]
