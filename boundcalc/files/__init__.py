"""Files: the ground floor every room reads and writes through.

* :mod:`.safe_read`: paths a user names, checked with ``stat`` before opening; size-capped
  reads; strict JSON (:func:`read_limited`, :func:`input_files`, :func:`read_json`, ...).
* :mod:`.atomic_write`: outputs written through a temporary file and ``os.replace`` (never a
  half-written file, never a replaced device or folder; a program's own JSON record:
  :func:`write_json_record`), behind one output gate that refuses
  an output which is an input of the same run (:func:`check_output`, :func:`run_scope`,
  :func:`note_input`).
* :mod:`.manifest`: a folder's manifest, recording the SHA-256 of every file each step wrote, so
  that only what hashes to the record is reused (:class:`Manifest`, :func:`output_hashes`).
* :mod:`.table_read`: the one reader of tables (CSV, TSV, JSON Lines, Parquet) within the memory
  budget (:func:`read_arrow`, :func:`read_pandas`, :func:`read_json_lines`).

The memory and time budgets are not files: they stay in :mod:`boundcalc.limits`.
"""

from __future__ import annotations

from .atomic_write import (check_output, note_input, run_scope, write_bytes_atomic,
                           write_json_record, write_text_atomic)
from .manifest import Manifest, hash_into, output_hashes
from .safe_read import (MAX_FOLDER_DEPTH, MAX_FOLDER_ENTRIES, MAX_FORMULA_FILE_BYTES,
                        as_finite_float, check_regular_file, finite_number, input_files,
                        loads_json, open_regular, read_json, read_limited)
from .table_read import (check_cells, check_parquet, plain, read_arrow, read_bytes,
                         read_json_lines, read_pandas, stream_rows)

__all__ = ["MAX_FOLDER_DEPTH", "MAX_FOLDER_ENTRIES", "MAX_FORMULA_FILE_BYTES", "Manifest",
           "check_cells", "hash_into", "output_hashes",
           "check_output", "note_input", "run_scope",
           "as_finite_float", "check_parquet", "check_regular_file", "finite_number", "input_files",
           "loads_json", "open_regular",
           "plain", "read_arrow", "read_bytes", "read_json", "read_json_lines", "read_limited",
           "read_pandas", "stream_rows",
           "write_bytes_atomic", "write_json_record", "write_text_atomic"]
