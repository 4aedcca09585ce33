"""Compression family (formulas/compression.toml): every entry against a direct computation here.

kl inverses are computed independently with mpmath bisection at 60 digits; the registry's value
must be at or above the exact root (outward rounding) and within 1e-9 of it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import boundcalc as bc
from _reference import kl_inv_exact

REG = bc.load_registry()
LN2 = math.log(2)
ALPHAS = [0.0001, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5]


def ev(entry_id: str, values: dict, params: dict | None = None) -> bc.Result:
    """Hand-set values, through the user-facing path (hand-set labels applied)."""
    return bc.compute(REG.get(entry_id), values=values, params=params, registry=REG)


CASES = [(500.0, 0.1, 1400), (0.0, 0.0, 100), (3000.0, 0.02, 60000), (20000.0, 0.3, 1000)]


@pytest.mark.parametrize("bits,risk,n", CASES)
def test_occam_kl_matches_exact_kl_inverse(bits, risk, n):
    r = ev("occam_kl", {"code_bits": bits, "emp_risk": risk, "n": n})
    budget = (bits * LN2 + math.log(1 / 0.05)) / n
    want = float(kl_inv_exact(risk, budget))
    assert r.value >= want - 1e-15  # outward
    assert r.value == pytest.approx(want, abs=1e-9)
    assert r.is_bound and r.kind == "certified"
    assert r.terms["divergence"] == pytest.approx(bits * LN2, rel=1e-12)


@pytest.mark.parametrize("bits,risk,n", CASES)
def test_relaxations_match_closed_forms_and_sit_above_kl(bits, risk, n):
    B = (bits * LN2 + math.log(20)) / n
    hoeff = ev("occam_hoeffding", {"code_bits": bits, "emp_risk": risk, "n": n}).value
    fast = ev("occam_fast_rate", {"code_bits": bits, "emp_risk": risk, "n": n}).value
    assert hoeff == pytest.approx(risk + math.sqrt(B / 2), rel=1e-12)
    assert fast == pytest.approx(risk + math.sqrt(2 * risk * B) + 2 * B, rel=1e-12)
    exact = float(kl_inv_exact(risk, B))
    assert hoeff >= exact - 1e-12 and fast >= exact - 1e-12


def test_occam_vacuous_when_bits_exceed_the_sample():
    r = ev("occam_kl", {"code_bits": 1e6, "emp_risk": 0.0, "n": 1000})
    assert r.value == pytest.approx(1.0) and r.vacuous is True


def test_occam_catoni_is_the_best_grid_point_with_the_union_cost():
    bits, risk, n = 800.0, 0.05, 5000
    grid = np.geomspace(1e-3, 1e2, 51)
    delta = 0.05 / 51
    vals = [(1 - math.exp(-C * risk - (bits * LN2 + math.log(1 / delta)) / n)) / (1 - math.exp(-C))
            for C in grid]
    r = ev("occam_catoni", {"code_bits": bits, "emp_risk": risk, "n": n})
    assert r.value == pytest.approx(min(vals), rel=1e-10)
    assert r.to_json()["union_bound_cost"]["C"] == pytest.approx(math.log(51))


def delta_range(alpha: float, V: int) -> float:
    return math.log2(1 + (1 - alpha) * V / alpha)


@pytest.mark.parametrize("alpha", [0.0001, 0.01, 0.5])
def test_smoothed_nll_hoeffding_direct(alpha):
    bits, nll, n, V = 1200.0, 1.3, 4000, 50257
    d = 0.05 / 8  # α on the 8-point grid
    want = nll + delta_range(alpha, V) * math.sqrt((bits * LN2 + math.log(1 / d)) / (2 * n))
    r = ev("occam_smoothed_nll", {"code_bits": bits, "smoothed_nll": nll, "n": n, "V": V},
           {"alpha": alpha})
    assert r.value == pytest.approx(want, rel=1e-12)
    assert r.to_json()["union_bound_cost"]["alpha"] == pytest.approx(math.log(8))
    assert r.vacuous is None  # a loss in bits is never compared with 1
    # a hand-set loss holds at the one α it was given with: an estimate, not a bound
    assert r.estimated and not r.is_bound


def test_smoothed_range_is_max_minus_min_of_the_smoothed_loss():
    # the range used by the authors' code equals log2(V/α) − (−log2((1−α) + α/V))
    for alpha in ALPHAS:
        for V in (2, 10, 50257):
            hi = math.log2(V / alpha)
            lo = -math.log2((1 - alpha) + alpha / V)
            assert delta_range(alpha, V) == pytest.approx(hi - lo, rel=1e-12)


@pytest.mark.parametrize("alpha,nll", [(0.01, 0.4), (0.1, 2.0), (0.0001, 0.05)])
def test_smoothed_nll_kl_direct(alpha, nll):
    bits, n, V = 300.0, 1500, 10
    d = 0.05 / 8
    D = delta_range(alpha, V)
    lmin = -math.log2((1 - alpha) + alpha / V)
    q = min(max((nll - lmin) / D, 0.0), 1.0)
    want = lmin + D * float(kl_inv_exact(q, (bits * LN2 + math.log(1 / d)) / n))
    r = ev("occam_smoothed_nll_kl", {"code_bits": bits, "smoothed_nll": nll, "n": n, "V": V},
           {"alpha": alpha})
    assert r.value >= want - 1e-12
    assert r.value == pytest.approx(want, abs=1e-8)
    hoeff = ev("occam_smoothed_nll", {"code_bits": bits, "smoothed_nll": nll, "n": n, "V": V},
               {"alpha": alpha}).value
    assert r.value <= hoeff + 1e-12


def test_smoothed_alpha_off_grid_is_refused():  # hand-set loss with an off-grid α
    with pytest.raises(bc.BoundcalcError):
        ev("occam_smoothed_nll", {"code_bits": 10, "smoothed_nll": 1.0, "n": 100, "V": 10},
           {"alpha": 0.02})


def authors_subsampling(train_error, div, N, s, Delta, eps):
    """The authors' llm_subsampling_bound, re-derived: two Hoeffding terms, δ split r / 1 − r."""
    r = s / (s + N)
    return train_error + Delta * (math.sqrt((div - math.log(r * eps)) / (2 * N))
                                  + math.sqrt(-math.log((1 - r) * eps) / (2 * s)))


@pytest.mark.parametrize("entry", ["lotfi_subsampled_smoothed", "lotfi_token_level"])
def test_subsampled_bounds_direct(entry):
    bits, nll, N, s, V, alpha = 60_000.0, 3.2, 9_000_000, 10_000, 50257, 0.05
    values = {"code_bits": bits, "smoothed_nll": nll, "n": N, "s": s, "V": V}
    r = ev(entry, values, {"alpha": alpha})
    want = authors_subsampling(nll, bits * LN2, N, s, delta_range(alpha, V), 0.05 / 8)
    assert r.value == pytest.approx(want, rel=1e-12)
    if entry == "lotfi_token_level":
        assert r.kind == "conditional" and not r.is_bound
        assert "conditional" in r.label
    else:  # hand-set smoothed loss: estimated (the measured-point rule)
        assert r.estimated and not r.is_bound


def test_subsample_larger_than_data_fails_its_check():
    r = ev("lotfi_subsampled_smoothed", {"code_bits": 10, "smoothed_nll": 1.0, "n": 100,
                                         "s": 200, "V": 10}, {"alpha": 0.1})
    assert not r.is_bound and "s ≤ N" in r.failed_assumptions


# ---- the smoothed loss is measured at every α of the grid; α is chosen only among those -----

NOTE = "quantized model sha256:0123456789abcdef"


def curve_stats(at, losses, bits=900.0, n=3000, V=10, err=0.2):
    from boundcalc.stats import Curve, Quantity, Stats

    return Stats(scalars={"code_bits": Quantity(bits, note=NOTE),
                          "quantized_error": Quantity(err, note=NOTE),
                          "vocab_size": Quantity(float(V), note=NOTE), "n": Quantity(float(n))},
                 curves={"quantized_smoothed_nll": Curve("alpha", np.array(at),
                                                         np.array(losses), note=NOTE)})


def hoeffding_nll(nll, alpha, bits, n, V):
    return nll + delta_range(alpha, V) * math.sqrt((bits * LN2 + math.log(8 / 0.05)) / (2 * n))


LOSSES = [3.1, 2.6, 2.2, 1.95, 1.80, 1.78, 1.95, 2.3]  # one per α of ALPHAS


@pytest.mark.parametrize("how", ["compute", "optimize"])
def test_alpha_chosen_only_among_measured_points_each_with_its_own_loss(how):
    from boundcalc.optimize import optimize

    st = curve_stats(ALPHAS, LOSSES)
    hand = [hoeffding_nll(l, a, 900.0, 3000, 10) for a, l in zip(ALPHAS, LOSSES)]
    r = (bc.compute("occam_smoothed_nll", st) if how == "compute" else
         optimize("occam_smoothed_nll", st, sensitivity=False, contributions=False))
    best = int(np.argmin(hand))
    assert r.value == pytest.approx(hand[best], rel=1e-12)
    assert r.parameters["alpha"] == ALPHAS[best]
    assert r.terms["smoothed_nll"] == LOSSES[best]
    assert r.union_bound_cost["alpha"] == pytest.approx(math.log(8))
    assert r.is_bound and not r.estimated
    pts = {p["alpha"]: p["value"] for p in r.extra["measured_points"]["points"]}
    assert [pts[a] for a in ALPHAS] == pytest.approx(hand, rel=1e-12)
    # kl form: every point evaluated with its own loss too; never above the Hoeffding form
    k = bc.compute("occam_smoothed_nll_kl", st)
    kl_vals = []
    for a, l in zip(ALPHAS, LOSSES):
        D, lmin = delta_range(a, 10), -math.log2((1 - a) + a / 10)
        q = min(max((l - lmin) / D, 0.0), 1.0)
        kl_vals.append(lmin + D * float(kl_inv_exact(q, (900.0 * LN2 + math.log(8 / 0.05))
                                                     / 3000)))
    assert k.value == pytest.approx(min(kl_vals), abs=1e-8) and k.value <= r.value + 1e-12


def test_a_given_alpha_uses_the_loss_measured_at_it_and_no_other():
    at = [0.01, 0.1]  # measured at two grid points only
    st = curve_stats(at, [1.95, 1.78])
    r = bc.compute("occam_smoothed_nll", st, params={"alpha": 0.01})
    assert r.terms["smoothed_nll"] == 1.95  # not the 0.1 point's 1.78
    assert r.value == pytest.approx(hoeffding_nll(1.95, 0.01, 900.0, 3000, 10), rel=1e-12)
    assert r.union_bound_cost["alpha"] == pytest.approx(math.log(8))  # the declared grid's
    # another α (on the grid, or off it) cannot be paired with a loss measured elsewhere
    for alpha in (0.05, 0.5, 0.02):
        with pytest.raises(bc.BoundcalcError, match="not a point where"):
            bc.compute("occam_smoothed_nll_kl", st, params={"alpha": alpha})
        with pytest.raises(bc.BoundcalcError, match="not a point where"):
            bc.compute("lotfi_subsampled_smoothed", st, values={"n": 10**6, "alpha": alpha})


def test_hand_set_smoothed_loss_needs_its_alpha_and_is_estimated():
    st = curve_stats(ALPHAS, LOSSES)
    with pytest.raises(bc.BoundcalcError, match="set by hand"):
        bc.compute("occam_smoothed_nll", st, values={"smoothed_nll": 1.0})
    r = bc.compute("occam_smoothed_nll", st, values={"smoothed_nll": 1.0, "alpha": 0.25})
    assert r.value == pytest.approx(hoeffding_nll(1.0, 0.25, 900.0, 3000, 10), rel=1e-12)
    assert r.parameters["alpha"] == 0.25 and r.estimated and not r.is_bound


def test_code_length_and_smoothed_loss_of_different_models_cannot_be_mixed():
    st = curve_stats(ALPHAS, LOSSES)
    # a code length of another level count by hand next to the file's quantized losses
    for entry in ("occam_smoothed_nll", "occam_kl"):
        with pytest.raises(bc.BoundcalcError, match="code_bits is set by hand"):
            bc.compute(entry, st, values={"code_bits": 120.0})
    st.curves["quantized_smoothed_nll"].note = "quantized model sha256:ffffffffffffffff"
    with pytest.raises(bc.BoundcalcError, match="different quantized models"):
        bc.compute("occam_smoothed_nll", st)
    del st.curves["quantized_smoothed_nll"]
    with pytest.raises(bc.BoundcalcError, match="without the curve"):
        bc.compute("occam_smoothed_nll_kl", st, params={"alpha": 0.1})


def test_every_compression_entry_points_to_the_docs_page():
    entries = list(REG.filter(family="compression"))
    assert len(entries) == 8
    for e in entries:
        assert e.provenance.startswith("docs/sources/compression.md §"), e.id
        assert e.kind in ("certified", "conditional")
