"""Consistency of a code length with the risk it is used with (compression bounds).

A code length C(h) only certifies the risk of the model h it codes. ``measure --compress``
writes the code length and the quantized model's risks with the same fingerprint of the
quantized weights in their ``note``; these checks refuse, in one line, a stats file or a binding
that pairs a code length with anything else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import StatsError

RISKS = ("quantized_error", "quantized_smoothed_nll")


def check_compression_scalars(scalars: Mapping[str, Any],
                              risks: tuple[str, ...] = RISKS) -> None:
    """Refuse a code length without a matching quantized risk (each of ``risks``) in the same
    stats scalars."""
    if "code_bits" not in scalars:
        return
    note = scalars["code_bits"].note
    for name in risks:
        if name not in scalars:
            raise StatsError(f"stats: a code length (code_bits) without '{name}', the risk "
                             "of the same quantized model; measure both with --compress")
        if scalars[name].note != note:
            raise StatsError(f"stats: code_bits and {name} describe different quantized "
                             f"models ({note} vs {scalars[name].note})")
    if "quantized_error" in scalars and "float_error" in scalars \
            and "quantized_changed" in scalars:
        gap = abs(scalars["quantized_error"].value - scalars["float_error"].value)
        if gap > scalars["quantized_changed"].value + 1e-12:
            raise StatsError("stats: the quantized risk differs from the float risk by more "
                             "than the recorded fraction of changed predictions: the "
                             "quantizer changed predictions the stats file does not record")


def check_compression_binding(entry: Any, sources: Mapping[str, str],
                              scalars: Mapping[str, Any] | None) -> None:
    """With code_bits from the stats file, its risk must come from the same file."""
    code = [n for n, s in entry.symbols.items() if s.stat == "scalars.code_bits"]
    if not code or sources.get(code[0]) != "scalars.code_bits":
        return
    used = tuple(r for r in RISKS if any(s.stat == f"scalars.{r}"
                                         for s in entry.symbols.values()))
    check_compression_scalars(scalars or {}, used)
    for name, spec in entry.symbols.items():
        if spec.stat in {f"scalars.{r}" for r in RISKS} and sources.get(name) == "given":
            raise StatsError(f"entry '{entry.id}': '{name}' is set by hand but code_bits "
                             "comes from the stats file; the risk must be the quantized "
                             f"model's ({spec.stat} of the same file)")
