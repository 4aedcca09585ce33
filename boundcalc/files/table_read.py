"""Reading a table a user names (CSV, TSV, JSON Lines, Parquet) within the memory budget.

One reader for every table boundcalc takes from a user (``measure --data``, sweep manifests,
results tables), whole (:func:`read_arrow`, :func:`read_pandas`) or streamed a row or a batch
at a time (:func:`stream_rows`, for sweep manifests: CSV cells stay text). The path is checked
with ``stat`` and read with a size cap (:func:`~boundcalc.files.safe_read.read_limited`, the
memory budget), and a Parquet file's row count and uncompressed size are read from its footer
*before* any row is decoded, so a small file that inflates to millions of rows (a
decompression bomb) is refused in milliseconds instead of exhausting memory. Every table is
then checked once more after parsing, counting the Python objects its cells become.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Sequence

from ..errors import BoundcalcError, one_line, shown
from ..limits import check_allocation, memory_budget
from .safe_read import check_regular_file, loads_json, open_regular, read_limited

PY_CELL_BYTES = 80  # one cell as a Python object: a short str is ~50 bytes, plus its list slot


def read_bytes(path: str | os.PathLike, err: type[BoundcalcError], what: str) -> bytes:
    """The bytes of the regular file ``path``, at most the memory budget."""
    return read_limited(path, memory_budget(), err, what)


def read_json_lines(path: str | os.PathLike, err: type[BoundcalcError], what: str) -> list[Any]:
    """Each non-empty line of the JSON Lines file ``path`` as one value, strict
    (:func:`~.safe_read.loads_json`, naming the line), the file read within the memory budget
    (:func:`read_bytes`). Lines end at ``\\n`` only: a text may hold U+2028 or a form feed,
    which ``json.dumps(..., ensure_ascii=False)`` writes as they are."""
    raw = read_bytes(path, err, what)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise err(f"{shown(path)}: {what} is not UTF-8 (byte {exc.start})") from None
    return [loads_json(line, f"{shown(path)}, line {i}", err)
            for i, line in enumerate(text.split("\n"), 1) if line.strip()]


def check_cells(rows: int, columns: int, nbytes: int, where: str) -> None:
    """Refuse a table whose ``rows`` × ``columns`` Python cells (plus ``nbytes`` of column
    data) would not fit the memory budget."""
    check_allocation(float(nbytes) + float(rows) * max(columns, 1) * PY_CELL_BYTES,
                     f"{where}: {rows} rows x {columns} columns")


def check_parquet(raw: bytes, where: str, err: type[BoundcalcError],
                  columns: Sequence[str] | None = None) -> list[str]:
    """Read the footer of the Parquet bytes ``raw`` and refuse them when their declared rows and
    uncompressed size (of ``columns``, default all) exceed the budget. Returns the file's
    column names."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(pa.BufferReader(raw)).metadata
        names = [meta.schema.column(j).path.split(".")[0] for j in range(meta.num_columns)]
        keep = [j for j, n in enumerate(names) if columns is None or n in columns]
        nbytes = sum(meta.row_group(g).column(j).total_uncompressed_size
                     for g in range(meta.num_row_groups) for j in keep)
        rows = int(meta.num_rows)
    except (pa.ArrowException, OSError, ValueError, IndexError) as exc:
        msg = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
        raise err(f"{where}: not a readable Parquet file ({msg})") from None
    check_cells(rows, len({names[j] for j in keep}), nbytes, where)
    return list(dict.fromkeys(names))


def read_arrow(path: str | os.PathLike, kind: str, err: type[BoundcalcError],
               what: str = "data file", columns: Sequence[str] | None = None
               ) -> tuple[Any, list[str]]:
    """``(table, names)``: a ``pyarrow.Table`` of the file ``path`` (``kind``: ``csv``, ``tsv``,
    ``json`` for JSON Lines, ``parquet``) limited to ``columns`` when given (names absent from
    the file are ignored), checked against the memory budget before its cells become Python
    objects; ``names`` are all the file's columns."""
    import pyarrow as pa

    where = str(path)
    raw = read_bytes(path, err, what)
    if not raw:
        raise err(f"{where}: empty file")
    if kind in ("csv", "tsv", "json"):
        check_utf8(raw, where, err, "\t" if kind == "tsv" else "," if kind == "csv" else None)
    try:
        if kind in ("csv", "tsv"):
            import pyarrow.csv as pcsv

            table = pcsv.read_csv(pa.BufferReader(raw), parse_options=pcsv.ParseOptions(
                delimiter="\t" if kind == "tsv" else ","))
        elif kind == "json":
            import pyarrow.json as pjson

            table = pjson.read_json(pa.BufferReader(raw))
        elif kind == "parquet":
            import pyarrow.parquet as pq

            names = check_parquet(raw, where, err, columns)
            want = None if columns is None else [c for c in names if c in columns]
            table = pq.read_table(pa.BufferReader(raw), columns=want)
            check_cells(table.num_rows, table.num_columns, 0, where)
            return table, names
        else:
            raise err(f"{where}: unknown table format {kind!r}")
    except BoundcalcError:
        raise
    except MemoryError:
        raise err(f"{where}: does not fit in memory") from None
    except (pa.ArrowException, OSError, ValueError) as exc:
        msg = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
        raise err(f"{where}: not a readable {kind.upper()} file ({msg})") from None
    names = list(table.column_names)
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        at = [j + 1 for j, n in enumerate(names) if n == twice]
        raise err(f"{where}: row 1 (the header), column '{twice}': the name appears "
                  f"{len(at)} times (columns {', '.join(map(str, at))}); rename all but one")
    if columns is not None:
        table = table.select([c for c in names if c in columns])
    check_cells(table.num_rows, table.num_columns, 0, where)
    return table, names


def check_utf8(raw: bytes, where: str, err: type[BoundcalcError],
               delimiter: str | None) -> None:
    """Refuse bytes that are not UTF-8 text with one line naming the line and the column
    (``delimiter``: of a CSV/TSV file, whose header gives the column's name; None: JSON Lines,
    where the key before the bad bytes is named)."""
    import codecs
    import re

    dec = codecs.getincrementaldecoder("utf-8")()
    step = 1 << 20
    for start in range(0, len(raw), step):
        try:
            dec.decode(raw[start:start + step], final=start + step >= len(raw))
        except UnicodeDecodeError as exc:
            bad = max(0, start + exc.start - len(dec.getstate()[0]))
            break
    else:
        return
    # the decoder may hold up to 3 bytes of a split character: find the first bad byte exactly
    while bad > 0:
        try:
            raw[:bad].decode("utf-8")
            break
        except UnicodeDecodeError as exc:
            bad = exc.start
    line_start = raw.rfind(b"\n", 0, bad) + 1
    line = raw.count(b"\n", 0, bad) + 1
    before = raw[line_start:bad].decode("utf-8", "replace")
    if delimiter is not None:
        header = raw[:raw.find(b"\n") if b"\n" in raw else len(raw)].decode("utf-8", "replace")
        names = [h.strip().strip('"') for h in header.split(delimiter)]
        j = before.count(delimiter)
        column = names[j] if line > 1 and j < len(names) else f"field {j + 1}"
        row = f"row {line - 1} (line {line})" if line > 1 else "row 1 (the header)"
    else:
        keys = re.findall(r'"([^"\\]{1,80})"\s*:', before)
        column = keys[-1] if keys else "?"
        row = f"row {line} (line {line})"
    raise err(f"{where}: {row}, column '{column}': byte 0x{raw[bad]:02x} is not UTF-8 text; "
              "save the file as UTF-8")


def read_pandas(path: str | os.PathLike, err: type[BoundcalcError], what: str,
                **csv_options: Any) -> Any:
    """A pandas DataFrame of a CSV/TSV (``csv_options`` go to ``pandas.read_csv``) or Parquet
    file, with the checks of :func:`read_arrow` (size cap, Parquet footer, cell budget)."""
    import pandas as pd

    where = str(path)
    raw = read_bytes(path, err, what)
    parquet = str(path).lower().endswith((".parquet", ".pq"))
    if parquet:
        check_parquet(raw, where, err)
    try:
        df = pd.read_parquet(io.BytesIO(raw)) if parquet else pd.read_csv(io.BytesIO(raw),
                                                                           **csv_options)
    except MemoryError:
        raise err(f"{where}: does not fit in memory") from None
    except Exception as exc:  # noqa: BLE001 - pandas/pyarrow raise many kinds
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise err(f"{where}: cannot read {what} ({first[:160]})") from None
    check_cells(len(df), len(df.columns), 0, where)
    return df


def plain(v: Any) -> Any:
    """numpy scalars → Python scalars (a table's cells, ready to be written as CSV or Parquet)."""
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        try:
            return v.item()
        except (ValueError, AttributeError):
            return v
    return v


def stream_rows(path: Path, err: type[BoundcalcError], what: str, *, bytes_per_byte: float,
                bytes_per_row: float, batch: int = 65_536
                ) -> tuple[list[str], Iterator[dict[str, Any]]]:
    """The columns and an iterator of row dicts of the CSV/TSV (``.tsv``: tab-separated; cells
    stay text, blank lines skipped) or Parquet (``.parquet``/``.pq``: decoded ``batch`` rows at
    a time, null → NaN) file ``path``. Before any row is read, ``bytes_per_byte`` × the file's
    bytes (and for Parquet ``bytes_per_row`` × the rows its footer declares) is held to the
    memory budget; unreadable files and bad bytes are one line of ``err`` naming ``what``."""
    st = check_regular_file(path, err, what)
    if path.suffix.lower() in (".parquet", ".pq"):
        return _stream_parquet(path, err, what, bytes_per_byte, bytes_per_row, batch)
    check_allocation(bytes_per_byte * st.st_size, f"{what} {shown(path)} ({st.st_size:,} bytes)")
    fh = io.TextIOWrapper(open_regular(path, err, what), newline="", encoding="utf-8-sig")
    reader = csv.reader(fh, delimiter="\t" if path.suffix.lower() == ".tsv" else ",")
    try:
        header = next(reader, None)
    except (csv.Error, UnicodeDecodeError, OSError) as exc:
        fh.close()
        raise err(f"{shown(path)}: cannot read the {what} ({one_line(str(exc))[:160]})") from None
    if header is None:
        fh.close()
        raise err(f"{shown(path)}: the {what} is empty (no header line)")
    columns = [c.strip() for c in header]

    def rows() -> Iterator[dict[str, Any]]:
        with fh:
            line = 1
            try:
                for rec in reader:
                    line += 1
                    if not rec or (len(rec) == 1 and not rec[0].strip()):
                        continue  # a blank line, as pandas skips it
                    if len(rec) > len(columns):
                        raise err(f"{shown(path)}: line {line} has {len(rec)} fields, "
                                  f"the header {len(columns)}")
                    rec += [""] * (len(columns) - len(rec))
                    yield dict(zip(columns, rec))
            except (csv.Error, UnicodeDecodeError, OSError) as exc:
                raise err(f"{shown(path)}: cannot read the {what} at line {line} "
                          f"({one_line(str(exc))[:160]})") from None
    return columns, rows()


def _stream_parquet(path: Path, err: type[BoundcalcError], what: str, bytes_per_byte: float,
                    bytes_per_row: float, batch: int
                    ) -> tuple[list[str], Iterator[dict[str, Any]]]:
    try:
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(path)
        meta = pf.metadata
        columns = [str(c) for c in pf.schema_arrow.names]
    except Exception as exc:  # noqa: BLE001 - pyarrow raises many kinds
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise err(f"{shown(path)}: cannot read the {what} ({one_line(first)[:160]})") from None
    raw = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    # the footer's counts, before any row is decoded: a small file can hold millions of rows
    check_allocation(max(bytes_per_byte * raw, bytes_per_row * meta.num_rows),
                     f"{what} {shown(path)} ({meta.num_rows} rows)")

    def rows() -> Iterator[dict[str, Any]]:
        try:
            for part in pf.iter_batches(batch_size=batch):
                yield from ({str(k): math.nan if v is None else plain(v)  # null → NaN
                             for k, v in r.items()} for r in part.to_pylist())
        except BoundcalcError:
            raise
        except Exception as exc:  # noqa: BLE001
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise err(f"{shown(path)}: cannot read the {what} ({one_line(first)[:160]})") \
                from None
    return columns, rows()
