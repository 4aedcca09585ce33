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

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...errors import BoundcalcError
from ...limits import check_allocation
from ...files import check_cells, input_files, loads_json, read_arrow, read_limited
from ...words import option
from ..safety import MAX_JSON_BYTES
from .hf import TaskModel, load_tokenizer, position_limit

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
    labels: dict[str, Any] | None = None  # how the labels were read (measure/data/labels.py)


class Columns(dict):
    """Column name → values, for the columns boundcalc may use; ``names`` lists every column of
    the file (for messages)."""

    names: list[str]

    def __init__(self, values: dict[str, Any], names: list[str]) -> None:
        super().__init__(values)
        self.names = names


def _columns_from_table(path: Path, kind: str, wanted: set[str]) -> Columns:
    table, names = read_arrow(path, kind, DataError, "data file", columns=sorted(wanted))
    return Columns({n: table.column(n).to_pylist() for n in table.column_names}, names)


def _columns_from_datasets(path: Path, wanted: set[str]) -> Columns:
    files = input_files(path, DataError, "data file")
    for f in files:
        if f.suffix != ".arrow" and f.stat().st_size > MAX_JSON_BYTES:
            raise DataError(f"{f}: {f.stat().st_size} bytes, more than the {MAX_JSON_BYTES} "
                            "allowed for a file beside the .arrow shards of a datasets folder")
        if f.name == "state.json":
            _check_state(f, set(files))
    try:
        from datasets import load_from_disk

        ds = load_from_disk(str(path))
    except Exception as exc:  # noqa: BLE001
        msg = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
        raise DataError(f"{path}: not a datasets.save_to_disk folder ({msg})") from None
    if hasattr(ds, "keys") and not hasattr(ds, "column_names"):
        raise DataError(f"{path}: a DatasetDict with splits {', '.join(ds.keys())}; pass the "
                        "folder of one split")
    names = list(ds.column_names)
    keep = [n for n in names if n in wanted]
    check_cells(int(ds.num_rows), len(keep), 0, str(path))
    return Columns({n: ds[n] for n in keep}, names)


def _check_state(state: Path, files: set[Path]) -> None:
    """The shards a ``state.json`` names must be files of its own folder that were checked
    (a name such as ``../../fifo`` would send the loader outside the folder)."""
    doc = loads_json(read_limited(state, MAX_JSON_BYTES, DataError, "datasets state file"),
                     str(state), DataError)
    shards = doc.get("_data_files") if isinstance(doc, dict) else None
    if not isinstance(shards, list):
        raise DataError(f"{state}: '_data_files' must be a list of shards")
    for item in shards:
        name = item.get("filename") if isinstance(item, dict) else None
        if not isinstance(name, str) or (state.parent / name) not in files \
                or Path(name).name != name:
            raise DataError(f"{state}: shard {str(name)[:80]!r} is not a file of "
                            f"{state.parent}")


def _tensors(path: Path) -> Columns:
    from ..samples import read_tensor_file

    obj = read_tensor_file(path, DataError)
    return Columns(obj, list(obj))


def _pick(cols: dict[str, Any], names: tuple[str, ...], what: str, source: str,
          required: bool = True) -> Any:
    for n in names:
        if n in cols:
            return cols[n]
    if required:
        shown = getattr(cols, "names", list(cols))
        err = DataError(f"{source}: no {what} column '{names[0]}' (columns: "
                        f"{', '.join(map(str, shown[:8])) or 'none'})")
        err.column = what  # which column role is missing: the CLI names its flag
        raise err
    return None


def _labels(raw: Any, n: int, tm: TaskModel, source: str,
            column: str) -> tuple[torch.Tensor, dict[str, Any]]:
    """One label per sample as class indices, by the policy of :mod:`.labels` (names through
    the model's ``id2label``, or indices), with the record of the rule used."""
    from .labels import check_class_labels, encode_labels

    arr = np.asarray(raw.numpy() if isinstance(raw, torch.Tensor) else raw)
    if arr.ndim == 1 and arr.dtype == object:  # each value one class (the rule certify reads by)
        check_class_labels(arr.tolist(), source, column, DataError)
    if arr.ndim != 1 or (arr.dtype == object and not all(
            isinstance(v, (str, int, float, np.integer, np.floating)) for v in arr.tolist())):
        got = "mixed values" if arr.ndim == 1 else f"shape {list(arr.shape)}"
        raise DataError(f"{source}: labels '{column}' must be one integer or class name per "
                        f"sample, got {got}")
    if arr.shape[0] != n:
        raise DataError(f"{source}: {arr.shape[0]} labels for {n} samples")
    return encode_labels(arr, tm.n_outputs, tm.model.config, tm.architecture, source, column,
                         DataError)


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
    """Read ``data`` for ``tm`` and cut it into batches (see the module docstring).

    The path is checked with ``stat`` before anything opens it (a regular file, or a folder of
    regular files), read within the memory budget (a Parquet file's row count from its footer
    first), and only the columns that can be used are turned into Python values. Text is
    tokenized with the checkpoint's tokenizer (loaded here, into ``tm.tokenizer``, only when
    needed: token ids need none), truncated to ``max_length`` and to the model's position
    limit."""
    if batch_size < 1:
        raise DataError(f"batch size must be >= 1, got {batch_size}")
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
        raise DataError(f"{option('max_length')} must be a positive integer, got "
                        f"{max_length!r}")
    return batches_of(read_columns(data, {text_column, label_column}), tm,
                      text_column=text_column, label_column=label_column,
                      max_length=max_length, batch_size=batch_size)


def batches_of(read: tuple[Columns, str, str], tm: TaskModel, *, text_column: str = "text",
               label_column: str = "label", max_length: int = 128,
               batch_size: int = 32) -> Batched:
    """:func:`read_batches` from columns already read (``read``: what :func:`read_columns`
    returned), so that one read serves batches of several sizes and other readers."""
    if batch_size < 1:
        raise DataError(f"batch size must be >= 1, got {batch_size}")
    cols, kind, source = read
    if tm.task == "image_classification":
        return _image_batches(cols, tm, source, kind, label_column, batch_size)
    return _token_batches(cols, tm, source, kind, text_column, label_column, max_length,
                          batch_size)


def read_columns(data: str | Path, columns: set[str]) -> tuple[Columns, str, str]:
    """``(columns, kind, source)`` of a data file or ``datasets`` folder: the named columns
    and those boundcalc reads by default (ids, pixels, labels), checked as
    :func:`read_batches` checks them."""
    path = Path(data)
    source = str(path)
    if not os.path.lexists(path):
        raise DataError(f"{source}: no such data file or folder")
    wanted = {*columns, "labels", "targets", "input_ids", "inputs", "pixel_values",
              "attention_mask"}
    if path.is_dir():
        cols = _columns_from_datasets(path, wanted)
        kind = "datasets folder"
    elif path.suffix.lower() in TABLE_SUFFIXES:
        kind = TABLE_SUFFIXES[path.suffix.lower()]
        cols = _columns_from_table(path, kind, wanted)
    elif path.suffix.lower() in TENSOR_SUFFIXES:
        cols = _tensors(path)
        kind = "tensors"
    else:
        input_files(path, DataError, "data file", folder=False)
        raise DataError(f"{source}: unknown data format (expected .csv, .jsonl, .parquet, a "
                        f"datasets folder or {', '.join(TENSOR_SUFFIXES)})")
    if not cols.names:
        raise DataError(f"{source}: empty data (no columns)")
    return cols, kind, source


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
    y, label_rule = _labels(_pick(cols, (label_column, "labels", "targets"), "label", source),
                            x.shape[0], tm, source, col)
    patch = int(getattr(cfg, "patch_size", 1))
    T = (want[1] // patch) ** 2 + 1
    x = x.float()
    batches = [({"pixel_values": x[lo:lo + batch_size]}, y[lo:lo + batch_size])
               for lo in range(0, x.shape[0], batch_size)]
    return Batched(batches, int(x.shape[0]), T, source,
                   f"{x.shape[0]} images from {kind}", columns={"label": col},
                   labels=label_rule)


def _int_matrix(raw: Any, source: str, what: str) -> torch.Tensor:
    """``raw`` as a B × T int64 tensor, or a one-line :class:`DataError`."""
    try:
        t = raw if isinstance(raw, torch.Tensor) else torch.as_tensor(np.asarray(raw))
    except (TypeError, ValueError, RuntimeError):
        raise DataError(f"{source}: {what} must be integers B x T") from None
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool or t.ndim != 2:
        raise DataError(f"{source}: {what} must be integers B x T, got dtype {t.dtype} "
                        f"shape {list(t.shape)}")
    return t.long()


def _pad_from_config(tok: Any, tm: TaskModel) -> None:
    """Give a tokenizer without a pad token the config's pad id, else its end-of-text or
    unknown token (padded positions are masked out: the choice does not change a number)."""
    pid = getattr(tm.model.config, "pad_token_id", None)
    if isinstance(pid, int) and not isinstance(pid, bool) and 0 <= pid < len(tok):
        name = tok.convert_ids_to_tokens(pid)
        if isinstance(name, str):
            tok.pad_token = name
            return
    if tok.eos_token or tok.unk_token:
        tok.pad_token = tok.eos_token or tok.unk_token
        return
    raise DataError(f"{tm.source}: the tokenizer has no pad, end-of-text or unknown token and "
                    "the config no pad_token_id: texts of different lengths cannot be batched")


def _token_batches(cols: dict[str, Any], tm: TaskModel, source: str, kind: str,
                   text_column: str, label_column: str, max_length: int,
                   batch_size: int) -> Batched:
    limit = position_limit(tm.model)
    note = ""
    if tm.task == "masked_lm" and tm.tokenizer is None:
        tm.tokenizer = load_tokenizer(tm.source)  # its mask token makes the targets
    ids_raw = _pick(cols, ("input_ids", "inputs"), "token", source, required=False) \
        if kind == "tensors" else None
    if ids_raw is not None:
        ids = _int_matrix(ids_raw, source, "token ids")
        if ids.numel() == 0:
            raise DataError(f"{source}: empty data (shape {list(ids.shape)})")
        if limit is not None and ids.shape[1] > limit:
            raise DataError(f"{source}: sequences of {ids.shape[1]} token ids, but the model "
                            f"takes at most {limit} positions; cut them to {limit}")
        vocab = int(getattr(tm.model.config, "vocab_size", 0) or 0)
        if vocab and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
            raise DataError(f"{source}: token ids range over {int(ids.min())}..{int(ids.max())}, "
                            f"outside the vocabulary 0..{vocab - 1}")
        mask = torch.ones_like(ids)
        pid = getattr(tm.model.config, "pad_token_id", None)
        if "attention_mask" not in cols and isinstance(pid, int) and not isinstance(pid, bool):
            hits = int((ids == pid).sum())
            if hits:  # padding or a real token (GPT-2's pad is often its end-of-text): not guessed
                note = (f"; no attention_mask: every position is attended and scored, including "
                        f"the {hits} positions holding the config's pad id {pid} (pass an "
                        "attention_mask to leave padding out)")
        if "attention_mask" in cols:
            mask = _int_matrix(cols["attention_mask"], source, "attention_mask")
            if mask.shape != ids.shape or bool(((mask != 0) & (mask != 1)).any()):
                raise DataError(f"{source}: attention_mask must be 0/1 of the token ids' shape "
                                f"{list(ids.shape)}, got shape {list(mask.shape)}")
        n = ids.shape[0]
        encoded = [(ids[lo:lo + batch_size], mask[lo:lo + batch_size])
                   for lo in range(0, n, batch_size)]
        col = "input_ids" if "input_ids" in cols else "inputs"
    else:
        if kind == "tensors":
            raise DataError(f"{source}: no 'inputs' or 'input_ids' tensor")
        texts = _texts(_pick(cols, (text_column,), "text", source), source, text_column)
        n = len(texts)
        if n == 0:
            raise DataError(f"{source}: empty data (0 rows)")
        if tm.tokenizer is None:
            tm.tokenizer = load_tokenizer(tm.source)
        tok = tm.tokenizer
        if tok.pad_token is None:
            _pad_from_config(tok, tm)
        if limit is not None and max_length > limit:
            note = f", truncated at {limit} tokens (the model's position limit)"
            max_length = limit
        # ids and mask, int64, at most max_length per text: refused before tokenizing
        check_allocation(16.0 * n * max_length, f"{source}: {n} texts tokenized to at most "
                                                f"{max_length} tokens")
        encoded = []
        vocab = int(getattr(tm.model.config, "vocab_size", 0) or 0)
        for lo in range(0, n, batch_size):
            enc = tok(texts[lo:lo + batch_size], padding=True, truncation=True,
                      max_length=max_length, return_tensors="pt")
            ids = enc["input_ids"]
            if vocab and ids.numel() and int(ids.max()) >= vocab:
                raise DataError(f"{tm.source}: the tokenizer gives token id {int(ids.max())}, "
                                f"outside the model's vocabulary 0..{vocab - 1}")
            encoded.append((ids, enc["attention_mask"]))
        col = text_column
    y_all = label_rule = None
    label_col = ""
    if not tm.is_lm:
        label_col = label_column if label_column in cols else \
            ("labels" if "labels" in cols else "targets")
        y_all, label_rule = _labels(_pick(cols, (label_column, "labels", "targets"), "label",
                                          source), n, tm, source, label_col)
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
    return Batched(batches, n, T, source, f"{n} sequences from {kind}{note}", tokens=tokens,
                   columns={"text": col, "label": label_col}, labels=label_rule)


def row_digests(data: Batched) -> list[bytes]:
    """One SHA-256 digest per row of ``data``: the row's model inputs as the model sees them
    (token ids at attended positions only, so padding to a batch's length does not count;
    pixel values as stored) and its label. Two rows with the same digest are the same sample,
    whatever file, link or copy they came from."""
    import hashlib

    out = []
    for inputs, labels in data.batches:
        arrays = {k: v.detach().cpu().contiguous().numpy() for k, v in sorted(inputs.items())
                  if k != "attention_mask"}
        mask = inputs.get("attention_mask")
        keep = None if mask is None else mask.detach().cpu().numpy().astype(bool)
        labs = (None if labels is None else
                labels.detach().cpu().to(torch.int64).contiguous().numpy())
        n = next(iter(inputs.values())).shape[0]
        heads = {k: f"{k}:{a.dtype}:".encode() for k, a in arrays.items()}
        for i in range(n):
            h = hashlib.sha256()
            for key, arr in arrays.items():
                row = arr[i]
                if keep is not None and row.shape == keep[i].shape:
                    row = row[keep[i]]
                h.update(heads[key] + str(row.shape).encode() + b";")
                h.update(row.tobytes())
            if labs is not None:
                h.update(b"label:" + str(labs[i].shape).encode() + b";" + labs[i].tobytes())
            out.append(h.digest())
    return out


def shared_rows(data: Batched, other: Batched) -> int:
    """How many rows of ``other`` are rows of ``data`` (by :func:`row_digests`)."""
    seen = set(row_digests(data))
    return sum(d in seen for d in row_digests(other))
