"""Progress for long commands, and the cheap checks that run before any expensive loading.

On a terminal a progress bar (stderr); otherwise a few one-line stage messages on stderr, and
only once the work has run for ``BOUNDCALC_PROGRESS_AFTER`` seconds (default 1), so quick
commands and their one-line errors stay quiet. ``boundcalc --quiet`` silences both.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, TypeVar

from ..errors import CheckpointError, StatsError, one_line
from .app import _state, err_console

T = TypeVar("T")
PROGRESS_EVERY_S = 10.0  # the longest silence of a long stage's progress messages


def require_paths(**paths: Any) -> None:
    """One-line error naming the option whose path does not exist (before anything is loaded).

    Keys are option names (``init="path"`` → ``--init``; ``model`` is the argument). A value that
    is not path-like (a bundled model name such as ``minilm``, a live object) is left alone.
    """
    for option, value in paths.items():
        if value is None or not isinstance(value, (str, os.PathLike)):
            continue
        p = Path(value)
        error = StatsError if option == "stats" else CheckpointError
        what = "stats file"
        if p.exists():
            if p.is_file() and not os.access(p, os.R_OK):
                raise error(f"{_label(option)} {one_line(str(p))}: not readable")
            continue
        if option == "stats":
            raise error(f"{_label(option)} {one_line(str(p))}: no such {what}")
        if option == "model":
            from ..bundled import BUNDLED_MODELS

            if str(value) in BUNDLED_MODELS:
                continue
            raise error(f"no such file or folder: {one_line(str(p))}")
        raise error(f"{_label(option)}: no such file or folder: {one_line(str(p))}")


def check_device(device: str) -> None:
    """Refuse ``--device cuda`` (or ``cuda:N``) on a machine without it, before anything slow
    (transformers, the model) is imported or loaded; ``auto`` and ``cpu`` need no check."""
    if device in ("auto", "cpu"):
        return
    from ..measure.device import resolve_device

    resolve_device(device)


def _label(option: str) -> str:
    return option.upper() if option == "model" else f"--{option.replace('_', '-')}"


class Stages:
    """Stage messages of one command (``boundcalc <command>: <message>`` on stderr)."""

    def __init__(self, command: str):
        self.command = command
        self.quiet = bool(_state.get("quiet"))
        self.terminal = err_console.is_terminal
        self.start = time.monotonic()
        try:
            self.after = float(os.environ.get("BOUNDCALC_PROGRESS_AFTER", "1"))
        except ValueError:
            self.after = 1.0
        self.spoke = False

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def say(self, message: str, force: bool = False) -> None:
        """One line on stderr (not on a terminal, where a bar shows the stage instead)."""
        if self.terminal or (not force and self.elapsed() < self.after):
            return
        self.note(message)

    def note(self, message: str) -> None:
        """One line on stderr before a long stage (a plan), on a terminal too; not when
        quiet."""
        if self.quiet:
            return
        self.spoke = True
        sys.stderr.write(f"boundcalc {self.command}: {one_line(message)}\n")
        sys.stderr.flush()

    def done(self) -> None:
        if self.spoke:
            self.say(f"done in {self.elapsed():.1f} s", force=True)

    def measure_progress(self, what: str, verb: str = "measuring"
                         ) -> bool | Callable[[int, int, str], None]:
        """The ``progress`` argument of :func:`boundcalc.measure.measure` (messages read
        '<verb> <what>: done/total steps (stage)'; an empty ``what``: '<verb>: …')."""
        if self.quiet:
            return False
        if self.terminal:
            return True
        marks: set[int] = set()
        # "base": the steps already done when the stage's clock started (a stage first heard
        # of at done > 0 has no time for those: they do not enter its rate)
        last = {"done": -1, "total": None, "start": time.monotonic(), "said": 0.0, "base": 0}

        def report(done: int, total: int, description: str) -> None:
            if not total:
                return
            now = time.monotonic()
            if total != last["total"] or done < last["done"]:  # a new stage: its own quarters
                marks.clear()
                last.update(start=now, said=now, base=done)
            last.update(done=done, total=total)
            quarter = min(4, int(4 * done / total))
            due = now - last["said"] >= PROGRESS_EVERY_S  # at least every 10 s in a long stage
            if (quarter in marks and not due) or self.elapsed() < self.after:
                return
            marks.add(quarter)
            last["said"] = now
            spent, counted = now - last["start"], done - last["base"]
            rate = counted / spent if spent > 0 and counted > 0 else 0.0
            speed = (f", {rate:.3g} steps/s, ETA {(total - done) / rate:.0f} s"
                     if rate > 0 else "")
            self.say(f"{verb}{' ' + what if what else ''}: {done}/{total} steps "
                     f"({description}{speed})")
        return report

    def track(self, items: Iterable[T], total: int, description: str) -> Iterator[T]:
        """Iterate with a bar on a terminal, else with a message at each quarter."""
        if self.quiet:
            yield from items
            return
        if self.terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                          console=err_console, transient=True) as bar:
                task = bar.add_task(description, total=total)
                for item in items:
                    yield item
                    bar.advance(task)
            return
        marks: set[int] = set()
        for k, item in enumerate(items):
            quarter = int(4 * k / max(total, 1))
            if quarter not in marks and self.elapsed() >= self.after:
                marks.add(quarter)
                self.say(f"{description}: {k}/{total}")
            yield item
