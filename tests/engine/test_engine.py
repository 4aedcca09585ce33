"""The expression layer: hybrid float/log arithmetic, reductions, GridMin, exact cross-check."""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import boundcalc as bc
from boundcalc.engine import logspace as ls
from boundcalc.errors import DomainError

FILE = '''
family = "t"
[[entry]]
id = "e"
title = "t"
source = "s"
provenance = "p"
kind = "proxy"
expression = "{expr}"
[entry.indices]
l = "L"
k = "L"
[entry.symbols]
L = {{ meaning = "layers", role = "size", domain = "[1, inf)", integer = true }}
x = {{ meaning = "x", role = "measured", domain = "(-inf, inf)" }}
c = {{ meaning = "c", role = "measured", domain = "[0, inf)", indices = ["l"] }}
[entry.parameters]
p = {{ choice = "grid", domain = "[0, 4]", default = 0, grid = {{ values = [0, 1, 2, 3, 4] }} }}
'''


def entry(tmp_path, expr):
    path = tmp_path / "t.toml"
    path.write_text(textwrap.dedent(FILE.format(expr=expr)), encoding="utf-8")
    return bc.load_registry([path]).get("e")


finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(finite, finite)
def test_hybrid_arithmetic_is_plain_numpy_float_arithmetic(x, y):
    X, Y = ls.from_float(x), ls.from_float(y)
    assert ls.add([X, Y]).to_float() == x + y
    assert ls.mul(X, Y).to_float() == x * y
    if x > 0:
        assert ls.power(X, np.float64(0.5)).to_float() == np.power(x, 0.5)
        assert ls.log(X).to_float() == np.log(x)
    assert bool(ls.less(X, Y)) == (x < y)


def test_product_underflowing_to_zero_is_float64s_zero():
    # Hypothesis' own counterexample (issue 34): 0.5 · 5e-324 lies exactly halfway between 0 and
    # the smallest subnormal, so IEEE rounds it to even, 0; the log form alone would give 5e-324
    X, Y = ls.from_float(0.5), ls.from_float(5e-324)
    assert 0.5 * 5e-324 == 0.0
    assert ls.mul(X, Y).to_float() == 0.0
    assert ls.mul(ls.from_float(1.5), Y).to_float() == 1.5 * 5e-324 == 1e-323   # tie, to even
    assert ls.mul(ls.from_float(1e-200), ls.from_float(1e-200)).to_float() == 0.0


def test_underflowed_value_is_carried_by_its_log_into_a_later_product():
    # float64 loses (0.5 · 5e-324) · 1e300 entirely; the hybrid keeps 2.47e-24 from the log form
    tiny = ls.mul(ls.from_float(0.5), ls.from_float(5e-324))
    back = ls.mul(tiny, ls.from_float(1e300)).to_float()
    assert (0.5 * 5e-324) * 1e300 == 0.0
    assert back == pytest.approx(0.5 * 4.9406564584124654e-24, rel=1e-12, abs=0)
    chain = ls.mul(ls.mul(ls.from_float(1e-200), ls.from_float(1e-200)), ls.from_float(1e300))
    assert chain.to_float() == pytest.approx(1e-100, rel=1e-12, abs=0)


def test_overflowing_products_keep_their_logarithm():
    big = ls.from_float(np.full(100, 1e300))
    prod = ls.reduce_mul(big, axis=0)
    assert np.isinf(prod.to_float())
    assert float(prod.a[0]) == pytest.approx(100 * math.log(1e300), rel=1e-14)
    root = ls.power(prod, np.float64(1 / 100))
    assert float(root.to_float()[0]) == pytest.approx(1e300, rel=1e-12)


def test_sum_product_with_dependent_limits(tmp_path):
    e = entry(tmp_path, "Sum(Product(c[k], (k, l + 1, L - 1)), (l, 0, L - 1))")
    c = np.array([2.0, 3.0, 5.0, 7.0])
    expected = sum(np.prod(c[l + 1:]) for l in range(4))
    assert bc.evaluate(e, {"c": c, "x": 0}).value == expected


def test_gridmin_records_argmin_per_instance_and_cost(tmp_path):
    e = entry(tmp_path, "Sum(GridMin((p - c[l])**2 + x, p), (l, 0, L - 1))")
    e.parameters["p"].indices = ("l",)
    c = np.array([0.2, 3.6, 2.4])
    r = bc.evaluate(e, {"c": c, "x": 1.0})
    grid = np.arange(5.0)
    best = [grid[np.argmin((grid - ci) ** 2)] for ci in c]
    assert list(r.parameters["p"]) == best
    assert r.value == pytest.approx(sum((b - ci) ** 2 + 1 for b, ci in zip(best, c)), rel=1e-15)
    assert r.union_bound_cost["p"] == pytest.approx(3 * math.log(5))


def test_undefined_values_are_errors_not_nan(tmp_path):
    e = entry(tmp_path, "sqrt(x) + Sum(c[l], (l, 0, L - 1))")
    with pytest.raises(DomainError, match="undefined"):
        bc.evaluate(e, {"c": [1.0], "x": -4.0})


def test_out_of_range_index_is_an_error(tmp_path):
    e = entry(tmp_path, "Sum(c[l + 1], (l, 0, L - 1))")
    with pytest.raises(DomainError):
        bc.evaluate(e, {"c": [1.0, 2.0], "x": 0})


def test_exact_evaluation_agrees_with_fast_path(registry):
    import sys
    sys.path.insert(0, "tests")
    from test_spectrum_adaptive import random_bert, subset, values_for

    e = registry.get("spectrum_adaptive_ours")
    vals = subset(e, values_for(random_bert(2, 2, 8, 4, seed=3, decay=1.0), 2, 2, 8, 4))
    prepared = bc.Prepared(e, vals)
    fast = prepared.result().value
    assert float(prepared.exact_value(digits=30)) == pytest.approx(fast, rel=1e-12)
    m = bc.Prepared(registry.get("mcallester"), {"emp_risk": 0.05, "KL": 5000, "n": 60000})
    assert float(m.exact_value()) == pytest.approx(m.result().value, rel=1e-14)
