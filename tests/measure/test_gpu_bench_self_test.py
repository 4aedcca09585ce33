"""benchmarks/bench_bert_gpu.py (the GPU acceptance cases that gpu_check.sh runs first) on the
CPU at tiny sizes: both cases write their record after every σ and complete, and the script
imports nothing beyond torch, transformers, numpy, the standard library and boundcalc."""

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
def test_self_test_writes_a_record_after_every_sigma(tmp_path, monkeypatch, case, rows, seq,
                                                     probes):
    mod = _module()
    stages: list[dict] = []
    real_write = Path.write_text

    def spy(self, text, *a, **k):  # every write of the record, in order
        if self.name == f"{case}_gpu.json":
            stages.append(json.loads(text))
        return real_write(self, text, *a, **k)

    monkeypatch.setattr(Path, "write_text", spy)
    assert mod.main(["--self-test", "--case", case, "--out", str(tmp_path)]) == 0
    rec = json.loads((tmp_path / f"{case}_gpu.json").read_text())
    assert rec["complete"] and rec["case"] == case and rec["self_test"]
    assert (rec["rows"], rec["seq_len"], rec["probes"]) == (rows, seq, probes)
    assert [r["sigma"] for r in rec["per_sigma"]] == [0.001, 0.01]
    # partial records: after the model, after the plain pass, after each σ, at the end
    assert [len(s["per_sigma"]) for s in stages] == [0, 0, 1, 2, 2]
    assert not any(s["complete"] for s in stages[:-1])
    for r in rec["per_sigma"]:
        assert r["samples_per_s"] > 0 and 0 <= r["mean_loss"] <= 1
    if case == "gpt2":  # read back by measure's own loader: a causal LM, per-token NLL
        assert rec["hessian_s"] == 0.0 and "plain_and_monte_carlo_le_120s" in rec["met"]
    else:
        assert "stacked under vmap" not in rec["hessian_route"]  # a CPU: the loop
        assert set(rec["met"]) == {"data_side_le_60s", "mc_throughput_ge_60pct"}


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
