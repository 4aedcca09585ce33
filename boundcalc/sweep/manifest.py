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
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ..errors import BoundcalcError
from ..limits import input_files

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


def _read_table(path: Path):
    from ..tables import read_pandas

    suffix = path.suffix.lower()
    if not os.path.lexists(path):
        raise ManifestError(f"{path}: no such manifest file")
    if suffix in (".parquet", ".pq"):
        return read_pandas(path, ManifestError, "the manifest")
    if suffix in (".csv", ".tsv", ".txt"):
        return read_pandas(path, ManifestError, "the manifest",
                           sep="\t" if suffix == ".tsv" else ",",
                           dtype={c: str for c in ("path", "init", "data")})
    raise ManifestError(f"{path}: a manifest is a .csv, .tsv or .parquet file, or a glob "
                        "pattern of checkpoints")


def _blank(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str)
                                                                    and not v.strip())


def _plain(v: Any) -> Any:
    """numpy scalars → Python scalars (the table is written as CSV and Parquet)."""
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        try:
            return v.item()
        except (ValueError, AttributeError):
            return v
    return v


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


def _resolve(base: Path, value: Any, what: str, source: str, line: int) -> str:
    """The row's path, checked with ``stat`` before the sweep hashes or opens it: a regular file
    or a folder of regular files (a FIFO would hang the hash, ``/dev/zero`` never end it)."""
    p = Path(str(value)).expanduser()
    if not p.is_absolute():
        p = base / p
    if not os.path.lexists(p):
        raise ManifestError(f"{source}: row {line}: {what} '{value}' does not exist")
    try:
        input_files(p, ManifestError, what)
    except ManifestError as exc:
        raise ManifestError(f"{source}: row {line}: {exc}") from None
    return str(p.resolve())


def read_manifest(manifest: str | Path, target: str | None = None,
                  known_symbols: Iterable[str] | None = None) -> Manifest:
    """Read and validate a manifest (CSV/TSV/Parquet, or a glob of checkpoints).

    ``target``: a column that must exist and hold a finite number in every row.
    ``known_symbols``: the registry's symbol and parameter names; ``set:`` columns must name one.
    Rows are numbered from 1 in messages (the header is not a row).
    """
    text = str(manifest)
    if _GLOB.search(text) and not Path(text).exists():
        hits = sorted(globlib.glob(text))
        if not hits:
            raise ManifestError(f"{text}: the glob matches no checkpoint")
        source, base = text, Path.cwd()
        columns, records = ["path"], [{"path": h} for h in hits]
    else:
        path = Path(text)
        if path.is_dir():
            raise ManifestError(f"{path}: is a folder; give a manifest file or a glob such as "
                                f"'{path}/*.safetensors'")
        df = _read_table(path)
        source, base = str(path), path.resolve().parent
        columns = [str(c) for c in df.columns]
        _check_columns(source, columns, known_symbols)
        records = [{c: _plain(v) for c, v in zip(columns, rec)}
                   for rec in df.itertuples(index=False, name=None)]
    if not records:
        raise ManifestError(f"{source}: the manifest has no rows")
    if target is not None:
        if target not in columns:
            raise ManifestError(f"{source}: target column '{target}' is not in the manifest "
                                f"(columns: {', '.join(columns)})")
    rows: list[Row] = []
    seen: dict[tuple, int] = {}
    for i, rec in enumerate(records):
        line = i + 1
        if _blank(rec.get("path")):
            raise ManifestError(f"{source}: row {line}: empty 'path'")
        row = Row(index=i, path=_resolve(base, rec["path"], "path", source, line),
                  columns={c: rec[c] for c in columns})
        for what in ("init", "data"):
            if not _blank(rec.get(what)):
                setattr(row, what, _resolve(base, rec[what], what, source, line))
        if not _blank(rec.get("n_heads")):
            v = rec["n_heads"]
            if isinstance(v, bool) or not float(v).is_integer() or float(v) < 1:
                raise ManifestError(f"{source}: row {line}: n_heads must be a positive "
                                    f"integer, got {v!r}")
            row.n_heads = int(float(v))
        for c in columns:
            if c.startswith("set:"):
                row.values[c[4:]] = _finite_number(rec[c], f"{source}: row {line}: column "
                                                   f"'{c}'", "give a finite number")
            elif c.startswith("hp:") and _blank(rec[c]):
                raise ManifestError(f"{source}: row {line}: hyper-parameter '{c}' is empty")
        if target is not None:
            _finite_number(rec[target], f"{source}: row {line}: target column '{target}'",
                           "every row needs a finite value")
        key = (row.path, row.init, row.data, row.n_heads, tuple(sorted(row.values.items())),
               tuple((c, str(v)) for c, v in row.columns.items() if c.startswith("hp:")))
        if key in seen:
            raise ManifestError(f"{source}: rows {seen[key]} and {line} are duplicates (same "
                                f"checkpoint '{rec['path']}', init, data and set:/hp: values)")
        seen[key] = line
        rows.append(row)
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
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise ManifestError(f"{what} must be a number, got {v!r}") from None
    if not math.isfinite(x) or isinstance(v, bool):
        shown = "NaN" if math.isnan(x) else repr(v)
        raise ManifestError(f"{what} is {shown}; {need}")
    return x
