"""The property-test campaign runner (benchmarks/property_campaign.py): records and resume.

A real pytest subprocess runs a two-example Hypothesis test in a throwaway folder whose conftest
takes the ``--hypothesis-scale`` option from the repository's tests/conftest.py."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import property_campaign as pc  # noqa: E402

CONFTEST = f"""
import importlib.util
spec = importlib.util.spec_from_file_location("_repo_conftest", {str(REPO / "tests" / "conftest.py")!r})
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
pytest_addoption = mod.pytest_addoption
pytest_collection_modifyitems = mod.pytest_collection_modifyitems
"""

TINY = """
from pathlib import Path
from hypothesis import given, settings, strategies as st

LOG = Path(__file__).with_name("drawn.txt")


@settings(max_examples=2, deadline=None)
@given(st.integers(0, 10**9))
def test_tiny(x):
    with LOG.open("a") as fh:
        fh.write(f"{{x}}\\n")
    assert x >= 0 + {floor}


def test_plain_is_not_a_property_test():
    pass
"""


def _drawn(folder: Path) -> list[str]:
    log = folder / "drawn.txt"
    lines = log.read_text().split() if log.exists() else []
    log.unlink(missing_ok=True)
    return lines


def test_campaign_records_each_run_and_skips_what_passed(tmp_path, capsys):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    tiny = tmp_path / "test_tiny.py"
    tiny.write_text(TINY.format(floor=0))
    results = tmp_path / "results.json"
    args = ["--root", str(tmp_path), "--tests", "test_tiny.py", "--results", str(results)]

    # first run at scale 2: one record, the plain test not collected
    assert pc.main([*args, "--scale", "2"]) == 0
    runs = json.loads(results.read_text())["runs"]
    assert len(runs) == 1
    run = runs[0]
    drawn = _drawn(tmp_path)
    assert run["id"] == "test_tiny.py::test_tiny"
    assert run["outcome"] == "pass" and run["scale"] == 2 and run["max_examples"] == 4
    assert run["file_sha256"] == hashlib.sha256(tiny.read_bytes()).hexdigest()
    assert run["commit"] is None                     # not a git repository
    assert 0 <= run["seed"] < 2**32
    # the examples Hypothesis reports are the calls the test saw (2 × 2 at most)
    assert run["examples"] == run["generated"] == len(drawn) and 1 <= len(drawn) <= 4
    assert run["wall_s"] > 0

    # the recorded seed reproduces the run: the same values drawn again
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "--hypothesis-scale", "2", "--hypothesis-seed", str(run["seed"]),
                    "test_tiny.py::test_tiny"], cwd=tmp_path, check=True, capture_output=True)
    assert _drawn(tmp_path) == drawn

    # re-run at a lower scale: skipped, nothing appended (the plan skips it at scale 2 too)
    assert pc.main([*args, "--scale", "1"]) == 0
    assert len(json.loads(results.read_text())["runs"]) == 1
    assert _drawn(tmp_path) == []
    assert "1 already passed" in capsys.readouterr().out
    tested = {"id": run["id"], "file_sha256": run["file_sha256"], "max_examples": 2}
    assert pc.plan([tested], runs, 2) == ([], [tested])
    assert [t["id"] for t in pc.plan([tested], runs, 3)[0]] == [run["id"]]

    # the test file changes (now it fails): run again, the failure and its example recorded
    tiny.write_text(TINY.format(floor=10**10))
    assert pc.main([*args, "--scale", "2"]) == 1
    runs = json.loads(results.read_text())["runs"]
    assert len(runs) == 2 and runs[1]["outcome"] == "fail"
    assert runs[1]["file_sha256"] == hashlib.sha256(tiny.read_bytes()).hexdigest()
    assert runs[1]["counterexample"].splitlines()[1].strip().startswith("x=0")

    # a failed id stays in the plan
    changed = {**tested, "file_sha256": runs[1]["file_sha256"]}
    assert [t["id"] for t in pc.plan([changed], runs, 2)[0]] == [run["id"]]


GREEDY = """
from hypothesis import given, settings, strategies as st


@settings(max_examples=2, deadline=None, database=None)
@given(st.integers(0, 1))
def test_greedy(x):
    block = bytearray(6 * 2**30)  # 6 GiB: above the 3 GiB cap, below this machine's memory
    assert len(block) == 6 * 2**30
"""


def test_memory_cap_turns_a_blow_up_into_a_recorded_failure(tmp_path):
    """--memory-gb: the run's allocation beyond the cap raises MemoryError inside the test, so
    the run is recorded as a failure with its counterexample and the cap, not killed by the
    kernel. Without the cap the same 6 GiB allocation succeeds (control)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_greedy.py").write_text(GREEDY)
    results = tmp_path / "results.json"
    args = ["--root", str(tmp_path), "--tests", "test_greedy.py", "--results", str(results),
            "--scale", "1"]
    assert pc.main([*args, "--memory-gb", "3"]) == 1
    (run,) = json.loads(results.read_text())["runs"]
    assert run["outcome"] == "fail" and run["memory_limit_gb"] == 3.0
    assert "MemoryError" in run["output_tail"]
    assert run["counterexample"].splitlines()[1].strip().startswith("x=0")

    assert pc.main(args) == 0  # no cap: the allocation succeeds, the id passes
    runs = json.loads(results.read_text())["runs"]
    assert runs[1]["outcome"] == "pass" and runs[1]["memory_limit_gb"] is None
