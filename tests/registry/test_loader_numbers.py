"""A number a formula file gives (a symbol's default, a parameter's bounds or default, a prior's c
and b) must be a finite float (a search bound may also be ±inf). TOML integers are unbounded, and
an integer beyond any float raised Python's OverflowError from the loader (found by the 100×
property campaign: the document fuzzer set the compression family's ``delta`` default to
10**400); one beyond 4300 digits raised tomllib's ValueError."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path

import pytest

import boundcalc as bc
from boundcalc.errors import FormulaError
from boundcalc.registry.loader import entries_from_document
from tests.registry.test_formula_safety import ENTRY, write

FORMULAS = Path(__file__).resolve().parents[2] / "formulas"
HUGE = "1" + "0" * 400  # a TOML integer: tomllib reads it as the int 10**400
TOO_LONG = "1" + "0" * 5000  # beyond Python's 4300-digit limit of int(str)
BIG = "number too large for double precision"
PRIOR = ', prior = {{ kind = "dziugaite_roy", {} }}'


def _load(tmp_path: Path, y_extra: str = "", choice: str = "simultaneous", lam_extra: str = ""):
    """The one-entry file of test_formula_safety with a symbol y and a parameter lam added."""
    body = (ENTRY.format(expr="x + y + lam")
            + f'y = {{ meaning = "y", role = "measured", domain = "[0, inf)"{y_extra} }}\n'
            + f'[entry.parameters]\nlam = {{ choice = "{choice}", domain = "(0, inf)"{lam_extra} }}\n')
    return bc.load_registry([write(tmp_path, body)])


@pytest.mark.parametrize("y_extra, choice, lam_extra, needle", [
    (f", default = {HUGE}", "simultaneous", "", f"symbol 'y': 'default': {BIG}"),
    (f", default = -{HUGE}", "simultaneous", "", f"symbol 'y': 'default': {BIG}"),
    (", default = nan", "simultaneous", "", "symbol 'y': 'default': expected a finite number"),
    (", default = inf", "simultaneous", "", "symbol 'y': 'default': expected a finite number"),
    (', default = "3"', "simultaneous", "", "symbol 'y': 'default': expected a number, got str"),
    ("", "simultaneous", f", bounds = [1, {HUGE}]", f"parameter 'lam': 'bounds'[1]: {BIG}"),
    ("", "simultaneous", f", bounds = [-{HUGE}, 1]", f"parameter 'lam': 'bounds'[0]: {BIG}"),
    ("", "simultaneous", ", bounds = [1, nan]", "'bounds'[1]: expected a finite number, got nan"),
    ("", "simultaneous", ", bounds = [2, 1]", "'bounds' must be [low, high] with low < high"),
    ("", "simultaneous", ", bounds = [inf, inf]", "'bounds' must be [low, high] with low < high"),
    ("", "simultaneous", f", default = {HUGE}", f"parameter 'lam': 'default': {BIG}"),
    ("", "prior", PRIOR.format(f"c = {HUGE}, b = 100"), f"prior: c: {BIG}"),
    ("", "prior", PRIOR.format('c = 0.1, b = "100"'), "prior: b: expected a number, got str"),
    ("", "prior", PRIOR.format("c = 0.1, b = inf"), "prior: b: expected a finite number, got inf"),
    ("", "prior", PRIOR.format("c = 0.1"), "prior: needs numbers c and b"),
    ("", "prior", PRIOR.format("c = -0.1, b = 100"), "prior: c and b must be positive"),
    (f", default = {TOO_LONG}", "simultaneous", "", "f.toml: not readable TOML (Exceeds the limit"),
])
def test_a_number_beyond_any_float_is_refused_in_one_line(tmp_path, y_extra, choice, lam_extra,
                                                         needle):
    with pytest.raises(FormulaError) as exc:
        _load(tmp_path, y_extra, choice, lam_extra)
    msg = str(exc.value)
    assert msg.startswith("f.toml: ") and needle in msg, msg
    assert "\n" not in msg and len(msg) < 300  # the long number is not echoed
    assert "set_int_max_str_digits" not in msg


def test_finite_numbers_still_load_as_floats(tmp_path):
    (entry,) = _load(tmp_path, ", default = 3", "simultaneous", ", bounds = [1, 1000], default = 7")
    assert entry.symbols["y"].default == 3.0 and type(entry.symbols["y"].default) is float
    lam = entry.parameters["lam"]
    assert lam.bounds == (1.0, 1000.0) and lam.default == 7.0
    (entry,) = _load(tmp_path, "", "simultaneous", ", bounds = [1, inf]")  # a half-line search
    assert entry.parameters["lam"].bounds == (1.0, float("inf"))
    (entry,) = _load(tmp_path, "", "prior", PRIOR.format("c = 1, b = 100, squared = true"))
    assert (entry.parameters["lam"].prior.c, entry.parameters["lam"].prior.b) == (1.0, 100.0)


def test_the_campaigns_counterexample_is_refused():
    """The fuzzer's document: the real compression family with delta's default = 10**400."""
    doc = tomllib.loads((FORMULAS / "compression.toml").read_text(encoding="utf-8"))
    assert entries_from_document(copy.deepcopy(doc), "fuzz.toml")  # the real file loads
    doc["symbols"]["delta"]["default"] = 10 ** 400
    with pytest.raises(FormulaError) as exc:
        entries_from_document(doc, "fuzz.toml")
    assert str(exc.value) == ("fuzz.toml: entry 'occam_kl': symbol 'delta': 'default': number too "
                              "large for double precision")
