"""A task model's batches made ready for a forward: moved to a device, language-model targets.

Shared by the plain data pass (:mod:`.data_pass`), the Monte Carlo Gibbs risk (:mod:`.gibbs`)
and the compression pass; sits below all three so that none of them imports another for it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ...errors import BoundcalcError
from .hf import TaskModel

Progress = Callable[[int, int, str], None]  # (done, total, what is running)
MASK_EVERY = 7  # a masked LM predicts every 7th non-special position


def on_device(t: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """``t`` on ``device``. A host tensor goes to a card from pinned memory without blocking:
    a blocking copy makes the host wait until the card has run every queued kernel (a host
    synchronisation per tensor), a non-blocking one from pinned memory is queued like a
    kernel (torch keeps the pinned block until the copy has run)."""
    device = torch.device(device)
    if device.type == "cuda" and t.device.type == "cpu":
        return (t if t.is_pinned() else t.pin_memory()).to(device, non_blocking=True)
    return t.to(device)


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """Every tensor of ``batch`` on ``device`` (:func:`on_device`)."""
    return {k: on_device(v, device) for k, v in batch.items()}


def lm_targets(tm: TaskModel, inputs: dict[str, torch.Tensor]
               ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """Model inputs, targets (B × T') and the mask of positions that count: causal LMs predict
    the next token; masked LMs see every :data:`MASK_EVERY`-th attended position masked and
    predict it (a tokenizer without a mask token is refused)."""
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    if tm.task == "causal_lm":
        return inputs, ids[:, 1:], mask[:, 1:].bool()
    tok_mask = getattr(tm.tokenizer, "mask_token_id", None) if tm.tokenizer else None
    if tok_mask is None:
        raise BoundcalcError(f"{tm.source}: a masked LM needs a tokenizer with a mask token")
    pos = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
    chosen = (pos % MASK_EVERY == 1) & mask.bool()
    masked = ids.masked_fill(chosen, int(tok_mask))
    return {**inputs, "input_ids": masked}, ids, chosen


def mask_is_full(inputs: dict[str, torch.Tensor]) -> bool:
    """Whether ``inputs`` holds an attention mask kept on the host with every entry 1, read
    with numpy (no device work, no synchronisation). A model given no mask attends every
    position, as with this one; Hugging Face models read a given mask back from the device to
    skip it (``mask.all()``), a host synchronisation per forward pass that leaving it out
    avoids."""
    mask = inputs.get("attention_mask")
    return mask is not None and mask.device.type == "cpu" and bool(mask.numpy().all())


def model_call(inputs: dict[str, torch.Tensor], full_mask: bool) -> dict[str, torch.Tensor]:
    """The keyword arguments of the model call: ``inputs`` without its attention mask when
    ``full_mask`` (:func:`mask_is_full` of the batch on the host)."""
    if not full_mask:
        return inputs
    return {k: v for k, v in inputs.items() if k != "attention_mask"}
