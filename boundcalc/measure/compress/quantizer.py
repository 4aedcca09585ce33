"""The quantizer: a vector of floats to at most K levels, and the codebook as it is stored.

Contract: :func:`quantize` returns integer codes into a sorted codebook already rounded to its
stored precision (float16 or float32), so ``codebook[codes]`` is exactly the vector the decoder
rebuilds; levels equal after rounding are merged. One-line :class:`BoundcalcError` on an empty or
non-finite vector, a bad level count, quantizer or precision. Imports nothing of the package but
the error class.
"""

from __future__ import annotations

import numpy as np

from ...errors import BoundcalcError
from ...words import option
from .options import CODEBOOK_BITS, QUANTIZERS  # declared with the options that choose them


def _round_codebook(values: np.ndarray, codebook_bits: int) -> np.ndarray:
    if codebook_bits == 16:
        out = values.astype(np.float16)
        if not np.all(np.isfinite(out)):
            raise BoundcalcError("quantizer: a level does not fit in float16; use "
                                 f"{option('codebook_bits', 32)}")
        return out.astype(np.float64)
    if codebook_bits == 32:
        return values.astype(np.float32).astype(np.float64)
    raise BoundcalcError(f"codebook precision must be 16 or 32 bits, got {codebook_bits}")


def _assign(x: np.ndarray, codebook: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest level for each value; returns (codes into the sorted codebook, sorted codebook)."""
    cb = np.unique(codebook)
    if cb.size == 1:
        return np.zeros(x.size, dtype=np.int64), cb
    mids = (cb[1:] + cb[:-1]) / 2
    return np.searchsorted(mids, x), cb


def quantize(x: np.ndarray, levels: int, kind: str = "uniform", codebook_bits: int = 16,
             iters: int = 25) -> tuple[np.ndarray, np.ndarray]:
    """Quantize a 1-D float array to at most ``levels`` values.

    Returns ``(codes, codebook)``: integer codes into a sorted codebook already rounded to
    ``codebook_bits``; ``codebook[codes]`` is the decoded vector. Levels that end up equal after
    rounding are merged (the codebook may be shorter than ``levels``).
    """
    x = np.asarray(x, dtype=np.float64).ravel()
    if x.size == 0:
        raise BoundcalcError("quantizer: nothing to code (no selected weights)")
    if not np.all(np.isfinite(x)):
        raise BoundcalcError("quantizer: the coded weights contain NaN or infinite values")
    if int(levels) != levels or levels < 1:
        raise BoundcalcError(f"quantizer: levels must be a positive integer, got {levels}")
    if kind not in QUANTIZERS:
        raise BoundcalcError(f"quantizer must be one of {', '.join(QUANTIZERS)}, got '{kind}'")
    lo, hi = float(x.min()), float(x.max())
    distinct = np.unique(x)
    if distinct.size <= levels:  # already quantized (e.g. after codebook fine-tuning): lossless
        centres = distinct
    elif kind == "uniform" or levels == 1 or lo == hi:
        centres = np.linspace(lo, hi, int(levels)) if levels > 1 else np.array([x.mean()])
    else:
        centres = np.quantile(x, (np.arange(levels) + 0.5) / levels)
        for _ in range(iters):  # Lloyd's algorithm in 1-D
            codes, cb = _assign(x, centres)
            sums = np.bincount(codes, weights=x, minlength=cb.size)
            counts = np.bincount(codes, minlength=cb.size)
            new = np.where(counts > 0, sums / np.maximum(counts, 1), cb)
            if new.size == centres.size and np.allclose(new, centres, rtol=0, atol=0):
                break
            centres = new
    codes, cb = _assign(x, _round_codebook(np.asarray(centres), codebook_bits))
    return codes, cb
