"""A real end-to-end example: a small ViT on scikit-learn's digits, saved as real HF folders.

The 1797 8×8 digits (shipped offline with scikit-learn) are shuffled once (seed) and split
into three disjoint parts:

* ``prior``: trains the prior centre (``ViTForImageClassification`` from a random init);
* ``bound``: the sample S the certified bounds are about; the posterior (the model that is
  measured) is the prior fine-tuned on S, with a pull ``post_l2``·‖w − w_prior‖² toward the
  prior, ``post_l2_embeddings`` on the embeddings (a PAC-Bayes posterior may depend on S in
  any way, so this choice is free; the KL grows with ‖w_g − w_prior,g‖²/σ_g², and the
  embeddings are the group that tolerates the least noise);
* ``test``: held out, never touched by training or by the bounds; its error is reported beside
  every certified number.

Because the prior centre was fit on ``prior`` only, it is independent of S: a PAC-Bayes prior
``N(w_prior, σ²I)`` is legitimate (Dziugaite et al. 2021's data-dependent priors, done with a
disjoint split). ``random_init`` is also saved, to show the bound with the prior at a
data-free random initialisation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from boundcalc.measure.device import resolve_device
from boundcalc.measure.threads import blas_threads


@dataclass
class DigitsConfig:
    seed: int = 0
    n_prior: int = 700
    n_bound: int = 700
    hidden: int = 32
    layers: int = 2
    heads: int = 2
    prior_epochs: int = 40
    prior_lr: float = 3e-3
    post_epochs: int = 2
    post_lr: float = 3e-4
    post_l2: float = 5.0  # fine-tuning loss + post_l2·‖w − w_prior‖²: a pull toward the prior
    post_l2_embeddings: float = 100.0  # the same pull on the embeddings (most noise-sensitive)
    batch: int = 64
    device: str = "auto"  # where it trains: CUDA when present


def _config(cfg: DigitsConfig):
    from transformers import ViTConfig

    return ViTConfig(image_size=8, patch_size=2, num_channels=1, hidden_size=cfg.hidden,
                     num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads,
                     intermediate_size=2 * cfg.hidden, num_labels=10,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                     id2label={i: str(i) for i in range(10)},
                     label2id={str(i): i for i in range(10)})


def splits(cfg: DigitsConfig) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{"prior", "bound", "test"}: (pixel values N×1×8×8 float32 in [−1, 1], labels int64)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images.astype(np.float32) / 16.0 - 0.5) / 0.5
    x = x[:, None]
    y = d.target.astype(np.int64)
    order = np.random.default_rng(cfg.seed).permutation(len(y))
    a, b = cfg.n_prior, cfg.n_prior + cfg.n_bound
    parts = {"prior": order[:a], "bound": order[a:b], "test": order[b:]}
    return {k: (x[v], y[v]) for k, v in parts.items()}


def _train(model, x: np.ndarray, y: np.ndarray, epochs: int, lr: float, batch: int,
           seed: int, l2: float = 0.0, l2_embeddings: float | None = None) -> None:
    """Adam on the cross-entropy; with ``l2`` > 0 plus Σ l2·‖w − w_start‖² over the parameters
    (``l2_embeddings`` on those of the embeddings), which keeps the weights near where training
    started: the KL of a prior centred there grows with ‖w − w_start‖²."""
    gen = torch.Generator().manual_seed(seed)
    emb = l2 if l2_embeddings is None else l2_embeddings
    pull = [(p, p.detach().clone(), emb if "embeddings" in n else l2)
            for n, p in model.named_parameters()] if l2 > 0 or emb > 0 else []
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    dev = next(model.parameters()).device  # batches go where the model is
    X, Y = torch.from_numpy(x).to(dev), torch.from_numpy(y).to(dev)
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(len(Y), generator=gen)
        for lo in range(0, len(Y), batch):
            idx = perm[lo:lo + batch]
            loss = torch.nn.functional.cross_entropy(model(pixel_values=X[idx]).logits, Y[idx])
            if pull:
                loss = loss + sum(w * (p - s).square().sum() for p, s, w in pull)
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()


def error(model, x: np.ndarray, y: np.ndarray) -> float:
    """0-1 error of ``model`` on (x, y)."""
    with torch.no_grad():
        dev = next(model.parameters()).device
        pred = model(pixel_values=torch.from_numpy(x).to(dev)).logits.argmax(-1).cpu().numpy()
    return float(np.mean(pred != y))


def build(out: str | Path, cfg: DigitsConfig | None = None) -> dict[str, object]:
    """Train and save ``random_init/``, ``prior/``, ``model/`` (HF folders) and
    ``bound.npz`` / ``test.npz`` / ``prior.npz`` (``pixel_values``, ``labels``) under ``out``."""
    from transformers import ViTForImageClassification
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # "Writing model shards" bars for three tiny folders
    try:
        return _build(out, cfg or DigitsConfig(), ViTForImageClassification)
    finally:
        if bars:
            hf_logging.enable_progress_bar()


def _build(out: str | Path, cfg: DigitsConfig, vit: type) -> dict[str, object]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    data = splits(cfg)
    for name, (x, y) in data.items():
        np.savez(out / f"{name}.npz", pixel_values=x, labels=y)
    torch.manual_seed(cfg.seed)
    model = vit(_config(cfg))
    model.save_pretrained(out / "random_init")
    model.to(resolve_device(cfg.device))  # trains on CUDA when present
    with blas_threads(1):  # a width-32 model: a thread pool costs more than it gives (5×)
        _train(model, *data["prior"], cfg.prior_epochs, cfg.prior_lr, cfg.batch, cfg.seed)
        model.save_pretrained(out / "prior")
        _train(model, *data["bound"], cfg.post_epochs, cfg.post_lr, cfg.batch, cfg.seed + 1,
               cfg.post_l2, cfg.post_l2_embeddings)
    model.save_pretrained(out / "model")
    test_err = error(model, *data["test"])
    n_test = len(data["test"][1])
    return {"dir": str(out), "test_error": test_err, "n_test": n_test,
            "test_error_stderr": math.sqrt(max(test_err * (1 - test_err), 1e-12) / n_test),
            "bound_error": error(model, *data["bound"])}
