"""Stage 1, validate (boundcalc/stages/validate.py): every symbol gets its value (given, default,
or a size implied by arrays) inside its domain, index sizes agree, grids are built and a hand-set
GridMin parameter is pinned — each checked on a real registry entry against values written
here."""

from __future__ import annotations

import math

import numpy as np
import pytest

from boundcalc.errors import DomainError, MissingValueError
from boundcalc.stages.validate import ValidatedEntry, count_value, nearest_index

MC = {"emp_risk": 0.1, "KL": 10.0, "n": 1000}


def test_given_values_and_the_declared_default_are_taken(registry):
    v = ValidatedEntry(registry.get("mcallester"), MC)
    assert v.scalars == {"emp_risk": 0.1, "KL": 10.0, "n": 1000.0, "delta": 0.05}
    assert v.arrays == {} and v.sizes == {} and v.grids == {}


@pytest.mark.parametrize("values,error,words", [
    ({"emp_risk": 0.1, "n": 1000}, MissingValueError, "missing value(s) for KL"),
    ({**MC, "emp_risk": 1.5}, DomainError, "emp_risk"),
    ({**MC, "n": 0}, DomainError, "outside its domain"),
    ({**MC, "kl": 1.0}, DomainError, "unknown symbol 'kl'"),
    ({**MC, "KL": [1.0, 2.0]}, DomainError, "expected a single number"),
])
def test_a_bad_value_is_one_error_naming_the_symbol(registry, values, error, words):
    with pytest.raises(error) as exc:
        ValidatedEntry(registry.get("mcallester"), values)
    assert words in str(exc.value) and "mcallester" in str(exc.value)


def test_an_index_size_is_implied_by_the_arrays_and_must_agree(registry):
    e = registry.get("gaussian_kl_groups")
    v = ValidatedEntry(e, {"dist_sq": [1.0, 4.0, 9.0], "sigma_g": [1.0, 2.0, 3.0]})
    assert v.sizes == {"g": 3} and v.scalars["G"] == 3.0
    np.testing.assert_array_equal(v.arrays["dist_sq"], [1.0, 4.0, 9.0])
    with pytest.raises(DomainError, match="other symbols have 3"):
        ValidatedEntry(e, {"dist_sq": [1.0, 4.0, 9.0], "sigma_g": [1.0, 2.0]})
    with pytest.raises(DomainError, match="but G = 2"):
        ValidatedEntry(e, {"G": 2, "dist_sq": [1.0, 4.0, 9.0], "sigma_g": [1.0, 2.0, 3.0]})


def test_a_gridmin_grid_is_built_and_charged_its_log_size(registry):
    v = ValidatedEntry(registry.get("catoni"), MC)
    np.testing.assert_allclose(v.grids["C"], np.geomspace(1e-3, 100, 51), rtol=1e-12)
    assert v.gridmin_cost == {"C": pytest.approx(math.log(51), rel=1e-15)}


def test_a_hand_set_gridmin_point_is_pinned_charged_unless_fixed(registry):
    grid = np.geomspace(1e-3, 100, 51)
    on = float(grid[30])
    v = ValidatedEntry(registry.get("catoni"), {**MC, "C": on})
    assert list(v.grids["C"]) == [on] and v.gridmin_cost["C"] == pytest.approx(math.log(51))
    with pytest.raises(DomainError, match="not on its declared grid"):
        ValidatedEntry(registry.get("catoni"), {**MC, "C": 0.5})
    fixed = ValidatedEntry(registry.get("catoni"), {**MC, "C": 0.5}, fixed=["C"])
    assert list(fixed.grids["C"]) == [0.5] and fixed.gridmin_cost["C"] == 0.0


def test_count_value_and_nearest_index(registry):
    e = registry.get("gaussian_kl_groups")
    assert count_value(e, "G", 3.0) == 3
    with pytest.raises(DomainError, match="is not a count"):
        count_value(e, "G", 2.5)
    grid = np.array([1.0, 10.0, 100.0])
    # 50 is nearer 100 in log space (ln 2 < ln 5), nearer 10 on the line (40 < 50)
    assert nearest_index(grid, 50.0, log_scale=True) == 2
    assert nearest_index(grid, 50.0, log_scale=False) == 1
