"""Content hashes for resumable sweeps.

A task's key is the SHA-256 of the checkpoint's bytes (and init's and data's), the formula files'
bytes and the options. A rerun whose key has a stored result reuses it; a changed checkpoint,
formula file or option gives a new key and is recomputed. File digests are remembered in
``DIR/hashes.json`` under (path, size, mtime), so a resumed sweep of huge checkpoints does not
re-read them.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable

KEY_VERSION = 1  # bump when the meaning of a stored result changes
_CHUNK = 1 << 22


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _checkpoint_files(path: Path) -> list[Path]:
    """The files whose bytes define a checkpoint: a folder's files (recursively, hidden ones
    skipped), a sharded index plus its shards, or the file itself."""
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file()
                      and not any(part.startswith(".") for part in p.relative_to(path).parts))
    if path.name.endswith(".index.json"):
        try:
            shards = set(json.loads(path.read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            shards = set()
        return [path] + sorted(path.parent / s for s in shards if (path.parent / s).is_file())
    return [path]


class Hasher:
    """Digests of files and checkpoints, remembered across runs in a JSON file."""

    def __init__(self, memo: Path | None = None) -> None:
        self.memo = memo
        self._known: dict[str, list[Any]] = {}
        if memo is not None and memo.is_file():
            try:
                self._known = dict(json.loads(memo.read_text()))
            except (OSError, ValueError, TypeError):
                self._known = {}

    def file(self, path: Path) -> str:
        st = path.stat()
        key = str(path.resolve())
        hit = self._known.get(key)
        if hit and hit[0] == st.st_size and hit[1] == st.st_mtime_ns:
            return str(hit[2])
        digest = _file_digest(path)
        self._known[key] = [st.st_size, st.st_mtime_ns, digest]
        return digest

    def checkpoint(self, path: str | os.PathLike | None) -> str | None:
        if path is None:
            return None
        p = Path(path)
        h = hashlib.sha256()
        for f in _checkpoint_files(p):
            rel = f.relative_to(p).as_posix() if p.is_dir() else f.name
            h.update(rel.encode() + b"\0" + self.file(f).encode() + b"\n")
        return h.hexdigest()

    def save(self) -> None:
        if self.memo is not None:
            from ..report.io import write_text_atomic

            write_text_atomic(self.memo, json.dumps(self._known, indent=0, sort_keys=True))


def formulas_digest(dirs: Iterable[str | os.PathLike] | None) -> str:
    """SHA-256 over the formula files a registry is loaded from (names and bytes)."""
    from ..registry.registry import default_formula_dirs

    files: list[Path] = []
    for base in (list(dirs) if dirs is not None else default_formula_dirs()):
        b = Path(base)
        files.extend([b] if b.is_file() else sorted(b.glob("*.toml")))
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + hashlib.sha256(f.read_bytes()).hexdigest().encode())
    return h.hexdigest()


def task_key(parts: dict[str, Any]) -> str:
    """The key of one task: a digest of its JSON-encoded parts (sorted keys)."""
    text = json.dumps({"v": KEY_VERSION, **parts}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]
