"""Reading the files a user names, safely: ``stat`` before opening, size caps, strict JSON.

Every path a user names is checked with ``stat`` (a regular file, or a folder of them) before
anything opens it; FIFOs, devices and symlink loops are refused, nothing is read past a size
limit, and duplicate JSON keys, NaN/Infinity and absurd nesting become one-line errors. Each
helper raises the caller's error class (``err``) so the message lands in the caller's terms.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any, Callable

from ..errors import BoundcalcError

MAX_FOLDER_ENTRIES = 10_000  # files + folders below one folder a user names
MAX_FOLDER_DEPTH = 8
MAX_FORMULA_FILE_BYTES = 2_000_000  # one formula (.toml) file


def check_regular_file(path: str | os.PathLike, err: type[BoundcalcError],
                       what: str = "file") -> os.stat_result:
    """``os.stat`` of ``path``, which must be a regular file (not a FIFO, device, socket or
    folder); symlink loops and unreadable paths become ``err`` with one line."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise err(f"{path}: cannot read {what} ({exc.strerror or exc.__class__.__name__})") \
            from None
    if not stat.S_ISREG(st.st_mode):
        kind = ("a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                else "not a regular file")
        raise err(f"{path}: {what} is {kind}; a regular file is required")
    return st


def input_files(path: str | os.PathLike, err: type[BoundcalcError], what: str = "file", *,
                folder: bool = True, recursive: bool = True,
                max_entries: int = MAX_FOLDER_ENTRIES,
                max_depth: int = MAX_FOLDER_DEPTH) -> list[Path]:
    """The files behind a path a user named, each checked with ``stat`` before anything opens
    it: ``[path]`` for a regular file; for a folder (when ``folder``), every file below it,
    sorted, hidden names (``.*``) skipped (with ``recursive=False`` only the folder's own
    files; its subfolders are skipped). A FIFO, device, socket, dangling
    link or symlink loop anywhere, a folder nested deeper than ``max_depth`` or holding more
    than ``max_entries`` entries is refused with one line of ``err`` naming it."""
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError as exc:
        raise err(f"{p}: cannot read {what} ({exc.strerror or exc.__class__.__name__})") from None
    if not stat.S_ISDIR(st.st_mode) or not folder:
        check_regular_file(p, err, what)
        return [p]
    out: list[Path] = []
    count = 0
    stack = [(p, 0)]
    while stack:
        d, depth = stack.pop()
        try:
            with os.scandir(d) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            raise err(f"{d}: cannot read {what} folder ({exc.strerror or exc.__class__.__name__})") \
                from None
        for e in entries:
            if e.name.startswith("."):
                continue
            count += 1
            if count > max_entries:
                raise err(f"{p}: {what} folder holds more than {max_entries} entries; refused")
            q = Path(e.path)
            try:
                est = os.stat(q)
            except OSError as exc:
                raise err(f"{q}: cannot read {what} ({exc.strerror or exc.__class__.__name__})") \
                    from None
            if stat.S_ISDIR(est.st_mode):
                if not recursive:
                    continue
                if depth + 1 >= max_depth:
                    raise err(f"{q}: {what} folder nested deeper than {max_depth} levels (a "
                              "symlink loop?); refused")
                stack.append((q, depth + 1))
            else:
                check_regular_file(q, err, what)
                out.append(q)
    return sorted(out)


def open_regular(path: str | os.PathLike, err: type[BoundcalcError], what: str = "file"):
    """``path`` opened for binary reading, refused with ``err`` unless it is a regular file.

    Opened without blocking (a FIFO would wait for a writer) and checked again on the open
    descriptor, so a file swapped for a FIFO or device after a ``stat`` is still refused."""
    check_regular_file(path, err, what)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise err(f"{path}: cannot read {what} ({exc.strerror})") from None
    fh = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):  # swapped since the stat above
        fh.close()
        raise err(f"{path}: {what} is not a regular file")
    return fh


def read_limited(path: str | os.PathLike, max_bytes: int, err: type[BoundcalcError],
                 what: str = "file") -> bytes:
    """The bytes of the regular file ``path``, refused with ``err`` if it is larger than
    ``max_bytes`` (checked before reading and while reading, so a file that grows or lies
    about its size is still cut off)."""
    st = check_regular_file(path, err, what)
    if st.st_size > max_bytes:
        raise err(f"{path}: {what} is {st.st_size} bytes, more than the limit of {max_bytes}")
    with open_regular(path, err, what) as fh:
        try:
            data = fh.read(max_bytes + 1)
        except OSError as exc:
            raise err(f"{path}: cannot read {what} ({exc.strerror})") from None
    if len(data) > max_bytes:
        raise err(f"{path}: {what} is larger than the limit of {max_bytes} bytes")
    return data


def _unique_keys(where: str, err: type[BoundcalcError]) -> Callable[[list], dict]:
    def hook(pairs: list[tuple[str, Any]]) -> dict:
        out: dict[str, Any] = {}
        for k, v in pairs:
            if k in out:
                raise err(f"{where}: key {k!r:.60} appears twice in one JSON object")
            out[k] = v
        return out
    return hook


def _no_constant(name: str) -> Any:
    raise ValueError(f"non-finite constant {name} is not allowed")


def as_finite_float(value: Any) -> float | None:
    """``value`` as a finite float when it is an int or a float (never a bool), else None: a
    number too large for double precision (JSON and TOML integers are unbounded; ``float(10**400)``
    raises OverflowError), inf and nan included. For checks that word their own refusal;
    :func:`finite_number` words it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        x = float(value)
    except OverflowError:
        return None
    return x if math.isfinite(x) else None


def finite_number(value: Any, what: str, err: type[BoundcalcError], nonneg: bool = False) -> float:
    """``value`` (an int or float, never a bool or a string) as a finite float, else one line of
    ``err`` naming ``what``; with ``nonneg`` also refused below 0. The one check of a number
    read from a file or a command line."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise err(f"{what}: expected a number, got {type(value).__name__} {value!r:.40}")
    try:
        x = float(value)
    except OverflowError:
        raise err(f"{what}: number too large for double precision") from None
    if not math.isfinite(x):
        raise err(f"{what}: expected a finite number, got {x}")
    if nonneg and x < 0:
        raise err(f"{what}: expected a non-negative number, got {x}")
    return x


def loads_json(text: str | bytes, where: str, err: type[BoundcalcError], *,
               finite: bool = True) -> Any:
    """``json.loads`` that refuses duplicate keys, NaN/Infinity (unless ``finite`` is False:
    a program's own record read back, as ``json.dumps`` wrote it) and absurd nesting with one
    line of ``err`` naming ``where``."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys(where, err),
                          parse_constant=_no_constant if finite else None)
    except BoundcalcError:
        raise
    except RecursionError:
        raise err(f"{where}: not valid JSON (nested too deeply)") from None
    except MemoryError:
        raise err(f"{where}: JSON document too large for memory") from None
    except (ValueError, TypeError) as exc:  # JSONDecodeError, bad UTF-8, int-string limit
        raise err(f"{where}: not valid JSON ({str(exc).splitlines()[0][:120]})") from None


def read_json(path: str | os.PathLike, max_bytes: int, err: type[BoundcalcError],
              what: str = "JSON file", *, finite: bool = True) -> Any:
    """:func:`read_limited` then :func:`loads_json` (``finite``: as there)."""
    return loads_json(read_limited(path, max_bytes, err, what), str(Path(path)), err,
                      finite=finite)
