"""The float evaluator (boundcalc/stages/float_eval.py): an entry's expression and its
sub-expressions at a point, in floats, against the formulas computed by hand here."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp

from boundcalc.errors import DomainError
from boundcalc.evaluation import Prepared
from boundcalc.stages.float_eval import FloatEvaluator
from boundcalc.stages.validate import ValidatedEntry

MC = {"emp_risk": 0.1, "KL": 10.0, "n": 1000}


def _mcallester(emp, kl, n, delta):
    return emp + math.sqrt((kl + math.log(2 * math.sqrt(n) / delta)) / (2 * n))


def test_every_validated_entry_is_the_evaluator():
    assert issubclass(ValidatedEntry, FloatEvaluator) and issubclass(Prepared, FloatEvaluator)


def test_the_value_at_a_point_is_the_formula_by_hand(registry):
    v = ValidatedEntry(registry.get("mcallester"), MC)
    assert v.value({}) == pytest.approx(_mcallester(0.1, 10, 1000, 0.05), rel=1e-13)
    value, sign, log_abs = v.point_value(v.context())
    assert sign == 1.0 and log_abs == pytest.approx(math.log(value), rel=1e-13)


def test_union_bound_costs_shrink_delta(registry):
    v = ValidatedEntry(registry.get("mcallester"), MC)
    assert v.delta_effective({"a": math.log(2), "b": math.log(5)}) == pytest.approx(0.005)
    assert v.value({}, {"a": math.log(4)}) == pytest.approx(
        _mcallester(0.1, 10, 1000, 0.05 / 4), rel=1e-13)
    with pytest.raises(DomainError, match="underflows to 0"):
        v.delta_effective({"a": 1e4})


def test_a_sub_expression_and_an_array_over_an_index(registry):
    e = registry.get("gaussian_kl_groups")
    v = ValidatedEntry(e, {"dist_sq": [1.0, 4.0, 9.0], "sigma_g": [1.0, 2.0, 4.0]})
    assert v.value({}) == pytest.approx(1 / 2 + 4 / 8 + 9 / 32, rel=1e-14)
    d = e.symbols["dist_sq"].symbol
    g = sp.Symbol("g", integer=True)
    np.testing.assert_allclose(v.eval_array(2 * sp.Indexed(d, g), v.context()), [2, 8, 18])
    with pytest.raises(DomainError, match="is not a scalar"):
        v.eval_scalar(sp.Indexed(d, g))
    assert v.eval_scalar(e.symbols["G"].symbol + 1) == 4.0


def test_a_free_parameter_enters_through_the_context(registry):
    v = ValidatedEntry(registry.get("pac_bayes_lambda"), MC)
    lam = 0.5
    budget = 10 + math.log(2 * math.sqrt(1000) / 0.05)
    hand = 0.1 / (1 - lam / 2) + budget / (1000 * lam * (1 - lam / 2))
    assert v.value({"lam": lam}) == pytest.approx(hand, rel=1e-13)
