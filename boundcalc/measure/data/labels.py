"""One label policy for every data-side command: class names or class indices, read the way the
model's own config reads them.

A classifier's ``config.json`` names its classes (``id2label``); ``boundcalc certify`` writes
there the classes it found, in its sorted order (``str(class)``), so a model certify trained and
a model a user trained with named classes read the same file the same way. The rule
(:func:`encode_labels`):

- **text labels** are class names: each must be a value of the model's ``id2label``; its index
  is that key. A name the model does not have is refused, naming both sets.
- **integer labels** (integer-valued floats included) are class indices 0..K−1, as a plain
  ``labels`` tensor is. When they are not all indices but all are class names of the model
  (a model whose classes are 2, 5 and 7, read from the raw file certify was given), they are
  read as names. When both readings apply and differ, the labels are refused as ambiguous:
  never a silently wrong class.
- anything else (lists, mixed values, NaN, an empty cell) is refused.

The rule on one value (:func:`label_problem`, :func:`check_class_labels`) is shared with
``certify``'s reader (:func:`boundcalc.certify.split.read_labelled`): a label is one scalar
class, an integer (an integer-valued float included) or a non-empty name (text); a list, an
object, a boolean, a fractional or non-finite number and an empty cell are refused, naming the
row.

Contract: the result is an int64 tensor of indices in 0..K−1 and a record of the rule used
(``{"rule": "class indices" | "class names (the model's id2label)", "classes": {...}}``), which
the stats file keeps under ``provenance.labels``.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import torch

_DEFAULT_NAME = re.compile(r"LABEL_\d+")


def model_class_names(config: Any, k: int) -> dict[str, int] | None:
    """``{name: index}`` from a config's ``id2label``, or None when it names nothing (absent,
    transformers' defaults ``LABEL_i``, not one name per class, or a name given twice)."""
    raw = getattr(config, "id2label", None)
    if not isinstance(raw, dict) or len(raw) != k:
        return None
    names: dict[str, int] = {}
    for key, name in raw.items():
        try:
            idx = int(key)
        except (TypeError, ValueError):
            return None
        if not isinstance(name, str) or name in names or not 0 <= idx < k:
            return None
        names[name] = idx
    if all(_DEFAULT_NAME.fullmatch(n) for n in names):
        return None
    return names


def label_problem(value: Any) -> str | None:
    """Why ``value`` cannot be one class label (a few words such as ``"empty"`` or ``"a
    list"``), or None when it can: an integer (an integer-valued float included, numpy's too)
    or a non-empty string."""
    if value is None or (isinstance(value, str) and value == ""):
        return "empty"
    if isinstance(value, str):
        return None
    if isinstance(value, (bool, np.bool_)):
        return f"a boolean ({value}; write the classes as 0/1 or as names)"
    if isinstance(value, (int, np.integer)):
        return None
    if isinstance(value, (float, np.floating)):
        if value != value:
            return "empty"
        if not np.isfinite(value):
            return f"not finite ({value})"
        return None if float(value).is_integer() else f"a fractional number ({value})"
    shown = str(value)[:40]
    if isinstance(value, dict):
        return f"an object ({shown})"
    if isinstance(value, (list, tuple, np.ndarray)):
        return f"a list ({shown})"
    return f"a {type(value).__name__} ({shown})"


def check_class_labels(values: Any, source: str, column: str,
                       error: type[Exception]) -> None:
    """Refuse the first of ``values`` that is not one class label (:func:`label_problem`), with
    one line of ``error`` naming ``source``, ``column``, the row and what the value is."""
    for i, v in enumerate(values):
        why = label_problem(v)
        if why is not None:
            raise error(f"{source}: labels '{column}' row {i} is {why}; a label is one class: "
                        "an integer or a non-empty name (text)")


def _as_text(arr: np.ndarray) -> list[str] | None:
    """The labels as text when every one is a non-empty string, else None."""
    if arr.dtype.kind == "U":
        vals = arr.tolist()
    elif arr.dtype == object and all(isinstance(v, str) for v in arr.tolist()):
        vals = arr.tolist()
    else:
        return None
    return vals


def encode_labels(arr: np.ndarray, k: int, config: Any, architecture: str, source: str,
                  column: str, error: type[Exception]) -> tuple[torch.Tensor, dict[str, Any]]:
    """Labels ``arr`` (one per row) as class indices of a ``k``-class head (module docstring).
    ``error`` is the exception class raised (with one line naming ``source`` and ``column``)."""
    names = model_class_names(config, k)
    shown = (", ".join(list(names)[:8]) + (", …" if len(names) > 8 else "")) if names else ""
    text = _as_text(arr)
    if text is not None:
        check_class_labels(text, source, column, error)
        if names is None:
            raise error(f"{source}: labels '{column}' are class names ({_few(text)}), but the "
                        f"head of {architecture} does not name its classes (its config's "
                        "id2label is absent or the defaults LABEL_i): give the labels as class "
                        f"indices 0..{k - 1}, or a model whose config names its classes")
        unknown = sorted({t for t in text if t not in names})
        if unknown:
            raise error(f"{source}: labels '{column}' include {_few(unknown)}, which the head "
                        f"of {architecture} does not name (its classes: {shown})")
        y = np.array([names[t] for t in text], dtype=np.int64)
        return torch.from_numpy(y), {"rule": "class names (the model's id2label)",
                                     "classes": dict(names)}
    if arr.dtype == object:
        raise error(f"{source}: labels '{column}' must be one integer or one class name per "
                    "sample, got mixed values")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise error(f"{source}: labels '{column}' must be integers, got {arr.dtype} "
                        "with fractional or non-finite values")
    elif arr.dtype.kind not in "iu":
        raise error(f"{source}: labels '{column}' must be integers or class names, got dtype "
                    f"{arr.dtype}")
    # the range in the file's own values (a float or uint64 beyond int64 is never wrapped)
    lo, hi = int(arr.min()), int(arr.max())
    in_range = lo >= 0 and hi < k
    distinct = sorted({int(v) for v in np.unique(arr)}) if arr.size else []
    by_name = names is not None and all(str(v) in names for v in distinct)
    indices = {"rule": "class indices", "classes": {str(i): i for i in range(k)}}
    if in_range and (not by_name or all(names[str(v)] == v for v in distinct)):
        return torch.from_numpy(arr.astype(np.int64)), indices
    if by_name and not in_range:
        y = np.array([names[str(int(v))] for v in arr.tolist()], dtype=np.int64)
        return torch.from_numpy(y), {"rule": "class names (the model's id2label)",
                                     "classes": dict(names)}
    if by_name:
        raise error(f"{source}: labels '{column}' ({_few(distinct)}) read both as class indices "
                    f"and as the class names of {architecture} ({shown}), and the two readings "
                    "differ: write the labels as class names (text) to be read by name")
    raise error(f"{source}: labels '{column}' range over {lo}..{hi}, but the head of "
                f"{architecture} has {k} classes (0..{k - 1})"
                + (f" named {shown}" if names else ""))


def _few(values: list[Any]) -> str:
    vals = [repr(v) if isinstance(v, str) else str(v) for v in list(dict.fromkeys(values))[:5]]
    return ", ".join(vals) + (", …" if len(set(values)) > 5 else "")
