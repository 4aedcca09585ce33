"""Progress reporting and cheap checks: stage messages on stderr when it is not a terminal,
`--quiet` silences them, and a missing --init / --stats is reported before any model or torch
code is loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _measure_helpers import save_safetensors, tiny_bert
from test_optimize_sensitivity import spectrum_stats

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str, after: str = "0", cwd: Path | None = None):
    env = dict(os.environ, PYTHONPATH=str(ROOT), BOUNDCALC_PROGRESS_AFTER=after)
    code = ("import sys\nfrom boundcalc.cli import main\nsys.argv = ['boundcalc', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\nelse:\n    code = 0\n"
            "print('LOADED', 'torch' in sys.modules, 'boundcalc.measure.weights.pipeline' in sys.modules,"
            " file=sys.stderr)\nsys.exit(code)\n")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env, cwd=cwd or ROOT, timeout=300)


def _split(stderr: str) -> tuple[list[str], str]:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    loaded = [ln for ln in lines if ln.startswith("LOADED")]
    return [ln for ln in lines if not ln.startswith("LOADED")], loaded[0]


def test_missing_init_is_reported_before_anything_is_loaded(tmp_path):
    res = run_cli("measure", "minilm", "--init", str(tmp_path / "nope.safetensors"),
                  "-o", str(tmp_path / "s.json"))
    lines, loaded = _split(res.stderr)
    assert res.returncode == 6
    assert len(lines) == 1 and "--init" in lines[0] and "nope.safetensors" in lines[0]
    assert loaded == "LOADED False False"  # neither torch nor the measurement code was imported
    assert not (tmp_path / "s.json").exists()


def test_missing_stats_is_reported_before_loading(tmp_path):
    res = run_cli("compare", "--stats", str(tmp_path / "nope.json"))
    lines, loaded = _split(res.stderr)
    assert res.returncode == 5 and len(lines) == 1 and "no such stats file" in lines[0]
    assert loaded.endswith("False")


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    return save_safetensors(tiny_bert(), tmp_path_factory.mktemp("tiny"))


def test_measure_reports_stages_on_stderr_unless_quiet(tiny_checkpoint, tmp_path):
    out = tmp_path / "s.json"
    res = run_cli("measure", str(tiny_checkpoint), "-o", str(out), "--json")
    assert res.returncode == 0, res.stderr
    lines, _ = _split(res.stderr)
    assert 2 <= len(lines) <= 8, lines
    assert all(ln.startswith("boundcalc measure: ") for ln in lines)
    assert "done in" in lines[-1] and any("steps" in ln for ln in lines)
    assert json.loads(res.stdout)["output"] == str(out)

    res = run_cli("--quiet", "measure", str(tiny_checkpoint), "-o", str(out), "--json")
    assert res.returncode == 0
    assert _split(res.stderr)[0] == []
    # the default: quick work says nothing
    res = run_cli("measure", str(tiny_checkpoint), "-o", str(out), after="600")
    assert res.returncode == 0 and _split(res.stderr)[0] == []


def test_compare_reports_stages_unless_quiet(tmp_path):
    path = spectrum_stats(L=2, A=2, seed=1).save(tmp_path / "s.json")
    res = run_cli("compare", "--stats", str(path), "--json")
    assert res.returncode == 0, res.stderr
    lines, _ = _split(res.stderr)
    assert any("optimising the applicable entries" in ln for ln in lines)
    assert all(ln.startswith("boundcalc compare: ") for ln in lines) and len(lines) <= 8
    json.loads(res.stdout)
    res = run_cli("-q", "compare", "--stats", str(path), "--json")
    assert res.returncode == 0 and _split(res.stderr)[0] == []
