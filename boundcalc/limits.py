"""Resource limits: the memory budget, time limits and bounded, safe reading of input files.

Every input whose *declared* size (a tensor's shape, a grid's length, an index range) would
make boundcalc allocate more than the memory budget is refused before anything is allocated.
The budget is 1 GiB plus the largest tensor of the model being measured; set it with the
global option ``--memory-budget`` or the environment variable ``BOUNDCALC_MEMORY_BUDGET``
(bytes, or a number with a K/M/G/T suffix).

Work that boundcalc sizes itself (Monte Carlo draws and their row chunks, Hessian probe
stacks) is held to :func:`work_budget` instead: the budget the user set, else the larger of
the default budget and a share of what the machine has free: half of the card's free memory
(``torch.cuda.mem_get_info``) for work on a card, a quarter of the available RAM for work on
the host (which also holds the model, the data and, on a shared machine, other processes).
Sizes declared by input files keep the fixed default, so what a file declares beyond it is
still refused before anything is allocated.

Work that can be counted before it starts (Monte Carlo draws, Hessian probes, bootstrap
resamples; see :mod:`boundcalc.plan`) is also held to a *time budget*: refused up front
when even an optimistic estimate exceeds it. Default one hour; set it with the global option
``--time-budget`` or ``BOUNDCALC_TIME_BUDGET`` (seconds, or a number with s/m/h/d).

The file helpers (:func:`input_files`, :func:`check_regular_file`, :func:`open_regular`,
:func:`read_limited`, :func:`loads_json`) are meant for every loader: every path a user names
is checked with ``stat`` (a regular file, or a folder of them) before anything opens it; they
refuse FIFOs, devices and symlink loops, never read past a size limit, and turn duplicate JSON
keys and absurd nesting into one-line errors.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import stat
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

from .errors import BoundcalcError, ResourceError, one_line

ENV_BUDGET = "BOUNDCALC_MEMORY_BUDGET"
ENV_TIME = "BOUNDCALC_TIME_BUDGET"
BASE_BUDGET = 1 << 30
MAX_FOLDER_ENTRIES = 10_000  # files + folders below one folder a user names
MAX_FOLDER_DEPTH = 8
MAX_FORMULA_FILE_BYTES = 2_000_000  # one formula (.toml) file
DEFAULT_TIME_BUDGET = 3600.0
_state: dict[str, int | float | None] = {"override": None, "largest_tensor": 0, "time": None}
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?(?:e[+-]?[0-9]+)?)\s*([smhd]?)\s*$", re.IGNORECASE)
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``"1.5G"`` → 1610612736; ``"123"`` → 123 bytes. Raises :class:`BoundcalcError`."""
    m = _SIZE.match(str(text))
    if not m:
        raise BoundcalcError(f"memory budget {str(text)[:40]!r}: expected bytes or a number "
                             f"with K/M/G/T, e.g. 2G")
    unit = (m.group(2) or "b")[0].lower()
    value = float(m.group(1)) * 1024 ** "bkmgt".index(unit)
    if not 1 <= value < 2 ** 62:
        raise BoundcalcError(f"memory budget {str(text)[:40]!r} is out of range")
    return int(value)


def parse_duration(text: str) -> float:
    """``"90"`` or ``"90s"`` → 90.0; ``"10m"``, ``"2h"``, ``"1d"``. Raises :class:`BoundcalcError`."""
    m = _DURATION.match(str(text))
    if not m:
        raise BoundcalcError(f"time budget {one_line(str(text))[:40]!r}: expected seconds or a "
                             f"number with s/m/h/d, e.g. 2h")
    value = float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[
        m.group(2).lower()]
    if not 0 < value <= 10 * 365 * 86400:
        raise BoundcalcError(f"time budget {one_line(str(text))[:40]!r} is out of range "
                             "(more than 0 s, at most 10 years)")
    return value


def set_time_budget(seconds: float | None) -> None:
    """Fix the time budget (seconds) for this process; ``None`` returns to the default."""
    _state["time"] = seconds


def time_budget() -> float:
    """The time budget in seconds: the override, else ``BOUNDCALC_TIME_BUDGET``, else 1 h."""
    if _state["time"] is not None:
        return float(_state["time"])
    env = os.environ.get(ENV_TIME)
    if env:
        return parse_duration(env)
    return DEFAULT_TIME_BUDGET


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds) or seconds > 1e12:
        return "longer than 30,000 years"
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


def check_time(seconds: float, what: str) -> None:
    """Refuse work whose estimated (optimistic) duration exceeds the time budget, with one
    :class:`ResourceError` line naming ``what`` (the option to lower)."""
    budget = time_budget()
    if not (seconds <= budget):  # also catches NaN
        raise ResourceError(f"{what} would take at least {_duration(seconds)}, more than the time "
                            f"budget of {_duration(budget)} (lower it, or raise the budget with "
                            f"--time-budget or {ENV_TIME})")


def set_memory_budget(nbytes: int | None) -> None:
    """Fix the budget (bytes) for this process; ``None`` returns to the default."""
    _state["override"] = nbytes


def note_tensor_bytes(nbytes: int) -> None:
    """Record a model tensor's size: the default budget grows by the largest one."""
    _state["largest_tensor"] = max(int(_state["largest_tensor"] or 0), int(nbytes))


def memory_budget() -> int:
    """The budget in bytes: the override, else the environment variable, else
    1 GiB + the largest tensor seen."""
    if _state["override"] is not None:
        return int(_state["override"])
    env = os.environ.get(ENV_BUDGET)
    if env:
        return parse_size(env)
    return BASE_BUDGET + int(_state["largest_tensor"] or 0)


def explicit_memory_budget() -> int | None:
    """The budget the user set (``--memory-budget`` or the environment variable), else None
    (code that sizes device-memory work may then use the device's own free memory)."""
    if _state["override"] is not None:
        return int(_state["override"])
    env = os.environ.get(ENV_BUDGET)
    return parse_size(env) if env else None


DEVICE_SHARE = 0.5  # of a card's free memory, for work on the card
HOST_SHARE = 0.25  # of the available RAM, for work on the host


def available_ram() -> int | None:
    """Bytes of RAM available to new work (``MemAvailable`` of /proc/meminfo, else the
    physical pages free by ``sysconf``); None where neither is known."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return None


def work_budget(device_free: int | None = None) -> int:
    """The memory budget for work boundcalc sizes itself (see the module docstring): the
    explicit budget when set; else the larger of :func:`memory_budget` and
    ``DEVICE_SHARE × device_free`` (bytes free on the card doing the work) or, for host work
    (``device_free`` None), ``HOST_SHARE ×`` :func:`available_ram`."""
    explicit = explicit_memory_budget()
    if explicit is not None:
        return explicit
    base = memory_budget()
    if device_free is not None:
        return max(base, int(device_free * DEVICE_SHARE))
    ram = available_ram()
    return max(base, int(ram * HOST_SHARE)) if ram else base


def _gb(n: float) -> str:
    return f"{n / 2 ** 30:.3g} GiB" if n < 2 ** 80 else f"about 2^{math.log2(n):.0f} bytes"


def check_allocation(nbytes: float, what: str, budget: int | None = None) -> None:
    """Refuse an allocation of ``nbytes`` (a declared size, before allocating) above the
    budget (default :func:`memory_budget`), with a one-line :class:`ResourceError` naming
    ``what``."""
    budget = memory_budget() if budget is None else budget
    if not (nbytes <= budget):  # also catches NaN
        raise ResourceError(f"{what} would need {_gb(nbytes)}, more than the memory budget of "
                            f"{_gb(budget)} (raise it with --memory-budget or {ENV_BUDGET})")


@contextlib.contextmanager
def time_limit(seconds: float, what: str,
               err: type[BoundcalcError] = ResourceError) -> Iterator[None]:
    """Raise ``err`` (default :class:`ResourceError`) if the body runs longer than ``seconds`` (wall clock).

    Uses SIGALRM, so it is enforced in the main thread only (elsewhere it is a no-op) and
    never replaces an alarm someone else set."""
    usable = (threading.current_thread() is threading.main_thread()
              and hasattr(signal, "setitimer")
              and signal.getitimer(signal.ITIMER_REAL)[0] == 0
              and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None))
    if not usable:
        yield
        return

    def on_alarm(signum: int, frame: Any) -> None:
        raise err(f"{what} took longer than {seconds:g} s; refused")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ---- files -------------------------------------------------------------------------------

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


def loads_json(text: str | bytes, where: str, err: type[BoundcalcError]) -> Any:
    """``json.loads`` that refuses duplicate keys, NaN/Infinity and absurd nesting with one
    line of ``err`` naming ``where``."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys(where, err),
                          parse_constant=_no_constant)
    except BoundcalcError:
        raise
    except RecursionError:
        raise err(f"{where}: not valid JSON (nested too deeply)") from None
    except MemoryError:
        raise err(f"{where}: JSON document too large for memory") from None
    except (ValueError, TypeError) as exc:  # JSONDecodeError, bad UTF-8, int-string limit
        raise err(f"{where}: not valid JSON ({str(exc).splitlines()[0][:120]})") from None


def read_json(path: str | os.PathLike, max_bytes: int, err: type[BoundcalcError],
              what: str = "JSON file") -> Any:
    """:func:`read_limited` then :func:`loads_json`."""
    return loads_json(read_limited(path, max_bytes, err, what), str(Path(path)), err)
