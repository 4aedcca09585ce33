"""What `compare` says first (issue 30's guidance where a user stands, issue 31 item 3): a
headline in every case, the least certified value with an honest δ (the least row
re-evaluated at δ/k), one line per missing ingredient, the recipe when KL makes the best row
vacuous, and --brief."""

from __future__ import annotations

from decimal import Decimal

import json
import math
from pathlib import Path

import numpy as np
import pytest
from rich.cells import cell_len

from boundcalc.report.compare_view import GUIDE
from boundcalc.stats import Quantity, Stats
from tests._cli_helpers import BOX, invoke
from tests._rounding_helpers import up_text

ROOT = Path(__file__).resolve().parents[2]


def _flat(text: str) -> str:
    return " ".join(BOX.sub(" ", text).split())


def _kl_stats(tmp_path: Path) -> Path:
    """n, an empirical risk and a KL: five certified PAC-Bayes rows, Catoni's the least."""
    return Stats(scalars={"n": Quantity(10000.0), "emp_risk": Quantity(0.05),
                          "kl": Quantity(50.0)}).save(tmp_path / "k.json")


def _catoni(emp: float, kl: float, n: float, delta: float) -> float:
    """formulas/pac_bayes.toml 'catoni', by hand: C on geomspace(1e-3, 1e2, 51), δ/51."""
    c = np.geomspace(1e-3, 1e2, 51)
    budget = (kl + math.log(51 / delta)) / n
    return float(np.min((1 - np.exp(-c * emp - budget)) / (1 - np.exp(-c))))


def test_the_minimum_over_certified_rows_is_quoted_at_delta_over_k(tmp_path):
    path = _kl_stats(tmp_path)
    doc = json.loads(invoke("compare", "--stats", path, "--json").stdout)
    bounds = [r for r in doc["certified"] if r["is_bound"]]
    k = len(bounds)
    least = min(bounds, key=lambda r: r["value"])
    m = doc["minimum"]
    assert k >= 3 and m["k"] == k and m["id"] == least["id"] == "catoni"
    assert m["method"] == "delta_over_k" and m["delta_each"] == pytest.approx(0.05 / k)
    # per-row values stay at δ; the quoted minimum is Catoni's at δ/k, so it holds at δ
    assert least["value"] == pytest.approx(_catoni(0.05, 50, 10000, 0.05), rel=1e-9)
    assert m["row_value"] == least["value"]
    assert m["value"] == pytest.approx(_catoni(0.05, 50, 10000, 0.05 / k), rel=1e-9)
    assert m["value"] > least["value"] and m["delta_total"] == pytest.approx(0.05)
    text = invoke("compare", "--stats", path)
    assert text.exit_code == 0
    flat = _flat(text.stdout)
    # the value rounded up, 1 − δ down: each row at δ/k = 0.05/k rounded down to 15 digits,
    # evaluated at the largest double below that decimal, so the k shares spend at most the
    # decimal 0.05 and 1 − δ ≥ 0.95 holds exactly
    assert Decimal(repr(m["delta_each"])) * k <= Decimal("0.05")
    assert Decimal(repr(m["delta_total"])) <= Decimal("0.05")
    assert flat.startswith(f"headline: {up_text(m['value'], 4)} certified (catoni, "
                           "probability ≥ 0.95)")
    assert f"minimum over {k} certified rows, each at δ/k" in flat
    assert max(cell_len(ln) for ln in text.stdout.splitlines()) <= 80


def test_brief_has_the_headline_the_certified_rows_and_what_is_missing(tmp_path):
    path = _kl_stats(tmp_path)
    full = invoke("compare", "--stats", path).stdout
    brief = invoke("compare", "--stats", path, "--brief")
    assert brief.exit_code == 0, brief.output
    out = brief.stdout
    assert out.startswith("headline:") and "catoni" in out and "mcallester" in out
    assert "zero-complexity floor" in full and "zero-complexity floor" not in out
    assert "values this stats file lacks" in full and "values this stats file lacks" not in out
    lines = [ln for ln in _flat(out).split("missing: ")[1:]]
    assert any(ln.startswith("boundcalc measure MODEL --init INIT") for ln in lines)
    assert len(out.splitlines()) < len(full.splitlines()) / 2
    assert max(cell_len(ln) for ln in out.splitlines()) <= 80


def test_a_headline_without_any_certified_bound_says_what_is_missing(tmp_path):
    from test_optimize_sensitivity import spectrum_stats

    path = spectrum_stats(L=2, A=2, seed=1).save(tmp_path / "s.json")
    res = invoke("compare", "--stats", path)
    assert res.exit_code == 0, res.output
    flat = _flat(res.stdout)
    assert flat.startswith("headline: no certified bound")
    assert "missing: boundcalc measure MODEL --data DATA" in flat
    doc = json.loads(invoke("compare", "--stats", path, "--json").stdout)
    assert doc["minimum"] is None and doc["headline"].startswith("headline: no certified")
    gives = {m["give"] for m in doc["missing"]}
    assert "boundcalc measure MODEL --data DATA" in gives
    assert "boundcalc measure MODEL --init INIT" in gives


def _vacuous_by_kl(tmp_path: Path, dist: float) -> Path:
    from boundcalc.measure.data.task_measure import dr_point
    from boundcalc.stats import Curve

    sig = [dr_point(0.01)[1], dr_point(0.02)[1]]
    return Stats(scalars={"n": Quantity(700.0), "emp_risk": Quantity(0.04),
                          "gibbs_draws": Quantity(100.0), "dist_init_total": Quantity(dist),
                          "majority_error": Quantity(0.889)},
                 curves={"gibbs_risk_mean": Curve(
                     "sigma", np.array(sig), np.array([0.06, 0.12]),
                     ci=np.array([[0.06, 0.1], [0.12, 0.18]]), confidence=0.99,
                     estimated=True, n_samples=100, method="Monte Carlo")},
                 provenance={"n_classes": 10}).save(tmp_path / f"d{dist}.json")


def test_vacuous_because_kl_dominates_names_the_recipe_and_its_page(tmp_path):
    doc = json.loads(invoke("compare", "--stats", _vacuous_by_kl(tmp_path, 5.0),
                            "--json").stdout)
    best = next(r for r in doc["certified"] if r["id"] == doc["minimum"]["id"])
    assert best["vacuous"] and best["floor"]["dominant"] == "KL_gauss"
    line = doc["guidance"]
    assert line and "--tune-data" in line and "--init PRIOR" in line and GUIDE in line
    assert (ROOT / GUIDE).is_file()
    text = _flat(invoke("compare", "--stats", _vacuous_by_kl(tmp_path, 5.0)).stdout)
    assert "vacuous because KL_gauss dominates" in text
    # a non-vacuous best row: no such line
    doc = json.loads(invoke("compare", "--stats", _vacuous_by_kl(tmp_path, 0.249),
                            "--json").stdout)
    assert doc["minimum"]["vacuous"] is False and doc["guidance"] is None


def test_monte_carlo_confidences_are_not_divided_by_k(tmp_path):
    """A Monte Carlo row spends δ + δ_MC: re-evaluation divides only δ, so the minimum holds
    at Σ(δ_i/k + δ_MC,i), not at δ."""
    path = _vacuous_by_kl(tmp_path, 0.249)
    data = json.loads(Path(path).read_text())
    data["scalars"]["kl"] = {"value": 50.0}
    Path(path).write_text(json.dumps(data))
    doc = json.loads(invoke("compare", "--stats", path, "--json").stdout)
    bounds = [r for r in doc["certified"] if r["is_bound"]]
    m = doc["minimum"]
    assert m["k"] == len(bounds) >= 2 and m["method"] == "delta_over_k"
    mc = [r["delta"] - 0.05 for r in bounds if r["delta"] > 0.05 + 1e-12]
    assert mc, "a Monte Carlo row"
    assert m["delta_total"] == pytest.approx(0.05 + sum(mc), rel=1e-12)
    assert m["delta_fixed"] == pytest.approx(sum(mc), rel=1e-12)


def test_the_per_group_gibbs_row_is_read_against_the_trivial_predictor(registry):
    """The digits headline said 'not vacuous (< 1)' for pac_bayes_kl_gaussian_groups_mc while
    the table's caption used the majority class's 0.889: its Gibbs risk per group is a 0-1
    risk like the isotropic one's."""
    from boundcalc.task_facts import bounds_zero_one

    assert bounds_zero_one(registry.get("pac_bayes_kl_gaussian_groups_mc"))
    assert bounds_zero_one(registry.get("pac_bayes_kl_gaussian_mc"))


def test_a_floor_at_the_vacuity_level_is_diagnosed_as_the_risk_not_the_kl(tmp_path):
    """Issue 44: a degenerate σ search (Gibbs risk 0.746, floor 0.792, vacuity level 0.658)
    was diagnosed 'vacuous because KL_groups dominates: train the prior on a split disjoint
    from S'. Here the Gibbs risk on S is 0.85 against a majority error of 0.889 (10 classes):
    the floor is above the vacuity level whatever the KL, and the line says so."""
    from boundcalc.measure.data.task_measure import dr_point
    from boundcalc.stats import Curve

    sig = [dr_point(0.01)[1]]
    path = Stats(scalars={"n": Quantity(700.0), "emp_risk": Quantity(0.04),
                          "gibbs_draws": Quantity(100.0), "dist_init_total": Quantity(5.0),
                          "majority_error": Quantity(0.889)},
                 curves={"gibbs_risk_mean": Curve(
                     "sigma", np.array(sig), np.array([0.85]), ci=np.array([[0.85, 0.9]]),
                     confidence=0.99, estimated=True, n_samples=100, method="Monte Carlo")},
                 provenance={"n_classes": 10}).save(tmp_path / "degenerate.json")
    doc = json.loads(invoke("compare", "--stats", path, "--json").stdout)
    best = next(r for r in doc["certified"] if r["id"] == doc["minimum"]["id"])
    assert best["vacuous"] and best["floor"]["own"] >= 0.889
    line = doc["guidance"]
    assert line.startswith("vacuous whatever the complexity: with zero complexity it would "
                           "still be ") and "degenerate σ search" in line
    assert "dominates" not in line and GUIDE in line
