"""The Dziugaite–Roy grid of σ (``formulas/pac_bayes.toml``): σ_j² = c·e^{−j/b}, j = 1, 2, …

Every σ the data side measures is a point of this grid, so that the bound's union over the grid
pays 2 ln j + ln(π²/6) for the point it uses. A requested σ is snapped to its nearest point
(:func:`dr_point`), and refused when no point lies within :data:`SNAP_TOLERANCE`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ...errors import DomainError
from ...words import option

DR_C, DR_B = 0.1, 100.0  # the Dziugaite–Roy grid σ_j² = c·e^{−j/b} of pac_bayes.toml


def dr_sigma(j: int) -> float:
    """σ_j = √(c·e^{−j/b}) on the Dziugaite–Roy grid."""
    return math.sqrt(DR_C) * math.exp(-j / (2 * DR_B))


DEFAULT_SIGMAS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1)

SNAP_TOLERANCE = 0.01  # neighbouring grid points differ by 0.5 %: anything further is off-grid

def dr_point(sigma: float) -> tuple[int, float]:
    """The Dziugaite–Roy grid point nearest to ``sigma``: (j, σ_j). A σ with no grid point
    within 1 % (above σ_1 ≈ 0.315, or below the smallest positive double's grid point) is
    refused with one line: it would otherwise be measured at a σ nobody asked for."""
    if not (math.isfinite(sigma) and sigma > 0):
        raise DomainError(f"{option('sigma', sigma)}: expected a positive number")
    j = max(1, round(-DR_B * (2 * math.log(sigma) - math.log(DR_C))))
    used = dr_sigma(j)
    if not (used > 0 and abs(used / sigma - 1) <= SNAP_TOLERANCE):
        raise DomainError(
            f"{option('sigma', f'{sigma:g}')}: no point of the Dziugaite–Roy grid σ_j² = "
            f"{DR_C}·e^(−j/{DR_B:g}) lies within {SNAP_TOLERANCE:.0%} of it (nearest: j = {j}, "
            f"σ = {used:.4g}); give a σ between 1e-300 and {dr_sigma(1):.4g}")
    return j, used


def snapped_sigmas(sigmas: Sequence[float]) -> list[dict[str, float]]:
    """Every requested σ with the grid point it is measured at (``requested``, ``used``,
    ``j``, ``moved``: whether the value changed), in the order given; refuses far-off σ."""
    out = []
    for s in sigmas:
        j, used = dr_point(float(s))
        out.append({"requested": float(s), "used": used, "j": j,
                    "moved": not math.isclose(used, float(s), rel_tol=1e-12)})
    return out
