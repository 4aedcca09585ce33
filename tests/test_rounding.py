"""Directed rounding of displayed bounds (boundcalc/rounding.py), against exact decimals."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boundcalc.rounding import bound_text, lower_text, round_down, round_up, upper_text


@pytest.mark.parametrize("x, digits, up, down", [
    (0.0977930948, 4, "0.0978", "0.09779"),   # compare's headline (was 0.09779, below the bound)
    (0.2188151, 4, "0.2189", "0.2188"),       # the digits example's minimum line
    (0.218815, 6, "0.218816", "0.218815"),    # the double is 0.21881500000000000949…
    (0.375, 6, "0.375", "0.375"),             # exact in binary and in 3 digits: as %g
    (0.0789847, 5, "0.078985", "0.078984"),
    (0.5, 3, "0.5", "0.5"),
    (9.9996, 4, "10", "9.999"),               # the carry adds a digit to the left
    (123456.0, 3, "1.24e+05", "1.23e+05"),
    (1.5e-7, 2, "1.5e-07", "1.4e-07"),        # the double is 1.49999999999999993…e-7
    (1.0000001e-7, 2, "1.1e-07", "1e-07"),
    (-0.12345, 3, "-0.123", "-0.124"),
    (0.0, 4, "0", "0"),
])
def test_hand_cases(x, digits, up, down):
    assert upper_text(x, digits) == up
    assert lower_text(x, digits) == down


def test_agrees_with_percent_g_when_exact():
    for x in (0.25, 1.0, 3.0, 2.5e10, 2.0 ** -4):  # exact in binary and in 7 digits
        assert upper_text(x, 7) == lower_text(x, 7) == f"{x:.7g}"
    # 0.1 and 1e-5 are not exact in binary (0.1000000000000000055…, 1.0000000000000000818…e-5)
    assert (upper_text(0.1, 4), lower_text(0.1, 4)) == ("0.1001", "0.1")
    assert (upper_text(1e-5, 4), lower_text(1e-5, 4)) == ("1.001e-05", "1e-05")


def test_non_finite_and_bad_digits():
    assert upper_text(math.inf, 4) == "inf"
    assert lower_text(math.nan, 4) == "nan"
    with pytest.raises(ValueError, match="digits"):
        upper_text(0.5, 0)
    with pytest.raises(ValueError, match="side"):
        bound_text(0.5, 4, "sideways")
    assert bound_text(0.0977930948, 4, "nearest") == "0.09779"


@settings(max_examples=2000, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False, width=64), st.integers(1, 17))
def test_directed_property(x, digits):
    up, down = upper_text(x, digits), lower_text(x, digits)
    exact = Decimal(x)
    assert Decimal(up) >= exact and float(up) >= x
    assert Decimal(down) <= exact and float(down) <= x
    assert round_up(x, digits) >= x >= round_down(x, digits)
    # at most `digits` significant digits
    for t in (up, down):
        mant = t.split("e")[0].lstrip("-").replace(".", "").lstrip("0")
        assert len(mant) <= digits, (t, digits)
    # and tight: one unit in the last place, no more
    if x != 0:
        ulp = Decimal(1).scaleb(Decimal(up).copy_abs().adjusted() - digits + 1)
        assert Decimal(up) - exact <= ulp
