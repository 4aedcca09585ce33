"""``test_set_kl`` (docs/sources/test_set.md): the registry's value against a 50-digit mpmath
recomputation of kl⁻¹(k/m, ln(1/δ)/m) (never below it, within 1e-12), against the exact
binomial-tail inversion of Langford 2005, Theorem 3.3 (the kl form is never tighter), the
closed form at k = 0; k > m is refused."""

from __future__ import annotations

import mpmath as mp
import pytest

import boundcalc as bc

mp.mp.dps = 50


def kl_inv_50(k: int, m: int, delta: float) -> mp.mpf:
    """The largest p ∈ [k/m, 1] with kl(k/m ‖ p) ≤ ln(1/δ)/m, by 200 bisections at 50 digits."""
    return kl_inv_rate_50(mp.mpf(k) / m, m, delta)


def kl_inv_rate_50(q, m: int, delta: float) -> mp.mpf:
    """kl⁻¹(q, ln(1/δ)/m) for a q ∈ [0, 1] (a count's rate, or a mean of [0, 1] losses given
    as a float), by 200 bisections at 50 digits."""
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


# ---- test_set_smoothed_kl (test_set.md §3): a language model's held-out bits ----------------

def smoothed(loss: float, m: int, alpha: float, vocab: int, delta: float = 0.05):
    return bc.evaluate(bc.load_registry().get("test_set_smoothed_kl"),
                       {"test_loss": loss, "m": m, "alpha": alpha, "V": vocab, "delta": delta})


@pytest.mark.parametrize("loss,m,alpha,vocab,delta", [
    (0.30884, 40, 0.01, 257, 0.05), (0.7025799570474114, 64, 0.01, 50257, 0.05),
    (0.123456789, 5000, 0.001, 256, 0.01), (0.5, 100, 0.25, 2, 0.2), (1.0, 10, 0.5, 3, 0.5)])
def test_smoothed_value_is_bits_range_times_the_kl_inverse_at_50_digits(loss, m, alpha, vocab,
                                                                         delta):
    r = smoothed(loss, m, alpha, vocab, delta)
    exact = mp.log(mp.mpf(vocab) / mp.mpf(alpha), 2) * kl_inv_rate_50(loss, m, delta)
    assert r.kind == "certified" and r.is_bound and r.output == "loss" and r.vacuous is None
    assert mp.mpf(r.value) >= exact  # rounded outward, never below
    assert float(mp.mpf(r.value) - exact) <= 1e-11 * float(exact)


def test_smoothed_at_zero_loss_and_at_a_count_is_the_0_1_entry_in_bits():
    """L = 0: log2(V/α)(1 − δ^{1/m}); L = k/m: log2(V/α) times test_set_kl at k, m (the same
    theorem: a 0-1 loss is a [0, 1] loss)."""
    bits = mp.log(mp.mpf(1000) / mp.mpf(0.01), 2)
    r = smoothed(0.0, 300, 0.01, 1000)
    exact = bits * (1 - mp.mpf(0.05) ** (mp.mpf(1) / 300))
    assert mp.mpf(r.value) >= exact and float(mp.mpf(r.value) - exact) <= 1e-11
    r = smoothed(29 / 500, 500, 0.01, 1000)
    assert r.value == pytest.approx(float(bits) * value(29, 500).value, rel=1e-12)


def test_a_smoothed_loss_outside_0_1_is_refused_by_its_domain():
    from boundcalc.errors import DomainError

    for bad in (1.5, -0.1):
        with pytest.raises(DomainError, match="'test_loss'.*outside its domain"):
            smoothed(bad, 10, 0.01, 1000)




@pytest.mark.parametrize("q,m,delta", [(0.4123456789, 1000, 0.05), (0.0, 300, 0.01),
                                       (0.987, 50, 0.2), (0.25, 1000, 0.05)])
def test_bounded_mean_is_the_kl_inverse_at_50_digits(q, m, delta):
    """``test_set_kl_bounded`` (docs/sources/test_set.md §4): kl⁻¹(mean, ln(1/δ)/m) for a
    mean of m losses in [0, 1], outward within 1e-12 of a 50-digit bisection; at a 0-1 mean
    k/m it is ``test_set_kl``'s value, at mean 0 the closed form 1 − δ^{1/m}."""
    r = bc.evaluate(bc.load_registry().get("test_set_kl_bounded"),
                    {"mean_loss": q, "m": m, "delta": delta})
    exact = kl_inv_rate_50(q, m, delta)
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
