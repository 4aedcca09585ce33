"""The data side of ``certify``: a labelled table read once, a seeded split of its rows into
the prior's data and the bound sample S that reads no label (:func:`seeded_split`), the class
list taken from the prior's rows alone (:func:`class_names`, :func:`check_no_unseen`) and the
labels as class indices, recorded as indices and hashes (``split.json``) so that a later run can
check it is the same split. Nothing the prior is trained from depends on a label of S."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import BoundcalcError
from ..files import hash_into
from ..words import option


@dataclass
class Labelled:
    """Texts with their raw labels, from one file or ``datasets`` folder."""

    texts: list[str]
    labels: list[Any]
    source: str
    sha256: str  # of the file's bytes (a folder: of its files, by name)


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes, or of a folder's files (sorted by relative name)."""
    p = Path(path)
    h = hashlib.sha256()
    files = sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else [p]
    for f in files:
        if p.is_dir():
            h.update(f.relative_to(p).as_posix().encode() + b"\0")
        hash_into(h, f)
    return h.hexdigest()


def read_labelled(path: str | Path, text_column: str = "text",
                  label_column: str = "label") -> Labelled:
    """Read the text and label columns of a CSV / JSON Lines / Parquet file or a
    ``datasets.save_to_disk`` folder (the reader of ``measure --data``). A missing column is
    an error that names it (and carries ``column``, so the CLI names its flag); each label must
    be one class by measure's rule (:func:`~boundcalc.measure.data.labels.check_class_labels`:
    an integer or a non-empty name; a list, an object, a boolean, 1.5 or an empty cell is
    refused, naming the row)."""
    from ..measure.data.dataset_io import DataError, _pick, _texts, read_columns
    from ..measure.data.labels import check_class_labels

    cols, _, source = read_columns(path, {text_column, label_column})
    texts = _texts(_pick(cols, (text_column,), "text", source), source, text_column)
    raw = _pick(cols, (label_column,), "label", source)
    labels = list(raw.tolist() if hasattr(raw, "tolist") else raw)
    if len(labels) != len(texts):
        raise DataError(f"{source}: {len(texts)} texts but {len(labels)} labels")
    if not texts:
        raise DataError(f"{source}: no rows")
    check_class_labels(labels, source, label_column, DataError)  # measure's rule, shared
    return Labelled(texts, labels, source, file_sha256(path))


def subset(rows: Labelled, keep: Sequence[int]) -> Labelled:
    """The rows ``keep`` of ``rows`` (in that order), from the same file."""
    return Labelled([rows.texts[i] for i in keep], [rows.labels[i] for i in keep],
                    rows.source, rows.sha256)


def _key(y: Any) -> tuple[int, Any]:
    """Sort key of a label: numbers by value, then strings."""
    if isinstance(y, bool):
        return (1, str(y))
    if isinstance(y, (int, float)):
        return (0, y)
    return (1, str(y))


def _canon(y: Any) -> Any:
    """A label as one class: a float with an integer value is that integer."""
    return int(y) if isinstance(y, float) and y.is_integer() else y


def class_names(labels: Sequence[Any]) -> list[Any]:
    """The distinct labels, sorted (numbers by value, then text); each is one class.
    ``certify`` passes the prior's rows only."""
    out = sorted({_canon(y) for y in labels}, key=_key)
    if len(out) < 2:
        raise BoundcalcError(f"the labels take {len(out)} value(s); a classifier needs at "
                             "least 2 classes")
    return out


def encode(labels: Sequence[Any], classes: Sequence[Any], source: str) -> np.ndarray:
    """Labels as indices into ``classes``; a label outside them is an error naming it."""
    index = {c: i for i, c in enumerate(classes)}
    out = np.empty(len(labels), dtype=np.int64)
    for i, y in enumerate(labels):
        y = _canon(y)
        if y not in index:
            raise BoundcalcError(f"{source}: row {i} has label {y!r}, which is not one of the "
                                 f"classes of the training data ({', '.join(map(str, classes))})")
        out[i] = index[y]
    return out


def seeded_split(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(prior, bound)`` row indices of ``n`` rows: a permutation seeded by ``seed``, its
    first round(fraction·n) rows to the prior's data, the rest to S; both sorted. It reads no
    label (the split depends on n, the fraction and the seed alone), so no label of S can
    reach the prior through it. ``fraction`` in (0, 1), as
    :class:`~boundcalc.certify.config.CertifyConfig` declares it (checked there)."""
    perm = np.random.default_rng(seed).permutation(n)
    k = int(round(fraction * n))
    p, b = np.sort(perm[:k]), np.sort(perm[k:])
    if len(p) == 0 or len(b) == 0:
        raise BoundcalcError(f"{option('prior_fraction')} {fraction} leaves "
                             f"{'the prior split' if len(p) == 0 else 'S'} empty ({n} rows)")
    return p, b


def check_no_unseen(labels: Sequence[Any], classes: Sequence[Any], what: str) -> None:
    """Refuse ``labels`` (of S, or of the held-out set) with a class that none of the prior's
    rows has: the prior, and the model trained from it, have no output for it. The message
    names the class and ``what``."""
    known = {_canon(c) for c in classes}
    unseen = sorted({_canon(y) for y in labels} - known, key=_key)
    if unseen:
        raise BoundcalcError(
            f"{what} has label {unseen[0]!r}"
            + (f" (and {len(unseen) - 1} more unseen class(es))" if len(unseen) > 1 else "")
            + " that none of the prior's rows has; the classes are read from the prior's "
            f"data alone ({', '.join(map(str, classes))}) so that no label of S reaches the "
            f"prior: give more rows of that class, another {option('seed')} or a larger "
            f"{option('prior_fraction')}")


def rows_sha256(texts: Sequence[str], labels: Sequence[int]) -> str:
    """SHA-256 of the rows (text and class index, in order) of one split."""
    h = hashlib.sha256()
    for t, y in zip(texts, labels):
        h.update(json.dumps([t, int(y)], ensure_ascii=False).encode() + b"\n")
    return h.hexdigest()


def write_jsonl(path: Path, texts: Sequence[str], labels: Sequence[int]) -> None:
    """``{"text": ..., "label": class index}`` per line (what ``measure --data`` reads),
    written atomically (:func:`boundcalc.files.write_text_atomic`)."""
    from ..files import write_text_atomic

    write_text_atomic(path, "".join(json.dumps({"text": t, "label": int(y)}, ensure_ascii=False)
                                    + "\n" for t, y in zip(texts, labels)))
