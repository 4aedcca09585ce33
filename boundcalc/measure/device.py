"""Device selection for the measurement code: ``auto`` (CUDA when available), ``cpu``, ``cuda``."""

from __future__ import annotations

import torch

from ..errors import BoundcalcError

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
                                 "machine; use --device cpu or auto")
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
