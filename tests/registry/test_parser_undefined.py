"""Undefined or imaginary constants in a formula are refused where they are written, with the
parser's one-line FormulaError: found by the 100× property campaign (``x < log(0, 2)`` raised
SymPy's TypeError; ``Max(x, 1/0)`` its ValueError) and, by reading the parser, constants SymPy
folds away ((1/0)**0 = 1, Abs(sqrt(-1)) = 1) that were accepted as if they were numbers."""

from __future__ import annotations

import pytest
import sympy as sp

from boundcalc.engine.functions import Cases
from boundcalc.errors import FormulaError
from boundcalc.registry.parser import Namespace, parse_expression

X = sp.Symbol("x", real=True)
NS = Namespace(scalars={"x": X})


@pytest.mark.parametrize("text,what", [
    ("x < log(0, 2)", "division by zero or log(0)"),   # the campaign's counterexample
    ("x < 1/0", "division by zero or log(0)"),
    ("1/0 >= x", "division by zero or log(0)"),
    ("x < 0/0", "(0/0)"),
    ("x <= sqrt(-1)", "imaginary"),
    ("x > log(-1)", "imaginary"),
    ("Max(x, 1/0)", "division by zero or log(0)"),
    ("Min(0/0, x)", "(0/0)"),
    ("Max(x, sqrt(-2))", "imaginary"),
    ("(1/0)**0 + x", "division by zero or log(0)"),     # SymPy folds zoo**0 to 1
    ("Abs(sqrt(-1)) * x", "imaginary"),                 # SymPy folds Abs(I) to 1
    ("Piecewise((1/0, False), (x, True))", "division by zero or log(0)"),  # branch dropped
    ("floor(0/0) + x", "(0/0)"),
])
def test_an_undefined_constant_is_refused_in_one_line(text, what):
    with pytest.raises(FormulaError) as exc:
        parse_expression(text, NS, "f.toml: entry 'e': expression: ")
    msg = str(exc.value)
    assert msg.startswith("f.toml: entry 'e': expression: expression contains ")
    assert what in msg and "\n" not in msg


@pytest.mark.parametrize("text,expected", [
    ("x < 1", X < 1),
    ("Max(x, 2*x) + Min(x, 1)", sp.Max(X, 2 * X) + sp.Min(X, 1)),
    ("x * log(2, 3)", X * sp.log(2) / sp.log(3)),
    ("Piecewise((x, x < 1), (1, True))", Cases(X, X < 1, 1)),  # the parser's Piecewise
])
def test_defined_constants_and_comparisons_are_kept(text, expected):
    assert parse_expression(text, NS) == expected
