"""Issue 43.3: every displayed certified or conditional value is rounded UP, a floor and the
probability 1 − δ DOWN, in every renderer (rich tables, Markdown, LaTeX, ``to_json()``'s
``value_text``, compare's headline and minimum line).

Real results of the bundled registry (a certified and a conditional entry), evaluated once;
each example replaces the value and renders it through the real renderers. The displayed text is read back and checked against
the exact binary value of the float, and against directed rounding done by hand in exact
fractions (tests/_rounding_helpers.py)."""

from __future__ import annotations

import dataclasses
import math
import re
from decimal import Decimal, localcontext
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

import boundcalc as bc
from boundcalc.report.compare_view import headline as compare_headline
from boundcalc.report.compare_view import minimum_line
from boundcalc.report.latex import latex_document
from boundcalc.report.markdown import headline as md_headline
from boundcalc.report.markdown import markdown_report
from boundcalc.report.summary import floor_line
from boundcalc.report.tables import certified_table, floor_rows, result_panel
from tests._rounding_helpers import directed, down_text, up_text

NUMBER = r"-?\d+(?:\.\d+)?(?:e[+-]\d+)?"
VALUES = st.floats(min_value=1e-12, max_value=1e12, allow_nan=False, allow_infinity=False)


CERTIFIED, CONDITIONAL = "mcallester", "lotfi_token_level"
KINDS = st.sampled_from([CERTIFIED, CONDITIONAL])


@pytest.fixture(scope="module")
def results(registry):
    """A certified and a conditional entry of the bundled registry, evaluated once."""
    lotfi = {"code_bits": 1e5, "n": 1e6, "s": 1e5, "smoothed_nll": 3.0, "V": 257, "alpha": 0.01}
    out = {CERTIFIED: bc.evaluate(registry.get(CERTIFIED), {"emp_risk": 0.05, "KL": 100,
                                                             "n": 10000}),
           CONDITIONAL: bc.evaluate(registry.get(CONDITIONAL), lotfi, fixed=["alpha"])}
    assert out[CERTIFIED].kind == "certified" and out[CERTIFIED].is_bound
    assert out[CONDITIONAL].kind == "conditional"
    return out


def _with(result, x: float):
    return dataclasses.replace(result, value=x, log10_value=math.log10(x), floor=None,
                               extra={}, trivial=None)


def _at_least(text: str, x: float, digits: int) -> None:
    """``text`` read back is ≥ x (as a double and as an exact decimal), and it is x rounded
    up to ``digits`` digits, by hand."""
    assert float(text) >= x and Fraction(text) >= Fraction(x), (text, x)
    assert Fraction(text) == directed(x, digits, up=True), (text, x, digits)


def _text_of(console_renderable) -> str:
    con = Console(record=True, width=200, color_system=None)
    con.print(console_renderable)
    return con.export_text()


def _latex_value(tex: str) -> str:
    m = re.search(r"\\textbf\{Value:\} \$\\mathcal\{B\} = (\d+(?:\.\d+)?)"
                  r"(?: \\cdot 10\^\{(-?\d+)\})?\$", tex)
    assert m, tex[:400]
    return m.group(1) + (f"e{int(m.group(2)):+03d}" if m.group(2) else "")


@settings(max_examples=300, deadline=None)
@given(VALUES, st.integers(1, 8), KINDS)
def test_value_text_rounds_up_for_every_digit_count(results, x, digits, kind):
    r = _with(results[kind], x)
    _at_least(r.value_text(digits), x, digits)


@settings(max_examples=150, deadline=None)
@given(VALUES, KINDS)
def test_every_renderer_shows_the_value_rounded_up(registry, results, x, kind):
    r = _with(results[kind], x)
    # to_json's value_text (6 digits), as compare --json and optimize --json carry it
    _at_least(r.to_json()["value_text"], x, 6)
    # the rich panel (8 digits) and the certified table's value cell (4 digits)
    panel = _text_of(result_panel(r))
    shown = re.search(rf"value\s+({NUMBER})", panel).group(1)
    _at_least(shown, x, 8)
    table = _text_of(certified_table([r]))
    row = next(ln for ln in table.splitlines() if ln.strip().startswith(f"│ {kind} "))
    cell = [c.strip() for c in row.strip("│ ").split("│")][1].split()[0]  # unit apart
    _at_least(cell, x, 4)
    # Markdown: the headline and the report (6 digits)
    word = "Certified bound" if kind == CERTIFIED else "Conditional value"
    m = re.search(rf"\*\*{word}: ({NUMBER})\*\*", md_headline(r))
    assert m and m.group(0) in markdown_report(r)
    _at_least(m.group(1), x, 6)
    # LaTeX: the value line and the instantiated equation's '= value' (6 digits)
    tex = latex_document(registry.get(kind), r)
    shown = _latex_value(tex)
    _at_least(shown, x, 6)
    typeset = r"\textbf{Value:} $\mathcal{B} = "
    value_tex = tex.split(typeset, 1)[1].split("$", 1)[0]
    assert tex.count(f" = {value_tex}") >= 2  # the equation ends with the same text


@settings(max_examples=200, deadline=None)
@given(VALUES, VALUES, st.floats(1e-6, 0.5), st.integers(2, 6))
def test_compare_headline_and_minimum_line(x, row, delta, k):
    base = {"id": "sure", "value": x, "row_value": row, "k": k, "vacuous": False,
            "vacuous_against": "no (< 1)", "quantity": "0-1 error", "delta_total": delta}
    head = compare_headline(base, [], [])
    shown, prob = re.match(rf"headline: ({NUMBER}) certified \(sure, probability ≥ "
                           rf"({NUMBER})\)", head).groups()
    _at_least(shown, x, 4)
    _at_most_probability(prob, delta)
    single = minimum_line({**base, "method": "single"})
    shown, prob = re.search(rf": ({NUMBER}) \(sure, holds with probability ≥ ({NUMBER})\)",
                            single).groups()
    _at_least(shown, x, 4)
    _at_most_probability(prob, delta)
    over_k = minimum_line({**base, "method": "delta_over_k", "delta_each": delta / k})
    shown, prob, own = re.search(rf"gives ({NUMBER}), so the minimum holds with probability ≥ "
                                 rf"({NUMBER}) .*\(sure: ({NUMBER})\)$", over_k).groups()
    _at_least(shown, x, 4)
    _at_least(own, row, 4)
    _at_most_probability(prob, delta)
    by_sum = minimum_line({**base, "method": "sum"})
    shown, prob = re.search(rf"δ's: ({NUMBER}) \(sure\) holds with probability ≥ 1 − Σδ = "
                            rf"({NUMBER})", by_sum).groups()
    _at_least(shown, x, 4)
    _at_most_probability(prob, delta)


def _at_most_probability(text: str, delta: float) -> None:
    """1 − δ shown: at most 1 − the decimal δ is written as (its repr: the engine spends no
    more than that decimal, rounding.at_most_decimal), and within 4 digits of it."""
    with localcontext() as ctx:
        ctx.prec = 80
        exact = Decimal(1) - Decimal(repr(float(delta)))
        assert Decimal(text) <= exact, (text, delta)
        assert exact - Decimal(text) <= Decimal("1e-4"), (text, delta)


def test_probability_by_hand():
    # δ is read as the decimal it is written as: the engine evaluates every share at the
    # largest double at or below it (0.05 → 0.0499999999999999958…), so 1 − 0.05 is 0.95
    from boundcalc.rounding import at_most_decimal, decimal_total
    for delta in (0.05, at_most_decimal(0.05)):
        assert compare_headline({"id": "a", "value": 0.5, "vacuous": None,
                                 "vacuous_against": "—", "delta_total": delta},
                                [], []).endswith("probability ≥ 0.95)")
    total = decimal_total([0.05, 0.01, 0.01])  # not the float sum 0.07000000000000000666…
    assert total == 0.07
    assert compare_headline({"id": "a", "value": 0.5, "vacuous": None, "vacuous_against": "—",
                             "delta_total": total}, [], []).endswith("probability ≥ 0.93)")
    # 0.5 and 0.25 are exact in binary: 1 − δ exactly
    assert "≥ 0.75" in minimum_line({"id": "a", "k": 1, "method": "single", "value": 0.5,
                                     "delta_total": 0.25})


def test_issue_examples(results):
    """The numbers issue 43 quoted: 0.0977930948 at 4 digits was shown 0.09779, 0.2188151 as
    0.2188, 0.218815 at 6 digits (the double 0.21881500000000000949…) as 0.218815."""
    assert _with(results[CERTIFIED], 0.0977930948).value_text(4) == "0.0978"
    assert _with(results[CERTIFIED], 0.2188151).value_text(4) == "0.2189"
    assert _with(results[CONDITIONAL], 0.218815).to_json()["value_text"] == "0.218816"
    # a rate or a proxy bounds nothing: to nearest, as %g
    assert dataclasses.replace(results[CERTIFIED], kind="proxy",
                               value=0.0977930948).value_text(4) == "0.09779"


@settings(max_examples=100, deadline=None)
@given(st.floats(min_value=308.5, max_value=5000.0), st.integers(1, 8))
def test_beyond_the_float_range_the_mantissa_rounds_up(registry, results, log10, digits):
    r = dataclasses.replace(results[CERTIFIED], value=math.inf, log10_value=log10)
    text = r.value_text(digits)
    mant, exp = text.split("e+")
    assert 1 <= float(mant) < 10 and len(mant.replace(".", "")) <= min(digits, 5)
    with localcontext() as ctx:
        ctx.prec = 60
        assert Decimal(mant).log10() + int(exp) >= Decimal(log10), (text, log10)
    # and the LaTeX value line typesets the 6-digit text (the mantissa has at most 5)
    mant6, exp6 = r.value_text(6).split("e+")
    assert _latex_value(latex_document(registry.get(CERTIFIED), r)) == f"{mant6}e+{int(exp6):02d}"


@settings(max_examples=100, deadline=None)
@given(st.floats(1e-6, 0.999), st.floats(1e-6, 0.5))
def test_floors_round_down(results, own, plain):
    floor = {"own": own, "plain": plain, "risk_symbol": "emp", "emp_risk": 0.05, "n": 1000.0,
             "delta": 0.05, "own_form": "ln(1/δ)", "budget_nats": {"confidence": 3.0},
             "effects": {"confidence": 0.01}, "dominant": "confidence", "mc_upper": None}
    r = dataclasses.replace(results[CERTIFIED], floor=floor)
    text = dict(floor_rows(r))["floor"]
    assert text.startswith(f"{down_text(own, 4)} = kl⁻¹(emp = 0.05, c(δ)/n)")
    assert f"; {down_text(plain, 4)} with ln(1/δ)" in text
    assert float(down_text(own, 4)) <= own
    line = floor_line({"floor": floor, "vacuous": None})
    assert line.startswith(f"floor {down_text(own, 4)};")


def test_hand_helpers_agree_with_known_texts():
    """The hand rounding itself, on cases worked out on paper."""
    assert up_text(0.0977930948, 4) == "0.0978" and down_text(0.0977930948, 4) == "0.09779"
    assert up_text(9.9996, 4) == "10" and down_text(0.95, 4) == "0.9499"
    assert up_text(0.375, 6) == "0.375"
