"""Stage 3, enclose (boundcalc/stages/enclose.py): the printed value is the upper end
of an interval enclosure, never below the exact value (a 50-digit mpmath recomputation here), the
exact SymPy value agrees with it, a certified value outside its output range is refused, and an
assumption's check is evaluated at the point."""

from __future__ import annotations

import math

import mpmath
import pytest

from boundcalc.errors import DomainError
from boundcalc.rounding import at_most_decimal
from boundcalc.stages.enclose import check_assumptions, check_output, enclose_value, exact_value
from boundcalc.stages.validate import ValidatedEntry

MC = {"emp_risk": 0.1, "KL": 10.0, "n": 1000}


def _exact(delta, emp="0.1"):
    """McAllester's value at MC and ``delta`` (each a decimal string or a double), 50
    digits."""
    with mpmath.workdps(50):
        n = mpmath.mpf(1000)
        return mpmath.mpf(emp) + mpmath.sqrt((10 + mpmath.log(2 * mpmath.sqrt(n)
                                                                / mpmath.mpf(delta))) / (2 * n))


def test_the_printed_value_encloses_the_exact_one_from_above(registry):
    v = ValidatedEntry(registry.get("mcallester"), MC)
    value = v.value({})
    up, log10, record, notes = enclose_value(v, {}, {}, value, math.log10(value))
    exact = _exact("0.05")
    assert up >= exact and (up - exact) / exact < 1e-14
    # the enclosure is of the value at the inputs as doubles (ê the double 0.1) and δ at the
    # largest double below the decimal 0.05 (so that "probability ≥ 1 − δ" holds of 0.05 as
    # written): a hair above _exact("0.05")
    below = _exact(at_most_decimal(0.05), 0.1)
    assert at_most_decimal(0.05) < 0.05 and below > exact
    with mpmath.workdps(50):
        assert record["lower"] <= below <= record["upper"] and record["agrees"]
    assert log10 == pytest.approx(float(mpmath.log10(exact)), rel=1e-14)


def test_the_exact_value_agrees_to_25_digits(registry):
    v = ValidatedEntry(registry.get("mcallester"), MC)
    got = exact_value(v, {}, {}, digits=30)
    with mpmath.workdps(50):
        assert abs(mpmath.mpf(str(got)) - _exact("0.05")) < mpmath.mpf(10) ** -25


def test_a_certified_value_outside_its_output_range_is_refused(registry):
    v = ValidatedEntry(registry.get("mcallester"), MC)
    check_output(v, 0.3, 1.0, math.log(0.3))  # inside [0, inf): no error
    with pytest.raises(DomainError, match="outside its output range"):
        check_output(v, -0.3, -1.0, math.log(0.3))
    with pytest.raises(DomainError, match="not a finite number"):
        check_output(v, math.inf, 1.0, math.inf)


def test_an_assumption_is_checked_at_the_point(registry):
    for n, status in ((1000, "holds"), (5, "fails")):
        v = ValidatedEntry(registry.get("mcallester"), {**MC, "n": n})
        got = {a["check"]: a["status"] for a in check_assumptions(v, v.context())}
        assert got["n >= 8"] == status
