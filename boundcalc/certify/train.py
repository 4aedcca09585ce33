"""Training for ``certify``: the base model as a sequence classifier, and the default training
loop (Adam on the cross-entropy, plus a proximal pull toward an anchor for the posterior).

A user's own loop replaces :func:`train_classifier` through the ``train`` argument of
:func:`boundcalc.certify.certify`: it gets the model, the tokenizer, the rows and a
:class:`TrainSpec`, and trains the model in place."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from ..errors import BoundcalcError, CheckpointError

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


@dataclass
class TrainSpec:
    """What one training stage is asked to do.

    ``stage``: ``"prior"`` (from the base, on the prior's data) or ``"posterior"`` (from the
    prior, on S). ``anchor``: for the posterior, the prior's weights by parameter name; the
    loss adds ``proximal``·Σ‖w − anchor‖² (a pull toward the prior: the KL of a prior centred
    there grows with that distance). ``device``: where to train."""

    stage: str
    epochs: int
    lr: float
    batch_size: int
    max_length: int
    seed: int
    device: torch.device
    proximal: float = 0.0
    anchor: Mapping[str, torch.Tensor] | None = None


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


def build_classifier(base: str | Path, classes: Sequence[Any], seed: int,
                     tokenizer: Any) -> Any:
    """A ``*ForSequenceClassification`` for ``classes`` from the base: its pretrained weights
    with a new head (drawn after ``torch.manual_seed(seed)``), or a random initialisation of
    its config when it has no weights."""
    from transformers import AutoConfig, AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    folder, raw = base_folder(base)
    names = {i: str(c) for i, c in enumerate(classes)}
    extra = dict(num_labels=len(classes), id2label=names,
                 label2id={v: k for k, v in names.items()})
    if raw.get("pad_token_id") is None and getattr(tokenizer, "pad_token_id", None) is not None:
        extra["pad_token_id"] = tokenizer.pad_token_id
    fields = {k: v for k, v in raw.items() if k not in ("model_type", "architectures")}
    cfg = AutoConfig.for_model(raw["model_type"], **{**fields, **extra})
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


def _batches(tokenizer: Any, texts: Sequence[str], max_length: int, device: torch.device,
             rows: Sequence[int]) -> dict[str, torch.Tensor]:
    enc = tokenizer([texts[i] for i in rows], padding=True, truncation=True,
                    max_length=max_length, return_tensors="pt")
    return {k: v.to(device) for k, v in enc.items()}


def train_classifier(model: Any, tokenizer: Any, texts: Sequence[str], labels: Sequence[int],
                     spec: TrainSpec, progress: Progress | None = None) -> None:
    """Adam on the mean cross-entropy over shuffled batches (seeded), ``spec.epochs`` passes,
    plus ``spec.proximal``·Σ‖w − anchor‖² when an anchor is given; trains in place on
    ``spec.device`` and leaves the model in eval mode there."""
    from ..measure.threads import blas_threads, data_threads

    if spec.epochs < 0 or spec.batch_size < 1 or not spec.lr > 0:
        raise BoundcalcError("training needs epochs >= 0, a batch size >= 1 and a learning "
                             "rate > 0")
    # a model no wider than 512 on a CPU: one thread (a thread pool on a shared 2-core
    # machine made a step of a width-64 BERT 8× slower)
    with blas_threads(data_threads(model, spec.device)):
        _train(model, tokenizer, texts, labels, spec, progress)


def _train(model: Any, tokenizer: Any, texts: Sequence[str], labels: Sequence[int],
           spec: TrainSpec, progress: Progress | None) -> None:
    model.to(spec.device)
    y = torch.as_tensor(list(labels), dtype=torch.long, device=spec.device)
    gen = torch.Generator().manual_seed(spec.seed)
    pull = []
    if spec.anchor is not None and spec.proximal > 0:
        pull = [(p, spec.anchor[n].to(spec.device, p.dtype)) for n, p in model.named_parameters()
                if p.requires_grad and n in spec.anchor]
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=spec.lr)
    steps = spec.epochs * math.ceil(len(y) / spec.batch_size)
    done = 0
    model.train()
    for _ in range(spec.epochs):
        perm = torch.randperm(len(y), generator=gen).tolist()
        for lo in range(0, len(y), spec.batch_size):
            rows = perm[lo:lo + spec.batch_size]
            logits = model(**_batches(tokenizer, texts, spec.max_length, spec.device,
                                      rows)).logits
            loss = torch.nn.functional.cross_entropy(logits, y[rows])
            if pull:
                loss = loss + spec.proximal * sum((p - a).square().sum() for p, a in pull)
            opt.zero_grad()
            loss.backward()
            opt.step()
            done += 1
            if progress:
                progress(done, steps, f"training the {spec.stage}")
    model.eval()


def error_rate(model: Any, tokenizer: Any, texts: Sequence[str], labels: Sequence[int],
               max_length: int, batch_size: int, device: torch.device) -> float:
    """0-1 error of the model on the rows (eval mode, no gradients)."""
    if not len(texts):
        return float("nan")
    from ..measure.threads import blas_threads, data_threads

    model.to(device).eval()
    with blas_threads(data_threads(model, device)):
        return _errors(model, tokenizer, texts, labels, max_length, batch_size, device)


def _errors(model: Any, tokenizer: Any, texts: Sequence[str], labels: Sequence[int],
            max_length: int, batch_size: int, device: torch.device) -> float:
    wrong = 0
    y = torch.as_tensor(list(labels), dtype=torch.long)
    with torch.no_grad():
        for lo in range(0, len(texts), batch_size):
            rows = list(range(lo, min(lo + batch_size, len(texts))))
            pred = model(**_batches(tokenizer, texts, max_length, device, rows)).logits
            wrong += int((pred.argmax(-1).cpu() != y[rows]).sum())
    return wrong / len(texts)


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
    (tmp / "certify_step.json").write_text(json.dumps(meta, indent=1, default=str))
    if folder.exists():
        shutil.rmtree(folder)
    tmp.replace(folder)
