"""Gaussian weight perturbations and the Monte Carlo Gibbs risk (pac_bayes.md §3).

* :func:`perturbed`: a context manager adding N(0, σ²) noise to every trainable parameter and
  restoring the exact original values afterwards.
* :func:`monte_carlo_gibbs_risk`: k noisy draws, mean loss Ê and the certified upper end
  kl⁻¹(Ê, ln(2/δ′)/k) (Langford & Caruana 2002), valid with probability ≥ 1 − δ′ for a loss
  in [0, 1].

``loss_fn`` is always a closure ``() -> scalar tensor`` evaluated at the model's current weights.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from ...errors import BoundcalcError, DomainError
from ...stats import Quantity
from .curvature import Closure, _params
from .data_pass import Progress, run_pass
from .dataset_io import Batched
from .hf import TaskModel


@dataclass
class GibbsRisk:
    """Monte Carlo estimate of the Gibbs empirical risk under Gaussian weight noise."""

    mean: Quantity
    upper: Quantity
    losses: np.ndarray


def _sigma_for(sigma: float | Mapping[str, float], name: str) -> float:
    s = sigma.get(name) if isinstance(sigma, Mapping) else sigma
    if s is None:
        raise BoundcalcError(f"sigma: no noise level for parameter '{name}'")
    s = float(s)
    if not math.isfinite(s) or s < 0:
        raise DomainError(f"sigma for '{name}': expected a finite number >= 0, got {s}")
    return s


@contextmanager
def perturbed(model: torch.nn.Module, sigma: float | Mapping[str, float],
              generator: torch.Generator | None = None) -> Iterator[dict[str, torch.Tensor]]:
    """Add N(0, σ²) noise to every trainable parameter; restore the originals on exit.

    ``sigma`` is one std for all parameters or a ``{parameter name: std}`` mapping. Yields the
    noise drawn (float64, per parameter name).
    """
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    named = _params(model)
    saved = {n: p.detach().clone() for n, p in named}
    noise: dict[str, torch.Tensor] = {}
    try:
        with torch.no_grad():
            for n, p in named:
                e = torch.randn(p.shape, generator=gen, dtype=torch.float64) * _sigma_for(sigma, n)
                noise[n] = e
                p.add_(e.to(dtype=p.dtype, device=p.device))
        yield noise
    finally:
        with torch.no_grad():
            for n, p in named:
                p.copy_(saved[n])


def monte_carlo_gibbs_risk(model: torch.nn.Module, loss_fn: Closure,
                           sigma: float | Mapping[str, float], *, k: int = 100,
                           delta_prime: float = 0.05, seed: int = 0) -> GibbsRisk:
    """Mean loss over k Gaussian weight draws and its kl upper end at confidence 1 − δ′.

    ``loss_fn`` must return the empirical loss on the sample, a number in [0, 1].
    """
    from ...engine.functions import kl_inv_upper

    if k < 1:
        raise BoundcalcError(f"monte_carlo_gibbs_risk: k must be >= 1, got {k}")
    if not 0 < delta_prime < 1:
        raise DomainError(f"monte_carlo_gibbs_risk: delta_prime must lie in (0, 1), "
                          f"got {delta_prime}")
    gen = torch.Generator().manual_seed(seed)
    losses = np.empty(k)
    for i in range(k):
        with perturbed(model, sigma, gen), torch.no_grad():
            value = float(loss_fn())
        if not (math.isfinite(value) and 0.0 <= value <= 1.0):
            raise DomainError(f"monte_carlo_gibbs_risk: draw {i} gave loss {value}; the kl bound "
                              "needs a loss in [0, 1] (e.g. the 0-1 error)")
        losses[i] = value
    mean = float(losses.mean())
    c = math.log(2 / delta_prime) / k
    upper = kl_inv_upper(mean, c)
    sig = sigma if not isinstance(sigma, Mapping) else "per-parameter"
    stderr = float(losses.std(ddof=1) / math.sqrt(k)) if k > 1 else None
    return GibbsRisk(
        mean=Quantity(mean, estimated=True, stderr=stderr,
                      method=f"mean loss over {k} draws of N(0, sigma^2 I) noise, sigma={sig}, "
                             f"seed {seed}"),
        upper=Quantity(upper, confidence=1 - delta_prime,
                       method=f"kl^-1(mean, ln(2/delta')/k) with k={k}, delta'={delta_prime} "
                              "(Langford-Caruana)",
                       note="upper bound on the Gibbs empirical risk with probability >= 1-delta'"),
        losses=losses)


def gibbs_risk(tm: TaskModel, data: Batched, device: torch.device, sigmas: Sequence[float],
               draws: int, seed: int, alpha: float,
               progress: Progress | None = None) -> np.ndarray:
    """(len(sigmas), draws) array: the bounded-loss mean over the data of each noisy draw."""
    out = np.empty((len(sigmas), draws))
    total = len(sigmas) * draws
    for i, s in enumerate(sigmas):
        gen = torch.Generator().manual_seed(seed + i)
        for d in range(draws):
            if progress:
                progress(i * draws + d, total, f"Gibbs risk σ={s:.3g}")
            with perturbed(tm.model, float(s), gen):
                r = run_pass(tm, data, device, alpha=alpha, norms=False)
            out[i, d] = float(r.bounded.mean())
    return out
