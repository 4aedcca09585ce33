"""Device selection for the measurement code: ``auto`` (CUDA when available), ``cpu``, ``cuda``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from ..errors import BoundcalcError
from ..words import keyword, option

DTYPE = torch.float64  # every statistic is accumulated in float64


def resolve_device(spec: str | torch.device | None = "auto") -> torch.device:
    """Turn ``auto|cpu|cuda|cuda:N`` (or a ``torch.device``) into a usable device."""
    if isinstance(spec, torch.device):
        spec = str(spec)
    spec = (spec or "auto").strip().lower()
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if spec == "cuda" or spec.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise BoundcalcError(f"device '{spec}': CUDA is not available in this torch build or "
                                 f"machine; use {option('device', 'cpu')} or auto")
        try:
            dev = torch.device(spec)
        except RuntimeError:
            raise BoundcalcError(f"device '{spec}': expected cuda or cuda:N") from None
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise BoundcalcError(f"device '{spec}': only {torch.cuda.device_count()} CUDA "
                                 "device(s) present")
        return dev
    raise BoundcalcError(f"device '{spec}': expected one of auto, cpu, cuda")


def device_name(device: torch.device) -> str:
    """Human-readable device name, including the CUDA card's name (recorded in provenance)."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    return device.type


def work_budget_for(device: torch.device) -> int:
    """The memory budget for work boundcalc sizes itself on ``device``
    (:func:`boundcalc.limits.work_budget`): from the card's free memory
    (``torch.cuda.mem_get_info``) for a CUDA device, from the available RAM otherwise."""
    from ..limits import work_budget

    if device.type == "cuda":
        return work_budget(int(torch.cuda.mem_get_info(device)[0]))
    return work_budget()


class MemoryMeter:
    """A card's memory as work sized from a measured pass needs it (the probe stacks of the
    Hessian trace, the rows per batch of the data side): :meth:`start` before a pass,
    :meth:`peak` after it (bytes above the start), :meth:`room` (bytes a pass may take: the
    budget of :func:`work_budget_for`, counting blocks the allocator holds but does not use
    as free). Reading the peak needs the card idle: :meth:`start` synchronises once."""

    def __init__(self, device: torch.device):
        self.device = device
        self.base = 0

    def start(self) -> None:
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        self.base = torch.cuda.memory_allocated(self.device)

    def peak(self) -> int:
        return int(torch.cuda.max_memory_allocated(self.device)) - self.base

    def room(self) -> int:
        from ..limits import work_budget

        free = int(torch.cuda.mem_get_info(self.device)[0])
        held = (int(torch.cuda.memory_reserved(self.device))
                - int(torch.cuda.memory_allocated(self.device)))
        return work_budget(free + held)


def rows_that_fit(run: Callable[[], object], rows: int, cap: int,
                  meter: MemoryMeter) -> tuple[int, dict[str, int]]:
    """``(n, record)``: the most rows a pass may hold, from one pass ``run()`` over ``rows``
    rows measured by ``meter``: its whole peak counted per row (the part that does not grow
    with the rows too, so the estimate errs on the large side), n · peak / rows ≤ room; at
    least 1, at most ``cap``. ``record``: the rows measured, the peak and the room (bytes)."""
    meter.start()
    run()
    peak = max(1, int(meter.peak()))
    room = int(meter.room())
    n = max(1, min(int(cap), room * int(rows) // peak))
    return n, {"measured_rows": int(rows), "peak_bytes": peak, "room_bytes": room}


def default_precision(device: torch.device) -> str:
    """``fp32`` on a CPU (today's numbers), ``tf32`` on CUDA: TF32 matmuls keep fp32's range
    and round products to a 10-bit mantissa (relative error about 1e-3 per product, far below
    the posterior noise the Monte Carlo averages over), about 4× fp32's speed on an H100; bf16
    (8-bit mantissa) is offered but not the default. See docs/sources/monte_carlo.md."""
    return "tf32" if device.type == "cuda" else "fp32"


def precision_record(name: str, device: torch.device) -> dict[str, str]:
    """What the arithmetic of the data side was, for the stats file's provenance."""
    how = {"fp32": "float32 matmuls (TF32 off)",
           "tf32": ("TF32 matmuls and convolutions (10-bit mantissa products, float32 "
                    "accumulation)" if device.type == "cuda"
                    else "float32 matmuls (a CPU has no TF32: the same arithmetic as fp32)"),
           "bf16": f"bfloat16 autocast on {device.type} (8-bit mantissa matmuls; layer norms, "
                   "softmax and the loss in float32)"}[name]
    return {"data_side": name, "arithmetic": how,
            "hessian": f"fp32 (the Hessian trace and P̂ ignore {keyword('precision')})"}


@contextmanager
def precision(name: str, device: torch.device) -> Iterator[None]:
    """The data side's arithmetic for ``name`` (see :func:`precision_record`); the TF32
    switches of torch are restored on exit. ``name``: fp32, tf32 or bf16, as the options
    that choose it declare (``measure.data.options.PRECISIONS``; checked there)."""
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    tf32 = name == "tf32"
    try:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=name == "bf16"):
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
