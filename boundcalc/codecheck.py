"""Consistency of a code length with the risk it is used with (compression bounds).

A code length C(h) only certifies the risk of the model h it codes, at the level count chosen
for that code. ``measure --compress`` writes the code length (scalar ``code_bits``), the
quantized model's 0-1 error (scalar ``quantized_error``) and its smoothed log-loss over the α
grid (curve ``quantized_smoothed_nll``), each with the same fingerprint of the quantized weights
in its ``note``; these checks refuse, in one line, a stats file or a binding that pairs a code
length with anything else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import StatsError
from .words import option

RISKS = ("quantized_error",)  # scalars
CURVE_RISKS = ("quantized_smoothed_nll",)  # curves over the smoothing weight α


def check_compression_scalars(scalars: Mapping[str, Any], risks: tuple[str, ...] = RISKS,
                              curves: Mapping[str, Any] | None = None,
                              curve_risks: tuple[str, ...] = ()) -> None:
    """Refuse a code length without a matching quantized risk (each of ``risks`` in the same
    stats scalars, each of ``curve_risks`` in its curves)."""
    if "code_bits" not in scalars:
        return
    note = scalars["code_bits"].note
    found = [(n, scalars.get(n), "") for n in risks]
    found += [(n, (curves or {}).get(n), "curve ") for n in curve_risks]
    for name, q, what in found:
        if q is None:
            raise StatsError(f"stats: a code length (code_bits) without {what and 'the '}"
                             f"{what}'{name}', the risk of the same quantized model; measure "
                             f"both with {option('compress')}")
        if q.note != note:
            raise StatsError(f"stats: code_bits and {what}{name} describe different quantized "
                             f"models ({note} vs {q.note})")
    if "quantized_error" in scalars and "float_error" in scalars \
            and "quantized_changed" in scalars:
        gap = abs(scalars["quantized_error"].value - scalars["float_error"].value)
        if gap > scalars["quantized_changed"].value + 1e-12:
            raise StatsError("stats: the quantized risk differs from the float risk by more "
                             "than the recorded fraction of changed predictions: the "
                             "quantizer changed predictions the stats file does not record")


def check_compression_binding(entry: Any, sources: Mapping[str, str],
                              scalars: Mapping[str, Any] | None,
                              curves: Mapping[str, Any] | None = None) -> None:
    """A code length and its quantized risk come from the same stats file, or both by hand.

    A curve-bound risk (the smoothed log-loss over α) set by hand is not refused here: the
    measured-point mechanism (:mod:`boundcalc.measured`) needs its α and labels it estimated.
    """
    code = [n for n, s in entry.symbols.items() if s.stat == "scalars.code_bits"]
    if not code:
        return
    scalar_risks = {f"scalars.{r}" for r in RISKS}
    curve_risks = {f"curves.{r}" for r in CURVE_RISKS}
    risk_syms = {n: s.stat for n, s in entry.symbols.items()
                 if s.stat in scalar_risks | curve_risks}
    if sources.get(code[0]) == "given":
        from_file = [n for n, stat in risk_syms.items() if sources.get(n) == stat]
        if from_file and "code_bits" in (scalars or {}):
            raise StatsError(f"entry '{entry.id}': code_bits is set by hand but '{from_file[0]}' "
                             f"comes from the stats file ({risk_syms[from_file[0]]}), whose "
                             "code length describes one quantized model at one level count; "
                             "set both by hand or take both from the file")
        return
    if sources.get(code[0]) != "scalars.code_bits":
        return
    used = tuple(r for r in RISKS if f"scalars.{r}" in risk_syms.values())
    used_curves = tuple(r for r in CURVE_RISKS if f"curves.{r}" in risk_syms.values()
                        and sources.get(next(n for n, s in risk_syms.items()
                                             if s == f"curves.{r}")) != "given")
    check_compression_scalars(scalars or {}, used, curves, used_curves)
    for name, stat in risk_syms.items():
        if stat in scalar_risks and sources.get(name) == "given":
            raise StatsError(f"entry '{entry.id}': '{name}' is set by hand but code_bits "
                             "comes from the stats file; the risk must be the quantized "
                             f"model's ({stat} of the same file)")
