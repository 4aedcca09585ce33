"""``certify``'s output folder is its own: marked, checked before anything is written, and
verified on every reuse.

* **The mark.** A new or empty folder gets the manifest ``certify_run.json``
  (:class:`boundcalc.files.manifest.Manifest`) before any other file; a folder that is not
  empty and has no manifest is not a certify run and is refused, never written into (a
  user's own ``model/`` or ``report.json`` stays as it is). A folder of an earlier certify,
  which recorded its steps in ``steps.json`` without hashes, is taken over: nothing in it is
  verified, so every step runs again.
* **Inputs are never outputs.** DATA, the held-out set, the base model and the tokenizer
  folder may not be, nor lie inside, a name certify writes in the folder (:data:`WRITES`, and
  each with ``.partial``); the folder may not lie inside an input folder; a name certify
  writes that is a symbolic link is refused (certify writes plain files and folders only).
  All of it before the first write.
* **Reuse is verified.** A step is reused only when the manifest records it with the same
  key and the SHA-256 of every file under its outputs is the one recorded when it wrote them
  (:meth:`RunFolder.fresh`); otherwise it runs again, and so does every later step. Before a
  step runs its record and those of the later steps are dropped, so a run killed meanwhile
  leaves nothing that looks finished.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..errors import OutputError, one_line, shown
from ..files import read_json
from ..files.manifest import Manifest
from ..words import option

MANIFEST = "certify_run.json"
FORM = "boundcalc certify run folder"
LEGACY = "steps.json"  # an earlier certify's record of its steps' keys (no hashes)
# every name certify writes in its output folder (each is also written as NAME.partial first)
WRITES = ("prior.jsonl", "S.jsonl", "tune.jsonl", "test.jsonl", "split.json", "prior",
          "model", "posterior_bound", "posterior_subspace", "stats.json", "stats_model.json",
          "report.json",
          MANIFEST)


def _inside(child: str, folder: str) -> bool:
    return child == folder or child.startswith(folder.rstrip(os.sep) + os.sep)


def _role(name: str, path: Any) -> str:
    return f"the base model {shown(path)}" if name == "base" else option(name, shown(path))


def check_inputs(out: Path, inputs: Mapping[str, Any]) -> None:
    """Refuse an input (``{keyword: path}``; ``"base"`` for the base model) that is, or lies
    inside, a name certify writes in ``out``, and an ``out`` that lies inside an input
    folder; one line naming both."""
    outs = {os.path.realpath(out), os.path.abspath(out)}
    for name, path in inputs.items():
        if path is None or not str(path).strip():
            continue
        real = os.path.realpath(path)
        for written in WRITES:
            for form in (written, written + ".partial"):
                if any(_inside(p, os.path.join(o, form)) for p in (real, os.path.abspath(path))
                       for o in outs):
                    raise OutputError(
                        f"{_role(name, path)} lies at {form} in the output folder "
                        f"{shown(out)}, which certify writes: it would be overwritten. Move "
                        f"it out of the folder or give another {option('out')}")
        if os.path.isdir(path) and any(_inside(o, real) for o in outs):
            raise OutputError(f"the output folder {shown(out)} lies inside {_role(name, path)}:"
                              f" certify's files would change an input. Give another "
                              f"{option('out')}")


def _links(out: Path) -> None:
    """Refuse a name certify writes that is a symbolic link."""
    for written in WRITES:
        for form in (written, written + ".partial"):
            p = out / form
            if p.is_symlink():
                raise OutputError(f"{shown(p)}: is a symbolic link (to {shown(os.readlink(p))});"
                                  " certify writes only plain files and folders in its output "
                                  "folder and never follows a link there. Remove the link or "
                                  f"give another {option('out')}")


# the folders certify writes whole (train.save_folder), each marked by STEP_MARK, which lists
# the files it wrote there
FOLDERS = ("prior", "model", "posterior_bound", "posterior_subspace")
STEP_MARK = "certify_step.json"


def files_under(folder: Path) -> list[str]:
    """Every file under ``folder``, as paths relative to it (sorted)."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                  if p.is_file() or p.is_symlink())


def foreign_files(folder: Path) -> list[str]:
    """The files under ``folder`` (one of :data:`FOLDERS`) that certify did not write: all of
    them without its mark; those its mark does not list (a mark of an earlier version lists
    none: nothing is foreign then)."""
    if not folder.is_dir() or folder.is_symlink():
        return []
    present = files_under(folder)
    try:
        listed = read_json(folder / STEP_MARK, 1 << 20, OutputError, "step record",
                           finite=False).get("files")
    except (OutputError, OSError, AttributeError):
        return present
    if not isinstance(listed, list):
        return []
    return [f for f in present if f != STEP_MARK and f not in listed]


def refuse_foreign(out: Path, names: Sequence[str] = FOLDERS) -> None:
    """Refuse a run whose folder holds, inside a folder certify writes whole (``names``), a
    file it did not write there (it would be deleted when that folder is written again)."""
    for name in names:
        extra = foreign_files(out / name)
        if extra:
            raise OutputError(
                f"{shown(out / name)}: holds {one_line(', '.join(extra[:3]), 200)}"
                f"{', …' if len(extra) > 3 else ''}, which certify did not write there; it "
                f"replaces {name}/ whole on a re-run: move the file out of the folder or give "
                f"another {option('out')}")


def remove_written(folder: Path, say: Callable[[str], None] | None = None) -> None:
    """Remove a folder certify wrote (a link or a file of that name: the link only), after
    :func:`refuse_foreign` found nothing of a user's in it; ``say`` tells what was removed."""
    import shutil

    if folder.is_symlink() or folder.is_file():
        folder.unlink()  # never followed: what a link points to is not certify's
    elif folder.exists():
        refuse_foreign(folder.parent, (folder.name,))
        shutil.rmtree(folder)
    else:
        return
    if say is not None:
        say(f"removed {shown(folder)}: an earlier run's, which this run does not certify")


class RunFolder:
    """The output folder of one certify run (module docs): :meth:`fresh` says whether a step
    is reused, :meth:`finish` records it; ``status`` maps each step to "ran" or "reused"."""

    def __init__(self, out: Path, steps: Sequence[str], inputs: Mapping[str, Any],
                 say: Callable[[str], None]):
        self.out, self.order, self.say = Path(out), tuple(steps), say
        self.status: dict[str, str] = {}
        self.ran = False  # once a step runs, every later one runs too (its input changed)
        self._outputs: dict[str, list[str]] = {}
        check_inputs(self.out, inputs)
        if self.out.exists() and not self.out.is_dir():
            raise OutputError(f"{shown(out)}: is a file, not a folder; give a folder as "
                              f"{option('out')}")
        self.manifest = Manifest(self.out, MANIFEST, FORM)
        if (self.out / MANIFEST).exists() or (self.out / MANIFEST).is_symlink():
            _links(self.out)
            self.manifest.load()
            refuse_foreign(self.out)
            return
        try:
            entries = sorted(os.listdir(self.out)) if self.out.is_dir() else []
        except OSError as exc:
            raise OutputError(f"{shown(out)}: cannot be read "
                              f"({exc.strerror or exc.__class__.__name__})") from None
        if entries and not self._legacy(entries):
            held = one_line(", ".join(entries[:3]), 200) + (", …" if len(entries) > 3 else "")
            raise OutputError(
                f"{shown(out)}: is not empty and is not a certify run (no {MANIFEST}; it holds "
                f"{held}); certify writes only into a new or empty folder, or one it made. "
                f"Give another {option('out')}")
        if entries:
            _links(self.out)
            say(f"{shown(out)}: a folder of an earlier certify without recorded hashes: every "
                "step runs again")
        try:
            self.out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(f"{shown(out)}: cannot make the folder "
                              f"({exc.strerror or exc.__class__.__name__})") from None
        self.manifest.save()  # the mark, before any other file

    def _legacy(self, entries: list[str]) -> bool:
        """Is this an earlier certify's folder (its ``steps.json``: step names → keys)?"""
        p = self.out / LEGACY
        if LEGACY not in entries or p.is_symlink() or not p.is_file() \
                or p.stat().st_size > 1 << 16:
            return False
        try:
            done = read_json(p, 1 << 16, OutputError, "record of steps", finite=False)
        except OutputError:
            return False
        return isinstance(done, dict) and bool(done) and set(done) <= set(self.order) \
            and all(isinstance(k, str) for k in done.values())

    def fresh(self, step: str, key: str, outputs: Sequence[Path]) -> bool:
        """Reuse ``step``? Yes when no earlier step ran in this run and the manifest records
        it with ``key`` and the files under ``outputs`` byte for byte; else its record and
        those of the later steps are dropped and the step runs."""
        names = [Path(p).name for p in outputs]
        self._outputs[step] = names
        why = "an earlier step ran" if self.ran else self.manifest.changed(step, key, names)
        if why is None:
            self.status[step] = "reused"
            kept = [n for n in names if (self.out / n).exists()]
            self.say(f"{step}: reusing {', '.join(kept)} (same inputs and settings, files as "
                     "written)")
            return True
        if step in self.manifest.steps:
            self.say(f"{step}: running again ({why})")
        self.manifest.forget(self.order[self.order.index(step):])
        return False

    def finish(self, step: str, key: str) -> None:
        """Record ``step`` with ``key`` and the hashes of the files now under the outputs
        given to :meth:`fresh`."""
        self.manifest.record(step, key, self._outputs[step])
        self.status[step] = "ran"
        self.ran = True
