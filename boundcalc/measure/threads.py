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

from ..words import option

PARALLEL_MAX_HIDDEN = 2048
SMALL_DATA_WIDTH = 512  # the data side of a model no wider than this runs on one thread


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


def widest_layer(model: torch.nn.Module, skip: torch.nn.Module | None = None) -> int:
    """The largest input or output width of the model's Linear, Conv2d and Embedding layers
    (``skip``: a layer left out)."""
    widths = [0]
    for m in model.modules():
        if m is skip:
            continue
        if isinstance(m, torch.nn.Linear):
            widths += [m.in_features, m.out_features]
        elif isinstance(m, torch.nn.Conv2d):
            widths += [m.in_channels, m.out_channels]
        elif isinstance(m, torch.nn.Embedding):
            widths.append(m.embedding_dim)
    return max(widths)


def data_threads(model: torch.nn.Module, device: torch.device,
                 requested: int | None = None) -> int | None:
    """Torch threads for the data side of ``measure`` (forward passes, Hessian-vector
    products): ``requested`` if given, capped at :func:`available_cores` (with a warning
    line); on a CPU one thread for a model no wider than
    :data:`SMALL_DATA_WIDTH`, whose kernels are too short for a thread pool to pay (the digits
    ViT, width 64, measured 3× faster on one thread than on two of a shared 2-core machine);
    otherwise None (torch's default)."""
    if requested is not None:
        cores = available_cores()
        if int(requested) > cores:
            import warnings

            warnings.warn(f"{option('threads', int(requested))}: this process may use {cores} "
                          f"core(s); running {cores} thread(s)", stacklevel=2)
            return cores
        return int(requested)
    if device.type == "cpu" and widest_layer(model, _vocabulary_head(model)) <= SMALL_DATA_WIDTH:
        return 1
    return None


def timed_choice(model: torch.nn.Module, device: torch.device) -> tuple[int, ...] | None:
    """The thread counts to time on the data itself, where no rule of thumb holds (else None):
    a language model narrower than :data:`SMALL_DATA_WIDTH` once its vocabulary head is left
    out, on a CPU with more than one core. Its one long kernel (the head and the blocked loss
    over the vocabulary) runs 1.7× faster on two threads of an idle 2-core machine (the tiny
    GPT-2 of issue 51: 3.5 s against 5.9 s for its 64 rows) and 2–4× *slower* when another
    process holds a core; which of the two holds is a fact of the machine now, so
    ``measure`` times both (:func:`.data.work_plan.faster_threads`) and keeps the faster.
    :func:`data_threads` still answers one thread for it (the certify steps that do not time)."""
    cores = available_cores()
    if device.type != "cpu" or cores < 2:
        return None
    head = _vocabulary_head(model)
    if head is None or widest_layer(model, head) > SMALL_DATA_WIDTH:
        return None
    return (1, cores)


def _vocabulary_head(model: torch.nn.Module) -> torch.nn.Module | None:
    """A language model's output projection onto its vocabulary (``get_output_embeddings``),
    which :func:`data_threads` does not count as the model's width: the tiny GPT-2 of issue 51
    (width 64, vocabulary 50,257) has one long kernel there and short ones everywhere else; on
    two threads of a shared 2-core machine its body ran 4× slower and the blocked losses
    (:func:`.data.lm_loss.scan`) 2–4× slower than on one (``benchmarks/bench_lm_memory.py``)."""
    get = getattr(model, "get_output_embeddings", None)
    try:
        head = get() if callable(get) else None
    except (AttributeError, NotImplementedError):
        return None
    return head if isinstance(head, torch.nn.Module) else None


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
