"""The property-test campaign: every Hypothesis test, one at a time, with K times its examples,
drawn at random, resumable across sessions.

Contract:

* Collects the Hypothesis tests (``pytest --collect-only -m hypothesis`` under ``--tests``) and
  runs each test id in its own pytest process with ``--hypothesis-scale K`` (tests/conftest.py:
  K × ``max_examples``, derandomize off, no example database) and ``--hypothesis-seed S``, S drawn
  at random here and recorded, so a run can be repeated exactly (same seed, same commit, same
  scale).
* Every run is appended to the results file (default ``benchmarks/results/property_campaign.json``)
  as soon as it ends: test id, test file and the SHA-256 of its text, scale, seed, outcome
  (``pass`` / ``fail`` / ``timeout`` / ``error`` / ``stopped`` when the session's budget ran out
  mid-run), wall seconds, the examples Hypothesis reports having run (``--hypothesis-show-statistics``:
  passing + failing test cases over all phases; invalid ones apart), the git commit and whether
  the test file differed from it, and for a failure the end of pytest's output (counterexample).
* Resumable: an id that already passed at a scale ≥ K with the same test-file hash is skipped.
  Order: ids with a measured 1× duration first (cheapest first), then the rest in file order; ids
  whose last run at this scale timed out go last.
* ``--budget-minutes N`` stops cleanly: no run starts, or runs on, past N minutes (one cut short
  by the budget is recorded as ``stopped`` and is not a result).
* ``--memory-gb G`` caps each run's address space (RLIMIT_AS, G GiB; recorded as
  ``memory_limit_gb``): a failing SymPy-heavy fuzzer can grow by tens of GB while Hypothesis
  shrinks and explains its failure, and the kernel's OOM killer would then leave an ``error``
  with no counterexample (twice on a 24 GB machine); under the cap the allocation raises
  MemoryError, and the run ends as a failure or an error with its output kept.

Usage (from the repository root, nice'd on a shared machine)::

    nice -n 19 python benchmarks/property_campaign.py --scale 100 --budget-minutes 90 --memory-gb 14
    python benchmarks/property_campaign.py --scale 100 --dry-run          # the plan only
    python benchmarks/property_campaign.py --scale 1 --only test_numerical_robustness

The module is also the pytest plugin of its own collection step (``-p property_campaign``):
:func:`pytest_collection_finish` writes the collected ids when ``PROPERTY_CAMPAIGN_COLLECT`` names
a file.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import fcntl
import fnmatch
import hashlib
import json
import os
import random
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_RESULTS = HERE / "results" / "property_campaign.json"
COLLECT_ENV = "PROPERTY_CAMPAIGN_COLLECT"
PYTEST = [sys.executable, "-m", "pytest", "-o", "addopts=", "-p", "no:cacheprovider"]
DESCRIPTION = ("Property-test campaign (benchmarks/property_campaign.py): one record per run of "
               "one Hypothesis test id at --hypothesis-scale K with --hypothesis-seed `seed`. "
               "`examples` = passing + failing test cases over all phases as Hypothesis reports "
               "them (--hypothesis-show-statistics), `generated` those of the generate phase, "
               "`invalid` apart; a failure keeps its counterexample and pytest's last output.")


# --- the collection plugin (runs inside the pytest collection process) ----------------------

def pytest_collection_finish(session) -> None:
    """Write the selected items (id, file, max_examples) to the file named by the env var."""
    out = os.environ.get(COLLECT_ENV)
    if not out:
        return
    rows = []
    for item in session.items:
        fn = getattr(item, "obj", None)
        conf = getattr(fn, "_hypothesis_internal_use_settings", None)
        rows.append({"id": item.nodeid, "path": str(item.path),
                     "max_examples": getattr(conf, "max_examples", None)})
    Path(out).write_text(json.dumps(rows), encoding="utf-8")


# --- the runner ------------------------------------------------------------------------------

def collect(root: Path, tests: list[str]) -> list[dict[str, Any]]:
    """The Hypothesis test ids under ``tests`` (relative to ``root``), in file order, each with
    its file (relative to root), the file's SHA-256 and its base ``max_examples``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ids.json"
        env = dict(os.environ, **{COLLECT_ENV: str(out)})
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH")) if p)
        proc = subprocess.run([*PYTEST, "-q", "--collect-only", "-m", "hypothesis",
                               "-p", "property_campaign", *tests],
                              cwd=root, env=env, capture_output=True, text=True)
        if not out.exists():
            raise SystemExit(f"collection failed (exit {proc.returncode}):\n"
                             f"{(proc.stdout + proc.stderr)[-3000:]}")
        rows = json.loads(out.read_text(encoding="utf-8"))
    hashes: dict[str, str] = {}
    for row in rows:
        path = Path(row.pop("path"))
        if str(path) not in hashes:
            hashes[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        row["file_sha256"] = hashes[str(path)]
        row["file"] = os.path.relpath(path, root)
    return rows


def load_results(path: Path) -> dict[str, Any]:
    if path.exists():
        data = json.loads(path.read_text(encoding="utf-8"))
        data.setdefault("runs", [])
        return data
    return {"description": DESCRIPTION, "runs": []}


def save_results(path: Path, data: dict[str, Any]) -> None:
    sys.path.insert(0, str(REPO))
    from boundcalc.files.atomic_write import write_text_atomic

    write_text_atomic(path, json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def append_result(path: Path, record: dict[str, Any]) -> None:
    """Append one record: re-read, append, write atomically, under a lock (a file in the temp
    folder named after the results path), so campaigns run side by side (different --only) keep
    every record."""
    lock = Path(tempfile.gettempdir()) / (
        "property_campaign." + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16] + ".lock")
    with open(lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        data = load_results(path)
        data["runs"].append(record)
        save_results(path, data)


def selected(test_id: str, patterns: list[str]) -> bool:
    """``--only``: a pattern with * ? [ is a glob over the id, otherwise a substring."""
    if not patterns:
        return True
    return any(fnmatch.fnmatchcase(test_id, p) if any(c in p for c in "*?[") else p in test_id
               for p in patterns)


def plan(tests: list[dict[str, Any]], runs: list[dict[str, Any]], scale: int
         ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(to run in order, skipped). Skipped: passed at a scale ≥ ``scale`` with the current
    test-file hash. Order: measured 1× duration ascending, then file order; ids whose latest
    run at ``scale`` (same hash) timed out last."""
    todo, skipped = [], []
    for index, test in enumerate(tests):
        mine = [r for r in runs if r.get("id") == test["id"]
                and r.get("file_sha256") == test["file_sha256"]]
        if any(r.get("outcome") == "pass" and r.get("scale", 0) >= scale for r in mine):
            skipped.append(test)
            continue
        one = [r["wall_s"] for r in mine if r.get("scale") == 1 and r.get("outcome") == "pass"]
        at_scale = [r for r in mine if r.get("scale") == scale and r.get("outcome") != "stopped"]
        timed_out = bool(at_scale) and at_scale[-1].get("outcome") == "timeout"
        key = (2, 0.0, index) if timed_out else (0, min(one), index) if one else (1, 0.0, index)
        todo.append({**test, "_key": key, "measured_1x_s": min(one) if one else None})
    todo.sort(key=lambda t: t["_key"])
    return todo, skipped


_STATS = re.compile(r"(\d+) passing(?: examples)?, (\d+) failing(?: examples)?,? "
                    r"(?:and )?(\d+) invalid")
_PHASE = re.compile(r"during (\w+) phase")
_STOP = re.compile(r"Stopped because (.+)")


def parse_statistics(text: str) -> dict[str, Any]:
    """Examples per phase from ``--hypothesis-show-statistics``; None where none printed."""
    phases: dict[str, list[int]] = {}
    phase = None
    for line in text.splitlines():
        m = _PHASE.search(line)
        if m:
            phase = m.group(1)
            continue
        m = _STATS.search(line)
        if m and phase:
            phases[phase] = [int(g) for g in m.groups()]
    stop = _STOP.search(text)
    if not phases:
        return {"examples": None, "generated": None, "invalid": None, "phases": None,
                "stopped_because": stop.group(1).strip() if stop else None}
    return {"examples": sum(p + f for p, f, _ in phases.values()),
            "generated": sum(phases.get("generate", [0, 0])[:2]),
            "invalid": sum(i for *_, i in phases.values()), "phases": phases,
            "stopped_because": stop.group(1).strip() if stop else None}


def counterexample(text: str) -> str | None:
    """The 'Falsifying example' / 'Failing test case' block of pytest's report, if any."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"E\s+(Falsifying example|Failing test case)", line):
            block = [line]
            for nxt in lines[i + 1:]:
                if not nxt.startswith("E "):
                    break
                block.append(nxt)
            return "\n".join(b[1:].strip() for b in block)[:4000]
    return None


def git_facts(root: Path, file: str, results: Path) -> dict[str, Any]:
    """HEAD, whether the test file is as committed, and whether any other tracked file (the
    results file aside) differs from HEAD."""
    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                                  text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return {"commit": None, "test_file_as_committed": None, "tree_dirty": None}
    changed = git("status", "--porcelain", "--", file)
    dirty = [line for line in (git("status", "--porcelain", "--untracked-files=no") or "")
             .splitlines() if not line.endswith(results.name)]
    return {"commit": commit, "test_file_as_committed": changed == "", "tree_dirty": bool(dirty)}


def _address_space_cap(gib: float | None):
    """A ``preexec_fn`` that caps the child's address space at ``gib`` GiB (None: no cap)."""
    if gib is None:
        return None
    limit = int(gib * 2**30)

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return cap


def run_one(root: Path, test: dict[str, Any], scale: int, seed: int, limit_s: float,
            results: Path, memory_gb: float | None = None) -> dict[str, Any]:
    """One pytest process for one id; killed (its whole process group) after ``limit_s``; its
    address space capped at ``memory_gb`` GiB when given."""
    cmd = [*PYTEST, "-q", "-p", "no:randomly", "--hypothesis-scale", str(scale),
           "--hypothesis-seed", str(seed), "--hypothesis-show-statistics", test["id"]]
    started = _dt.datetime.now(_dt.timezone.utc)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True,
                            preexec_fn=_address_space_cap(memory_gb))
    try:
        out, _ = proc.communicate(timeout=limit_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        timed_out = True
    wall = time.monotonic() - t0
    if timed_out:
        outcome = "timeout"
    elif proc.returncode == 0 and re.search(r"\b1 passed\b", out):
        outcome = "pass"
    elif proc.returncode == 1:
        outcome = "fail"
    else:
        outcome = "error"
    record = {"id": test["id"], "file": test["file"], "file_sha256": test["file_sha256"],
              "scale": scale, "max_examples": (test["max_examples"] * scale
                                               if test.get("max_examples") else None),
              "seed": seed, "outcome": outcome, "wall_s": round(wall, 2),
              "limit_s": round(limit_s, 1), "memory_limit_gb": memory_gb,
              "returncode": proc.returncode,
              **parse_statistics(out), **git_facts(root, test["file"], results),
              "started_utc": started.isoformat(timespec="seconds"),
              "python": sys.version.split()[0], "hypothesis": _hypothesis_version()}
    if outcome != "pass":
        record["counterexample"] = counterexample(out)
        record["output_tail"] = out[-4000:]
    return record


def _hypothesis_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("hypothesis")
    except Exception:  # noqa: BLE001 - a missing distribution is only a missing fact
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=int, default=100, help="K × each test's max_examples")
    ap.add_argument("--budget-minutes", type=float, default=None,
                    help="stop cleanly after N minutes (default: no limit)")
    ap.add_argument("--per-run-minutes", type=float, default=30.0,
                    help="time limit of one test id's run (default 30)")
    ap.add_argument("--only", action="append", default=[], metavar="PATTERN",
                    help="run only ids containing PATTERN (a glob if it has * ? [); repeatable")
    ap.add_argument("--memory-gb", type=float, default=None,
                    help="cap each run's address space at G GiB (RLIMIT_AS; default: no cap)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    ap.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help="the results file")
    ap.add_argument("--root", type=Path, default=REPO, help="where pytest runs")
    ap.add_argument("--tests", nargs="*", default=["tests"], help="paths to collect, under root")
    args = ap.parse_args(argv)
    if args.scale < 1:
        ap.error(f"--scale must be at least 1, got {args.scale}")
    if args.memory_gb is not None and not args.memory_gb > 0:
        ap.error(f"--memory-gb must be positive, got {args.memory_gb}")
    t_start = time.monotonic()
    deadline = t_start + 60 * args.budget_minutes if args.budget_minutes is not None else None

    root = args.root.resolve()
    tests = [t for t in collect(root, args.tests) if selected(t["id"], args.only)]
    data = load_results(args.results)
    todo, skipped = plan(tests, data["runs"], args.scale)
    print(f"{len(tests)} Hypothesis test ids selected; {len(skipped)} already passed at "
          f"scale >= {args.scale} (same test file), {len(todo)} to run", flush=True)
    if args.dry_run:
        for t in todo:
            cost = f"{t['measured_1x_s']:.1f} s at 1x" if t["measured_1x_s"] is not None else "-"
            print(f"  run   {t['id']}  (max_examples {t['max_examples']} x {args.scale}; {cost})")
        for t in skipped:
            print(f"  skip  {t['id']}")
        return 0

    done: dict[str, int] = {}
    examples = 0
    for n, test in enumerate(todo, 1):
        limit = 60 * args.per_run_minutes
        by_budget = False
        if deadline is not None:
            left = deadline - time.monotonic()
            if left < 30:
                print("budget spent; stopping", flush=True)
                break
            if left < limit:
                limit, by_budget = left, True
        seed = random.SystemRandom().randrange(2**32)
        print(f"[{n}/{len(todo)}] {test['id']}  scale {args.scale} seed {seed} ...", flush=True)
        record = run_one(root, test, args.scale, seed, limit, args.results, args.memory_gb)
        if record["outcome"] == "timeout" and by_budget:
            record["outcome"] = "stopped"
        append_result(args.results, record)
        done[record["outcome"]] = done.get(record["outcome"], 0) + 1
        examples += record["examples"] or 0
        print(f"    {record['outcome']} in {record['wall_s']:.1f} s, "
              f"{record['examples']} examples", flush=True)
        if record["outcome"] == "stopped":
            print("budget spent; stopping", flush=True)
            break
    summary = ", ".join(f"{v} {k}" for k, v in sorted(done.items())) or "nothing run"
    print(f"this session: {summary}; {examples} examples; results in {args.results}", flush=True)
    return 1 if done.get("fail") or done.get("error") else 0


if __name__ == "__main__":
    raise SystemExit(main())
