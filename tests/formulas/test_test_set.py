"""``test_set_kl`` (docs/sources/test_set.md): the registry's value against a 50-digit mpmath
recomputation of kl⁻¹(k/m, ln(1/δ)/m) (never below it, within 1e-12), against the exact
binomial-tail inversion of Langford 2005, Theorem 3.3 (the kl form is never tighter), the
closed form at k = 0; k > m is refused."""

from __future__ import annotations

import mpmath as mp
import pytest

import boundcalc as bc

mp.mp.dps = 50


def kl_inv_50_mean(q: float, m: int, delta: float) -> mp.mpf:
    """The largest p ∈ [q, 1] with kl(q ‖ p) ≤ ln(1/δ)/m for a mean loss q ∈ [0, 1] (q any
    real, not a count over m), by 200 bisections at 50 digits."""
    q, c = mp.mpf(q), mp.log(1 / mp.mpf(delta)) / m

    def kl(p):
        a = q * mp.log(q / p) if q > 0 else mp.mpf(0)
        b = (1 - q) * mp.log((1 - q) / (1 - p)) if q < 1 else mp.mpf(0)
        return a + b

    lo, hi = q, mp.mpf(1)
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if kl(mid) <= c else (lo, mid)
    return lo


def kl_inv_50(k: int, m: int, delta: float) -> mp.mpf:
    """The largest p ∈ [k/m, 1] with kl(k/m ‖ p) ≤ ln(1/δ)/m, by 200 bisections at 50 digits."""
    return kl_inv_50_mean(mp.mpf(k) / m, m, delta)


def binomial_inversion_50(k: int, m: int, delta: float) -> mp.mpf:
    """Langford's Theorem 3.3: the largest p with P(Binomial(m, p) ≤ k) ≥ δ (bisection)."""
    def tail(p):
        return mp.fsum(mp.binomial(m, j) * p ** j * (1 - p) ** (m - j) for j in range(k + 1))

    lo, hi = mp.mpf(k) / m, mp.mpf(1)
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tail(mid) >= delta else (lo, mid)
    return lo


def value(k: int, m: int, delta: float = 0.05):
    return bc.evaluate(bc.load_registry().get("test_set_kl"),
                       {"test_errors": k, "m": m, "delta": delta})


@pytest.mark.parametrize("k,m,delta", [(17, 500, 0.05), (29, 500, 0.05), (3, 40, 0.01),
                                       (260, 1000, 0.05), (500, 500, 0.2), (1, 1, 0.5)])
def test_value_is_the_kl_inverse_at_50_digits(k, m, delta):
    r = value(k, m, delta)
    exact = kl_inv_50(k, m, delta)
    assert r.kind == "certified" and r.is_bound and r.delta == delta
    assert mp.mpf(r.value) >= exact  # rounded outward, never below
    assert float(mp.mpf(r.value) - exact) <= 1e-12
    # the kl form relaxes the binomial tail inversion: never below it
    assert mp.mpf(r.value) >= binomial_inversion_50(k, m, delta)


def test_no_errors_is_one_minus_delta_to_the_1_over_m():
    r = value(0, 500)
    exact = 1 - mp.mpf(0.05) ** (mp.mpf(1) / 500)  # δ as the float the entry is given
    assert mp.mpf(r.value) >= exact and float(mp.mpf(r.value) - exact) <= 1e-12
    # at k = 0 the binomial inversion is the same number: (1 − p)^m = δ
    assert abs(binomial_inversion_50(0, 500, 0.05) - exact) < mp.mpf("1e-40")


def test_more_errors_than_rows_is_never_called_a_bound():
    """k > m is outside the theorem: its check k ≤ m fails, so the (finite, capped) value is
    labelled 'not a bound' and never compared with 1 (the domain sweep of
    test_numerical_robustness needs a finite value everywhere)."""
    r = value(12, 10)
    assert r.value == 1.0 and not r.is_bound
    assert r.label == "not a bound: an assumption fails"
    assert [a["status"] for a in r.assumptions][-1] == "fails"




@pytest.mark.parametrize("q,m,delta", [(0.4123456789, 1000, 0.05), (0.0, 300, 0.01),
                                       (0.987, 50, 0.2), (0.25, 1000, 0.05)])
def test_bounded_mean_is_the_kl_inverse_at_50_digits(q, m, delta):
    """``test_set_kl_bounded`` (docs/sources/test_set.md §3): kl⁻¹(mean, ln(1/δ)/m) for a
    mean of m losses in [0, 1], outward within 1e-12 of a 50-digit bisection; at a 0-1 mean
    k/m it is ``test_set_kl``'s value, at mean 0 the closed form 1 − δ^{1/m}."""
    r = bc.evaluate(bc.load_registry().get("test_set_kl_bounded"),
                    {"mean_loss": q, "m": m, "delta": delta})
    exact = kl_inv_50_mean(q, m, delta)
    assert r.kind == "certified" and r.is_bound and r.delta == delta
    assert mp.mpf(r.value) >= exact and float(mp.mpf(r.value) - exact) <= 1e-12
    if q == 0.25:
        assert r.value == pytest.approx(value(250, 1000, delta).value, rel=1e-12)
    if q == 0.0:
        closed = 1 - mp.mpf(delta) ** (mp.mpf(1) / m)
        assert abs(exact - closed) < mp.mpf("1e-40")


def test_bounded_mean_outside_0_1_is_refused():
    for q in (1.2, -0.1):
        with pytest.raises(bc.BoundcalcError, match="mean_loss"):
            bc.evaluate(bc.load_registry().get("test_set_kl_bounded"),
                        {"mean_loss": q, "m": 100, "delta": 0.05})
