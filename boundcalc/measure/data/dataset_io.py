"""Read a labelled data set for a task-head model and cut it into model-ready batches.

Formats: CSV, JSON Lines, Parquet (``--text-column``, ``--label-column``; text is tokenized with
the checkpoint's own tokenizer, truncated to ``--max-length``), a folder written by
``datasets.Dataset.save_to_disk`` (same columns, or ``pixel_values``), and ``.pt/.npz/
.safetensors`` tensors with ``inputs`` (token ids B × T or pixel values B × C × H × W; also
``input_ids`` / ``pixel_values``) and ``targets`` (or ``labels``).

Only token ids / pixels and labels are kept (no activations): the data pass then holds one batch
of activations at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...errors import BoundcalcError
from .hf import TaskModel, load_tokenizer

TABLE_SUFFIXES = {".csv": "csv", ".jsonl": "json", ".json": "json", ".parquet": "parquet",
                  ".pq": "parquet"}
TENSOR_SUFFIXES = (".pt", ".pth", ".npz", ".safetensors")


class DataError(BoundcalcError):
    """The data set does not fit the model (column, dtype, shape, label range, emptiness)."""


@dataclass
class Batched:
    """Model inputs cut into batches, with labels; ``seq_len`` is T (tokens or patches)."""

    batches: list[tuple[dict[str, torch.Tensor], torch.Tensor | None]]
    n: int
    seq_len: int
    source: str
    description: str
    tokens: int = 0  # total non-padding tokens (language models)
    columns: dict[str, str] = field(default_factory=dict)


def _columns_from_table(path: Path, kind: str) -> dict[str, list[Any]]:
    import pyarrow as pa

    try:
        if kind == "csv":
            import pyarrow.csv as pcsv

            table = pcsv.read_csv(str(path))
        elif kind == "json":
            import pyarrow.json as pjson

            table = pjson.read_json(str(path))
        else:
            import pyarrow.parquet as pq

            table = pq.read_table(str(path))
    except (pa.ArrowInvalid, OSError, ValueError) as exc:
        msg = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
        if path.is_file() and path.stat().st_size == 0:
            raise DataError(f"{path}: empty file") from None
        raise DataError(f"{path}: not a readable {kind.upper()} file ({msg})") from None
    return {name: table.column(name).to_pylist() for name in table.column_names}


def _columns_from_datasets(path: Path) -> dict[str, list[Any]]:
    try:
        from datasets import load_from_disk

        ds = load_from_disk(str(path))
    except Exception as exc:  # noqa: BLE001
        msg = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
        raise DataError(f"{path}: not a datasets.save_to_disk folder ({msg})") from None
    if hasattr(ds, "keys") and not hasattr(ds, "column_names"):
        raise DataError(f"{path}: a DatasetDict with splits {', '.join(ds.keys())}; pass the "
                        "folder of one split")
    return {name: ds[name] for name in ds.column_names}


def _tensors(path: Path) -> dict[str, Any]:
    from ..samples import _read_file

    return _read_file(path)


def _pick(cols: dict[str, Any], names: tuple[str, ...], what: str, source: str,
          required: bool = True) -> Any:
    for n in names:
        if n in cols:
            return cols[n]
    if required:
        raise DataError(f"{source}: no {what} column '{names[0]}' (columns: "
                        f"{', '.join(list(cols)[:8]) or 'none'})")
    return None


def _labels(raw: Any, n: int, tm: TaskModel, source: str, column: str) -> torch.Tensor:
    arr = np.asarray(raw.numpy() if isinstance(raw, torch.Tensor) else raw)
    if arr.dtype == object or arr.ndim != 1:
        raise DataError(f"{source}: labels '{column}' must be one integer per sample, got "
                        f"{'mixed values' if arr.dtype == object else f'shape {list(arr.shape)}'}")
    if arr.shape[0] != n:
        raise DataError(f"{source}: {arr.shape[0]} labels for {n} samples")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise DataError(f"{source}: labels '{column}' must be integers, got {arr.dtype} "
                            "with fractional or non-finite values")
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise DataError(f"{source}: labels '{column}' must be integers, got dtype {arr.dtype}")
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= tm.n_outputs:
        raise DataError(f"{source}: labels '{column}' range over {lo}..{hi}, but the head of "
                        f"{tm.architecture} has {tm.n_outputs} classes (0..{tm.n_outputs - 1})")
    return torch.from_numpy(arr.astype(np.int64))


def _texts(raw: Any, source: str, column: str) -> list[str]:
    texts = list(raw)
    bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
    if bad is not None:
        raise DataError(f"{source}: text column '{column}' row {bad} is "
                        f"{type(texts[bad]).__name__}, not text")
    return texts


def read_batches(data: str | Path, tm: TaskModel, *, text_column: str = "text",
                 label_column: str = "label", max_length: int = 128,
                 batch_size: int = 32) -> Batched:
    """Read ``data`` for ``tm`` and cut it into batches (see the module docstring)."""
    path = Path(data)
    source = str(path)
    if path.is_dir():
        cols = _columns_from_datasets(path)
        kind = "datasets folder"
    elif not path.exists():
        raise DataError(f"{source}: no such data file or folder")
    elif path.suffix.lower() in TABLE_SUFFIXES:
        kind = TABLE_SUFFIXES[path.suffix.lower()]
        cols = _columns_from_table(path, kind)
    elif path.suffix.lower() in TENSOR_SUFFIXES:
        cols = _tensors(path)
        kind = "tensors"
    else:
        raise DataError(f"{source}: unknown data format (expected .csv, .jsonl, .parquet, a "
                        f"datasets folder or {', '.join(TENSOR_SUFFIXES)})")
    if not cols:
        raise DataError(f"{source}: empty data (no columns)")
    if batch_size < 1:
        raise DataError(f"batch size must be >= 1, got {batch_size}")
    if tm.task == "image_classification":
        return _image_batches(cols, tm, source, kind, label_column, batch_size)
    return _token_batches(cols, tm, source, kind, text_column, label_column, max_length,
                          batch_size)


def _image_batches(cols: dict[str, Any], tm: TaskModel, source: str, kind: str,
                   label_column: str, batch_size: int) -> Batched:
    raw = _pick(cols, ("pixel_values", "inputs"), "pixel", source)
    x = torch.as_tensor(np.asarray(raw)) if not isinstance(raw, torch.Tensor) else raw
    if not x.is_floating_point() or x.ndim != 4:
        raise DataError(f"{source}: pixel values must be float B x C x H x W, got dtype "
                        f"{x.dtype} shape {list(x.shape)}")
    if x.shape[0] == 0:
        raise DataError(f"{source}: empty data (0 samples)")
    if not bool(torch.isfinite(x).all()):
        raise DataError(f"{source}: pixel values contain NaN or infinite values")
    cfg = tm.model.config
    want = (int(getattr(cfg, "num_channels", x.shape[1])), int(getattr(cfg, "image_size",
                                                                         x.shape[2])))
    if x.shape[1] != want[0] or x.shape[2] != want[1] or x.shape[3] != want[1]:
        raise DataError(f"{source}: images of shape {list(x.shape[1:])}, but the model takes "
                        f"[{want[0]}, {want[1]}, {want[1]}]")
    col = label_column if label_column in cols else ("labels" if "labels" in cols else "targets")
    y = _labels(_pick(cols, (label_column, "labels", "targets"), "label", source), x.shape[0],
                tm, source, col)
    patch = int(getattr(cfg, "patch_size", 1))
    T = (want[1] // patch) ** 2 + 1
    x = x.float()
    batches = [({"pixel_values": x[lo:lo + batch_size]}, y[lo:lo + batch_size])
               for lo in range(0, x.shape[0], batch_size)]
    return Batched(batches, int(x.shape[0]), T, source,
                   f"{x.shape[0]} images from {kind}", columns={"label": col})


def _token_batches(cols: dict[str, Any], tm: TaskModel, source: str, kind: str,
                   text_column: str, label_column: str, max_length: int,
                   batch_size: int) -> Batched:
    ids_raw = _pick(cols, ("input_ids", "inputs"), "token", source, required=False) \
        if kind == "tensors" else None
    if ids_raw is not None:
        ids = torch.as_tensor(np.asarray(ids_raw)) if not isinstance(ids_raw, torch.Tensor) \
            else ids_raw
        if ids.is_floating_point() or ids.ndim != 2:
            raise DataError(f"{source}: token ids must be integers B x T, got dtype {ids.dtype} "
                            f"shape {list(ids.shape)}")
        if ids.numel() == 0:
            raise DataError(f"{source}: empty data (shape {list(ids.shape)})")
        vocab = int(getattr(tm.model.config, "vocab_size", 0) or 0)
        if vocab and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
            raise DataError(f"{source}: token ids range over {int(ids.min())}..{int(ids.max())}, "
                            f"outside the vocabulary 0..{vocab - 1}")
        ids = ids.long()
        mask = torch.ones_like(ids)
        n = ids.shape[0]
        encoded = [(ids[lo:lo + batch_size], mask[lo:lo + batch_size])
                   for lo in range(0, n, batch_size)]
        col = "inputs"
    else:
        if kind == "tensors":
            raise DataError(f"{source}: no 'inputs' or 'input_ids' tensor")
        texts = _texts(_pick(cols, (text_column,), "text", source), source, text_column)
        n = len(texts)
        if n == 0:
            raise DataError(f"{source}: empty data (0 rows)")
        tok = load_tokenizer(tm.source)
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token or tok.unk_token
        encoded = []
        for lo in range(0, n, batch_size):
            enc = tok(texts[lo:lo + batch_size], padding=True, truncation=True,
                      max_length=max_length, return_tensors="pt")
            encoded.append((enc["input_ids"], enc["attention_mask"]))
        col = text_column
    y_all = None
    label_col = ""
    if not tm.is_lm:
        label_col = label_column if label_column in cols else \
            ("labels" if "labels" in cols else "targets")
        y_all = _labels(_pick(cols, (label_column, "labels", "targets"), "label", source), n,
                        tm, source, label_col)
    batches = []
    lo = 0
    T = 0
    tokens = 0
    for ids, mask in encoded:
        b = ids.shape[0]
        y = y_all[lo:lo + b] if y_all is not None else None
        batches.append(({"input_ids": ids, "attention_mask": mask}, y))
        T = max(T, int(mask.sum(1).max()))
        tokens += int(mask.sum())
        lo += b
    if tm.task == "causal_lm" and T < 2:
        raise DataError(f"{source}: every sequence has fewer than 2 tokens; a causal LM needs "
                        "at least one next-token target")
    return Batched(batches, n, T, source, f"{n} sequences from {kind}", tokens=tokens,
                   columns={"text": col, "label": label_col})
