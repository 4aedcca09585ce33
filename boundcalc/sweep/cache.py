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
import re
from pathlib import Path
from typing import Any, Iterable

from ..errors import BoundcalcError, FormulaError
from ..files import MAX_FORMULA_FILE_BYTES, input_files, open_regular, read_json, read_limited

KEY_VERSION = 1  # bump when the meaning of a stored result changes
_CHUNK = 1 << 22
MAX_INDEX_BYTES = 64 << 20
MAX_MEMO_BYTES = 256 << 20


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open_regular(path, BoundcalcError, "checkpoint file") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _checkpoint_files(path: Path) -> list[Path]:
    """The files whose bytes define a checkpoint: a folder's files (recursively, hidden ones
    skipped), a sharded index plus its shards, or the file itself; each checked with ``stat``
    (:func:`~boundcalc.files.input_files`: a FIFO or device is refused, never read)."""
    if path.is_dir():
        return input_files(path, BoundcalcError, "checkpoint file")
    if path.name.endswith(".index.json"):
        try:
            shards = {str(s) for s in read_json(path, MAX_INDEX_BYTES, BoundcalcError,
                                                "shard index")["weight_map"].values()}
        except (BoundcalcError, KeyError, TypeError, AttributeError):
            shards = set()
        return [path] + sorted(path.parent / s for s in shards if (path.parent / s).is_file())
    return input_files(path, BoundcalcError, "checkpoint file", folder=False)


def _valid_memo(entry: Any) -> bool:
    return (isinstance(entry, list) and len(entry) == 3
            and all(isinstance(v, int) and not isinstance(v, bool) for v in entry[:2])
            and isinstance(entry[2], str) and re.fullmatch(r"[0-9a-f]{64}", entry[2]) is not None)


class Hasher:
    """Digests of files and checkpoints, remembered across runs in a JSON file.

    The memo is validated when read back: an entry of the wrong shape (a damaged or
    hand-edited ``hashes.json``) is dropped, so its file is hashed again."""

    def __init__(self, memo: Path | None = None) -> None:
        self.memo = memo
        self._known: dict[str, list[Any]] = {}
        if memo is not None and os.path.lexists(memo):
            try:
                doc = read_json(memo, MAX_MEMO_BYTES, BoundcalcError, "sweep hashes")
            except BoundcalcError:
                doc = {}
            if isinstance(doc, dict):
                self._known = {str(k): v for k, v in doc.items() if _valid_memo(v)}

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
            from ..files import write_text_atomic

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
        raw = read_limited(f, MAX_FORMULA_FILE_BYTES, FormulaError, "formula file")
        h.update(f.name.encode() + b"\0" + hashlib.sha256(raw).hexdigest().encode())
    return h.hexdigest()


def task_key(parts: dict[str, Any]) -> str:
    """The key of one task: a digest of its JSON-encoded parts (sorted keys)."""
    text = json.dumps({"v": KEY_VERSION, **parts}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]
