"""benchmarks/bench_bert_gpu.py (the GPU acceptance cases that gpu_check.sh runs first) on the
CPU at tiny sizes: both cases run the user's command as a subprocess and read its figures from
its own stats file and progress lines; the script imports nothing beyond torch, transformers,
numpy, the standard library and boundcalc."""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_bert_gpu.py"


def _module():
    spec = importlib.util.spec_from_file_location("bench_bert_gpu_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("case,rows,seq,probes", [("bert", 64, 16, 2), ("gpt2", 32, 16, 0)])
def test_self_test_runs_the_users_command(tmp_path, case, rows, seq, probes):
    """The user's command, a subprocess on the CPU: its exit status, its own stats file and
    progress lines in the record, the Monte Carlo rate set beside the plain loop's."""
    mod = _module()
    assert mod.main(["--self-test", "--case", case, "--out", str(tmp_path)]) == 0
    rec = json.loads((tmp_path / f"{case}_gpu.json").read_text())
    assert rec["complete"] and rec["case"] == case and rec["self_test"]
    assert rec["command_exit"] == 0 and rec["command"].startswith("boundcalc measure ")
    assert (rec["rows"], rec["seq_len"], rec["probes"]) == (rows, seq, probes)
    assert f"--hessian-probes {probes}" in rec["command"]
    assert ("--precision bf16" in rec["command"]) == (case == "gpt2")
    assert rec["stats_provenance"]["device"] == "cpu"
    assert rec["stats_provenance"]["precision"]["data_side"] == rec["precision"]
    lines = [x for _, x in rec["progress"]]
    assert any("Gibbs risk σ=" in x for x in lines) and any("wrote " in x for x in lines)
    mc = rec["monte_carlo"]
    # the whole stage: 2 σ × 2 draws = 4 passes of every row
    assert mc["of"] == 4 and mc["samples_per_step"] == rows and mc["steps"] >= 1
    assert mc["fraction_of_plain"] == pytest.approx(mc["samples_per_s"]
                                                    / rec["plain_samples_per_s"])
    assert 0 < rec["plain_pass_s"] < rec["command_s"]
    assert set(rec["met"]) == ({"command_s", "mc_fraction"} if case == "bert"
                               else {"command_s"})


def test_monte_carlo_rate_from_progress_lines():
    """By hand: the stage starts at 2.0 s (0/40), is at 20/40 at 7.0 s and ends when the
    Hessian stage starts at 12.0 s: 40 steps of 2048 samples in 10 s = 8192 samples/s."""
    mod = _module()
    p = "boundcalc measure: measuring m: "
    lines = [[1.0, p + "1/2 steps (data pass, 3 steps/s, ETA 0 s)"],
             [2.0, p + "0/40 steps (Gibbs risk σ=0.001, 2048 samples per step)"],
             [7.0, p + "20/40 steps (Gibbs risk σ=0.002, 2048 samples per step, 4 steps/s, "
                       "ETA 5 s)"],
             [12.0, p + "0/20 steps (Hessian trace: 20 probes)"]]
    assert mod.monte_carlo_rate(lines) == {"steps": 40, "of": 40, "seconds": 10.0,
                                           "samples_per_step": 2048,
                                           "samples_per_s": 8192.0}
    assert mod.monte_carlo_rate(lines[:2]) is None  # no step done yet
    # stopped mid-stage: what was done up to the last line
    assert mod.monte_carlo_rate(lines[:3])["samples_per_s"] == 2048 * 20 / 5.0


def test_the_gpu_script_imports_nothing_optional():
    allowed = {"torch", "transformers", "numpy", "boundcalc", "__future__"}
    tree = ast.parse(SCRIPT.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    outside = {n for n in names - allowed if n not in sys.stdlib_module_names}
    assert not outside, outside


def test_every_target_beside_its_figure(tmp_path):
    """gpu_check.py --targets from hand-made records: each figure against its target, the
    card's use over the certify run only (its wall time + 2 s), a step that did not run
    shown as such."""
    spec = importlib.util.spec_from_file_location(
        "gpu_check_under_test", SCRIPT.parent / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    (tmp_path / "bert_gpu.json").write_text(json.dumps(
        {"command_exit": 0, "command_s": 58.0, "monte_carlo": {"fraction_of_plain": 0.55}}))
    (tmp_path / "certify_cuda.json").write_text(json.dumps({"minilm": {"wall_s": 1.0}}))
    # 0.0 s 40 %, 0.5 s 80 %, 3.5 s 100 % (after the run: 3.5 > 1.0 + 2): mean 60 %
    (tmp_path / "smi_minilm.csv").write_text(
        "2026/11/27 10:00:00.000, 40 %, 9 MiB\n2026/11/27 10:00:00.500, 80 %, 9 MiB\n"
        "2026/11/27 10:00:03.500, 100 %, 9 MiB\n")
    (tmp_path / "gpt2_gpu.json").write_text(json.dumps({"command_exit": -9,
                                                        "command_s": 100.0}))
    rows = {r["target"].split(" ")[0] + str(i): r
            for i, r in enumerate(mod.targets(str(tmp_path)))}
    mc, bert, cert, weights, gpt2 = rows.values()
    assert (mc["figure"], mc["met"], mc["text"]) == (0.55, False, "55%")
    assert (bert["figure"], bert["met"]) == (58.0, True)
    assert cert["met"] is True and "60 % on average (max 80 %)" in cert["text"]
    assert weights["met"] is None and weights["text"] == "not run"
    assert gpt2["met"] is False and "(stopped)" in gpt2["text"]  # killed before the end
    assert mod.print_targets(str(tmp_path)) == 0
    assert (tmp_path / "targets.md").read_text().count("\n") == 7
