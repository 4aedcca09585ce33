"""What would it take: smallest n, shrink factors and the n/δ tables, against closed forms and
brute force written here."""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pytest

import boundcalc as bc
from boundcalc.optimize import Options, optimize, prepare_entry, quick_value
from boundcalc.optimize.whatif import bound_table, shrink_factor, smallest_n
from boundcalc.stats import Stats

FORMULAS = """
family = "whatif"
title = "what-if test formulas"
[symbols]
n = { meaning = "sample size", role = "data_size", domain = "[1, inf)", integer = true }
delta = { meaning = "confidence", role = "confidence", domain = "(0, 1)", default = 0.05 }
emp = { meaning = "empirical risk", role = "measured", domain = "[0, 1]" }
KL = { meaning = "KL divergence", role = "measured", domain = "[0, inf)" }

[[entry]]
id = "w_mcallester"
title = "McAllester"
source = "test"
provenance = "test"
kind = "certified"
expression = "emp + sqrt((KL + log(2*sqrt(n)/delta))/(2*n))"

[[entry]]
id = "w_grid"
title = "Alquier on a lambda grid (bounded loss, s = 1/2)"
source = "test"
provenance = "test"
kind = "certified"
expression = "emp + lam/(8*n) + (KL + log(1/delta))/lam"
[entry.parameters]
lam = { choice = "grid", domain = "(0, inf)", grid = { geomspace = [1, 1e8, 81] }, log_scale = true }

[[entry]]
id = "w_rate"
title = "a rate"
source = "test"
provenance = "test"
kind = "rate"
expression = "Cst*sqrt(KL/n)"
[entry.symbols]
Cst = { meaning = "hidden constant", role = "hidden_constant", domain = "(0, inf)", default = 1 }
"""


@pytest.fixture(scope="module")
def reg(tmp_path_factory):
    path = tmp_path_factory.mktemp("f") / "whatif.toml"
    path.write_text(textwrap.dedent(FORMULAS), encoding="utf-8")
    return bc.load_registry([path])


def mcallester(n, emp, KL, delta=0.05):
    return emp + math.sqrt((KL + math.log(2 * math.sqrt(n) / delta)) / (2 * n))


def grid_bound(n, emp, KL, delta=0.05):
    lam = np.geomspace(1, 1e8, 81)
    return float(np.min(emp + lam / (8 * n) + (KL + math.log(81 / delta)) / lam))


def brute_smallest(f, target, lo=1, hi=10 ** 15):
    """Smallest integer n ≥ lo with f(n) < target for a decreasing f (integer bisection)."""
    if f(lo) < target:
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if f(mid) < target else (mid, hi)
    return hi


@pytest.mark.parametrize("emp, KL, target", [(0.05, 5000.0, 1.0), (0.2, 10.0, 0.3),
                                             (0.0, 1e6, 0.01), (0.5, 0.0, 1.0)])
def test_smallest_n_mcallester(reg, emp, KL, target):
    p = prepare_entry(reg.get("w_mcallester"), values={"emp": emp, "KL": KL, "n": 1000})
    out = smallest_n(p, lambda q: quick_value(q), target)
    ref = brute_smallest(lambda n: mcallester(n, emp, KL), target)
    assert out["status"] == "found" and out["n"] == ref
    assert mcallester(ref, emp, KL) < target
    if ref > 1:
        assert mcallester(ref - 1, emp, KL) >= target


@pytest.mark.parametrize("emp, KL, target", [(0.05, 300.0, 0.5), (0.0, 1e4, 0.1)])
def test_smallest_n_reoptimises_the_grid(reg, emp, KL, target):
    p = prepare_entry(reg.get("w_grid"), values={"emp": emp, "KL": KL, "n": 1000})
    out = smallest_n(p, lambda q: quick_value(q), target)
    ref = brute_smallest(lambda n: grid_bound(n, emp, KL), target)
    assert out["n"] == ref
    assert out["value"] == pytest.approx(grid_bound(ref, emp, KL), rel=1e-12)


def test_smallest_n_never(reg):
    p = prepare_entry(reg.get("w_mcallester"), values={"emp": 0.4, "KL": 10.0, "n": 1000})
    out = smallest_n(p, lambda q: quick_value(q), 0.3)
    assert out["status"] == "never" and out["n"] is None and out["value_at_cap"] >= 0.3


@pytest.mark.parametrize("n, KL, target", [(10 ** 4, 5e4, 1.0), (10 ** 6, 1e7, 0.2)])
def test_shrink_factor_closed_form(reg, n, KL, target):
    emp = 0.05
    p = prepare_entry(reg.get("w_mcallester"), values={"emp": emp, "KL": KL, "n": n})
    out = shrink_factor(p, lambda q: quick_value(q), "KL", target)
    # B(KL') = target  ⇔  KL' = 2n(target − emp)² − ln(2√n/δ)
    kl_needed = 2 * n * (target - emp) ** 2 - math.log(2 * math.sqrt(n) / 0.05)
    assert out["status"] == "found"
    assert out["factor"] == pytest.approx(KL / kl_needed, rel=1e-8)
    assert out["value"] < target


def test_shrink_never_and_already(reg):
    p = prepare_entry(reg.get("w_mcallester"), values={"emp": 0.05, "KL": 1e3, "n": 30})
    out = shrink_factor(p, lambda q: quick_value(q), "KL", 0.2)
    assert out["status"] == "never"  # ln(2√n/δ) alone keeps the bound above 0.2
    p = prepare_entry(reg.get("w_mcallester"), values={"emp": 0.05, "KL": 10.0, "n": 10 ** 6})
    assert shrink_factor(p, lambda q: quick_value(q), "KL", 1.0)["status"] == "already below"


def test_tables_against_formula(reg):
    p = prepare_entry(reg.get("w_grid"), values={"emp": 0.05, "KL": 500.0, "n": 2000})
    t = bound_table(p, lambda q: quick_value(q))
    assert any(row["n"] == 2000 for row in t["n"]["rows"])
    for row in t["n"]["rows"]:
        assert row["value"] == pytest.approx(grid_bound(int(row["n"]), 0.05, 500.0), rel=1e-12)
    for row in t["delta"]["rows"]:
        assert row["value"] == pytest.approx(grid_bound(2000, 0.05, 500.0, row["delta"]),
                                             rel=1e-12)
    values = [row["value"] for row in t["n"]["rows"]]
    assert all(a >= b for a, b in zip(values, values[1:]))


def test_what_it_takes_in_results(reg):
    r = optimize(reg.get("w_mcallester"), values={"emp": 0.05, "KL": 5000.0, "n": 1000},
                 what_if=True, target=1.0)
    wit = r.extra["what_it_takes"]
    assert wit["smallest_n"]["n"] == brute_smallest(lambda n: mcallester(n, 0.05, 5000.0), 1.0)
    assert wit["shrink"]["symbol"] == "KL"  # the most sensitive measured statistic
    rate = optimize(reg.get("w_rate"), values={"KL": 50.0, "n": 1000}, what_if=True)
    wit = rate.extra["what_it_takes"]
    assert "smallest_n" not in wit and "shrink" not in wit
    assert "never compared" in wit["note"]
    assert wit["table"]["n"]["rows"]


def test_options_default_is_the_clis_and_comparisons_stay_cheap():
    """The record's defaults are the optimize command's (issue 53: what_if was False here and
    True there); a comparison of many entries asks for no what-if."""
    from boundcalc.optimize.compare import compare_entries
    from boundcalc.registry import load_registry

    o = Options()
    assert o.what_if is True and o.sensitivity and o.use_gp
    reg = load_registry()
    got = compare_entries(Stats(), {"n": 1000, "emp_risk": 0.05, "KL": 50.0}, reg)
    assert got.results and all("what_it_takes" not in r.extra for r in got.results)


# ---- issue 44 item 5: 'smallest n' agrees with the table and the vacuity level ----------------

def _n_of(p):
    return int(p.scalars["n"])


def test_smallest_n_never_contradicts_a_tabulated_n(reg):
    """A bound below the target on n = 40..80 and from n = 1000 on, 1 elsewhere: bisection
    alone stops at 40 (it assumes a decreasing bound); the table's n = 90 and 190 at 1 show
    that is not the smallest n from which on the bound stays below, and the search goes on
    above the larger."""
    p = prepare_entry(reg.get("w_mcallester"), None, {"n": 500, "emp": 0.1, "KL": 10.0})

    def f(q):
        n = _n_of(q)
        return 0.5 if 40 <= n <= 80 or n >= 1000 else 1.0

    alone = smallest_n(p, f, 0.9)
    assert alone["n"] == 40 and "note" not in alone  # what the bisection finds by itself
    out = smallest_n(p, f, 0.9, known=[(2, 1.0), (60, 0.5), (90, 1.0), (190, 1.0),
                                       (6000, 0.5)])
    assert out["status"] == "found" and out["n"] == 1000 and out["value"] == 0.5
    assert "not monotone in n" in out["note"] and "n = 190" in out["note"]
    # tabulated values that agree change nothing
    assert smallest_n(p, f, 0.9, known=[(2, 1.0), (60, 0.5), (6000, 0.5)])["n"] == 40


def test_the_default_target_is_the_vacuity_level(tmp_path):
    """Without --target, 'what would it take' aims below the trivial predictor's error (here
    the majority class errs 0.45), not below 1; the n it names is where the table drops
    below that level."""
    from boundcalc.stats import Quantity, Stats

    st = Stats(model={"n_layers": 1, "n_heads": 1, "hidden": 4},
               scalars={"n": Quantity(1000.0), "emp_risk": Quantity(0.2),
                        "majority_error": Quantity(0.45)},
               provenance={"n_classes": 2})
    r = optimize("pac_bayes_kl", st, {"KL": 50.0}, what_if=True, sensitivity=False)
    wit = r.extra["what_it_takes"]
    assert wit["target"] == 0.45 and "majority class" in wit["target_rule"]
    n = wit["smallest_n"]["n"]
    assert wit["smallest_n"]["value"] < 0.45
    below = optimize("pac_bayes_kl", st, {"KL": 50.0, "n": n - 1}, sensitivity=False)
    assert below.value >= 0.45  # the smallest such n
    given = optimize("pac_bayes_kl", st, {"KL": 50.0}, what_if=True, sensitivity=False,
                     target=1.0)
    assert given.extra["what_it_takes"]["target"] == 1.0
    assert given.extra["what_it_takes"]["smallest_n"]["n"] < n
