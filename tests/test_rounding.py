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


# ---- δ as the decimal it is written as --------------------------------------------------------

def test_at_most_decimal_share_and_total_by_hand():
    from boundcalc.rounding import at_most_decimal, decimal_total, probability_text, share

    assert Decimal(at_most_decimal(0.05)) < Decimal("0.05") < Decimal(0.05)
    assert at_most_decimal(0.05) == math.nextafter(0.05, 0)
    assert at_most_decimal(0.06) == 0.06  # the double 0.06 is already below 0.06
    assert at_most_decimal(0.25) == 0.25  # exact
    assert share(0.05, 2) == 0.025 and repr(share(0.01, 3)) == "0.00333333333333333"
    assert 3 * Decimal(repr(share(0.01, 3))) <= Decimal("0.01")
    assert decimal_total([0.05, 0.01]) == 0.06 != 0.05 + 0.01  # the float sum: 0.060000000000000005
    assert decimal_total([0.05, 0.01, 0.01]) == 0.07
    assert decimal_total([0.06, -Decimal("0.05")]) == 0.01
    assert probability_text(0.05) == "0.95" and probability_text(0.07) == "0.93"


@settings(max_examples=500, deadline=None)
@given(st.floats(1e-12, 0.99), st.integers(1, 50))
def test_shares_never_spend_more_than_their_total(total, k):
    from boundcalc.rounding import at_most_decimal, decimal_total, share

    s = share(total, k)
    assert k * Decimal(at_most_decimal(s)) <= k * Decimal(repr(s)) <= Decimal(repr(total))
    t = decimal_total([total, s])
    assert Decimal(repr(t)) >= Decimal(repr(total)) + Decimal(repr(s))


def test_a_certified_value_holds_at_the_decimal_delta():
    """The engine takes δ = 0.05 at the largest double below the decimal 0.05, so the printed
    McAllester value is ≥ the bound at the decimal δ = 0.05 itself (50 digits)."""
    import mpmath

    import boundcalc as bc

    r = bc.compute("mcallester", values={"emp_risk": 0.05, "KL": 5000.0, "n": 60000})
    with mpmath.workdps(50):
        n, d = mpmath.mpf(60000), mpmath.mpf("0.05")
        exact = mpmath.mpf(0.05) + mpmath.sqrt((5000 + mpmath.log(2 * mpmath.sqrt(n) / d))
                                               / (2 * n))
        assert mpmath.mpf(r.value) >= exact
    assert r.delta == 0.05  # the decimal it holds at
