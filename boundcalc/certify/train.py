"""Training for ``certify``: the base model as a sequence classifier, and the default training
loop (Adam on the cross-entropy, plus a proximal pull toward an anchor for the posterior).

A user's own loop replaces :func:`train_classifier` through the ``train`` argument of
:func:`boundcalc.certify.certify`: it gets the model, the tokenizer, the rows and a
:class:`TrainSpec`, and trains the model in place."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from ..errors import BoundcalcError, CheckpointError
from ..files import write_json_record
from ..options import refusal
from .run_folder import STEP_MARK, files_under, remove_written

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


@dataclass
class TrainSpec:
    """What one training stage is asked to do.

    ``stage``: ``"prior"`` (from the base, on the prior's data) or ``"posterior"`` (from the
    prior, on S). ``anchor``: for the posterior, the prior's weights by parameter name; the
    loss adds ``proximal``·Σ‖w − anchor‖² (a pull toward the prior: the KL of a prior centred
    there grows with that distance). ``device``: where to train. ``batch_size`` None: sized
    to the device (:func:`batch_rows`). ``precision`` None: bf16 autocast on CUDA, fp32 on a
    CPU (:func:`train_precision`)."""

    stage: str
    epochs: int
    lr: float
    batch_size: int | None
    max_length: int
    seed: int
    device: torch.device
    proximal: float = 0.0
    anchor: Mapping[str, torch.Tensor] | None = None
    precision: str | None = None


Progress = Callable[[int, int, str], None]


def base_folder(base: str | Path) -> tuple[Path, dict[str, Any]]:
    """The base's folder and its config (a folder with ``config.json``, or that file)."""
    from ..measure.data.hf import check_folder, read_config
    from ..measure.safety import read_small_json

    p = Path(base)
    if p.is_file():
        cfg = read_small_json(p, "config")
        folder = p.parent
    else:
        cfg = read_config(p)
        folder = p
        if cfg is None:
            raise CheckpointError(f"{p}: no config.json (the base model is a Hugging Face "
                                  "folder, or its config.json alone)")
    if not isinstance(cfg, dict) or not isinstance(cfg.get("model_type"), str):
        raise CheckpointError(f"{p}: the config names no model_type")
    if cfg.get("auto_map"):
        check_folder(folder)  # refuses code shipped with a checkpoint
    return folder, cfg


def has_weights(base: str | Path) -> bool:
    """Does the base hold weights (else it is a config: a random initialisation)?"""
    p = Path(base)
    return p.is_dir() and any((p / f).exists() for f in WEIGHT_FILES)


def classifier_config(raw: Mapping[str, Any], classes: Sequence[Any], tokenizer: Any) -> Any:
    """The transformers config of the classifier for ``classes`` built from the base's config
    ``raw`` (its ``model_type`` and fields; the classes named in ``id2label``; the tokenizer's
    pad id when the config has none)."""
    from transformers import AutoConfig

    names = {i: str(c) for i, c in enumerate(classes)}
    extra = dict(num_labels=len(classes), id2label=names,
                 label2id={v: k for k, v in names.items()})
    if raw.get("pad_token_id") is None and getattr(tokenizer, "pad_token_id", None) is not None:
        extra["pad_token_id"] = tokenizer.pad_token_id
    fields = {k: v for k, v in raw.items() if k not in ("model_type", "architectures")}
    return AutoConfig.for_model(raw["model_type"], **{**fields, **extra})


def build_classifier(base: str | Path, classes: Sequence[Any], seed: int,
                     tokenizer: Any) -> Any:
    """A ``*ForSequenceClassification`` for ``classes`` from the base: its pretrained weights
    with a new head (drawn after ``torch.manual_seed(seed)``), or a random initialisation of
    its config when it has no weights."""
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    folder, raw = base_folder(base)
    cfg = classifier_config(raw, classes, tokenizer)
    torch.manual_seed(seed)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "some weights newly initialized": the head, by design
    try:
        if has_weights(folder) and Path(base).is_dir():
            model = AutoModelForSequenceClassification.from_pretrained(
                folder, config=cfg, local_files_only=True, trust_remote_code=False)
        else:
            model = AutoModelForSequenceClassification.from_config(cfg)
    finally:
        hf_logging.set_verbosity(verbosity)
    return model.float()


ROWS_CPU = 32  # rows per batch on a CPU (the default since certify exists)
ROWS_CARD_MAX = 256


def batch_rows(model: Any, max_length: int, rows: int, device: torch.device,
               requested: int | None = None, backward: bool = True) -> int:
    """Rows per batch: ``requested`` when given; else 32 on a CPU; on CUDA
    :func:`card_rows` for the model's width, depth and heads and the card's free memory."""
    if requested is not None:
        return int(requested)
    if device.type != "cuda":
        return ROWS_CPU
    cfg = getattr(model, "config", None)
    h = int(getattr(cfg, "hidden_size", 0) or getattr(cfg, "n_embd", 0) or 1024)
    layers = int(getattr(cfg, "num_hidden_layers", 0) or getattr(cfg, "n_layer", 0) or 24)
    heads = int(getattr(cfg, "num_attention_heads", 0) or getattr(cfg, "n_head", 0) or 16)
    return card_rows(torch.cuda.mem_get_info(device)[0], h, layers, heads, max_length, rows,
                     backward)


def card_rows(free_bytes: float, hidden: int, layers: int, heads: int, max_length: int,
              rows: int, backward: bool = True) -> int:
    """The largest power of two ≤ 256 whose activations fit a quarter of ``free_bytes`` and
    that leaves ≥ 8 steps per epoch of ``rows`` rows (a larger batch at the same learning rate
    trains less per epoch), never below 32; without a backward pass (evaluation) ≤ 512, with
    no rule on steps. Activations of one row: ``max_length``·h·(34 + 5·a·``max_length``/h)
    bytes per layer in 16-bit (Korthikanti et al. 2022, arXiv:2205.05198, Eq. 2), doubled for
    float32; a tenth without a backward pass (nothing is kept for it)."""
    per_row = 2 * layers * max_length * hidden * (34 + 5 * heads * max_length / hidden)
    fit = free_bytes / 4 / (per_row if backward else per_row / 10)
    cap = (min(ROWS_CARD_MAX, fit, max(rows // 8, 1)) if backward
           else min(2 * ROWS_CARD_MAX, fit))
    b = ROWS_CPU
    while b * 2 <= cap:
        b *= 2
    return b


def train_precision(device: torch.device, name: str | None = None) -> str:
    """The arithmetic of training: ``name`` when given, else bf16 autocast on CUDA (weights,
    gradients and Adam's moments stay float32) and fp32 on a CPU (today's numbers). It decides
    which weights are trained, not what is certified: the certificate is about the weights
    training produced, evaluated in measure's own precision."""
    from ..measure.data.options import PRECISIONS

    if name and name not in PRECISIONS:
        raise refusal("precision", name, "one of " + ", ".join(PRECISIONS))
    return name if name else ("bf16" if device.type == "cuda" else "fp32")


class Encoded:
    """Texts tokenized once (padded to the longest, kept on ``device``) and each row's length on
    the host: :meth:`batch` gives the rows padded to their own longest, the tensors one
    tokenizer call per batch gave, with no tokenizer call and no host synchronisation."""

    def __init__(self, tokenizer: Any, texts: Sequence[str], max_length: int,
                 device: torch.device):
        enc = tokenizer(list(texts), padding=True, truncation=True, max_length=max_length,
                        return_tensors="pt")
        mask = enc.get("attention_mask")
        width = enc["input_ids"].shape[1]
        # numpy on the host: a batch's width is read with no torch operator at all
        self.lengths = (mask.sum(1).numpy() if mask is not None
                        else np.full(len(texts), width, dtype=np.int64))
        self.left = getattr(tokenizer, "padding_side", "right") == "left"
        self.tensors = {k: v.to(device) for k, v in enc.items()}

    def batch(self, rows: torch.Tensor, rows_host: np.ndarray) -> dict[str, torch.Tensor]:
        """The rows ``rows`` (an index tensor on the device; ``rows_host`` the same on the
        host, for the width), padded to their longest."""
        lengths = self.lengths[rows_host]
        width = int(lengths.max()) if len(lengths) else 0
        padded = bool(len(lengths)) and int(lengths.min()) < width
        cut = slice(-width, None) if self.left else slice(0, width)
        # no padding in the batch: no mask (transformers drops an all-ones mask itself, after
        # reading it back from the card: one synchronisation per forward pass saved)
        return {k: v[rows][:, cut] for k, v in self.tensors.items()
                if k != "attention_mask" or padded}


def train_classifier(model: Any, tokenizer: Any, texts: Sequence[str], labels: Sequence[int],
                     spec: TrainSpec, progress: Progress | None = None) -> dict[str, Any]:
    """Adam on the mean cross-entropy over shuffled batches (seeded), ``spec.epochs`` passes,
    plus ``spec.proximal``·Σ‖w − anchor‖² when an anchor is given (its gradient
    2·``proximal``·(w − anchor) added to the gradients in one fused update per step); trains in
    place on ``spec.device`` in ``spec.precision`` (:func:`train_precision`) with
    :func:`batch_rows` rows per batch, and leaves the model in eval mode there. The texts are
    tokenized once; a step reads nothing back to the host. Returns what it did (precision,
    rows per batch, steps, seconds)."""
    import time

    from ..measure.threads import blas_threads, data_threads

    if spec.epochs < 0 or (spec.batch_size is not None and spec.batch_size < 1) \
            or not spec.lr > 0:
        raise BoundcalcError("training needs epochs >= 0, a batch size >= 1 and a learning "
                             "rate > 0")
    t0 = time.monotonic()
    model.to(spec.device)
    prec = train_precision(spec.device, spec.precision)
    rows = batch_rows(model, spec.max_length, len(texts), spec.device, spec.batch_size)
    # a model no wider than 512 on a CPU: one thread (a thread pool on a shared 2-core
    # machine made a step of a width-64 BERT 8× slower)
    with blas_threads(data_threads(model, spec.device)):
        steps = _train(model, Encoded(tokenizer, texts, spec.max_length, spec.device), labels,
                       spec, rows, prec, progress)
    if spec.device.type == "cuda":
        torch.cuda.synchronize(spec.device)
    return {"stage": spec.stage, "precision": prec, "batch_size": rows, "steps": steps,
            "device": str(spec.device), "seconds": round(time.monotonic() - t0, 2)}


def _train(model: Any, enc: Encoded, labels: Sequence[int], spec: TrainSpec, rows: int,
           prec: str, progress: Progress | None, fused: bool | None = None) -> int:
    """The loop; Adam ``fused`` (default: on CUDA; the CPU's multi-tensor Adam gives the
    numbers of the single-tensor one used before, bit for bit)."""
    from ..measure.device import precision

    y = torch.as_tensor(list(labels), dtype=torch.long, device=spec.device)
    gen = torch.Generator().manual_seed(spec.seed)
    params = [p for p in model.parameters() if p.requires_grad]
    pull: list[torch.Tensor] = []
    anchors: list[torch.Tensor] = []
    if spec.anchor is not None and spec.proximal > 0:
        for n, p in model.named_parameters():
            if p.requires_grad and n in spec.anchor:
                pull.append(p)
                anchors.append(spec.anchor[n].to(spec.device, p.dtype))
    weights = [p.detach() for p in pull]  # views: they follow Adam's in-place updates
    fused = spec.device.type == "cuda" if fused is None else fused
    opt = torch.optim.Adam(params, lr=spec.lr, **({"fused": True} if fused else
                                                  {"foreach": True}))
    steps = spec.epochs * math.ceil(len(y) / rows)
    done = 0
    model.train()
    for _ in range(spec.epochs):
        perm = torch.randperm(len(y), generator=gen)
        perm_dev, perm = perm.to(spec.device), perm.numpy()
        for lo in range(0, len(y), rows):
            idx = perm_dev[lo:lo + rows]
            with precision(prec, spec.device):
                logits = model(**enc.batch(idx, perm[lo:lo + rows])).logits
                loss = torch.nn.functional.cross_entropy(logits.float(), y[idx])
            opt.zero_grad(set_to_none=not pull)
            loss.backward()
            if pull:
                _pull(pull, weights, anchors, spec.proximal)
            opt.step()
            done += 1
            if progress:
                progress(done, steps, f"training the {spec.stage}")
    model.eval()
    return done


def _pull(params: list[torch.Tensor], weights: list[torch.Tensor], anchors: list[torch.Tensor],
          proximal: float) -> None:
    """Add the gradient of ``proximal``·Σ‖w − anchor‖², 2·``proximal``·(w − anchor), to every
    parameter's gradient: three fused multi-tensor kernels, no Python sum over tensors (the
    same float32 numbers autograd gave for that term: w − anchor rounded, times 2 exact, times
    ``proximal`` rounded, added)."""
    for p in params:
        if p.grad is None:  # not reached by the loss: the pull alone (first step only)
            p.grad = torch.zeros_like(p)
    grads = [p.grad for p in params]
    diff = torch._foreach_sub(weights, anchors)
    torch._foreach_mul_(diff, 2.0 * proximal)
    torch._foreach_add_(grads, diff)


def error_rate(model: Any, tokenizer: Any, texts: Sequence[str], labels: Sequence[int],
               max_length: int, batch_size: int | None, device: torch.device) -> float:
    """0-1 error of the model on the rows (eval mode, no gradients; rows per batch
    ``batch_size`` or :func:`batch_rows`; on CUDA in its default precision, TF32). The texts
    are tokenized once and the count read back once."""
    if not len(texts):
        return float("nan")
    from ..measure.device import default_precision, precision
    from ..measure.threads import blas_threads, data_threads

    model.to(device).eval()
    enc = Encoded(tokenizer, texts, max_length, device)
    y = torch.as_tensor(list(labels), dtype=torch.long, device=device)
    rows = batch_rows(model, max_length, len(texts), device, batch_size, backward=False)
    order = np.arange(len(texts))
    order_dev = torch.arange(len(texts), device=device)
    wrong = torch.zeros((), dtype=torch.long, device=device)
    with blas_threads(data_threads(model, device)), torch.no_grad(), \
            precision(default_precision(device), device):
        for lo in range(0, len(texts), rows):
            idx = order_dev[lo:lo + rows]
            pred = model(**enc.batch(idx, order[lo:lo + rows])).logits
            wrong += (pred.argmax(-1) != y[idx]).sum()
    return int(wrong) / len(texts)


def load_trained(folder: Path) -> tuple[Any, Any]:
    """A classifier certify saved (``prior/``, ``model/``: :func:`save_folder`) in float32,
    and its tokenizer: the one loader of both, through the offline gate
    (:func:`boundcalc.measure.offline.from_pretrained`: no download, no code from the
    folder)."""
    from ..measure.data.hf import load_tokenizer
    from ..measure.offline import from_pretrained, transformers_module

    model = from_pretrained(transformers_module().AutoModelForSequenceClassification, folder,
                            "the classifier")
    return model.float(), load_tokenizer(folder)


def save_folder(model: Any, tokenizer: Any, folder: Path, meta: Mapping[str, Any]) -> None:
    """Save model and tokenizer to ``folder`` atomically: written to ``folder.partial``, the
    step record ``certify_step.json`` last, then renamed (a killed run leaves no half folder
    under the final name)."""
    import shutil

    from transformers.utils import logging as hf_logging

    tmp = folder.with_name(folder.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.to("cpu").save_pretrained(tmp)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    tokenizer.save_pretrained(tmp)
    write_json_record(tmp / STEP_MARK, {**meta, "files": files_under(tmp)})
    remove_written(folder)  # refused if it holds a file certify did not write
    tmp.replace(folder)
