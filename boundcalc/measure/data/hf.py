"""Load a local Hugging Face folder whose config names a task head, as a live module.

Only local folders are read, through :mod:`..offline` (local files only, offline Hub client,
``trust_remote_code=False``, a folder with an ``auto_map`` refused); nothing is downloaded and
no code of the checkpoint runs. The task decides the
loss of the data pass (:mod:`.data_pass`): classification heads give per-sample logits over
``num_labels`` classes, language-model heads per-token logits over the vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import CheckpointError
from ...words import option
from ..offline import check_folder, from_pretrained, transformers_module
from ..safety import read_small_json

TASKS = {  # architecture-name suffix -> task
    "ForSequenceClassification": "sequence_classification",
    "ForImageClassification": "image_classification",
    "ForCausalLM": "causal_lm",
    "ForMaskedLM": "masked_lm",
    "LMHeadModel": "causal_lm",  # GPT-2 style naming of a causal LM head
}
SUPPORTED = ", ".join(f"*{k}" for k in TASKS if k != "LMHeadModel")


@dataclass
class TaskModel:
    """A live task-head model, its task, class count (or vocabulary size) and tokenizer."""

    model: Any
    task: str
    architecture: str
    n_outputs: int
    tokenizer: Any = None
    source: str = ""

    @property
    def is_lm(self) -> bool:
        return self.task in ("causal_lm", "masked_lm")


def read_config(path: str | Path) -> dict[str, Any] | None:
    """The folder's ``config.json`` as a dict, or None when ``path`` is not such a folder
    (a bounded, strict read: a FIFO or device config is refused, not waited on)."""
    p = Path(path)
    cfg = p / "config.json"
    if not p.is_dir() or not cfg.exists():
        return None
    data = read_small_json(cfg, "config.json")
    if not isinstance(data, dict):
        raise CheckpointError(f"{cfg}: expected a JSON object")
    return data


def task_of(config: dict[str, Any] | None) -> tuple[str, str] | None:
    """``(architecture, task)`` from the config's ``architectures``, or None for a bare model."""
    archs = (config or {}).get("architectures") or []
    if not isinstance(archs, list):
        return None
    for a in archs:
        for suffix, task in TASKS.items():
            if isinstance(a, str) and a.endswith(suffix):
                return a, task
    return None


def _refuse_regression(config: dict[str, Any], task: str, p: Path) -> None:
    """A classification head with one output (``num_labels = 1``) or ``problem_type =
    regression`` is a regression head: its loss is not a bounded classification loss."""
    if not task.endswith("classification"):
        return
    labels = config.get("num_labels")
    if labels is None and isinstance(config.get("id2label"), dict):
        labels = len(config["id2label"])
    regression = config.get("problem_type") == "regression"
    if regression or labels == 1:
        what = f"num_labels = {labels}" + (", problem_type = regression" if regression else "")
        raise CheckpointError(f"{p}: a regression head ({what}): not supported; the bounds "
                              "here are for classifiers (two or more classes, 0-1 and bounded "
                              "cross-entropy losses)")


def load_task_model(path: str | Path, device: Any = "cpu") -> TaskModel:
    """Load the folder with transformers; a bare encoder gets an error naming the heads."""
    p = Path(path)
    config = read_config(p)
    if config is not None:
        check_folder(p)  # before anything else: an auto_map is refused whatever the head
    if config is None:
        raise CheckpointError(f"{p}: {option('data')} needs a Hugging Face folder with a "
                              f"config.json naming a task head ({SUPPORTED})")
    found = task_of(config)
    if found is None:
        archs = config.get("architectures") or ["no 'architectures' entry"]
        raise CheckpointError(f"{p}: config names {', '.join(map(str, archs))[:80]}, which has "
                              f"no task head; {option('data')} needs one of {SUPPORTED}")
    arch, task = found
    _refuse_regression(config, task, p)  # before the weights are read
    transformers = transformers_module()
    cls = getattr(transformers, arch, None)
    if cls is None:
        auto = {"sequence_classification": "AutoModelForSequenceClassification",
                "image_classification": "AutoModelForImageClassification",
                "causal_lm": "AutoModelForCausalLM", "masked_lm": "AutoModelForMaskedLM"}[task]
        cls = getattr(transformers, auto)
    model = from_pretrained(cls, p, arch, attn_implementation="eager")
    model.eval()
    model.to(device)
    key = "num_labels" if task.endswith("classification") else "vocab_size"
    n_out = getattr(model.config, key, None)  # as transformers read it from the config
    if isinstance(n_out, bool) or not isinstance(n_out, int):
        raise CheckpointError(f"{p}: config.json: '{key}' must be an integer, got "
                              f"{str(n_out)[:40]!r}")
    if n_out < 1:
        raise CheckpointError(f"{p}: config gives no class count / vocabulary size")
    _refuse_regression({"num_labels": n_out}, task, p)
    return TaskModel(model, task, arch, n_out, None, str(p))


VOCAB_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "tokenizer.model", "spiece.model",
               "sentencepiece.bpe.model", "sentencepiece.model", "spm.model", "vocab.model",
               "bpe.codes", "merges.txt")


def load_tokenizer(path: str | Path) -> Any:
    """The checkpoint's own tokenizer, with a vocabulary; a one-line error when the folder has
    none (a ``tokenizer_config.json`` alone names a tokenizer but holds no vocabulary: loading
    it would map every word to the unknown token)."""
    p = Path(path)
    check_folder(p)  # an auto_map (tokenization code) is refused before anything else
    if not any((p / f).exists() for f in VOCAB_FILES):
        has_config = (p / "tokenizer_config.json").exists()
        alone = "; tokenizer_config.json alone has no vocabulary" if has_config else ""
        raise CheckpointError(
            f"{p}: no tokenizer in the checkpoint folder (no vocabulary: none of "
            f"{', '.join(VOCAB_FILES[:4])}, ...{alone}); text data is tokenized with the "
            "model's own tokenizer: save it with tokenizer.save_pretrained, or give token ids "
            "(.pt/.npz/.safetensors with input_ids)")
    tok = from_pretrained(transformers_module().AutoTokenizer, p, "the tokenizer")
    try:
        vocab = tok.get_vocab()
        special = set(getattr(tok, "all_special_ids", []) or [])
    except Exception as exc:  # noqa: BLE001 - a tokenizer class without a readable vocabulary
        raise CheckpointError(f"{p}: the tokenizer has no readable vocabulary "
                              f"({type(exc).__name__})") from None
    if not any(i not in special for i in vocab.values()):
        raise CheckpointError(f"{p}: the tokenizer has no vocabulary beyond its {len(vocab)} "
                              "special tokens (every word would become the unknown token); save "
                              "the real tokenizer with tokenizer.save_pretrained")
    return tok


def position_limit(model: Any) -> int | None:
    """The longest sequence ``model`` takes: its config's position count, less the rows a
    learned position table reserves below its first position (RoBERTa-style ``padding_idx``).
    None when the config names no limit."""
    import torch

    cfg = getattr(model, "config", None)
    limit = None
    for key in ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length"):
        v = getattr(cfg, key, None)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            limit = v
            break
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Embedding) and "position" in name.lower():
            usable = mod.num_embeddings - (mod.padding_idx + 1 if mod.padding_idx is not None
                                           else 0)
            limit = usable if limit is None else min(limit, usable)
            break
    return limit
