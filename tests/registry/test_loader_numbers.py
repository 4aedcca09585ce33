"""A number a formula file gives (a symbol's default, a parameter's bounds or default, a prior's c
and b) must be a float (finite, except that a search bound may be ±inf): TOML and JSON integers are unbounded, and an integer beyond any
float raised Python's OverflowError from the loader (found by the 100× property campaign: the
document fuzzer set the compression family's ``delta`` default to 10**400)."""

from __future__ import annotations

import copy
import textwrap
import tomllib
from pathlib import Path

import pytest

import boundcalc as bc
from boundcalc.errors import FormulaError
from boundcalc.registry.loader import entries_from_document

FORMULAS = Path(__file__).resolve().parents[2] / "formulas"
HUGE = "1" + "0" * 400  # a TOML integer: tomllib reads it as the int 10**400

FILE = """
family = "t"
[[entry]]
id = "e"
title = "t"
source = "s"
provenance = "p"
kind = "certified"
expression = "x + lam"
[entry.symbols]
x = {{ meaning = "x", role = "measured", domain = "[0, inf)"{x_extra} }}
[entry.parameters]
lam = {{ choice = "{choice}", domain = "(0, inf)"{lam_extra} }}
"""


def _load(tmp_path: Path, x_extra: str = "", choice: str = "simultaneous", lam_extra: str = ""):
    path = tmp_path / "f.toml"
    path.write_text(textwrap.dedent(FILE.format(x_extra=x_extra, choice=choice,
                                                lam_extra=lam_extra)), encoding="utf-8")
    return bc.load_registry([path])


@pytest.mark.parametrize("x_extra, choice, lam_extra, needle", [
    (f", default = {HUGE}", "simultaneous", "",
     "symbol 'x': 'default': number too large for double precision"),
    (f", default = -{HUGE}", "simultaneous", "",
     "symbol 'x': 'default': number too large for double precision"),
    (", default = nan", "simultaneous", "", "symbol 'x': 'default': expected a finite number"),
    (", default = inf", "simultaneous", "", "symbol 'x': 'default': expected a finite number"),
    (', default = "3"', "simultaneous", "", "symbol 'x': 'default': expected a number, got str"),
    ("", "simultaneous", f", bounds = [1, {HUGE}]",
     "parameter 'lam': 'bounds'[1]: number too large for double precision"),
    ("", "simultaneous", f", bounds = [-{HUGE}, 1]",
     "parameter 'lam': 'bounds'[0]: number too large for double precision"),
    ("", "simultaneous", ", bounds = [1, nan]", "'bounds'[1]: expected a finite number, got nan"),
    ("", "simultaneous", ", bounds = [2, 1]", "'bounds' must be [low, high] with low < high"),
    ("", "simultaneous", ", bounds = [inf, inf]", "'bounds' must be [low, high] with low < high"),
    ("", "simultaneous", f", default = {HUGE}",
     "parameter 'lam': 'default': number too large for double precision"),
    ("", "prior", f', prior = {{ kind = "dziugaite_roy", c = {HUGE}, b = 100 }}',
     "prior: c: number too large for double precision"),
    ("", "prior", ', prior = { kind = "dziugaite_roy", c = 0.1, b = "100" }',
     "prior: b: expected a number, got str"),
    ("", "prior", ', prior = { kind = "dziugaite_roy", c = 0.1, b = inf }',
     "prior: b: expected a finite number, got inf"),
    ("", "prior", ', prior = { kind = "dziugaite_roy", c = 0.1 }', "prior: needs numbers c and b"),
    ("", "prior", ', prior = { kind = "dziugaite_roy", c = -0.1, b = 100 }',
     "prior: c and b must be positive"),
])
def test_a_number_beyond_any_float_is_refused_in_one_line(tmp_path, x_extra, choice, lam_extra,
                                                         needle):
    with pytest.raises(FormulaError) as exc:
        _load(tmp_path, x_extra, choice, lam_extra)
    msg = str(exc.value)
    assert "f.toml" in msg and "entry 'e'" in msg and needle in msg, msg
    assert "\n" not in msg and len(msg) < 300  # the 401-digit number is not echoed


def test_an_integer_beyond_pythons_digit_limit_is_refused_in_one_line(tmp_path):
    """tomllib reads integers with int(), which refuses more than 4300 digits (ValueError)."""
    with pytest.raises(FormulaError) as exc:
        _load(tmp_path, ", default = 1" + "0" * 5000)
    msg = str(exc.value)
    assert msg.startswith("f.toml: not readable TOML (Exceeds the limit (4300 digits)"), msg
    assert "\n" not in msg and "set_int_max_str_digits" not in msg


def test_finite_numbers_still_load_as_floats(tmp_path):
    (entry,) = _load(tmp_path, ", default = 3", "simultaneous", ", bounds = [1, 1000], default = 7")
    assert entry.symbols["x"].default == 3.0 and type(entry.symbols["x"].default) is float
    lam = entry.parameters["lam"]
    assert lam.bounds == (1.0, 1000.0) and lam.default == 7.0
    (entry,) = _load(tmp_path, "", "simultaneous", ", bounds = [1, inf]")  # a half-line search
    assert entry.parameters["lam"].bounds == (1.0, float("inf"))
    (entry,) = _load(tmp_path, "", "prior",
                     ', prior = { kind = "dziugaite_roy", c = 1, b = 100, squared = true }')
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
