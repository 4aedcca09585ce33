"""The streamed data pass of a task-head model: losses, margins, input norms, Gibbs risk, Hessian.

Per sample (one batch of activations in memory at a time, ``torch.no_grad``):

* classification: 0-1 error, cross-entropy, margin m = f_y − max_{j≠y} f_j (logits);
* language models: per-token NLL averaged over the sequence's targets (causal: next token;
  masked: every 7th non-special token is masked and predicted), top-1 token error, and the
  bounded loss of prediction smoothing (Lotfi et al. 2023): with p̃ = (1 − α)p + α/V,
  −ln p̃_y ≤ ln(V/α), divided by ln(V/α) so that it lies in [0, 1].
  A language model runs on chunks of a batch's rows whose logits fit
  :func:`.lm_loss.logit_rows`, its losses taken in float64 a block of positions at a time, in
  one read of the logits (:func:`.lm_loss.scored`).

The bounded loss (0-1 error for classifiers, the smoothed NLL for language models) is the loss of
the Monte Carlo Gibbs risk under N(w, σ²I) weight noise (:mod:`.gibbs`): k passes per σ, with
a fresh draw per sample or one per pass, mean Ê over N independent losses and the
Langford–Caruana upper end kl⁻¹(Ê, ln(2·|points|/δ′)/N).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ...errors import BoundcalcError
from .dataset_io import Batched
from .hf import TaskModel
from .inputs import Progress, lm_targets, mask_is_full, model_call, on_device, to_device
from .lm_loss import logit_rows, row_chunks, row_mean, row_stats, scored

GAMMA_GRID = tuple(2.0 ** k for k in range(-20, 21))  # bartlett_spectral_gamma_grid's grid


@dataclass
class PassResult:
    """Per-sample arrays of one pass (margins only for classifiers)."""

    err01: np.ndarray
    ce: np.ndarray
    bounded: np.ndarray
    margin: np.ndarray | None
    token_norm_max: float
    fro_max: float


def run_pass(tm: TaskModel, data: Batched, device: torch.device, *, alpha: float = 0.01,
             norms: bool = True, progress: Progress | None = None,
             what: str = "data pass") -> PassResult:
    """One pass over the data at the model's current weights (see the module docstring), with
    one host synchronisation: every per-sample figure, the norm maxima and the count of
    non-finite logits stay on the device until the one copy at the end."""
    err, ce, bounded, margin = [], [], [], []
    zero = torch.zeros((), dtype=torch.float64, device=device)
    tmax, fmax, nonfinite = zero, zero, zero
    chunk = logit_rows(tm, data.seq_len, device)  # a language model's rows per forward
    with torch.no_grad():
        for i, (batch, labels) in enumerate(data.batches):
            if progress:
                progress(i, len(data.batches), what)
            for host, y in row_chunks(batch, labels, chunk):
                tmax, fmax, nonfinite = _pass_rows(tm, host, y, device, alpha, norms,
                                                   (err, ce, bounded, margin),
                                                   (tmax, fmax, nonfinite))
    columns = [torch.cat(xs) for xs in (err, ce, bounded, margin) if xs]
    n = columns[0].shape[0]
    packed = torch.cat([*columns, torch.stack([tmax, fmax, nonfinite])]).cpu().numpy()
    if packed[-1] > 0:  # the pass's one synchronisation is the copy above
        raise BoundcalcError(f"{tm.source}: the model produced NaN or infinite logits")
    parts = [packed[k * n:(k + 1) * n] for k in range(len(columns))]
    return PassResult(parts[0], parts[1], parts[2], parts[3] if margin else None,
                      float(packed[-3]), float(packed[-2]))


def _pass_rows(tm: TaskModel, host: dict[str, torch.Tensor], y: torch.Tensor | None,
               device: torch.device, alpha: float, norms: bool, columns: tuple[list, ...],
               maxima: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """The data pass on one piece of rows: per-row figures appended to ``columns`` (err, ce,
    bounded, margin), the running maxima ``(token norm, Frobenius norm, non-finite count)``
    returned updated. A language model's losses come from :func:`.lm_loss.scored` (the
    compute-dtype logits of this piece, float64 a block at a time); a classifier's logits are
    widened to float64 whole (B × classes)."""
    err, ce, bounded, margin = columns
    tmax, fmax, nonfinite = maxima
    inputs = to_device(host, device)
    if tm.is_lm:
        inputs, targets, keep = lm_targets(tm, inputs)
    out = tm.model(**model_call(inputs, mask_is_full(host)), output_hidden_states=norms)
    if norms:
        h = out.hidden_states[0].double()  # the embedding output: input of layer 0
        tok = torch.linalg.vector_norm(h, dim=-1)
        if "attention_mask" in inputs:
            tok = tok * inputs["attention_mask"].to(tok.dtype)
        tmax = torch.maximum(tmax, tok.max())
        fmax = torch.maximum(fmax, tok.square().sum(-1).sqrt().max())
    logits = out.logits
    if tm.is_lm:  # one read of the logits: the non-finite count, the losses, the top-1
        lp, top, bad = scored(logits, targets, tm.task == "causal_lm", top=True)
        nonfinite = nonfinite + bad
        nll, smooth, wrong = row_stats(lp, top, targets, keep, alpha, logits.shape[-1])
        ce.append(nll)
        bounded.append(smooth)
        err.append(wrong)
    else:
        nonfinite = nonfinite + (~torch.isfinite(logits)).sum()
        logits = logits.double()
        y = on_device(y, device)
        logp = torch.log_softmax(logits, -1)
        ce.append(-logp.gather(1, y[:, None]).squeeze(1))
        e = (logits.argmax(-1) != y).double()
        err.append(e)
        bounded.append(e)
        fy = logits.gather(1, y[:, None]).squeeze(1)
        other = logits.scatter(1, y[:, None], -math.inf).max(1).values
        margin.append(fy - other)
    return tmax, fmax, nonfinite


def ramp_risk(margins: np.ndarray, gamma: float) -> float:
    """Mean ramp loss: 1 for m ≤ 0, 1 − m/γ for 0 < m < γ, 0 for m ≥ γ."""
    return float(np.mean(np.clip(1.0 - margins / gamma, 0.0, 1.0)))


def hessian_terms(tm: TaskModel, data: Batched, device: torch.device, max_samples: int,
                  rows: int | None = None) -> tuple[list[Callable[[], torch.Tensor]], int]:
    """The mean training loss (cross-entropy / NLL) on the first ``max_samples`` samples, as
    one closure per batch (the batch's summed loss divided by the number used), with graphs
    for second derivatives; ``rows``: at most that many rows per term (a batch cut in pieces),
    and for a language model at most :func:`.lm_loss.logit_rows` (one term's logits in the
    compute dtype fit the chunk's budget).
    The terms add up to the mean loss; each is evaluated on its own, so a Hessian estimate
    holds one term's activations at a time, whatever the count."""
    chosen = []
    left = max_samples
    for inputs, y in data.batches:
        size = min(left, next(iter(inputs.values())).shape[0])
        step = min(rows or max(size, 1), logit_rows(tm, data.seq_len, device))
        for lo in range(0, size, step):
            hi = min(size, lo + step)
            host = {k: v[lo:hi] for k, v in inputs.items()}
            # on the device once, here: a term runs once per probe pass, under torch.func
            chosen.append((to_device(host, device), None if y is None else
                           on_device(y[lo:hi], device), mask_is_full(host)))
        left -= size
        if left <= 0:
            break
    used = sum(next(iter(i.values())).shape[0] for i, _, _ in chosen)

    def term(inputs: dict[str, torch.Tensor], y: torch.Tensor | None,
             full: bool) -> torch.Tensor:
        if tm.is_lm:  # in the compute dtype (second derivatives), ``rows`` at a time
            inputs, targets, keep = lm_targets(tm, inputs)
            logits = tm.model(**model_call(inputs, full)).logits
            if tm.task == "causal_lm":
                logits = logits[:, :-1]
            lp = torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
            per = -row_mean(lp, keep)
        else:
            logits = tm.model(**model_call(inputs, full)).logits
            per = torch.nn.functional.cross_entropy(logits, y, reduction="none")
        return per.sum() / used

    return [functools.partial(term, *c) for c in chosen], used


def hessian_closure(tm: TaskModel, data: Batched, device: torch.device, max_samples: int):
    """The mean training loss on the first ``max_samples`` samples as ONE closure (the sum of
    :func:`hessian_terms`): kept for callers that need a single closure; it holds the graph
    of every sample at once, so prefer the terms."""
    terms, used = hessian_terms(tm, data, device, max_samples)
    return (lambda: sum(t() for t in terms)), used


LS_MESH = tuple(float(x) for x in np.linspace(0.01, 0.00001, 20))  # lintilhac_shaikh.toml's mesh


def perturbation_term(tm: TaskModel, data: Batched, device: torch.device,
                      sigmas: Sequence[float], draws: int, probes: int, samples: int,
                      seed: int, progress: Progress | None = None,
                      routes: list[str] | None = None, rows: int | None = None) -> np.ndarray:
    """P̂(σ) of Lintilhac–Shaikh at each σ: the 90th percentile over ``draws`` noise draws
    u ~ N(0, σ²I) of |tr ∇²L̂(θ + u) − tr ∇²L̂(θ)|, both traces by Hutchinson with the same
    Rademacher probes (common random numbers), on the first ``samples`` samples (streamed a
    term of at most ``rows`` rows at a time, as in :func:`hessian_terms`). ``routes``: where
    given, each distinct
    route of the Hessian-vector products (``HessianTrace.route``) is appended to it."""
    from .curvature import hutchinson_trace
    from .gibbs import perturbed

    terms, _ = hessian_terms(tm, data, device, samples, rows)
    for p in tm.model.parameters():
        p.requires_grad_(True)
    total = len(sigmas) * draws + 1
    if progress:
        progress(0, total, "P̂: trace at the trained weights")

    sized: list[int] = []  # probes per stacked pass on a card: measured once, then reused

    def trace() -> float:
        tr = hutchinson_trace(tm.model, terms, n_probes=probes, groups=None, seed=seed,
                              sized=sized)
        if routes is not None and tr.route not in routes:
            routes.append(tr.route)
        return tr.total.value

    base = trace()
    out = np.empty(len(sigmas))
    for i, s in enumerate(sigmas):
        gen = torch.Generator().manual_seed(seed + 1000 + i)
        diffs = []
        for d in range(draws):
            if progress:
                progress(1 + i * draws + d, total, f"P̂ σ={s:.3g} draw {d + 1}/{draws}")
            with perturbed(tm.model, float(s), gen):
                t = trace()
            diffs.append(abs(t - base))
        out[i] = float(np.percentile(diffs, 90))
    if progress:
        progress(total, total, "P̂ done")
    return out
