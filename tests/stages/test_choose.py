"""Stage 2, choose parameters (boundcalc/stages/choose.py): a free parameter comes from the
caller, else its closed form (a simultaneous one, free of charge), else the best admissible point
of its grid (charged ln |grid| in δ) — each against the value computed by hand here."""

from __future__ import annotations

import math

import numpy as np
import pytest

from boundcalc.errors import DomainError
from boundcalc.stages.choose import resolve_parameters
from boundcalc.stages.validate import ValidatedEntry

MC = {"emp_risk": 0.1, "KL": 10.0, "n": 1000}


def test_a_simultaneous_parameter_takes_its_closed_form_at_no_cost(registry):
    v = ValidatedEntry(registry.get("pac_bayes_lambda"), MC)
    values, choice, costs = resolve_parameters(v)
    budget = 10 + math.log(2 * math.sqrt(1000) / 0.05)
    hand = 2 / (math.sqrt(2 * 1000 * 0.1 / budget + 1) + 1)
    assert values["lam"] == pytest.approx(hand, rel=1e-13)
    assert costs == {} and "lam" in choice


def test_a_given_value_is_used_as_is(registry):
    v = ValidatedEntry(registry.get("pac_bayes_lambda"), MC)
    values, _, costs = resolve_parameters(v, {"lam": 0.5})
    assert values == {"lam": 0.5} and costs == {}


def _alquier(lam, delta_eff, emp=0.1, kl=10.0, n=1000, b=1.0):
    return emp + lam * b ** 2 / (8 * n) + (kl + math.log(1 / delta_eff)) / lam


def test_a_grid_parameter_is_the_best_grid_point_and_is_charged(registry):
    v = ValidatedEntry(registry.get("alquier_bounded"), MC)
    values, _, costs = resolve_parameters(v)
    grid = np.geomspace(math.sqrt(1000), 1e6 * math.sqrt(1000), 61)
    assert costs == {"lam": pytest.approx(math.log(61), rel=1e-15)}
    best = min(grid, key=lambda lam: _alquier(lam, 0.05 / 61))
    assert values["lam"] == pytest.approx(best, rel=1e-12)
    assert v.value(values, costs) == pytest.approx(_alquier(best, 0.05 / 61), rel=1e-12)


def test_a_hand_set_grid_value_must_be_a_grid_point(registry):
    # the grid is √1000·10^(k/10), k = 0..60: 100 is its point k = 5, 50 is none
    on = ValidatedEntry(registry.get("alquier_bounded"), {**MC, "lam": 100.0})
    values, choice, costs = resolve_parameters(on)
    assert values == {"lam": 100.0} and costs["lam"] == pytest.approx(math.log(61))
    off = ValidatedEntry(registry.get("alquier_bounded"), {**MC, "lam": 50.0})
    with pytest.raises(DomainError, match="'lam' = 50 is not on its declared grid"):
        resolve_parameters(off)
