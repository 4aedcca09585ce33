"""A language model's losses over its vocabulary, in chunks (issue 51).

A language model's logits are [rows, T, V]: for GPT-2's vocabulary (V = 50,257) 64 rows of 128
tokens take 1.6 GB in float32 and 3.3 GB in float64, several times the model's own activations.
Every stage that turns a language model's logits into losses (the data pass, the Monte Carlo
Gibbs risk, the Hessian terms, compression's quantized risk, the bound-trained posterior, the
examples) therefore

* runs the model on at most :func:`logit_rows` rows at a time, so that one [chunk, T, V] tensor
  in the compute dtype is held (the rows of a data batch are cut into such chunks;
  :func:`row_chunks`), and
* reads those logits in **blocks of positions** (:func:`scan`: on a CPU at most
  :data:`BLOCK_BYTES` of float64, on a card one row; never more positions than one row
  holds), each block once from memory: its least
  and greatest logit (the count of non-finite positions, the shift of the log-sum-exp), its
  top-1 prediction where asked, and the float64 log-sum-exp of the exactly widened block,
  while it sits in the processor's cache. Never a float64 tensor wider than one row's [T, V].

The values are those of the full-tensor formula ``log_softmax(logits.double())`` gathered at
the targets, to float64 rounding (the test compares per-row losses to 1e-9 relative): the
float64 log-sum-exp of the exactly widened logits is the same arithmetic as
``torch.logsumexp`` (the greatest logit subtracted, ``exp``, the sum over the vocabulary,
``log``, the shift added back; an infinite greatest logit is not subtracted), block by block.
Before issue 51's second pass the rows were widened one at a time and read five times over
(``aminmax``, ``argmax``, the widening, ``logsumexp``'s own passes): on the tiny GPT-2 of
``benchmarks/bench_lm_memory.py`` those reads were half of ``boundcalc measure``'s time.
:func:`token_logprob` is differentiable once (its backward forms softmax − one-hot per row in
float64 and returns the logits' gradient in their dtype); the Hessian, which needs second
derivatives, keeps its loss in the compute dtype over chunks of rows (:mod:`.data_pass`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

# bytes of one chunk's logits in the compute dtype: a fixed figure on a CPU (a laptop's memory
# must hold the model's measurement beside everything else), an eighth of the work budget on a
# card, at most CARD_LOGITS_BYTES (larger chunks buy no speed: the head's matmul is already
# large)
CPU_LOGITS_BYTES = 128 << 20
CARD_LOGITS_BYTES = 4 << 30


def logit_rows(tm: Any, seq_len: int, device: torch.device | None = None) -> int:
    """The most rows whose logits ([rows, seq_len, V] in the model's dtype) fit the chunk's
    budget (:data:`CPU_LOGITS_BYTES` on a CPU; on a card an eighth of the work budget, at most
    :data:`CARD_LOGITS_BYTES`), at least 1. Not a language model: no limit (a huge number)."""
    if not tm.is_lm:
        return 1 << 62
    p = next(iter(tm.model.parameters()), None)
    device = device or (p.device if p is not None else torch.device("cpu"))
    elt = p.element_size() if p is not None else 4
    budget = CPU_LOGITS_BYTES
    if device.type == "cuda":
        from ..device import work_budget_for

        budget = min(CARD_LOGITS_BYTES, work_budget_for(device) // 8)
    per_row = max(1, int(seq_len)) * int(tm.n_outputs) * elt
    return max(1, budget // per_row)


def row_chunks(inputs: Mapping[str, torch.Tensor], y: torch.Tensor | None,
               rows: int) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor | None]]:
    """``(inputs, y)`` cut along the row axis into pieces of at most ``rows`` rows (views,
    no copy; the whole batch when it is no larger)."""
    n = next(iter(inputs.values())).shape[0]
    if n <= rows:
        yield dict(inputs), y
        return
    for lo in range(0, n, rows):
        yield ({k: v[lo:lo + rows] for k, v in inputs.items()},
               None if y is None else y[lo:lo + rows])


def split_batches(batches: list, rows: int) -> list:
    """Every ``(inputs, y)`` batch of ``batches`` cut by :func:`row_chunks`."""
    return [piece for inputs, y in batches for piece in row_chunks(inputs, y, rows)]


# float64 bytes of one block of positions in :func:`scan`: a few blocks fit a CPU's cache
# beside their compute-dtype logits (2 MiB: 5 positions of GPT-2's vocabulary)
BLOCK_BYTES = 2 << 20


@dataclass
class Scan:
    """What one read of a language model's logits ([B, T, V]) gives, per position: ``lse``,
    log Σ_v exp(logits) in float64 ([B, T]); ``top``, the index of the greatest logit
    ([B, T], or None where not asked); ``bad``, the number of positions holding a NaN or an
    infinity (a 0-d tensor on the logits' device: read it with the pass's other figures)."""

    lse: torch.Tensor
    top: torch.Tensor | None
    bad: torch.Tensor


def block_positions(seq_len: int, vocab: int, device: torch.device | None = None) -> int:
    """Positions per block of :func:`scan`: on a CPU as many as :data:`BLOCK_BYTES` of float64
    hold, at least 1; on a card a whole row (each block is a few kernel launches, and a card's
    memory, not its cache, is what a row's float64 [T, V] must fit: the rule of before); never
    more than ``seq_len`` (a block never spans two rows)."""
    if device is not None and device.type != "cpu":
        return max(1, int(seq_len))
    return max(1, min(int(seq_len), BLOCK_BYTES // (8 * max(1, int(vocab)))))


def scan(logits: torch.Tensor, top: bool = False) -> Scan:
    """One read of ``logits`` ([B, T, V], any float dtype, any strides) in blocks of
    :func:`block_positions` positions of one row: per block its least and greatest logit
    (``amax``/``max``, ``amin``), its top-1 index (``top``), and its float64 log-sum-exp, the
    block widened by subtracting the greatest logit (left unshifted where that is infinite, as
    ``torch.logsumexp`` does), exponentiated and summed in place. No float64 tensor wider
    than one block; not differentiable (:func:`token_logprob` is)."""
    rows, seq, vocab = logits.shape
    dev = logits.device
    step = block_positions(seq, vocab, dev)
    lse = torch.empty((rows, seq), dtype=torch.float64, device=dev)
    idx = torch.empty((rows, seq), dtype=torch.long, device=dev) if top else None
    bad = torch.zeros((), dtype=torch.long, device=dev)
    for r in range(rows):
        row = logits[r]
        for lo in range(0, seq, step):
            block = row[lo:lo + step]
            if idx is None:
                most = block.amax(-1)
            else:  # the greatest logit and its index in one read
                most, idx[r, lo:lo + step] = block.max(-1)
            least = block.amin(-1)  # amax and amin: a fifth of aminmax's time on a CPU
            bad += (~(torch.isfinite(least) & torch.isfinite(most))).sum()
            shift = most.double()
            shift = torch.where(torch.isinf(shift), torch.zeros_like(shift), shift)
            # widened by the subtraction itself (float32 − float64 is float64, exactly)
            total = torch.sub(block, shift.unsqueeze(-1)).exp_().sum(-1)
            lse[r, lo:lo + step] = total.log_().add_(shift)
    return Scan(lse, idx, bad)


def _lse_rows(logits: torch.Tensor) -> torch.Tensor:
    """log Σ_v exp(logits[r, t, v]) in float64 (B × T), by :func:`scan`."""
    return scan(logits).lse


def _picked(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1).double()


class _TokenLogProb(torch.autograd.Function):
    """log p(target) per position, float64, with a row-by-row float64 log-sum-exp."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        lse = _lse_rows(logits)
        ctx.save_for_backward(logits, targets, lse)
        return _picked(logits, targets) - lse

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        logits, targets, lse = ctx.saved_tensors
        out = torch.empty_like(logits)
        for r in range(logits.shape[0]):  # d lp / d x = one-hot(y) − softmax(x), per row
            g = grad[r].double()
            soft = torch.exp(logits[r].double() - lse[r].unsqueeze(-1))
            d = (-g.unsqueeze(-1) * soft).scatter_add_(-1, targets[r].unsqueeze(-1),
                                                       g.unsqueeze(-1))
            out[r] = d.to(logits.dtype)
        return out, None


def token_logprob(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``log_softmax(logits.double(), -1)`` gathered at ``targets`` (B × T, float64), without a
    float64 tensor wider than one row's [T, V]; differentiable once in ``logits``."""
    if torch.is_grad_enabled() and logits.requires_grad:
        return _TokenLogProb.apply(logits, targets)
    return _picked(logits, targets) - _lse_rows(logits)


def nonfinite(logits: torch.Tensor) -> torch.Tensor:
    """The number of positions whose logits hold a NaN or an infinity (0 exactly when every
    logit is finite), on the device: each position's least and greatest value (which a NaN or
    an infinity among them makes non-finite; ``amin`` and ``amax``, each one read, together a
    fifth of ``aminmax``'s time on a CPU), where ``isfinite`` over every logit reads them five
    times. :func:`scan` counts the same in its own read."""
    lo, hi = logits.amin(-1), logits.amax(-1)
    return (~(torch.isfinite(lo) & torch.isfinite(hi))).sum()


def smoothed(lp: torch.Tensor, vocab: int, alpha: float) -> torch.Tensor:
    """The prediction-smoothed log-loss −ln((1−α)e^lp + α/V)/ln(V/α) of each log-probability
    ``lp``, in [0, 1]."""
    return -torch.log((1 - alpha) * lp.exp() + alpha / vocab) / math.log(vocab / alpha)


def row_mean(per_token: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Per row, the mean of ``per_token`` over the kept positions (none kept: 0)."""
    w = keep.to(per_token.dtype)
    return (per_token * w).sum(1) / w.sum(1).clamp(min=1)


def smoothed_token_loss(logits: torch.Tensor, targets: torch.Tensor, keep: torch.Tensor,
                        alpha: float) -> torch.Tensor:
    """Per row, the mean over its kept positions (``keep``) of the prediction-smoothed
    log-loss −ln((1−α)p_y + α/V)/ln(V/α), a loss in [0, 1] (V = the logits' last size, p_y the
    probability of the target), in float64 (:func:`token_logprob`; differentiable once).
    ``logits`` (B × T × V, any float dtype) are already aligned with ``targets`` (B × T);
    α in (0, 1)."""
    return row_mean(smoothed(token_logprob(logits, targets), logits.shape[-1], alpha), keep)


def token_stats(logits: torch.Tensor, targets: torch.Tensor, keep: torch.Tensor,
                alpha: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row (float64): the mean token NLL, the mean smoothed loss (:func:`smoothed`) and the
    top-1 error rate over the kept positions of aligned ``logits`` and ``targets``."""
    sc = scan(logits, top=True)
    return row_stats(_picked(logits, targets) - sc.lse, sc.top, targets, keep, alpha,
                     logits.shape[-1])


def row_stats(lp: torch.Tensor, top: torch.Tensor, targets: torch.Tensor, keep: torch.Tensor,
              alpha: float, vocab: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row (float64), from each position's target log-probability ``lp`` and top-1 index
    ``top``: the mean token NLL, the mean smoothed loss and the top-1 error rate over the kept
    positions."""
    wrong = (top != targets).double()  # the widening to float64 is exact
    return (row_mean(-lp, keep), row_mean(smoothed(lp, vocab, alpha), keep),
            row_mean(wrong, keep))


def scored(logits: torch.Tensor, targets: torch.Tensor, causal: bool, top: bool = False
           ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """``(log p(target), top-1 index or None, count of non-finite positions)`` from one
    :func:`scan` of a model's logits as the model gives them (every position counted for
    NaN and infinity, the last one too), aligned with ``targets``: a causal model's last
    position predicts nothing and is dropped (``causal``)."""
    sc = scan(logits, top)
    lse, idx = sc.lse, sc.top
    if causal:
        logits, lse = logits[:, :-1], lse[:, :-1]
        idx = None if idx is None else idx[:, :-1]
    return _picked(logits, targets) - lse, idx, sc.bad
