"""Outputs never destroy inputs (issue 32, 9 cases): one output gate for every command.

An output that is an input of the same run (same path, a hard link, a file inside an input
folder) or a read-only file is refused with exit 9 (OutputError) and one line naming both
paths, before any work; the input is left byte for byte as it was."""

from __future__ import annotations

import os
import stat

import pandas as pd
import pytest

from tests._cli_helpers import invoke
from tests.reliability._rel_helpers import one_line_error

ENTRY = "pac_bayes_kl_gaussian_mc"


def _refused(res, output, culprit) -> str:
    err = one_line_error(res, 9)
    assert str(output) in err and str(culprit) in err, err
    return err


def _unchanged(path, before: bytes) -> None:
    assert path.read_bytes() == before


def test_measure_output_inside_the_model_folder(tiny):
    weights = tiny / "cls" / "model.safetensors"
    before = weights.read_bytes()
    res = invoke("measure", tiny / "cls", "-o", weights)
    _refused(res, weights, tiny / "cls")
    _unchanged(weights, before)
    assert sorted(p.name for p in (tiny / "cls").iterdir()) == [
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]


def test_measure_output_is_data(tiny):
    data = tiny / "d.csv"
    before = data.read_bytes()
    res = invoke("measure", tiny / "cls", "--data", data, "--text-column", "sentence",
                 "--draws", "0", "--hessian-probes", "0", "-o", data)
    _refused(res, data, data)
    _unchanged(data, before)


def test_measure_output_is_a_hard_link_to_data(tiny, tmp_path):
    data = tiny / "d.csv"
    link = tmp_path / "link.csv"
    os.link(data, link)
    before = data.read_bytes()
    res = invoke("measure", tiny / "cls", "--data", data, "--text-column", "sentence",
                 "--draws", "0", "--hessian-probes", "0", "-o", link)
    _refused(res, link, data)
    _unchanged(data, before)


def test_measure_output_inside_the_init_folder(tiny):
    target = tiny / "prior" / "model.safetensors"
    before = target.read_bytes()
    res = invoke("measure", tiny / "cls", "--init", tiny / "prior", "-o", target)
    _refused(res, target, tiny / "prior")
    _unchanged(target, before)


def test_measure_output_is_the_tune_data(tiny):
    tune = tiny / "t.csv"
    before = tune.read_bytes()
    res = invoke("measure", tiny / "cls", "--init", tiny / "prior", "--data", tiny / "d.csv",
                 "--tune-data", tune, "--text-column", "sentence", "-o", tune)
    _refused(res, tune, tune)
    _unchanged(tune, before)


def test_compare_model_output_inside_the_model_folder(tiny):
    weights = tiny / "cls" / "model.safetensors"
    before = weights.read_bytes()
    res = invoke("compare", "--model", tiny / "cls", "-o", weights)
    _refused(res, weights, tiny / "cls")
    _unchanged(weights, before)


def test_optimize_report_is_the_stats_file(group_stats):
    path, _ = group_stats
    before = path.read_bytes()
    res = invoke("optimize", ENTRY, "--stats", path, "--report", path)
    _refused(res, path, path)
    _unchanged(path, before)


def test_latex_output_is_the_stats_file(group_stats):
    path, _ = group_stats
    before = path.read_bytes()
    res = invoke("latex", ENTRY, "--stats", path, "-o", path)
    _refused(res, path, path)
    _unchanged(path, before)


def test_correlate_out_holds_its_own_table(tmp_path):
    folder = tmp_path / "sweep"
    folder.mkdir()
    table = folder / "correlation.csv"
    pd.DataFrame({"row": range(1, 7), "path": [f"m{i}" for i in range(6)], "id": "e",
                  "kind": "proxy", "status": "ok", "log10_value": [1.0, 3, 2, 4, 6, 5],
                  "gap": [1.0, 2, 3, 4, 5, 6]}).to_csv(table, index=False)
    before = table.read_bytes()
    res = invoke("correlate", table, "--target", "gap", "--bootstrap", "0", "--out", folder)
    _refused(res, table, table)
    _unchanged(table, before)


def test_a_read_only_output_is_not_replaced(tmp_path):
    """Root bypasses os.access: the gate reads the mode bits."""
    target = tmp_path / "bound.tex"
    target.write_text("mine\n")
    os.chmod(target, 0o444)
    res = invoke("latex", "mcallester", "--set", "emp_risk=0.05", "--set", "KL=5000",
                 "--set", "n=10000", "-o", target)
    err = _refused(res, target, "0444")
    assert "read-only" in err
    assert target.read_text() == "mine\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o444


def test_a_replaced_output_keeps_its_mode(tmp_path):
    target = tmp_path / "bound.tex"
    target.write_text("old\n")
    os.chmod(target, 0o640)
    res = invoke("latex", "mcallester", "--set", "emp_risk=0.05", "--set", "KL=5000",
                 "--set", "n=10000", "-o", target)
    assert res.exit_code == 0, res.output[-1000:]
    assert target.read_text() != "old\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def test_the_python_api_is_not_gated(tmp_path):
    """Outside a CLI run there is no run scope: the API writes where it is told."""
    from boundcalc.files.atomic_write import note_input, write_text_atomic

    p = tmp_path / "x.txt"
    p.write_text("a")
    note_input(p)
    write_text_atomic(p, "b")
    assert p.read_text() == "b"


@pytest.mark.parametrize("argv, inputs", [
    (["measure", "M", "-o", "O", "--init=I"], ["measure", "M", "I"]),
    (["latex", "e", "--output=O", "--stats", "S"], ["latex", "e", "--stats", "S"]),
    (["correlate", "T", "--out", "D", "--plot", "P", "--report", "R"], ["correlate", "T"]),
])
def test_which_words_are_inputs(argv, inputs):
    from boundcalc.cli.app import input_arguments

    assert input_arguments(argv) == inputs
