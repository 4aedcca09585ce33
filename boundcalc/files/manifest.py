"""A hash-recording manifest: one JSON file that marks a folder as a program's own and records,
for each step that wrote into it, the step's key (a digest of its inputs and settings) and the
SHA-256 of every file it wrote.

An output is reused only when :meth:`Manifest.changed` finds the step recorded with the same key
and the files under each of its output names are exactly the recorded ones, byte for byte (a
file edited, added, removed or swapped for another step's output is a change). The manifest is
written through :func:`~.atomic_write.write_text_atomic`, so a killed run leaves the previous
record, whose hashes then disagree with any output that was half replaced.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterable

from ..errors import OutputError, shown
from .atomic_write import write_text_atomic
from .safe_read import read_json

MAX_MANIFEST_BYTES = 16 << 20


def hash_into(digest: Any, path: Path) -> None:
    """Feed one regular file's bytes, read in blocks, to ``digest`` (a ``hashlib`` object)."""
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)


def sha256_of(path: Path) -> str:
    """SHA-256 of one regular file's bytes, read in blocks."""
    digest = hashlib.sha256()
    hash_into(digest, path)
    return digest.hexdigest()


def output_hashes(folder: Path, names: Iterable[str]) -> dict[str, str]:
    """``{relative path: SHA-256}`` of every regular file an output name of ``folder`` holds:
    the file itself, or each file under the sub-folder (paths ``/``-separated, relative to
    ``folder``). A name that is missing, or neither a file nor a folder, holds no file."""
    out: dict[str, str] = {}
    for name in names:
        p = folder / name
        if p.is_symlink():
            continue  # never followed: its target is not an output
        found = sorted(f for f in p.rglob("*") if f.is_file() and not f.is_symlink()) \
            if p.is_dir() else ([p] if p.is_file() else [])
        for f in found:
            out[f.relative_to(folder).as_posix()] = sha256_of(f)
    return out


class Manifest:
    """The manifest ``folder/name`` of the program whose mark is ``form``: ``steps`` maps each
    finished step to ``{"key": ..., "files": {relative path: SHA-256}}``."""

    def __init__(self, folder: Path, name: str, form: str):
        self.folder = Path(folder)
        self.path = self.folder / name
        self.form = form
        self.steps: dict[str, dict[str, Any]] = {}

    def load(self) -> None:
        """Read the record; a file that is not this program's manifest is refused (it is
        never taken for an empty record)."""
        doc = read_json(self.path, MAX_MANIFEST_BYTES, OutputError, "manifest")
        steps = doc.get("steps") if isinstance(doc, dict) else None
        ok = isinstance(doc, dict) and doc.get("format") == self.form and isinstance(steps, dict)
        ok = ok and all(isinstance(r, dict) and isinstance(r.get("key"), str)
                        and isinstance(r.get("files"), dict) for r in steps.values())
        if not ok:
            raise OutputError(f"{shown(self.path)}: not a manifest of {self.form} (its record "
                              "of what was written cannot be read); nothing there is reused. "
                              "Remove the folder or give another one")
        self.steps = steps

    def save(self) -> None:
        """Write the record atomically."""
        write_text_atomic(self.path, json.dumps({"format": self.form, "steps": self.steps},
                                                indent=1, sort_keys=True) + "\n")

    def changed(self, step: str, key: str, names: Iterable[str]) -> str | None:
        """None when ``step`` is recorded with ``key`` and the files under ``names`` are the
        recorded ones byte for byte; else why not, in a few words."""
        rec = self.steps.get(step)
        if rec is None:
            return "not finished before"
        if rec["key"] != key:
            return "its inputs or settings changed"
        now = output_hashes(self.folder, names)
        then = rec["files"]
        for rel in sorted(set(now) | set(then)):
            if rel not in now:
                return f"{rel} is missing"
            if rel not in then:
                return f"{rel} was not written by it"
            if now[rel] != then[rel]:
                return f"{rel} is not the file it wrote (SHA-256 {now[rel][:12]}…, recorded " \
                       f"{str(then[rel])[:12]}…)"
        return None

    def record(self, step: str, key: str, names: Iterable[str]) -> None:
        """Record ``step`` as finished with ``key`` and the hashes of the files under
        ``names`` now, and save."""
        self.steps[step] = {"key": key, "files": output_hashes(self.folder, names)}
        self.save()

    def forget(self, steps: Iterable[str]) -> None:
        """Drop the records of ``steps`` and save (before a step's outputs are replaced: a run
        killed meanwhile leaves them, and every step that read them, unrecorded)."""
        dropped = [s for s in list(steps) if self.steps.pop(s, None) is not None]
        if dropped:
            self.save()
