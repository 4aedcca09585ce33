"""Real text nobody here wrote: the Python standard library's own sources and docstrings.

Shared by the text examples (``text_classifier``, ``language_model``):

* :func:`stdlib_files` lists the ``.py`` files of ``sysconfig.get_paths()["stdlib"]``, without
  ``site-packages`` and without test folders (``test``, ``tests``, ``idle_test``): the tests
  are left out so that the text is library code and its documentation, not fixtures;
* :func:`docstrings` reads a file's function and class docstrings with :mod:`ast` (never
  importing or executing it);
* :func:`split_by_file` assigns whole files to the splits (no file is in two splits);
* :func:`iid_draws` draws the bound sample S i.i.d. (uniformly, with replacement) from a stated
  pool, so the sampling assumption of every bound is true by construction: the bound is about
  the uniform distribution on that pool;
* :func:`run_cli` runs ``boundcalc …`` as a subprocess (what a user runs), printing a stage line
  first so that the user is never left silent for minutes.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import sysconfig
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from boundcalc.errors import BoundcalcError

EXCLUDED_DIRS = frozenset({"site-packages", "__pycache__", "test", "tests", "idle_test"})
SPLITS = ("prior", "bound", "heldout")


def stdlib_root() -> Path:
    """The running interpreter's standard library folder."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(root: str | Path | None = None) -> list[str]:
    """Sorted paths (relative to ``root``, '/'-separated) of the library's ``.py`` files,
    without ``site-packages`` and test folders."""
    root = Path(root) if root is not None else stdlib_root()
    if not root.is_dir():
        raise BoundcalcError(f"{root}: no standard library folder there")
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in EXCLUDED_DIRS)
        for f in filenames:
            if f.endswith(".py"):
                out.append(Path(dirpath, f).relative_to(root).as_posix())
    return sorted(out)


def package_of(rel: str) -> str:
    """Top-level module or package a relative path belongs to (``email/mime/text.py`` →
    ``email``; ``os.py`` → ``os``)."""
    first = rel.split("/", 1)[0]
    return first[:-3] if first.endswith(".py") else first


def docstrings(path: str | Path, min_chars: int = 40) -> list[str]:
    """Function and class docstrings of a source file longer than ``min_chars`` (cleaned by
    :func:`ast.get_docstring`), in source order; [] for a file that does not parse."""
    try:
        tree = ast.parse(Path(path).read_bytes())
    except (SyntaxError, ValueError, OSError):
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            d = ast.get_docstring(node)
            if d and len(d) > min_chars:
                out.append(d)
    return out


def split_by_file(groups: Mapping[str, Sequence[tuple[str, int]]],
                  fractions: Sequence[float], seed: int) -> dict[str, int]:
    """Assign whole files to splits: file → split index.

    ``groups`` maps a stratum (a package) to its ``(file, weight)`` pairs (weight = units in
    the file). Within each stratum the files are shuffled (``seed``) and each goes to the split
    furthest below its target share of the stratum's weight, so every split gets files of every
    stratum that has enough files, and no file is in two splits.
    """
    fr = np.asarray(fractions, dtype=np.float64)
    if fr.ndim != 1 or fr.size < 2 or np.any(fr <= 0):
        raise BoundcalcError("split fractions must be at least two positive numbers")
    fr = fr / fr.sum()
    rng = np.random.default_rng(seed)
    out: dict[str, int] = {}
    for key in sorted(groups):
        items = list(groups[key])
        order = rng.permutation(len(items))
        total = float(sum(w for _, w in items)) or 1.0
        have = np.zeros(fr.size)
        for i in order:
            f, w = items[i]
            deficit = fr * total - have
            if np.any(have == 0):  # every split first gets one file of the stratum
                deficit = np.where(have == 0, deficit + 2 * total, deficit)
            s = int(np.argmax(deficit))
            out[f] = s
            have[s] += w
    return out


def iid_draws(pool_size: int, n: int, seed: int) -> np.ndarray:
    """``n`` indices drawn i.i.d. uniformly from ``range(pool_size)`` (with replacement)."""
    if pool_size < 1 or n < 1:
        raise BoundcalcError(f"cannot draw {n} units from a pool of {pool_size}")
    return np.random.default_rng(seed).integers(0, pool_size, size=n)


def stage(msg: str) -> None:
    """One progress line on stderr, with the wall time."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parents[1])  # this checkout first on the path
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    env.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    return env


def run_cli(args: Sequence[str], what: str, timeout: float | None = None) -> str:
    """``boundcalc ARGS`` in a subprocess (``python -m boundcalc``); returns its stdout.

    The command's own stage messages (stderr) are echoed as they come, so a long ``measure`` is
    never silent. A failing command raises :class:`BoundcalcError` with its last line."""
    import tempfile

    stage(f"{what}: boundcalc {' '.join(args)}")
    t0 = time.time()
    tail: list[str] = []
    with tempfile.TemporaryFile("w+", encoding="utf-8") as out:
        proc = subprocess.Popen([sys.executable, "-m", "boundcalc", *args], stdout=out,
                                stderr=subprocess.PIPE, text=True, env=_env())
        try:
            assert proc.stderr is not None
            for line in proc.stderr:
                line = line.rstrip()
                if line:
                    tail = (tail + [line])[-20:]
                    print(f"    {line}", file=sys.stderr, flush=True)
            rc = proc.wait(timeout=timeout)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        out.seek(0)
        stdout = out.read()
    if rc:
        last = tail[-1] if tail else (stdout.strip().splitlines() or ["no output"])[-1]
        raise BoundcalcError(f"boundcalc {args[0]} failed (exit {rc}): {last}")
    stage(f"{what}: done in {time.time() - t0:.0f} s")
    return stdout


def write_json(path: str | Path, doc: object) -> None:
    """``doc`` as indented JSON (NaN refused)."""
    Path(path).write_text(json.dumps(doc, indent=1, allow_nan=False, default=str) + "\n")
