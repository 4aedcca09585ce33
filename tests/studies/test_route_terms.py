"""Issue 50's arithmetic (studies/route_terms.py) against hand computations: each route's value
from Ê, N, KL and n by 50-digit kl inverses, its floor at KL 0, the baseline, the break-even n
(checked on both sides of the crossing), and Maurer's ξ(n) summed exactly."""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import pytest

from studies.route_terms import (ROUTES, baseline_value, break_even, floor_zero_kl, maurer_xi,
                                 route_value, with_maurer_xi)
from tests._reference import kl_inv_exact

GROUPS, LEARNED, SUBSPACE = ROUTES


def _hand(e: float, units: float, kl: float, n: float, extra: float) -> float:
    """kl⁻¹(kl⁻¹(Ê, ln(2/δ′)/N), (KL + extra + ln(2√n/δ))/n), δ = 0.05, δ′ = 0.01."""
    up = kl_inv_exact(e, math.log(2 / 0.01) / units)
    return float(kl_inv_exact(up, (kl + extra + math.log(2 * math.sqrt(n) / 0.05)) / n))


@pytest.mark.parametrize("entry,extra", [(GROUPS, math.log(17)), (LEARNED, math.log(17)),
                                         (SUBSPACE, 0.0)])
def test_route_value_is_the_kl_inverse_with_the_entrys_own_costs(entry, extra):
    e, units, kl, n = 0.031, 6000.0, 3.7, 1000.0
    assert route_value(entry, e, units, kl, n) == pytest.approx(_hand(e, units, kl, n, extra),
                                                                rel=1e-7)
    assert floor_zero_kl(entry, e, units, n) == pytest.approx(_hand(e, units, 0, n, extra),
                                                              rel=1e-7)


def test_subspace_grid_of_six_pays_ln_six():
    assert route_value(SUBSPACE, 0.1, 5994, 0.62, 999, prior_grid=6) == pytest.approx(
        _hand(0.1, 5994, 0.62, 999, math.log(6)), rel=1e-7)


def test_baseline_is_the_test_set_kl_inverse():
    hand = float(kl_inv_exact(0.026, math.log(1 / 0.05) / 1000))
    assert baseline_value(0.026, 1000) == pytest.approx(hand, rel=1e-9)
    # 0.0265·1000 errors: 26 of them (rounded down)
    assert baseline_value(0.0265, 1000) == pytest.approx(hand, rel=1e-9)


def test_break_even_is_the_first_n_where_the_route_is_below():
    e, kl, p0 = 0.02, 5.0, 0.03

    def below(n: int) -> bool:
        route = _hand(e, 6 * n, kl, n, 0.0)
        base = float(kl_inv_exact(math.floor(p0 * n + 1e-9) / n, math.log(1 / 0.05) / n))
        return route < base

    n = break_even(SUBSPACE, e, kl, p0)
    assert n is not None and below(n) and not below(n - 1)
    # the learned scale's ln 17 moves the crossing later
    assert break_even(GROUPS, e, kl, p0) > n
    # Ê not below the prior's rate: never
    assert break_even(SUBSPACE, 0.03, 0.0, 0.03) is None
    assert break_even(GROUPS, 0.05, 1.0, 0.03) is None


def test_maurer_xi_summed_exactly_and_between_its_bounds():
    for n in (8, 10, 37):
        exact = sum(Fraction(math.comb(n, k)) * Fraction(k, n) ** k * Fraction(n - k, n) ** (n - k)
                    for k in range(n + 1))
        assert maurer_xi(n) == pytest.approx(float(exact), rel=1e-12)
    for n in (8, 100, 1000):
        assert math.sqrt(n) <= maurer_xi(n) <= 2 * math.sqrt(n)
    # at n = 1,000 the exact sum (mpmath, 30 digits) and the saving ln(2√n/ξ(n)) ≈ 0.45 nats
    with mpmath.workdps(30):
        n = 1000
        exact = mpmath.fsum(mpmath.binomial(n, k) * mpmath.mpf(k) ** k * mpmath.mpf(n - k)
                            ** (n - k) / mpmath.mpf(n) ** n for k in range(n + 1))
    assert maurer_xi(n) == pytest.approx(float(exact), rel=1e-10)
    assert 0.44 < math.log(2 * math.sqrt(n) / maurer_xi(n)) < 0.46


@pytest.mark.parametrize("kl", [0.0, 0.1, 3.0])
def test_with_maurer_xi_replaces_two_root_n_by_xi(kl):
    e, units, n = 0.05, 6000.0, 1000
    save = math.log(2 * math.sqrt(n) / maurer_xi(n))
    for entry, extra in ((GROUPS, math.log(17)), (SUBSPACE, 0.0)):
        assert with_maurer_xi(entry, e, units, kl, n) == pytest.approx(
            _hand(e, units, kl - save, n, extra), rel=1e-7)
