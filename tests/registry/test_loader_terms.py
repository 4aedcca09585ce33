"""An entry's ``terms`` are shown with its result, so a family-level symbol named there is one the
entry uses, even when the expression does not: found by the 100× property campaign (the
compression family with ``occam_kl``'s expression replaced by ``0``: the loader dropped the unused
shared symbol ``emp_risk``, and evaluating the entry raised KeyError: 'emp_risk')."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest

import boundcalc as bc
from boundcalc.errors import MissingValueError
from boundcalc.registry.loader import entries_from_document

COMPRESSION = Path(__file__).resolve().parents[2] / "formulas" / "compression.toml"
VALUES = {"emp_risk": 0.1, "code_bits": 100.0, "n": 1000.0, "delta": 0.05}


def _occam_kl(expression: str | None = None):
    """The real ``occam_kl`` entry, its expression replaced when one is given."""
    doc = tomllib.loads(COMPRESSION.read_text(encoding="utf-8"))
    (raw,) = [e for e in doc["entry"] if e["id"] == "occam_kl"]
    if expression is not None:
        raw["expression"] = expression
    (entry,) = [e for e in entries_from_document(doc, "fuzz.toml") if e.id == "occam_kl"]
    return entry


def test_a_term_that_the_expression_does_not_use_is_kept_and_shown():
    entry = _occam_kl("0")  # the campaign's counterexample
    assert entry.terms == ["emp_risk", "divergence", "kl_budget"]
    assert "emp_risk" in entry.symbols
    r = bc.evaluate(entry, VALUES)
    assert r.value == 0.0
    assert r.terms["emp_risk"] == 0.1
    # divergence = C(h) ln 2, kl_budget = (C(h) ln 2 + ln(1/δ)) / n, by hand
    assert math.isclose(r.terms["divergence"], 100 * math.log(2), rel_tol=1e-12)
    assert math.isclose(r.terms["kl_budget"], (100 * math.log(2) + math.log(20)) / 1000,
                        rel_tol=1e-12)


def test_the_term_needs_its_value_like_any_symbol():
    with pytest.raises(MissingValueError, match="emp_risk"):
        bc.evaluate(_occam_kl("0"), {k: v for k, v in VALUES.items() if k != "emp_risk"})


def test_the_real_entry_is_unchanged():
    """Control: the file's own expression, the same symbols and the kl-inverse value."""
    real = _occam_kl()
    assert real.expression_text == "kl_inv(emp_risk, kl_budget)"
    assert sorted(real.symbols) == ["code_bits", "delta", "emp_risk", "n"]
    assert bc.evaluate(real, VALUES).value > 0.1
