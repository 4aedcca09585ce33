"""Loading a Hugging Face folder without running its code, reading stdin or reaching the network.

The one gate every ``from_pretrained`` of boundcalc goes through (:func:`from_pretrained`):

* the folder is checked before transformers sees it: every file in it is a regular file
  (:func:`~boundcalc.files.input_files`; a FIFO would hang a loader), and no config file
  carries an ``auto_map`` — the key by which a checkpoint asks transformers to import its own
  ``modeling_*.py`` / ``tokenization_*.py`` or a Hub repository's code — refused in one line
  naming the file and the key;
* the call passes ``trust_remote_code=False`` and ``local_files_only=True``;
* the Hub client is switched to offline mode (``HF_HUB_OFFLINE``) before transformers is used,
  so no code path of it can open a connection;
* stdin is replaced by an empty stream during the call, so no prompt can read an answer.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path
from typing import Any, Iterator

from ..errors import BoundcalcError, CheckpointError
from ..files import input_files
from .safety import read_small_json

# Files transformers reads from a folder that may name code to import (``auto_map``).
CODE_CONFIGS = ("config.json", "tokenizer_config.json", "preprocessor_config.json",
                "processor_config.json", "image_processor_config.json",
                "feature_extractor_config.json", "video_preprocessor_config.json",
                "generation_config.json")
CODE_KEYS = ("auto_map",)


def go_offline() -> None:
    """Switch the Hugging Face Hub client to offline mode for this process (idempotent).

    The environment variables cover a later import; the constant covers a client already
    imported (it reads the variable once, at import)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    hub = sys.modules.get("huggingface_hub.constants")
    if hub is not None:
        hub.HF_HUB_OFFLINE = True


def transformers_module() -> Any:
    """``transformers``, imported in offline mode with its progress bars and logs quiet."""
    go_offline()
    try:
        import transformers
    except ImportError:  # pragma: no cover - the [hf] extra
        raise CheckpointError("loading a Hugging Face model needs transformers (pip install "
                              "'boundcalc[hf]')") from None
    go_offline()
    transformers.utils.logging.disable_progress_bar()  # our own progress goes to stderr
    transformers.utils.logging.set_verbosity_error()
    return transformers


def check_folder(path: str | Path, err: type[BoundcalcError] = CheckpointError) -> None:
    """Refuse a folder transformers must not load: a file in it that is not a regular file, or
    a config file with an ``auto_map`` (code the checkpoint would have executed)."""
    p = Path(path)
    input_files(p, err, "checkpoint file", recursive=False)
    for name in CODE_CONFIGS:
        f = p / name
        if not f.exists():
            continue
        try:
            doc = read_small_json(f, name)
        except CheckpointError as exc:
            raise err(str(exc)) from None
        if not isinstance(doc, dict):
            if name in ("config.json", "tokenizer_config.json"):
                raise err(f"{f}: expected a JSON object")
            continue
        for key in CODE_KEYS:
            if key in doc:
                raise err(f"{f}: key '{key}' names code for transformers to run "
                          f"({_first(doc[key])}); boundcalc never executes a checkpoint's "
                          "code: save the model with a built-in transformers class")


def _first(value: Any) -> str:
    if isinstance(value, dict) and value:
        k = next(iter(value))
        v = value[k]
        v = v[0] if isinstance(v, list) and v else v
        return f"{str(k)[:40]} -> {str(v)[:80]}"
    return str(value)[:80]


@contextlib.contextmanager
def no_stdin() -> Iterator[None]:
    """``sys.stdin`` is an empty stream inside the block: a prompt gets end-of-file."""
    saved = sys.stdin
    sys.stdin = io.StringIO("")
    try:
        yield
    finally:
        sys.stdin = saved


def from_pretrained(loader: Any, path: str | Path, what: str,
                    err: type[BoundcalcError] = CheckpointError, **kwargs: Any) -> Any:
    """``loader.from_pretrained(path, ...)`` through the gate of the module docstring; any
    failure is one line of ``err`` naming ``path`` and ``what`` (e.g. ``"the tokenizer"``)."""
    check_folder(path, err)
    go_offline()
    kwargs.update(local_files_only=True, trust_remote_code=False)
    try:
        with no_stdin():
            return loader.from_pretrained(str(path), **kwargs)
    except BoundcalcError:
        raise
    except Exception as exc:  # noqa: BLE001 - any loader failure is the checkpoint's fault
        msg = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:140]
        raise err(f"{path}: transformers could not load {what} ({msg})") from None
