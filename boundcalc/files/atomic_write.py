"""Writing output files safely: never a half-written file, never a replaced device or folder.

* A regular file (or a new name) is written through a temporary file in the same folder and
  ``os.replace``: a crash or a full disk leaves the old file intact.
* A symlink is followed: its *target* is replaced atomically and the link stays a link.
* A character device or FIFO (``/dev/null``, ``/dev/stdout``, a pipe) is written directly,
  never renamed over; a folder is refused.
* Every failure (full disk, a parent that is a file, a name longer than NAME_MAX, an empty
  name, no permission) is one :class:`~boundcalc.errors.OutputError` line.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from ..errors import OutputError, one_line


def _fail(path: Path | str, exc: OSError) -> OutputError:
    reason = exc.strerror or exc.__class__.__name__
    if exc.errno == errno.ENOSPC:
        reason = "no space left on device; nothing was replaced"
    return OutputError(f"{one_line(str(path))[:200]}: cannot write ({reason})")


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` as described in the module docs."""
    if not str(path).strip():
        raise OutputError("output file name is empty")
    path = Path(path)
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
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the usual file mode
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
