"""Directed rounding by hand, for tests of what is displayed: exact rational arithmetic
(``fractions.Fraction``), independent of boundcalc.rounding's ``decimal`` implementation."""

from __future__ import annotations

import math
from fractions import Fraction


def _exponent(q: Fraction) -> int:
    """floor(log10 |q|) for q ≠ 0, exactly (the float log10 only as a first guess)."""
    e = math.floor(math.log10(abs(q)))
    while Fraction(10) ** e > abs(q):
        e -= 1
    while Fraction(10) ** (e + 1) <= abs(q):
        e += 1
    return e


def directed(x: float, digits: int, up: bool) -> Fraction:
    """The exact binary value of ``x`` rounded to ``digits`` significant digits, toward +∞
    (``up``) or −∞, as an exact fraction."""
    q = Fraction(x)
    if q == 0:
        return q
    unit = Fraction(10) ** (_exponent(q) - digits + 1)
    n = q / unit
    return (math.ceil(n) if up else math.floor(n)) * unit


def up_text(x: float, digits: int) -> str:
    """``x`` rounded up to ``digits`` (≤ 15) significant digits, in ``%g`` style: the double
    nearest a decimal of ≤ 15 digits prints back as that decimal."""
    return f"{float(directed(x, digits, True)):.{digits}g}"


def down_text(x: float, digits: int) -> str:
    """``x`` rounded down, as :func:`up_text`."""
    return f"{float(directed(x, digits, False)):.{digits}g}"
