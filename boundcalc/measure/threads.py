"""How ``measure`` uses the CPU cores without oversubscribing them.

A BLAS/OpenMP pool of two spinning threads per call turns a 17 ms SVD of a 384 × 384 matrix into
2–4 s when another process holds a core (each parallel region waits for its slowest thread).
So matrices up to ``PARALLEL_MAX_HIDDEN`` run with **one** BLAS thread per call, and independent
layers run side by side in a thread pool (torch releases the GIL inside its kernels), one worker
per available core. Larger matrices (hidden size above the limit) keep the BLAS pool and go one
layer at a time: there, one call is long enough that the pool's synchronisation is cheap.
CUDA work is always serial (the GPU parallelises inside each call).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch

PARALLEL_MAX_HIDDEN = 2048


def available_cores() -> int:
    """Cores this process may run on (the affinity mask, not the machine's total)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def layer_workers(hidden: int, device: torch.device) -> int:
    """Layers measured at once: one per core for small matrices on a CPU, else 1."""
    if device.type != "cpu" or hidden > PARALLEL_MAX_HIDDEN:
        return 1
    return available_cores()


@contextmanager
def blas_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``n`` torch/BLAS threads (None: leave as is); restore afterwards."""
    if n is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
