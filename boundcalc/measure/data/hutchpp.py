"""Hessian trace with fewer Hessian-vector products: Hutch++ (Meyer, Musco, Musco & Woodruff,
SOSA 2021, arXiv:2010.09649, Algorithm 1), with a confidence interval for the estimator used.

Hutch++ splits the trace with a projection P = QQᵀ onto the range of a sketch H S (S: k
Rademacher columns, Q orthonormal):

    tr H = tr(Qᵀ H Q) + tr((I − P) H (I − P)),

an identity (the cross terms vanish because tr(P H (I − P)) = tr((I − P) P H) = 0). The first
term is computed exactly from k more products H Q; the second is estimated by Hutchinson with
probes g projected off Q: samples x_i = gᵢᵀ(I − P) H (I − P)gᵢ. Given Q these samples are
i.i.d. with mean exactly the second term, so the interval is

    tr(Qᵀ H Q) + [Student-t interval of the x_i],

the same kind of interval (a CLT/t approximation over i.i.d. samples, not a rigorous bound) as
plain Hutchinson's, for the residual only. The paper's (ε, δ) guarantee needs a positive
semi-definite matrix, which a loss Hessian is not in general; it is not used. Results are always
marked estimated. Products: k (sketch) + k (exact part) + the residual probes.

With ``halfwidth=h`` the residual uses Stein's two-stage procedure (Stein 1945): ``pilot`` = n₀
probes give a spread s₀; the total is n = max(n₀ + 1, ⌈(t_{n₀−1}·s₀/h)²⌉) probes, and the
interval is mean ± t_{n₀−1}·s₀/√n — half-width at most h by construction, and exact coverage
when the samples are normal (as with any t-interval, an approximation otherwise).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ...errors import BoundcalcError, DomainError
from ...stats import Quantity
from .curvature import Closure, HessianTrace, _hvp_batch, _params, _rademacher, t_interval


class _HVP:
    """Hessian-vector products of ``loss_fn`` at the current weights, on flat float64 vectors."""

    def __init__(self, model: torch.nn.Module, loss_fn: Closure, batch_size: int):
        named = _params(model)
        loss = loss_fn()
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise BoundcalcError("hutchpp_trace: loss_fn must return a scalar tensor")
        if not bool(torch.isfinite(loss)):
            raise DomainError(f"hutchpp_trace: loss is not finite ({float(loss)})")
        self.params = [p for _, p in named]
        grads = torch.autograd.grad(loss.reshape(()), self.params, create_graph=True,
                                    allow_unused=True)
        self.live = [i for i, g in enumerate(grads) if g is not None and g.requires_grad]
        self.grads = [grads[i] for i in self.live]
        self.sizes = [p.numel() for p in self.params]
        self.dim = sum(self.sizes)
        self.device = self.params[0].device
        self.batched = any(p.is_cuda for p in self.params)
        self.batch_size = batch_size
        self.count = 0

    def __call__(self, V: torch.Tensor) -> torch.Tensor:
        """H V for V of shape (b, dim) (float64) → (b, dim) float64."""
        out = torch.zeros_like(V)
        for lo in range(0, V.shape[0], self.batch_size):
            rows = V[lo:lo + self.batch_size]
            b = rows.shape[0]
            self.count += b
            if not self.live:
                continue
            parts = list(torch.split(rows, self.sizes, dim=1))
            vs = [parts[i].reshape(b, *self.params[i].shape).to(self.params[i].dtype)
                  for i in self.live]
            live_params = [self.params[i] for i in self.live]
            try:
                try:
                    hv = _hvp_batch(self.grads, live_params, vs, self.batched)
                except RuntimeError:
                    if not self.batched:
                        raise
                    self.batched = False
                    hv = _hvp_batch(self.grads, live_params, vs, self.batched)
            except RuntimeError as exc:
                msg = (str(exc).strip().splitlines() or ["RuntimeError"])[0][:140]
                raise BoundcalcError(f"hutchpp_trace: no second derivatives through this model "
                                     f"({msg}); use eager attention") from None
            offsets = np.cumsum([0] + self.sizes)
            for j, i in enumerate(self.live):
                out[lo:lo + b, offsets[i]:offsets[i + 1]] = hv[j].reshape(b, -1).double()
        return out


def _rademacher_rows(n: int, dim: int, device: torch.device, gen: torch.Generator
                     ) -> torch.Tensor:
    like = torch.empty(0, dtype=torch.float64, device=device)
    return _rademacher((n, dim), like, gen)


def hutchpp_trace(model: torch.nn.Module, loss_fn: Closure, *, sketch: int = 20,
                  n_probes: int | None = 40, halfwidth: float | None = None, pilot: int = 10,
                  max_probes: int = 10_000, seed: int = 0, confidence: float = 0.95,
                  batch_size: int = 16) -> HessianTrace:
    """Hutch++ estimate of tr ∇²L(θ) with a t-interval for the estimator actually used.

    ``sketch`` = k (2k products for the exact part). Residual probes: ``n_probes``, or, with
    ``halfwidth``, as many fresh probes as a pilot of ``pilot`` probes says are needed for that
    95 %-style half-width (at most ``max_probes``). Total products in ``.hvps``. No per-group
    split (the exact part mixes groups); see :func:`~.curvature.hutchinson_trace` for groups.
    """
    if sketch < 1:
        raise BoundcalcError(f"hutchpp_trace: sketch must be >= 1, got {sketch}")
    if halfwidth is None and (n_probes is None or n_probes < 2):
        raise BoundcalcError(f"hutchpp_trace: n_probes must be >= 2, got {n_probes}")
    if halfwidth is not None and not (math.isfinite(halfwidth) and halfwidth > 0):
        raise BoundcalcError(f"hutchpp_trace: halfwidth must be a positive number, got "
                             f"{halfwidth}")
    if halfwidth is not None and pilot < 2:
        raise BoundcalcError(f"hutchpp_trace: pilot must be >= 2, got {pilot}")
    if not 0 < confidence < 1:
        raise BoundcalcError(f"hutchpp_trace: confidence must lie in (0, 1), got {confidence}")
    hvp = _HVP(model, loss_fn, batch_size)
    k = min(sketch, hvp.dim)
    gen = torch.Generator().manual_seed(seed)
    S = _rademacher_rows(k, hvp.dim, hvp.device, gen)
    Y = hvp(S)
    Q = torch.linalg.qr(Y.T, mode="reduced")[0]  # (dim, k), orthonormal columns
    exact = float((Q.T * hvp(Q.T)).sum())

    def residual(n: int) -> np.ndarray:
        out = []
        for lo in range(0, n, batch_size):  # a batch at a time: n × dim would not fit
            G = _rademacher_rows(min(batch_size, n - lo), hvp.dim, hvp.device, gen)
            G = G - (G @ Q) @ Q.T
            out.append((G * hvp(G)).sum(1))
        return torch.cat(out).cpu().numpy() if out else np.zeros(0)  # one copy to the host

    from scipy import stats as sps

    if halfwidth is None:
        samples = residual(int(n_probes))
        mean, se, ci = t_interval(samples, confidence)
        rule = f"{n_probes} residual Rademacher probes, t-interval of the residual"
    else:  # Stein's two-stage procedure: n fixed by the pilot's spread, interval from s0
        first = residual(pilot)
        s0 = float(first.std(ddof=1))
        t0 = float(sps.t.ppf((1 + confidence) / 2, pilot - 1))
        n_probes = int(min(max_probes, max(pilot + 1, math.ceil((t0 * s0 / halfwidth) ** 2))))
        samples = np.concatenate([first, residual(n_probes - pilot)])
        mean, se = float(samples.mean()), s0 / math.sqrt(n_probes)
        ci = (mean - t0 * se, mean + t0 * se)
        rule = (f"{n_probes} residual Rademacher probes, Stein two-stage t-interval (pilot "
                f"{pilot}, target half-width {halfwidth:.6g})")
    value, lo, hi = exact + mean, exact + ci[0], exact + ci[1]
    if not all(math.isfinite(x) for x in (value, se, lo, hi)):
        raise DomainError("hutchpp_trace: non-finite Hessian-vector products")
    method = (f"hutch++ (Meyer et al. 2021): sketch k={k}, exact tr(QᵀHQ) = {exact:.6g}, "
              f"{rule}, {hvp.count} Hessian-vector products, seed {seed}")
    q = Quantity(value, estimated=True, stderr=se, ci=(lo, hi), confidence=confidence,
                 method=method)
    return HessianTrace(q, samples=samples + exact, hvps=hvp.count)
