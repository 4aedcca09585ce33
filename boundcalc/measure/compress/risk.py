"""The risk of a model on a data sample: 0-1 error, smoothed log-loss and its predictions.

Both the trained model and every quantized model are measured here, in the same units, so
:meth:`Risk.changed` compares their predictions (the agreement the compression record states).
Contract: per-unit errors in [0, 1] and smoothed log-losses in bits at every α of the grid;
one-line errors on missing targets, logits of the wrong shape, NaN or infinite logits and
targets outside the vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ...errors import BoundcalcError
from ..samples import DataSample

ALPHA_GRID = (0.0001, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5)  # formulas/compression.toml

Forward = Callable[[torch.nn.Module, torch.Tensor], torch.Tensor]


@dataclass
class Risk:
    """0-1 error and smoothed log-loss (bits) per unit, and the predictions."""

    errors: np.ndarray  # per unit, in [0, 1]
    smoothed: dict[float, np.ndarray]  # α → per-unit smoothed log-loss in bits
    predictions: np.ndarray  # flat argmax predictions
    vocab: int
    units: np.ndarray | None = None  # unit of each prediction, when units differ in length

    def changed(self, ref: "Risk") -> float:
        """Mean over units of the fraction of predictions that differ from ``ref``'s: it bounds
        the change of the mean 0-1 error (what ``check_compression_scalars`` checks)."""
        diff = (self.predictions != ref.predictions).astype(np.float64)
        if self.units is None:
            return float(diff.mean())
        n = len(self.errors)
        per = np.bincount(self.units, weights=diff, minlength=n)
        return float(np.mean(per / np.maximum(np.bincount(self.units, minlength=n), 1)))


def default_forward(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``model(x)``, or its ``.logits`` for Hugging Face outputs."""
    out = model(x)
    logits = getattr(out, "logits", out)
    if isinstance(logits, (tuple, list)):
        logits = logits[0]
    return logits


def target_prob(logits: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(p_y, argmax)``: the softmax probability of each target in float64 and the predicted
    class. Per-token logits (B, T, V) take their log-sum-exp in float64 one row at a time
    (:func:`..data.lm_loss.token_logprob`: never a float64 copy of every row's vocabulary);
    per-example logits (B, V) are widened whole."""
    from ..data.lm_loss import token_logprob

    if logits.ndim == 3:
        return token_logprob(logits, y).exp(), logits.argmax(-1)
    wide = logits.double()
    return torch.softmax(wide, -1).gather(-1, y.unsqueeze(-1)).squeeze(-1), wide.argmax(-1)


def model_risk(model: torch.nn.Module, sample: DataSample, forward: Forward = default_forward,
               alphas: Sequence[float] = ALPHA_GRID, batch_size: int = 256,
               causal: bool = False) -> Risk:
    """Per-unit 0-1 error and prediction-smoothed log-loss of ``model`` on ``sample``.

    Logits (B, V) with targets (B,): one unit per example. Logits (B, T, V) with targets
    (B, T) — or, with ``causal``, next-token targets from the token-id inputs — one unit per
    sequence, losses averaged over its tokens (the document-level convention of Lotfi et al.).
    Smoothed probability p_α = (1 − α)·softmax + α/V.
    """
    if sample.targets is None and not causal:
        raise BoundcalcError(f"{sample.source}: the quantized model's risk needs targets; the "
                             "data has none")
    errs, preds = [], []
    smooth: dict[float, list[np.ndarray]] = {float(a): [] for a in alphas}
    vocab = 0
    model.eval()
    with torch.no_grad():
        for lo in range(0, sample.n, batch_size):
            x = sample.inputs[lo:lo + batch_size]
            logits = forward(model, x)
            if causal:
                logits, y = logits[:, :-1], x[:, 1:].long()
            else:
                y = sample.targets[lo:lo + batch_size].long()
            if not isinstance(logits, torch.Tensor) or logits.shape[:-1] != y.shape:
                raise BoundcalcError(f"forward: logits of shape "
                                     f"{list(getattr(logits, 'shape', []))} do not match targets "
                                     f"of shape {list(y.shape)}")
            if not bool(torch.isfinite(logits).all()):
                raise BoundcalcError("forward: the model produced NaN or infinite logits")
            vocab = int(logits.shape[-1])
            if int(y.min()) < 0 or int(y.max()) >= vocab:
                raise BoundcalcError(f"{sample.source}: targets must lie in [0, {vocab})")
            p, pred = target_prob(logits, y)
            wrong = (pred != y).double()
            red = (lambda t: t.reshape(t.shape[0], -1).mean(1))
            errs.append(red(wrong).numpy())
            preds.append(pred.reshape(-1).numpy())
            for a in smooth:
                pa = (1 - a) * p + a / vocab
                smooth[a].append(red(-torch.log2(pa)).numpy())
    return Risk(np.concatenate(errs), {a: np.concatenate(v) for a, v in smooth.items()},
                np.concatenate(preds), vocab)


def batched_risk(model: torch.nn.Module, tm: Any, batched: Any,
                 alphas: Sequence[float] = ALPHA_GRID) -> Risk:
    """:func:`model_risk` on the batches of ``measure --data`` (``dataset_io.read_batches``: CSV,
    JSON Lines, Parquet, a datasets folder, tensors), with the units of the data pass
    (``data_pass.run_pass``): one per example for a classifier; one per sequence for a language
    model, its losses averaged over the positions that count (causal: every next token; masked:
    the masked positions). ``tm`` is the loaded task model (its task and tokenizer); ``model``
    is evaluated in its place (the quantized copy)."""
    from ..data.inputs import lm_targets
    from ..data.lm_loss import logit_rows, split_batches

    errs, preds, units = [], [], []
    smooth: dict[float, list[np.ndarray]] = {float(a): [] for a in alphas}
    vocab = 0
    done = 0
    model.eval()
    chunk = logit_rows(tm, batched.seq_len, torch.device("cpu"))
    with torch.no_grad():
        for inputs, y in split_batches(batched.batches, chunk):
            keep = None
            if tm.is_lm:
                inputs, y, keep = lm_targets(tm, inputs)
            logits = model(**inputs).logits
            if tm.task == "causal_lm":
                logits = logits[:, :-1]
            if not bool(torch.isfinite(logits).all()):
                raise BoundcalcError(f"{tm.source}: the model produced NaN or infinite logits")
            vocab = int(logits.shape[-1])
            y = y.long()
            p, pred = target_prob(logits, y)
            wrong = (pred != y).double()
            if keep is None:
                red = (lambda t: t)
                preds.append(pred.numpy())
                units.append(done + np.arange(len(y)))
            else:
                w = keep.double()
                red = (lambda t, w=w: (t * w).sum(1) / w.sum(1).clamp(min=1))
                preds.append(pred[keep].numpy())
                units.append(done + keep.nonzero()[:, 0].numpy())
            done += int(y.shape[0])
            errs.append(red(wrong).numpy())
            for a in smooth:
                smooth[a].append(red(-torch.log2((1 - a) * p + a / vocab)).numpy())
    if not errs:
        raise BoundcalcError(f"{batched.source}: no data to measure the quantized risk on")
    return Risk(np.concatenate(errs), {a: np.concatenate(v) for a, v in smooth.items()},
                np.concatenate(preds), vocab, np.concatenate(units))
