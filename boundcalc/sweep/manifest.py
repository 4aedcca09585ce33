"""Sweep manifests: one row per checkpoint, validated whole before any work starts.

A manifest is a CSV or Parquet file (or a glob of checkpoint paths). Columns:

* ``path`` (required): the checkpoint (HF folder, safetensors file or sharded index, state_dict);
  relative paths are read relative to the manifest's folder.
* ``init``, ``data`` (optional): initial weights and data, passed to ``measure``.
* ``n_heads`` (optional): attention heads, when no ``config.json`` says so.
* ``set:SYMBOL``: a value for a registry symbol (as ``--set SYMBOL=VALUE``), e.g. ``set:n``.
* ``hp:NAME``: a hyper-parameter of the zoo (width, depth, seed, ...), used by the granulated
  Kendall τ of :mod:`.correlate`.
* any other plain name (``test_error``, ``gap``, ...): carried through to the results table.

Refused with one line naming the culprit: a missing file, two rows that would compute the same
thing, a column with an unknown ``prefix:``, a ``set:`` column naming no registry symbol, a column
named like a results column, a non-numeric or NaN ``set:`` value, and a target column that is
absent, non-numeric or NaN.
"""

from __future__ import annotations

import glob as globlib
import hashlib
import math
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ..errors import BoundcalcError, one_line, shown
from ..files import input_files, stream_rows

RESERVED = ("path", "init", "data", "n_heads")
PREFIXES = ("set", "hp")
# Columns of the results table: a manifest column may not take one of these names.
RESULT_COLUMNS = ("row", "id", "kind", "label", "value", "log10_value", "delta",
                  "delta_effective", "union_cost", "parameters", "estimated", "vacuous",
                  "stats", "status", "error")
_GLOB = re.compile(r"[*?\[]")


class ManifestError(BoundcalcError):
    """A sweep manifest is unreadable or invalid (reported before any work starts)."""

    exit_code = 2


@dataclass
class Row:
    """One checkpoint of the sweep."""

    index: int
    path: str
    init: str | None = None
    data: str | None = None
    n_heads: int | None = None
    values: dict[str, float] = field(default_factory=dict)  # from set: columns
    columns: dict[str, Any] = field(default_factory=dict)    # every manifest column, verbatim


@dataclass
class Manifest:
    """Validated rows plus the column layout (``columns`` in file order)."""

    source: str
    rows: list[Row]
    columns: list[str]

    @property
    def hyperparameters(self) -> list[str]:
        """The declared hyper-parameter columns (``hp:NAME``)."""
        return [c for c in self.columns if c.startswith("hp:")]


# pandas' default missing-value spellings: a manifest cell spelled like this is blank
_NA = frozenset(["", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND",
                 "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"])
_TRUE, _FALSE = frozenset(["True", "TRUE", "true"]), frozenset(["False", "FALSE", "false"])
BYTES_PER_MANIFEST_BYTE = 16  # Python objects per byte of CSV (rows, keys, resolved paths)
PARQUET_BATCH = 65_536
BYTES_PER_MANIFEST_ROW = 512  # a Row, its dict of cells and its digest


def _stream(path: Path) -> tuple[list[str], Iterator[dict[str, Any]]]:
    """The columns and an iterator of row dicts, read one row (CSV) or one batch (Parquet) at
    a time by the one table reader; unreadable files and bad bytes are one-line
    :class:`ManifestError`."""
    suffix = path.suffix.lower()
    if suffix not in (".parquet", ".pq", ".csv", ".tsv", ".txt"):
        raise ManifestError(f"{shown(path)}: a manifest is a .csv, .tsv or .parquet file, or a "
                            "glob pattern of checkpoints")
    if not path.exists() and not path.is_symlink():
        raise ManifestError(f"{shown(path)}: no such manifest file")
    return stream_rows(path, ManifestError, "manifest", bytes_per_byte=BYTES_PER_MANIFEST_BYTE,
                       bytes_per_row=BYTES_PER_MANIFEST_ROW, batch=PARQUET_BATCH)


def _typed_columns(rows: list["Row"], columns: list[str]) -> None:
    """CSV cells are text: give each carried column one type, as a table reader would (all
    whole numbers → int, all numbers → float, else text; blank cells → NaN)."""
    for c in columns:
        if c in ("path", "init", "data"):
            continue
        cells = [r.columns[c] for r in rows]
        if not all(isinstance(v, str) for v in cells):
            continue  # Parquet: typed already
        present = [v for v in cells if v.strip() not in _NA]
        if present and all(v.strip() in _TRUE or v.strip() in _FALSE for v in present) \
                and len(present) == len(cells):
            conv: Any = lambda v: v.strip() in _TRUE  # noqa: E731
        elif present and all(_is_int(v) for v in present):
            conv = (lambda v: int(v)) if len(present) == len(cells) else (  # noqa: E731
                lambda v: float(v) if v.strip() not in _NA else math.nan)
        elif present and all(_is_float(v) for v in present):
            conv = lambda v: float(v) if v.strip() not in _NA else math.nan  # noqa: E731
        else:
            conv = lambda v: math.nan if v.strip() in _NA else v  # noqa: E731
        for r in rows:
            r.columns[c] = conv(r.columns[c])


def _is_int(v: str) -> bool:
    t = v.strip()
    return bool(re.fullmatch(r"[+-]?[0-9]{1,18}", t))


def _is_float(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True


def _blank(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str)
                                                                    and v.strip() in _NA)


def _check_columns(source: str, columns: list[str], known_symbols: Iterable[str] | None) -> None:
    if "path" not in columns:
        raise ManifestError(f"{source}: no 'path' column (the checkpoint of each row)")
    seen: set[str] = set()
    symbols = set(known_symbols) if known_symbols is not None else None
    for c in columns:
        if c in seen:
            raise ManifestError(f"{source}: column '{c}' appears twice")
        seen.add(c)
        if c in RESULT_COLUMNS:
            raise ManifestError(f"{source}: unknown column '{c}': the name is taken by the "
                                "results table (rename it)")
        if ":" in c:
            prefix, _, name = c.partition(":")
            if prefix not in PREFIXES or not name:
                raise ManifestError(f"{source}: unknown column '{c}' (prefixes are "
                                    "set:SYMBOL and hp:NAME)")
            if prefix == "set" and symbols is not None and name not in symbols:
                raise ManifestError(f"{source}: unknown column '{c}': no registry entry has a "
                                    f"symbol or parameter '{name}'")
        elif not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]*", c):
            raise ManifestError(f"{source}: unknown column {c!r} (names are letters, digits, "
                                "'_', '.', '-')")


def _resolver(base: Path, source: str) -> Callable[[Any, str, int], str]:
    """Resolve a path cell against the manifest's folder, once per distinct value (rows of a
    zoo share inits and data): a missing file is one line naming the row."""
    known: dict[str, str] = {}

    def resolve(value: Any, what: str, line: int) -> str:
        text = str(value)
        hit = known.get(text)
        if hit is not None:
            return hit
        p = Path(text).expanduser()
        if not p.is_absolute():
            p = base / p
        try:
            exists = os.path.lexists(p)
        except (OSError, ValueError):  # a NUL byte, a name too long
            exists = False
        if not exists:
            raise ManifestError(f"{source}: row {line}: {what} {_quoted(text)} does not exist")
        try:  # stat before the sweep hashes or opens it: a FIFO would hang, /dev/zero never end
            input_files(p, ManifestError, what)
        except ManifestError as exc:
            raise ManifestError(f"{source}: row {line}: {exc}") from None
        known[text] = str(p.resolve())
        return known[text]
    return resolve


def _quoted(text: str) -> str:
    return f"'{text}'" if text.isprintable() else repr(text)


def read_manifest(manifest: str | Path, target: str | None = None,
                  known_symbols: Iterable[str] | None = None) -> Manifest:
    """Read and validate a manifest (CSV/TSV/Parquet, or a glob of checkpoints).

    ``target``: a column that must exist and hold a finite number in every row.
    ``known_symbols``: the registry's symbol and parameter names; ``set:`` columns must name one.
    Rows are numbered from 1 in messages (the header is not a row).

    Validation is one streaming pass: each row is checked as it is read and only a 16-byte
    digest of it is kept (for duplicates), so a bad row is reported as soon as it is reached,
    in little memory; the rows are built in a second pass over a file known to be valid. A file
    whose rows could not fit the memory budget is refused before reading (16 bytes of objects
    per byte of CSV).
    """
    text = str(manifest)
    if _GLOB.search(text) and not Path(text).exists():
        hits = sorted(globlib.glob(text))
        if not hits:
            raise ManifestError(f"{shown(text)}: the glob matches no checkpoint")
        source, base = shown(text), Path.cwd()
        columns = ["path"]
        reread: Callable[[], Iterator[dict[str, Any]]] = lambda: ({"path": h} for h in hits)  # noqa: E731
        records = reread()
    else:
        path = Path(text)
        if path.is_dir():
            raise ManifestError(f"{shown(path)}: is a folder; give a manifest file or a glob "
                                f"such as '{path}/*.safetensors'")
        columns, records = _stream(path)
        reread = lambda: _stream(path)[1]  # noqa: E731
        source, base = shown(path), path.resolve().parent
        _check_columns(source, columns, known_symbols)
    if target is not None and target not in columns:
        raise ManifestError(f"{source}: target column '{target}' is not in the manifest "
                            f"(columns: {', '.join(columns)})")
    resolve = _resolver(base, source)
    set_cols = [c for c in columns if c.startswith("set:")]
    hp_cols = [c for c in columns if c.startswith("hp:")]

    def make(i: int, rec: dict[str, Any]) -> tuple[Row, bytes]:
        line = i + 1
        if _blank(rec.get("path")):
            raise ManifestError(f"{source}: row {line}: empty 'path'")
        row = Row(index=i, path=resolve(rec["path"], "path", line), columns=rec)
        for what in ("init", "data"):
            if not _blank(rec.get(what)):
                setattr(row, what, resolve(rec[what], what, line))
        if not _blank(rec.get("n_heads")):
            v = _finite_number(rec["n_heads"], f"{source}: row {line}: n_heads",
                               "give a positive integer")
            if not v.is_integer() or v < 1:
                raise ManifestError(f"{source}: row {line}: n_heads must be a positive "
                                    f"integer, got {rec['n_heads']!r}")
            row.n_heads = int(v)
        for c in set_cols:
            row.values[c[4:]] = _finite_number(rec[c], f"{source}: row {line}: column "
                                               f"'{c}'", "give a finite number")
        for c in hp_cols:
            if _blank(rec[c]):
                raise ManifestError(f"{source}: row {line}: hyper-parameter '{c}' is empty")
        if target is not None:
            _finite_number(rec[target], f"{source}: row {line}: target column '{target}'",
                           "every row needs a finite value")
        key = (row.path, row.init, row.data, row.n_heads, tuple(sorted(row.values.items())),
               tuple((c, str(rec[c]).strip()) for c in hp_cols))
        return row, hashlib.blake2b(repr(key).encode(), digest_size=16).digest()

    # pass 1 validates, keeping 16 bytes per row: a bad row costs the rows before it little
    seen: dict[bytes, int] = {}
    count = 0
    for i, rec in enumerate(records):
        _, key = make(i, rec)
        if key in seen:
            raise ManifestError(f"{source}: rows {seen[key]} and {i + 1} are duplicates (same "
                                f"checkpoint {_quoted(str(rec['path']))}, init, data and "
                                "set:/hp: values)")
        seen[key] = i + 1
        count += 1
    if not count:
        raise ManifestError(f"{source}: the manifest has no rows")
    del seen
    rows = [make(i, rec)[0] for i, rec in enumerate(reread())]  # pass 2: a valid file only
    _typed_columns(rows, columns)
    return Manifest(source=source, rows=rows, columns=columns)


def registry_symbols(registry: Any) -> set[str]:
    """Every symbol and free-parameter name in a registry (what ``set:`` columns may name)."""
    names: set[str] = set()
    for entry in registry:
        names.update(entry.symbols)
        names.update(entry.parameters)
    return names


def _finite_number(v: Any, what: str, need: str) -> float:
    """``v`` as a finite float, or a one-line :class:`ManifestError` naming ``what``."""
    if v is None or (isinstance(v, str) and v.strip() in _NA):
        v = math.nan  # a blank CSV cell or a null, as a table reader gives it
    try:
        x = float(v.strip() if isinstance(v, str) else v)
    except (TypeError, ValueError, OverflowError):
        raise ManifestError(f"{what} must be a number, got {one_line(repr(v))[:60]}") from None
    if not math.isfinite(x) or isinstance(v, bool):
        text = "NaN" if math.isnan(x) else one_line(repr(v))[:60]
        raise ManifestError(f"{what} is {text}; {need}")
    return x
