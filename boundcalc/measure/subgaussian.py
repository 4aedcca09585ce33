"""Empirical sub-Gaussian constant of a loss (Lintilhac–Shaikh, Appendix A; sharper_picture.md §6).

Procedure, as in the authors' ``plot_losses.ipynb``: t_max = ln(2³² − 1) / max_i ℓ_i (from the
raw losses), centre the losses, evaluate the empirical MGF M̂(t) = mean_i exp(t(ℓ_i − ℓ̄)) on 41
evenly spaced t in [−t_max, t_max], and return the smallest Σ of a linear grid of 21 candidates
with exp(Σ² t² / 2) ≥ M̂(t) at every grid t. This is a heuristic, not a certificate.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import DomainError
from ..stats import Quantity

N_T = 41
N_SIGMA = 21


def _passing(mgf: np.ndarray, t: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    gauss = np.exp(np.outer(candidates**2, t**2) / 2)
    return np.all(gauss >= mgf[None, :], axis=1)


def subgaussian_constant(losses: Sequence[float] | np.ndarray, candidates: Sequence[float] | None =
                         None, n_t: int = N_T) -> Quantity:
    """Smallest candidate Σ whose Gaussian MGF dominates the empirical MGF of centred losses.

    ``candidates`` defaults to ``linspace(0.01, 0.1, 21)`` (the paper's empirical range). If none
    passes, the grid is extended linearly (21 points) from the last candidate up to
    (max ℓ − min ℓ)/2, which always passes (Hoeffding's lemma for the empirical distribution);
    the note says so.
    """
    x = np.asarray(losses, dtype=np.float64).ravel()
    if x.size < 2:
        raise DomainError(f"sub-Gaussian estimator: need at least 2 losses, got {x.size}")
    if not np.all(np.isfinite(x)):
        raise DomainError("sub-Gaussian estimator: losses contain NaN or infinite values")
    top = float(x.max())
    if top <= 0:
        raise DomainError(f"sub-Gaussian estimator: max loss must be positive to set t_max, "
                          f"got {top}")
    cand = np.linspace(0.01, 0.1, N_SIGMA) if candidates is None else np.asarray(candidates, float)
    if cand.ndim != 1 or cand.size == 0 or np.any(~np.isfinite(cand)) or np.any(cand <= 0):
        raise DomainError("sub-Gaussian estimator: candidates must be positive finite numbers")
    cand = np.sort(cand)
    t_max = np.log(2.0**32 - 1) / top
    t = np.linspace(-t_max, t_max, n_t)
    centred = x - x.mean()
    mgf = np.exp(np.outer(t, centred)).mean(axis=1)
    method = (f"empirical MGF of {x.size} centred losses on {n_t} t in "
              f"[-{t_max:.6g}, {t_max:.6g}], {cand.size} candidates in "
              f"[{cand[0]:.6g}, {cand[-1]:.6g}]")
    note = "heuristic, not a certificate"
    ok = _passing(mgf, t, cand)
    if not ok.any():
        hoeffding = (x.max() - x.min()) / 2
        wide = np.linspace(cand[-1], max(hoeffding, cand[-1]), N_SIGMA)
        ok_wide = _passing(mgf, t, wide)
        if not ok_wide.any():  # only possible through rounding at the Hoeffding end
            wide = np.append(wide, hoeffding * (1 + 1e-9))
            ok_wide = _passing(mgf, t, wide)
        note += (f"; no candidate in [{cand[0]:.6g}, {cand[-1]:.6g}] passed, grid extended to "
                 f"[{wide[0]:.6g}, {wide[-1]:.6g}] ({wide.size} points)")
        cand, ok = wide, ok_wide
        if not ok.any():
            raise DomainError("sub-Gaussian estimator: no candidate dominates the empirical MGF")
    return Quantity(float(cand[np.argmax(ok)]), estimated=True, method=method, note=note)
