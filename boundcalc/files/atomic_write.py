"""Writing output files safely: never a half-written file, never a replaced device or folder.

* A regular file (or a new name) is written through a temporary file in the same folder and
  ``os.replace``: a crash or a full disk leaves the old file intact.
* A symlink is followed: its *target* is replaced atomically and the link stays a link.
* A character device or FIFO (``/dev/null``, ``/dev/stdout``, a pipe) is written directly,
  never renamed over; a folder is refused.
* Every failure (full disk, a parent that is a file, a name longer than NAME_MAX, an empty
  name, no permission) is one :class:`~boundcalc.errors.OutputError` line.
* **The output gate** (:func:`check_output`, run by every write here): inside a run scope
  (:func:`run_scope`, opened by the CLI for each command), an output that is an input of the same
  run (same real path, or same inode: a hard link or a symlink counts), or lies inside an input
  folder, is refused naming both paths; so is an existing file without write permission, by its
  mode bits (root bypasses ``os.access``, so a 0444 file would otherwise be replaced). A
  replaced file keeps its mode. Inputs are the paths named on the command line (other than the
  values of the output options) and every file a reader notes with :func:`note_input`.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import OutputError, one_line


def _fail(path: Path | str, exc: OSError) -> OutputError:
    reason = exc.strerror or exc.__class__.__name__
    if exc.errno == errno.ENOSPC:
        reason = "no space left on device; nothing was replaced"
    return OutputError(f"{one_line(str(path))[:200]}: cannot write ({reason})")


# the inputs of the current run: (shown name, real path, (st_dev, st_ino) or None, is a folder);
# None outside a run scope (the Python API writes where it is told)
_inputs: list[tuple[str, str, tuple[int, int] | None, bool]] | None = None


@contextmanager
def run_scope(paths: Iterable[str | os.PathLike] = ()) -> Iterator[None]:
    """One run: outputs written inside it are checked against ``paths`` and every path given
    to :func:`note_input` meanwhile (nested scopes share the outer one's inputs)."""
    global _inputs
    outer = _inputs
    _inputs = list(outer) if outer is not None else []
    try:
        for p in paths:
            note_input(p)
        yield
    finally:
        _inputs = outer


def note_input(path: str | os.PathLike) -> None:
    """Record ``path`` (a file or a folder that exists) as an input of the current run."""
    if _inputs is None:
        return
    try:
        if not str(path).strip() or not os.path.exists(path):
            return
        st = os.stat(path)
        real = os.path.realpath(path)
    except (OSError, ValueError):
        return
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        return  # a device or a pipe (/dev/stdin) is not replaced by a write
    _inputs.append((str(path), real, (st.st_dev, st.st_ino), stat.S_ISDIR(st.st_mode)))


def _inside(child: str, folder: str) -> bool:
    return child == folder or child.startswith(folder.rstrip(os.sep) + os.sep)


def check_output(path: str | os.PathLike) -> None:
    """The output gate (see the module docs): refuse ``path`` when it is, or lies inside, an
    input of the current run, or is an existing file without write permission."""
    from ..errors import shown

    try:
        real = os.path.realpath(path)
        st = os.stat(path) if os.path.exists(path) else None
    except (OSError, ValueError):
        return  # the write itself reports it
    if st is not None and stat.S_ISREG(st.st_mode):
        writable = (st.st_mode & 0o222) != 0 if os.geteuid() == 0 else os.access(path, os.W_OK)
        if not writable:
            raise OutputError(f"{shown(path)}: the file is read-only (mode "
                              f"{stat.S_IMODE(st.st_mode):04o}); not replaced. Give another "
                              "output path or make it writable")
    for name, in_real, ident, is_dir in _inputs or ():
        same = st is not None and ident == (st.st_dev, st.st_ino)
        if same or real == in_real:
            raise OutputError(f"{shown(path)}: is the input {shown(name)} of this run (the same "
                              "file); an output never replaces an input. Give another output path")
        if is_dir and _inside(real, in_real):
            raise OutputError(f"{shown(path)}: lies inside the input folder {shown(name)} of "
                              "this run; an output never changes an input. Give a path outside it")


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` as described in the module docs."""
    if not str(path).strip():
        raise OutputError("output file name is empty")
    path = Path(path)
    check_output(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:  # a symlink loop, a parent that is a file, a name too long
        raise _fail(path, exc) from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise OutputError(f"{one_line(str(path))[:200]}: is a folder; give a file name")
    if st is not None and not stat.S_ISREG(st.st_mode):
        _write_direct(path, data)
        return path
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name[:64]}.", suffix=".tmp",
                                   dir=target.parent)
    except OSError as exc:
        raise _fail(path, exc) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        # mkstemp creates 0600: a replaced file keeps its mode, a new one gets the usual mode
        mode = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~umask
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise _fail(path, exc) from None
        raise
    return path


def _write_direct(path: Path, data: bytes) -> None:
    """A device or FIFO: write in place (a FIFO without a reader is refused, not waited on)."""
    try:
        fd = os.open(path, os.O_WRONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise _fail(path, exc) from None
    try:
        os.set_blocking(fd, True)
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    except OSError as exc:
        raise _fail(path, exc) from None
    finally:
        os.close(fd)


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` with :func:`write_bytes_atomic`."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_json_record(path: str | os.PathLike, value: object) -> Path:
    """Write ``value`` as JSON (indented by one, anything else as its ``str``) with
    :func:`write_text_atomic`: a program's own record, read back with
    ``read_json(..., finite=False)``."""
    import json

    return write_text_atomic(path, json.dumps(value, indent=1, default=str))
