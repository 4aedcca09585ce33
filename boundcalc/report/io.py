"""Atomic writes and the output gate live in :mod:`boundcalc.files.atomic_write` (the
ground-floor I/O room); this module re-exports them for the code that still imports them from
here."""

from __future__ import annotations

from ..files.atomic_write import (_fail, _write_direct, check_output, note_input, run_scope,
                                  write_bytes_atomic, write_text_atomic)

__all__ = ["_fail", "_write_direct", "check_output", "note_input", "run_scope",
           "write_bytes_atomic", "write_text_atomic"]
