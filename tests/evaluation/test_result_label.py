"""A result's label and its head (what narrow tables show) for every way a number may be called."""

from __future__ import annotations

import dataclasses

import pytest

import boundcalc as bc


@pytest.fixture(scope="module")
def base(registry):
    return bc.evaluate(registry.get("mcallester"), {"emp_risk": 0.05, "KL": 100, "n": 10000})


@pytest.mark.parametrize("change, head, full", [
    ({}, "certified bound", "certified bound"),
    ({"estimated": True}, "estimated",
     "estimated (uses a stochastic estimate without its confidence term)"),
    ({"delta": 1.5}, "not a bound", "not a bound: total δ = 1.5 ≥ 1 (no guarantee)"),
    ({"assumptions": [{"text": "n ≥ 8", "check": "n >= 8", "status": "fails"}]}, "not a bound",
     "not a bound: an assumption fails"),
    ({"kind": "conditional", "conditions": ["the remainder is ≤ 0", "P̂ is a supremum"]},
     "conditional",
     "conditional: an upper bound only if the remainder is ≤ 0; and P̂ is a supremum"),
    ({"kind": "conditional", "conditions": ["c"], "estimated": True}, "estimated",
     "estimated (uses a stochastic estimate without its confidence term) and conditional: an "
     "upper bound only if c"),
    ({"kind": "rate", "hidden_constants": {"C": 2.0}}, "rate",
     "rate (O(·) with hidden constant C=2)"),
    ({"kind": "proxy"}, "proxy", "proxy (complexity measure, not a bound)"),
    ({"output": "divergence"}, "certified divergence",
     "certified divergence (exact under the assumptions; not a risk bound)"),
    ({"output": "loss"}, "certified bound on an expected loss",
     "certified bound on an expected loss (in its own unit; not compared with 1)"),
])
def test_label_and_its_head(base, change, head, full):
    r = dataclasses.replace(base, **change)
    assert r.label == full
    assert r.label_head == head and r.label.startswith(r.label_head)
