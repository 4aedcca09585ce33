"""Resource limits: the memory budget and the time budget.

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

Reading files safely (``stat`` first, size caps, strict JSON) lives in :mod:`boundcalc.files`.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import threading
from typing import Any, Iterator

from .errors import BoundcalcError, ResourceError, one_line
from .words import option

ENV_BUDGET = "BOUNDCALC_MEMORY_BUDGET"
ENV_TIME = "BOUNDCALC_TIME_BUDGET"
BASE_BUDGET = 1 << 30
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


def duration_text(seconds: float) -> str:
    """'16.7 min', '2.1 h', '45 s': a duration as every budget message says it."""
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
        raise ResourceError(f"{what} would take at least {duration_text(seconds)}, more than the time "
                            f"budget of {duration_text(budget)} (lower it, or raise the budget with "
                            f"{option('time_budget')} or {ENV_TIME})")


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
                            f"{_gb(budget)} (raise it with {option('memory_budget')} or {ENV_BUDGET})")


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
