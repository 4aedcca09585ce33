"""Checks every loader applies before trusting a file or a tensor (reusable by new loaders).

* :func:`check_archive` — a zip container (torch ``.pt``, numpy ``.npz``) whose declared
  uncompressed size exceeds the memory budget, or that is compressed like a zip bomb, is
  refused before anything is inflated.
* :func:`checked_tensor` — a tensor is dense, has data, does not repeat its storage (stride-0
  views), fits the budget as float64, is finite and not absurdly large; float8 becomes float32.
* :func:`read_small_json` — config and index files: regular files, bounded size, strict JSON.
"""

from __future__ import annotations

import math
import zipfile
from pathlib import Path
from typing import Any

import torch

from ..errors import BoundcalcError, CheckpointError
from ..limits import check_allocation
from ..files import read_json

MAX_JSON_BYTES = 64 << 20
MAX_ZIP_RATIO = 1000  # stored tensors are not compressed; this is a bomb, not a checkpoint
MAX_ABS_WEIGHT = 1e75  # fourth powers (norms of products, squared) stay finite in float64
_FLOAT8 = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                                            "float8_e5m2fnuz", "float8_e8m0fnu") if hasattr(torch, n))


def check_archive(path: Path, err: type[BoundcalcError] = CheckpointError) -> None:
    """Refuse a zip archive that would inflate beyond the memory budget or at a bomb's ratio."""
    try:
        if not zipfile.is_zipfile(path):
            return
        with zipfile.ZipFile(path) as z:
            infos = z.infolist()
    except (OSError, zipfile.BadZipFile, ValueError) as exc:
        raise err(f"{path}: not a readable archive ({exc.__class__.__name__})") from None
    total = sum(i.file_size for i in infos)
    check_allocation(total, f"{path}: archive contents ({len(infos)} members)")
    for i in infos:
        if i.file_size > (1 << 20) and i.file_size > MAX_ZIP_RATIO * max(i.compress_size, 1):
            raise err(f"{path}: member '{i.filename[:80]}' inflates {i.file_size} bytes from "
                      f"{i.compress_size}: a zip bomb, refused")


def checked_tensor(t: torch.Tensor, name: str, source: str) -> torch.Tensor:
    """``t`` if it can be measured safely (float8 is returned as float32), else a one-line
    :class:`CheckpointError` (or :class:`~boundcalc.errors.ResourceError`) naming it."""
    what = f"{source}: tensor '{name}'"
    if t.layout != torch.strided:
        raise CheckpointError(f"{what} is {str(t.layout).replace('torch.', '')}; only dense "
                              f"tensors can be measured")
    if t.device.type == "meta":
        raise CheckpointError(f"{what} is a meta tensor (a shape without data)")
    n = t.numel()
    check_allocation(8.0 * n, f"{what} of shape {tuple(t.shape)} as float64")
    if n and t.untyped_storage().nbytes() < n * t.element_size():
        raise CheckpointError(f"{what} is a view that repeats its storage (a stride-0 "
                              f"expansion of {t.untyped_storage().nbytes()} bytes to {n} "
                              f"values); refused")
    if t.dtype in _FLOAT8:
        t = t.to(torch.float32)
    if n and t.is_floating_point():
        # one pass without a temporary (isfinite + abs + max took 40× longer: 0.17 s of a
        # MiniLM measure); NaN propagates to both ends, ±inf shows at one end
        lo, hi = (float(x) for x in torch.aminmax(t))
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise CheckpointError(f"{what} holds NaN or infinite values")
        amax = max(-lo, hi)
        if amax > MAX_ABS_WEIGHT:
            raise CheckpointError(f"{what} has an entry of magnitude {amax:.3g}; weights beyond "
                                  f"{MAX_ABS_WEIGHT:g} cannot be measured in double precision")
    return t


def read_small_json(path: Path, what: str) -> Any:
    """A config or shard index: a regular file of at most 64 MiB of strict JSON."""
    return read_json(path, MAX_JSON_BYTES, CheckpointError, what)


def tensor_bytes(shape: tuple[int, ...], itemsize: int = 4) -> int:
    """Declared size of a tensor of ``shape``."""
    return itemsize * math.prod(int(s) for s in shape)
