"""boundcalc sweep on a real Ray runtime (started once for the module, 2 CPUs, no mock): the same
table as the local executor bit for bit, and a worker killed mid-task is retried."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from _measure_helpers import minilm_path
from _sweep_helpers import make_zoo

from boundcalc.sweep import run_sweep

ray = pytest.importorskip("ray")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ray_runtime():
    # Workers import boundcalc from this checkout when it is not installed.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    return make_zoo(tmp_path_factory.mktemp("zoo"))


@pytest.mark.slow
def test_ray_and_local_give_the_same_table(ray_runtime, zoo, tmp_path):
    local = run_sweep(zoo, tmp_path / "local", workers=2)
    on_ray = run_sweep(zoo, tmp_path / "ray", ray=True)
    assert (local.executor, on_ray.executor) == ("local", "ray")
    assert on_ray.computed == local.computed == 13
    assert on_ray.table.equals(local.table)
    for name in ("results.csv", "results.parquet"):
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes()
    stats = sorted(p.name for p in (tmp_path / "local" / "stats").iterdir())
    assert len(stats) == 12
    for name in stats:
        assert ((tmp_path / "ray" / "stats" / name).read_bytes()
                == (tmp_path / "local" / "stats" / name).read_bytes())
    # the broken checkpoint failed in both, with the same one-line error
    assert on_ray.failed == local.failed and len(local.failed) == 1
    # Ray really ran them: the attempt log names worker processes other than this one
    pids = {json.loads(line)["pid"] for p in (tmp_path / "ray" / "tasks").iterdir()
            for line in p.read_text().splitlines()}
    assert os.getpid() not in pids and len(pids) >= 1


def _sweep_killing(manifest: Path, out: Path, victim: str, **kw):
    """Run a sweep in a thread; SIGKILL the process that starts ``victim`` as soon as its
    attempt log names it (mid-task: the task has only just begun)."""
    box: dict = {}
    runner = threading.Thread(target=lambda: box.update(outcome=run_sweep(manifest, out, **kw)))
    runner.start()
    killed = None
    deadline = time.monotonic() + 300
    while killed is None and time.monotonic() < deadline and runner.is_alive():
        for log in (out / "tasks").glob("*.log") if (out / "tasks").is_dir() else []:
            for line in log.read_text().splitlines():
                rec = json.loads(line)
                if rec["path"] == victim and killed is None:
                    os.kill(rec["pid"], signal.SIGKILL)
                    killed = rec["pid"]
        time.sleep(0.02)
    runner.join(timeout=600)
    assert killed is not None, "the task never started"
    return box["outcome"]


@pytest.mark.slow
def test_worker_killed_mid_task_is_retried(ray_runtime, zoo, tmp_path):
    big = str(Path(minilm_path()).resolve())  # a few seconds of work: time to kill it
    manifest = tmp_path / "m.csv"
    manifest.write_text(f"path,hp:seed\n{big},0\n{zoo.parent / 'w32_s0'},1\n"
                        f"{zoo.parent / 'w48_s1'},2\n")
    reference = run_sweep(manifest, tmp_path / "clean", workers=1)
    for name, kw in (("ray", {"ray": True}), ("local", {"workers": 1})):
        out = tmp_path / name
        outcome = _sweep_killing(manifest, out, big, **kw)
        assert outcome.failed == [] and outcome.executor == name
        attempts = json.loads((out / "sweep.json").read_text())["attempts"]
        assert sorted(attempts.values())[-1] == 2  # the killed task ran again
        assert outcome.table.equals(reference.table), name
        assert (out / "results.csv").read_bytes() == (tmp_path / "clean" /
                                                      "results.csv").read_bytes()
        minilm = outcome.table[outcome.table["path"] == big]
        assert set(minilm["status"]) == {"ok"} and len(minilm) >= 3
