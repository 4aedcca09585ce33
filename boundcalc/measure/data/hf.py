"""Load a local Hugging Face folder whose config names a task head, as a live module.

Only local folders are read (``local_files_only``); nothing is downloaded. The task decides the
loss of the data pass (:mod:`.data_pass`): classification heads give per-sample logits over
``num_labels`` classes, language-model heads per-token logits over the vocabulary.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import CheckpointError

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
    """The folder's ``config.json`` as a dict, or None when ``path`` is not such a folder."""
    p = Path(path)
    cfg = p / "config.json"
    if not p.is_dir() or not cfg.is_file():
        return None
    try:
        data = json.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{cfg}: not readable JSON ({str(exc)[:80]})") from None
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


def load_task_model(path: str | Path, device: Any = "cpu") -> TaskModel:
    """Load the folder with transformers; a bare encoder gets an error naming the heads."""
    p = Path(path)
    config = read_config(p)
    if config is None:
        raise CheckpointError(f"{p}: --data needs a Hugging Face folder with a config.json "
                              f"naming a task head ({SUPPORTED})")
    found = task_of(config)
    if found is None:
        archs = config.get("architectures") or ["no 'architectures' entry"]
        raise CheckpointError(f"{p}: config names {', '.join(map(str, archs))[:80]}, which has "
                              f"no task head; --data needs one of {SUPPORTED}")
    arch, task = found
    try:
        import transformers
    except ImportError:  # pragma: no cover - the [hf] extra
        raise CheckpointError("loading a task-head model needs transformers (pip install "
                              "'boundcalc[hf]')") from None
    transformers.utils.logging.disable_progress_bar()  # our own progress goes to stderr
    transformers.utils.logging.set_verbosity_error()
    cls = getattr(transformers, arch, None)
    if cls is None:
        auto = {"sequence_classification": "AutoModelForSequenceClassification",
                "image_classification": "AutoModelForImageClassification",
                "causal_lm": "AutoModelForCausalLM", "masked_lm": "AutoModelForMaskedLM"}[task]
        cls = getattr(transformers, auto)
    try:
        model = cls.from_pretrained(str(p), local_files_only=True, attn_implementation="eager")
    except Exception as exc:  # noqa: BLE001 - any loader failure is the checkpoint's fault
        msg = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:140]
        raise CheckpointError(f"{p}: transformers could not load {arch} ({msg})") from None
    model.eval()
    model.to(device)
    n_out = int(config.get("num_labels") or len(config.get("id2label") or {}) or 0) \
        if task.endswith("classification") else int(config.get("vocab_size") or 0)
    if task.endswith("classification"):
        n_out = int(getattr(model.config, "num_labels", n_out))
    if n_out < 1:
        raise CheckpointError(f"{p}: config gives no class count / vocabulary size")
    return TaskModel(model, task, arch, n_out, None, str(p))


def load_tokenizer(path: str | Path) -> Any:
    """The checkpoint's own tokenizer; a one-line error when the folder has none."""
    files = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json",
             "tokenizer.model", "spiece.model")
    if not any((Path(path) / f).is_file() for f in files):
        raise CheckpointError(f"{path}: no tokenizer in the checkpoint folder (none of "
                              f"{', '.join(files[:4])}, ...); text data is tokenized with the "
                              "model's own tokenizer: save it with tokenizer.save_pretrained")
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:  # noqa: BLE001
        msg = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
        raise CheckpointError(f"{path}: no usable tokenizer in the checkpoint folder (text data "
                              f"is tokenized with the model's own tokenizer): {msg}") from None
