"""``pac_bayes_kl_gaussian_learned_mc`` (the bound-trained Gibbs posterior's row,
formulas/pac_bayes.toml) against a 50-digit mpmath recomputation, written here independently
of the registry: the diagonal-Gaussian KL coordinate by coordinate summed per group, the
Monte Carlo kl⁻¹, the bound's kl⁻¹ at δ·e^{−costs}."""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest

import boundcalc as bc
from _reference import kl_inv_exact

REG = bc.load_registry()


def dr_sigma(j: int, c: float = 0.1, b: float = 100.0) -> float:
    """Dziugaite–Roy grid point j: σ_j² = c·e^{−j/b}."""
    return math.sqrt(c * math.exp(-j / b))


def close(a: float, b: float, rel: float) -> bool:
    return abs(a - b) <= rel * abs(b)


def ev(entry_id: str, values: dict) -> bc.Result:
    return bc.evaluate(REG.get(entry_id), values)


@pytest.mark.parametrize("case", [0, 1, 2])
def test_pac_bayes_kl_gaussian_learned_mc_to_50_digits(case):
    """The bound-trained Gibbs posterior's row, recomputed in mpmath: KL of diagonal Gaussians
    coordinate by coordinate summed per group, the Monte Carlo kl⁻¹, then the kl⁻¹ of the
    bound at δ·e^{−costs}: hand-set ρ pays Σ_g [2 ln j_g + ln(π²/6)], the scale ln 17."""
    E, k, dm, n, d = [(0.05, 6006, 0.01, 1001, 0.05), (0.0, 100, 0.1, 8, 0.5),
                      (0.3, 10 ** 5, 1e-6, 60_000, 1e-9)][case]
    js = [[500, 600, 700], [1], [50, 1400]][case]
    sizes = [[1961728, 32768, 67], [10], [3, 10 ** 6]][case]
    dist = [[1e-3, 5e-4, 3e-5], [0.0], [2.0, 40.0]][case]
    scale = float(np.geomspace(0.25, 4, 17)[[6, 0, 16][case]])
    rho = [dr_sigma(j) for j in js]
    post = [scale * r * f for r, f in zip(rho, [[1.0001, 0.999, 1.2], [0.5], [3.0, 1.0]][case])]
    r = ev("pac_bayes_kl_gaussian_learned_mc", dict(E_hat=E, k=k, delta_mc=dm, n=n, delta=d,
                                                    d=sizes, dist_sq=dist, sigma_post=post,
                                                    rho=rho, scale=scale))
    with mp.workdps(50):
        KL = mp.mpf(0)
        for dg, q, a, b in zip(sizes, dist, post, rho):
            sp = mp.mpf(scale) * mp.mpf(b)
            ratio2 = (mp.mpf(a) / sp) ** 2
            KL += dg * (ratio2 - 1 - mp.log(ratio2)) / 2 + mp.mpf(q) / (2 * sp ** 2)
        cost = sum(2 * mp.log(j) + mp.log(mp.pi ** 2 / 6) for j in js) + mp.log(17)
        d_eff = mp.mpf(d) * mp.exp(-cost)
        upper = kl_inv_exact(E, mp.log(2 / mp.mpf(dm)) / k, dps=50)
        exact = kl_inv_exact(upper, (KL + mp.log(2 * mp.sqrt(n) / d_eff)) / n, dps=50)
    assert mp.mpf(r.value) >= exact  # outward: never below the exact value
    assert float(mp.mpf(r.value) - exact) <= 1e-10 * float(exact) + 1e-300
    assert close(r.terms["KL_learned"], float(KL), rel=1e-10)
    assert math.isclose(r.delta, d + dm, rel_tol=1e-15)
    assert math.isclose(r.delta_effective, float(d_eff), rel_tol=1e-10)
