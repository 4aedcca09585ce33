"""Numbers shown in fewer digits, rounded the safe way: an upper bound up, a lower bound down.

A certified (or conditional) upper bound printed as ``0.09779`` when its exact value is
``0.0977930948`` claims more than the theorem gives. Every place that prints a bound in fewer
digits than the float carries goes through this module:

- :func:`upper_text` ``(x, digits)``: the shortest ``%g``-style text with at most ``digits``
  significant digits whose decimal value is **≥ x** (``0.0977930948`` → ``'0.0978'`` at 4
  digits, ``'0.09780'`` is never produced: trailing zeros are dropped as ``%g`` drops them).
- :func:`lower_text`: the same, **≤ x** (for a lower bound or an error that must not be
  overstated in the safe direction).
- :func:`round_up` / :func:`round_down`: the decimal value of those texts as a float.

Contract: ``float(upper_text(x, d)) >= x`` and ``float(lower_text(x, d)) <= x`` for every finite
double ``x`` and every ``d >= 1`` (the text's decimal value is on the safe side of ``x``'s exact
binary value, and rounding that decimal to the nearest double cannot cross ``x``, itself a
double). A value already exact in ``d`` digits prints as ``%g`` prints it. Non-finite values
print as Python prints them (``inf``, ``nan``); ``None`` is refused by the caller, not here.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext

__all__ = ["upper_text", "lower_text", "round_up", "round_down", "bound_text", "probability_text",
           "at_most_decimal", "decimal_total", "share"]


def _directed(x: float | Decimal, digits: int, rounding: str) -> str:
    """``x`` (a double, or an exact Decimal) rounded to ``digits`` significant digits."""
    if not isinstance(digits, int) or digits < 1:
        raise ValueError(f"digits must be an integer ≥ 1, got {digits!r}")
    if not isinstance(x, Decimal):
        x = float(x)
        if not math.isfinite(x):
            return str(x)
    if x == 0:
        return "0"
    d = Decimal(x)  # the exact binary value (a Decimal is taken as it is)
    exp = d.adjusted()  # the decimal exponent of the leading digit
    q = d.quantize(Decimal(1).scaleb(exp - digits + 1), rounding=rounding)
    if q.adjusted() != exp:  # 9.99… rounded up to 10.0: one digit more to the left
        exp = q.adjusted()
        q = q.quantize(Decimal(1).scaleb(exp - digits + 1), rounding=rounding)
    if -4 <= exp < digits:  # %g's rule for positional notation
        text = format(q, "f")
        if "." in text:
            text = text.rstrip("0").rstrip(".")
        return text
    mant = q.scaleb(-exp)
    m = format(mant, "f")
    if "." in m:
        m = m.rstrip("0").rstrip(".")
    return f"{m}e{'+' if exp >= 0 else '-'}{abs(exp):02d}"


def upper_text(x: float, digits: int = 4) -> str:
    """``x`` in at most ``digits`` significant digits, rounded toward +∞ (module docstring)."""
    return _directed(x, digits, ROUND_CEILING)


def lower_text(x: float, digits: int = 4) -> str:
    """``x`` in at most ``digits`` significant digits, rounded toward −∞."""
    return _directed(x, digits, ROUND_FLOOR)


def round_up(x: float, digits: int = 4) -> float:
    """The value of :func:`upper_text` as a float (≥ ``x``)."""
    return float(upper_text(x, digits))


def round_down(x: float, digits: int = 4) -> float:
    """The value of :func:`lower_text` as a float (≤ ``x``)."""
    return float(lower_text(x, digits))


def bound_text(x: float, digits: int = 4, side: str = "upper") -> str:
    """A bound's text: ``side`` ``"upper"`` rounds up, ``"lower"`` down, ``"nearest"`` is
    ``%g`` (for numbers that bound nothing: an estimate, a measured error)."""
    if side == "upper":
        return upper_text(x, digits)
    if side == "lower":
        return lower_text(x, digits)
    if side == "nearest":
        x = float(x)
        return f"{x:.{digits}g}"
    raise ValueError(f"side must be 'upper', 'lower' or 'nearest', got {side!r}")


def probability_text(delta: float, digits: int = 4) -> str:
    """``1 − δ``, the probability a statement at total confidence ``δ`` holds with, as the
    lower bound it is: 1 minus the decimal ``δ`` is written as (its shortest ``repr``: 0.05,
    not the double's binary 0.0500000000000000027…), exactly, rounded down.

    That is literally true of the numbers boundcalc prints because the engine never spends
    more than that decimal: the interval evaluation of a certified value takes every
    confidence share at :func:`at_most_decimal` of it, and every total δ is
    :func:`decimal_total` of its shares (a δ of 0.05 + 0.01 prints ``0.94``)."""
    delta = float(delta)
    if not math.isfinite(delta):
        return str(1.0 - delta)
    with localcontext() as ctx:
        ctx.prec = 60
        exact = Decimal(1) - Decimal(repr(delta))
    return _directed(exact, digits, ROUND_FLOOR)


def at_most_decimal(x: float) -> float:
    """The largest double ≤ the decimal ``x`` is written as (its shortest ``repr``): ``0.05``
    (the double 0.0500000000000000027…) → 0.0499999999999999958…; a double already at or
    below its decimal is returned as it is. A bound evaluated with δ at this double holds
    with probability ≥ 1 − the decimal, at a cost of one unit in the last place of δ."""
    x = float(x)
    if not math.isfinite(x) or Decimal(x) <= Decimal(repr(x)):
        return x
    return math.nextafter(x, -math.inf)


def decimal_total(parts) -> float:
    """A total δ: the exact sum of the decimals ``parts`` are written as (floats by their
    ``repr``, Decimals as they are; a part may be negative), as the smallest double whose
    ``repr`` is at least that sum. ``0.05 + 0.01 + 0.01`` → ``0.07`` (not the float sum
    0.07000000000000000666…)."""
    with localcontext() as ctx:
        ctx.prec = 60
        exact = sum((p if isinstance(p, Decimal) else Decimal(repr(float(p))) for p in parts),
                    Decimal(0))
    total = float(exact)
    while Decimal(repr(total)) < exact:
        total = math.nextafter(total, math.inf)
    return total


def share(total: float, k: int) -> float:
    """One of ``k`` equal shares of the δ ``total`` (a union bound over k statements): the
    decimal total/k rounded down to 15 significant digits, as the double whose ``repr`` is
    that decimal; k shares never add up to more than the decimal ``total`` is written as.
    ``share(0.05, 2)`` → 0.025; ``share(0.01, 3)`` → 0.00333333333333333."""
    with localcontext() as ctx:
        ctx.prec, ctx.rounding = 15, ROUND_FLOOR
        part = Decimal(repr(float(total))) / Decimal(int(k))
    return float(part)

