"""Per-matrix norms and spectra (float64), with a fast path for per-head products.

A per-head product ``Aᵀ B`` with ``A, B ∈ R^{d_h×N}`` has rank ≤ d_h. Its nonzero singular values
are those of a small core: thin QR ``Aᵀ = Q_A R_A`` and ``Bᵀ = Q_B R_B`` give
``Aᵀ B = Q_A (R_A R_Bᵀ) Q_Bᵀ``, so only the d_h × d_h matrix ``R_A R_Bᵀ`` needs an SVD. Heads are
batched. Only these ≤ d_h values are stored; the other N − d_h singular values are exactly zero.

Numerical rank follows spectrum_adaptive.md §4.3:
``#{σ_i > 1e-10 · min(rows, cols) · max(σ_1, 1)}`` with min(rows, cols) of the full matrix.

Each statistic is first a tensor on the matrix's device (:func:`matrix_parts`,
:func:`product_parts`) and becomes a float in :func:`finish`. The per-matrix functions
(:func:`matrix_stats`, :func:`product_stats`) finish at once; the CUDA layer path collects a
whole layer's parts and reads them back with one copy (:func:`to_host`), since every
``float(cuda_tensor)`` synchronises with the host.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

RANK_TOL = 1e-10
_CHUNK_BYTES = 64 * 2**20  # per-head products are formed in chunks of at most this size
# (each chunk has two same-size temporaries in _norms: 64 MiB keeps a layer of N = 1024
# under ~0.2 GB of transients; a 12-head N = 384 layer still fits in one chunk)
_STACK_BYTES = 256 * 2**20  # svdvals_many stacks at most this much per call (the stack is a
# copy; a matrix this large is long enough per SVD that its one host synchronisation is cheap)

Parts = dict[str, Any]  # one matrix's statistics as tensors (on its device) before finish()


def numerical_rank(sv: np.ndarray | torch.Tensor, k: int | None = None) -> int:
    """Count ``σ_i > 1e-10 · k · max(σ_1, 1)``; ``k`` defaults to the number of values given."""
    s = np.asarray(sv.cpu() if isinstance(sv, torch.Tensor) else sv, dtype=np.float64)
    if s.size == 0:
        return 0
    k = s.size if k is None else k
    return int(np.count_nonzero(s > RANK_TOL * k * max(float(s.max()), 1.0)))


def schatten_sum(singular_values: Sequence[float] | np.ndarray, p: float,
                 rank: int | None = None, k: int | None = None) -> float:
    """``S_p = Σ σ_i^p`` for p > 0; for p = 0 the numerical rank (``rank`` if given).

    Pass ``k`` = min(rows, cols) of the full matrix when only its nonzero values are stored.
    """
    s = np.asarray(singular_values, dtype=np.float64)
    if p < 0:
        raise ValueError(f"schatten_sum: p must be >= 0, got {p}")
    if p == 0:
        return float(rank if rank is not None else numerical_rank(s, k))
    return float(np.sum(s[s > 0] ** p))


def schatten_grid(sv: Sequence[float] | np.ndarray, grid: Sequence[float],
                  rank: int | None = None, k: int | None = None) -> np.ndarray:
    """``S_p`` for every p of ``grid`` (same conventions as :func:`schatten_sum`)."""
    s = np.asarray(sv, dtype=np.float64)
    g = np.asarray(grid, dtype=np.float64).reshape(-1)
    if np.any(g < 0):
        raise ValueError(f"schatten_sum: p must be >= 0, got {float(g[g < 0][0])}")
    out = np.empty(g.size, dtype=np.float64)
    zero = g == 0
    if zero.any():
        out[zero] = float(rank if rank is not None else numerical_rank(s, k))
    if not zero.all():  # one (grid × values) power table; row sums as in schatten_sum
        out[~zero] = np.sum(s[s > 0][None, :] ** g[~zero, None], axis=1)
    return out


def _norms(W: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(frobenius, norm_21 = sum of column l2 norms, norm_11) of a matrix or a batch."""
    col_sq = W.square().sum(-2)  # one pass gives both; a strided vector_norm is ~3x slower
    return col_sq.sum(-1).sqrt(), col_sq.sqrt().sum(-1), W.abs().sum((-2, -1))


def _from_sv(sv: torch.Tensor, fro: torch.Tensor, n21: torch.Tensor, n11: torch.Tensor,
             k: int) -> dict[str, float]:
    s = sv.double().cpu().numpy()
    spectral = float(s[0]) if s.size else 0.0
    return {"spectral": spectral, "frobenius": float(fro), "nuclear": float(s.sum()),
            "norm_21": float(n21), "norm_11": float(n11), "rank": float(numerical_rank(s, k)),
            "stable_rank": float(fro) ** 2 / spectral**2 if spectral > 0 else 0.0}


def svdvals(W: torch.Tensor) -> torch.Tensor:
    """Singular values, descending; computed on the tall orientation (about 2x faster in LAPACK).

    A clearly tall matrix (rows ≥ 11/6 · cols, LAPACK's own crossover for this path) is first
    reduced to its square R factor: gesdd does the same QR internally, so the values are the
    same, but the explicit R skips its extra copies (about 15 % faster on FFN matrices).
    """
    T = W if W.shape[-2] >= W.shape[-1] else W.transpose(-2, -1)
    if 6 * T.shape[-2] >= 11 * T.shape[-1] and T.shape[-1] > 0:
        T = torch.linalg.qr(T, mode="r")[1]
    return _svdvals(T)


def _svdvals(T: torch.Tensor) -> torch.Tensor:
    # On CUDA, torch's default float64 driver (Jacobi, gesvdj) was both slower and less accurate
    # than QR-based gesvd on an H200 (768x768: 55 vs 41 ms, 2e-13 vs 6e-15 relative to LAPACK;
    # 12 batched 64x64 cores: 17 vs 5 ms). gesvda is faster still but approximate (Gram-based).
    if T.is_cuda:
        return torch.linalg.svdvals(T, driver="gesvd")
    return torch.linalg.svdvals(T)


def svdvals_many(mats: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """:func:`svdvals` of many matrices; those whose tall orientation has the same shape go
    through one batched call (up to ``_STACK_BYTES`` per call), so on CUDA a group costs one
    host synchronisation instead of one per matrix."""
    groups: dict[tuple[int, ...], list[tuple[int, torch.Tensor]]] = {}
    for i, W in enumerate(mats):
        T = W if W.shape[-2] >= W.shape[-1] else W.transpose(-2, -1)
        groups.setdefault(tuple(T.shape), []).append((i, T))
    out: list[torch.Tensor] = [torch.empty(0)] * len(mats)
    for group in groups.values():
        T0 = group[0][1]
        step = max(1, _STACK_BYTES // max(1, T0.numel() * T0.element_size()))
        for lo in range(0, len(group), step):
            chunk = group[lo:lo + step]
            for (i, _), sv in zip(chunk, svdvals(torch.stack([T for _, T in chunk]))):
                out[i] = sv
    return out


def matrix_parts(W: torch.Tensor, sv: torch.Tensor | None = None,
                 W0: torch.Tensor | None = None, dist_sv: torch.Tensor | None = None) -> Parts:
    """The tensors of :func:`matrix_stats` on W's device (no host synchronisation beyond the
    SVDs'); ``dist_sv``: the singular values of ``W − W0`` when already known."""
    W = W.double()
    if sv is None:
        sv = svdvals(W)
    fro, n21, n11 = _norms(W)
    parts: Parts = {"sv": sv, "fro": fro, "n21": n21, "n11": n11, "k": min(W.shape)}
    if W0 is not None:
        D = W - W0.double()
        parts["dist_fro"] = torch.linalg.matrix_norm(D, "fro")
        parts["dist_spectral"] = (svdvals(D) if dist_sv is None else dist_sv)[0]
        parts["dist_21"] = torch.linalg.vector_norm(D, dim=-2).sum()
    return parts


def to_host(parts: list[Parts]) -> list[Parts]:
    """Copies of the parts with every tensor on the CPU, read back in ONE device→host copy (a
    synchronisation per statistic made CUDA slower than the CPU). The copy is float64 →
    float64, so the values are exactly the device's. CPU tensors go through the same packing
    (a cheap copy; the CPU layer path does not call this)."""
    keys = [(i, k) for i, p in enumerate(parts) for k, v in p.items()
            if isinstance(v, torch.Tensor)]
    out = [dict(p) for p in parts]
    if not keys:
        return out
    ts = [parts[i][k].detach() for i, k in keys]
    flat = torch.cat([t.reshape(-1).to(torch.float64) for t in ts]).cpu()
    for (i, k), t, h in zip(keys, ts, flat.split([t.numel() for t in ts])):
        out[i][k] = h.reshape(t.shape)
    return out


def finish(parts: Parts) -> tuple[dict[str, float], torch.Tensor]:
    """Statistics (floats) and singular values of one matrix from its parts."""
    stats = _from_sv(parts["sv"], parts["fro"], parts["n21"], parts["n11"], parts["k"])
    if "dist_fro" in parts:
        stats["dist_init_fro"] = float(parts["dist_fro"])
        stats["dist_init_spectral"] = float(parts["dist_spectral"])
        stats["dist_init_21"] = float(parts["dist_21"])
    return stats, parts["sv"]


def matrix_stats(W: torch.Tensor, sv: torch.Tensor | None = None,
                 W0: torch.Tensor | None = None) -> tuple[dict[str, float], torch.Tensor]:
    """Statistics of one matrix in its stored orientation, plus its singular values.

    ``sv`` may be supplied when already known (e.g. M_in = ffn_inᵀ shares ffn_in's values).
    With ``W0`` (the initial matrix) the ``dist_init_*`` statistics are added.
    """
    return finish(matrix_parts(W, sv, W0))


def core_singular_values(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """The ≤ d singular values of ``A[h]ᵀ B[h]`` that can be nonzero, descending.

    A, B: (H, d, N) → (H, min(d, N)).
    """
    ra = torch.linalg.qr(A.transpose(-2, -1), mode="r")[1]
    rb = torch.linalg.qr(B.transpose(-2, -1), mode="r")[1]
    return _svdvals(ra @ rb.transpose(-2, -1))


def product_stats(A: torch.Tensor, B: torch.Tensor, A0: torch.Tensor | None = None,
                  B0: torch.Tensor | None = None) -> list[tuple[dict[str, float], torch.Tensor]]:
    """Statistics and singular values of ``A[h]ᵀ B[h]`` (N × N) for every head h.

    ``A``, ``B``: (H, d_h, N) float64. Singular values come from the QR core; the norms that need
    the entries (frobenius, norm_21, norm_11) use the product, formed a few heads at a time.
    With ``A0, B0`` (initial weights) the distance statistics are added; the spectral norm of the
    difference uses the rank-2d_h core of ``[A; −A0]ᵀ [B; B0]``.
    """
    return [finish(p) for p in product_parts(A, B, A0, B0)]


def product_parts(A: torch.Tensor, B: torch.Tensor, A0: torch.Tensor | None = None,
                  B0: torch.Tensor | None = None) -> list[Parts]:
    """The tensors of :func:`product_stats`, one parts dict per head, on A's device."""
    H, _, N = A.shape
    sv = core_singular_values(A, B)
    dist_sv = None
    if A0 is not None:
        dist_sv = core_singular_values(torch.cat([A, -A0], 1), torch.cat([B, B0], 1))[:, 0]
    out: list[Parts] = []
    step = max(1, _CHUNK_BYTES // (N * N * 8 * (2 if A0 is not None else 1)))
    for lo in range(0, H, step):
        hi = min(H, lo + step)
        P = A[lo:hi].transpose(-2, -1) @ B[lo:hi]
        fro, n21, n11 = _norms(P)
        if A0 is not None:
            D = P - A0[lo:hi].transpose(-2, -1) @ B0[lo:hi]
            dfro, d21, _ = _norms(D)
        for i in range(hi - lo):
            h = lo + i
            parts: Parts = {"sv": sv[h], "fro": fro[i], "n21": n21[i], "n11": n11[i], "k": N}
            if dist_sv is not None:
                parts.update(dist_fro=dfro[i], dist_spectral=dist_sv[h], dist_21=d21[i])
            out.append(parts)
    return out
