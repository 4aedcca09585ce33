"""The bound-trained Gibbs posterior: a Gaussian posterior Q = N(μ, diag σ_Q,g²) whose means
and per-group standard deviations are trained on S by gradient descent on a PAC-Bayes bound
(docs/sources/pac_bayes.md §7; Pérez-Ortiz, Rivasplata, Shawe-Taylor & Szepesvári 2021).

* The prior is P = N(μ₀, diag σ_P,g²) with σ_P,g = c·ρ_g: μ₀ the prior model, ρ the shape the
  per-group σ search of :mod:`.tune` chose (free when it was searched with the prior weights on
  a split disjoint from S), c the scale that search chose; c is chosen again after training on
  the declared grid ``SCALE_GRID`` (charged ln 17 by the formula
  ``pac_bayes_kl_gaussian_learned_mc``).
* μ starts at the trained model's weights, σ_Q,g at σ_P,g. Each step draws, for every row of a
  batch, its own weight draw θ ∼ Q (the per-row law of :mod:`.row_noise`, written here with
  tensors σ so that the draws carry gradients: the pathwise, or reparameterisation, gradient),
  evaluates a bounded surrogate loss (cross-entropy with probabilities clipped at ``p_min``,
  divided by ln(1/p_min), in [0, 1]) and descends the PAC-Bayes objective ``quad`` or
  ``classic`` of :func:`objective` with the closed-form KL(Q‖P) (:func:`kl_groups`).
* ``sigma="scale"``: instead of σ_Q,g, one factor t of the prior's scale is learned with
  σ_Q,g = σ_P,g = t·c·ρ_g (the KL's variance part, which pins σ_Q,g to σ_P,g on a large group,
  is then zero); c·t is snapped to the nearest point of ``SCALE_GRID`` afterwards (the grid the
  formula already pays for). ``init="prior"`` starts μ at the prior's weights.
* A language model (``tm.is_lm``) is trained on the loss its certificate is about: the
  prediction-smoothed log-loss −ln((1−α)p_y + α/V)/ln(V/α) per predicted token, averaged over
  each row's tokens (:func:`.lm_loss.smoothed_token_loss`, in [0, 1]; α the smoothing measured
  with the model, ``smoothing_alpha``), in place of the clipped cross-entropy. Its weights are
  drawn whole (:class:`WeightDraws`: θ = μ + σ_Q,g·ε on every parameter, one draw per batch,
  through ``torch.func.functional_call``), as the Monte Carlo of :func:`.tune.final_risk`
  draws them for a model whose row-wise draws are not exact (GPT-2's Conv1D layers, tied
  input and output embeddings: one draw per chunk of S); each row's loss then has the law of
  the certified Gibbs loss, so the gradient is the pathwise gradient of the same objective.
  A batch whose logits exceed :func:`.lm_loss.logit_rows` is cut into such chunks, each a step.
* ``means="moved"``: only the means of the groups where the trained model differs from the
  prior are trained (those its own training changed, e.g. the head of a model whose encoder was
  frozen); the others stay at ``init``. Every choice of how μ and σ_Q are trained is a choice
  of the posterior, which the bound allows to depend on S: none is paid.
* The certificate never uses the training draws: the Gibbs risk of the learned Q is measured
  afterwards on S with fresh draws (:func:`.tune.final_risk`), and the record
  ``provenance.gibbs_learned`` and the curve ``gibbs_risk_learned`` feed the formula.

One host synchronisation per epoch (the objective's running sum), none per step.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from ...errors import BoundcalcError
from .curvature import _params
from .dataset_io import Batched
from .hf import TaskModel
from .inputs import Progress, lm_targets, to_device
from .lm_loss import logit_rows, smoothed_token_loss, split_batches
from .options import (BOUND_INITS, BOUND_MEANS, BOUND_SIGMAS, OBJECTIVES,  # noqa: F401
                      BoundTraining)  # re-exported: declared (torch-free) in .options
from .row_noise import RowNoise, refused
from .weight_draws import WeightDraws

# declared with the options (torch-free, for certify's CLI), with the settings' record
# BoundTraining: .options
SIGMAS, INITS, MEANS = BOUND_SIGMAS, BOUND_INITS, BOUND_MEANS
RECORD, CURVE, UNITS = "gibbs_learned", "gibbs_risk_learned", "gibbs_learned_units"
JITTER = 1e-6  # relative jitter of the Gram in the training draws (training only, not the MC)


def bounded_cross_entropy(logits: torch.Tensor, y: torch.Tensor, p_min: float) -> torch.Tensor:
    """Per-row −ln max(p_y, p_min) / ln(1/p_min): the cross-entropy with the probability of
    the label clipped at ``p_min``, scaled into [0, 1]."""
    work = logits if logits.dtype == torch.float64 else logits.float()
    lp = torch.log_softmax(work, -1).gather(-1, y[:, None]).squeeze(-1)
    return -lp.clamp(min=math.log(p_min)) / math.log(1 / p_min)


def objective(loss: torch.Tensor, kl: torch.Tensor, n: int, delta: float,
              kind: str = "quad") -> torch.Tensor:
    """The PAC-Bayes training objective of Pérez-Ortiz et al. (2021) for a loss in [0, 1]:
    with B = (KL + ln(2√n/δ))/(2n), ``quad`` is (√(L + B) + √B)² and ``classic`` is L + √B.
    Both are upper bounds on kl⁻¹(L, 2B) (Pinsker), so descending them descends the certified
    kl bound up to its slack."""
    B = (kl + math.log(2 * math.sqrt(n) / delta)) / (2 * n)
    if kind == "quad":
        return (torch.sqrt(loss + B) + torch.sqrt(B)) ** 2
    if kind == "classic":
        return loss + torch.sqrt(B)
    raise BoundcalcError(f"bound-trained posterior: objective {kind!r}; expected one of "
                         f"{', '.join(OBJECTIVES)}")


def kl_groups(dist_sq: torch.Tensor, sizes: torch.Tensor, log_ratio: torch.Tensor,
              sigma_prior: torch.Tensor) -> torch.Tensor:
    """KL(N(μ, diag σ_Q,g²) ‖ N(μ₀, diag σ_P,g²)) summed over groups, in the dtype of its
    inputs: Σ_g d_g·(r_g² − 1 − ln r_g²)/2 + ‖μ_g − μ₀,g‖²/(2σ_P,g²) with ln r_g = ``log_ratio``
    = ln(σ_Q,g/σ_P,g) (r² − 1 − ln r² = expm1(2 ln r) − 2 ln r)."""
    var = torch.expm1(2 * log_ratio) - 2 * log_ratio
    return (sizes * var / 2 + dist_sq / (2 * sigma_prior ** 2)).sum()


class GradRowNoise(RowNoise):
    """:class:`~.row_noise.RowNoise` with a tensor σ per parameter group, so that every row's
    draw is differentiable in μ (the module's weights) and in σ (:meth:`set_sigma`).

    The laws are those of :mod:`.row_noise`: Linear as σ·L·ξ with LLᵀ the row's Gram (plus a
    relative jitter of 1e-6 on its diagonal, so the factor always exists and its gradient stays
    finite: a variance larger by that fraction, in training only) or σ·X·Ξ when the row has at
    least as many positions as inputs; Embedding one draw per distinct id of a row (sync-free:
    repeated ids found by sorting); LayerNorm x̂·ε_γ + ε_β. Refused for modules it does not
    cover (convolutions, parameters outside those modules) and for tied weights."""

    def __init__(self, model: nn.Module, group_of: Mapping[str, int],
                 generator: torch.Generator) -> None:
        super().__init__(model, dict.fromkeys(group_of, 1.0), generator)
        if self._replay:
            path = next(iter(self._replay.values()))[0]
            raise refused(f"the bound-trained posterior draws only through Linear, Embedding "
                          f"and LayerNorm modules; '{path or type(model).__name__}' holds "
                          "parameters outside them")
        self._index: dict[tuple[int, str], int] = {}
        for mod, (path, sig) in self._plan.items():
            if isinstance(mod, nn.Conv2d):
                raise refused(f"the bound-trained posterior does not draw convolutions "
                              f"('{path}')")
            for attr in sig:
                self._index[(id(mod), attr)] = group_of[f"{path}.{attr}" if path else attr]
        self._sigma: torch.Tensor | None = None

    def set_sigma(self, sigma: torch.Tensor) -> None:
        """σ_Q per group (a tensor, in the parameters' dtype, on their device) for the next
        forward passes."""
        self._sigma = sigma

    def _s(self, mod: nn.Module, attr: str) -> torch.Tensor | None:
        g = self._index.get((id(mod), attr))
        return None if g is None else self._sigma[g]

    def _linear(self, mod: nn.Linear, x: torch.Tensor, y: torch.Tensor,
                sig: dict[str, float]) -> torch.Tensor:
        R = self.rows
        X = self._rows_of(x).reshape(R, -1, mod.in_features)
        y3 = self._rows_of(y).reshape(R, X.shape[1], mod.out_features)
        out = y3
        T, d_in = X.shape[1], X.shape[2]
        sw, sb = self._s(mod, "weight"), self._s(mod, "bias")
        if sw is not None:
            if T < d_in:
                Xd = X.double()
                gram = torch.bmm(Xd, Xd.transpose(1, 2))
                diag = gram.diagonal(dim1=1, dim2=2)
                eye = torch.eye(T, dtype=gram.dtype, device=gram.device)
                gram = gram + (JITTER * diag.mean(-1) + 1e-30)[:, None, None] * eye
                factor = torch.linalg.cholesky_ex(gram)[0].to(y3.dtype)
            else:
                factor = X.to(y3.dtype)
            xi = self._randn((R, factor.shape[2], y3.shape[2]), y3)
            out = out + sw * torch.bmm(factor, xi)
        if sb is not None:
            out = out + sb * self._randn((R, 1, y3.shape[2]), y3)
        return out.reshape(y.shape)

    def _embedding(self, mod: nn.Embedding, ids: torch.Tensor, y: torch.Tensor,
                   sig: dict[str, float]) -> torch.Tensor:
        R = self.rows
        ids = self._rows_of(ids).reshape(R, -1)
        y = self._rows_of(y)
        T = ids.shape[1]
        sorted_ids, perm = torch.sort(ids, dim=1, stable=True)
        pos = torch.arange(T, device=ids.device).expand(R, T)
        new = torch.ones_like(sorted_ids, dtype=torch.bool)
        new[:, 1:] = sorted_ids[:, 1:] != sorted_ids[:, :-1]
        first = torch.cummax(torch.where(new, pos, 0), dim=1).values  # first slot of each id
        src = torch.empty_like(perm).scatter_(1, perm, perm.gather(1, first))
        z = self._randn((R, T, mod.embedding_dim), y)
        e = z.gather(1, src[..., None].expand(R, T, mod.embedding_dim))
        return y + (self._s(mod, "weight") * e).reshape(y.shape)

    def _layer_norm(self, mod: nn.LayerNorm, x: torch.Tensor, y: torch.Tensor,
                    sig: dict[str, float]) -> torch.Tensor:
        """y + x̂·ε_γ + ε_β, one (ε_γ, ε_β) per row; x̂ the affine-free normalisation of x."""
        out = self._rows_of(y)
        shape = (self.rows, *(1,) * (out.ndim - 2), out.shape[-1])
        sw, sb = self._s(mod, "weight"), self._s(mod, "bias")
        if sw is not None:
            xhat = nn.functional.layer_norm(self._rows_of(x), mod.normalized_shape, eps=mod.eps)
            out = out + xhat.to(out.dtype) * (sw * self._randn(shape, out))
        if sb is not None:
            out = out + sb * self._randn(shape, out)
        return out


@dataclass
class Learned:
    """What :func:`train_bound_posterior` learned (μ is the model's weights, trained in place):
    σ_Q per group, the objective's mean per epoch, the steps and the seconds; ``scale_factor``
    the learned factor t of the prior's scale (1 unless ``sigma`` is ``scale``)."""

    groups: list[str]
    sigma_post: list[float]
    sigma_prior: list[float]
    history: list[float] = field(default_factory=list)
    steps: int = 0
    seconds: float = 0.0
    scale_factor: float = 1.0
    trained: list[str] = field(default_factory=list)


class BoundObjective:
    """The differentiable PAC-Bayes objective of one batch for a model, its prior and a group
    map: μ is the model's weights, ``log_ratio`` (a float64 leaf tensor, one per group, 0 at
    the start) is ln(σ_Q,g/σ_P,g), ``log_scale`` (a float64 scalar leaf, 0 at the start) is
    ln t, the learned factor of the prior's scale (``spec.sigma == "scale"``: σ_P,g and σ_Q,g
    are both t·``sigma_prior``; else t stays 1), ``hooks`` the draws (a context to enter):
    row-wise (:class:`GradRowNoise`) for a classifier, whole-weight (:class:`WeightDraws`)
    for a language model, whose loss is the smoothed log-loss at ``spec.smoothing``."""

    def __init__(self, tm: TaskModel, prior: TaskModel, device: torch.device,
                 groups: Mapping[str, str], sigma_prior: Mapping[str, float],
                 spec: BoundTraining, n: int, generator: torch.Generator) -> None:
        spec.check()  # before the model is moved or a weight copied
        if tm.is_lm and spec.smoothing is None:
            raise BoundcalcError("bound-trained posterior of a language model: its smoothing α "
                                 "(BoundTraining.smoothing) must lie in (0, 1), got None")
        self.model = tm.model.to(device).eval()
        self.named = _params(self.model)
        self.groups = sorted(set(groups[n] for n, _ in self.named))
        index = {g: i for i, g in enumerate(self.groups)}
        ref = dict(prior.model.named_parameters())
        self.pairs: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in self.groups]
        for name, p in self.named:
            q = ref.get(name)
            if q is None or q.shape != p.shape:
                raise BoundcalcError(f"prior weights: parameter '{name}' is missing or has "
                                     "another shape; the prior must be the same architecture "
                                     "as the model")
            self.pairs[index[groups[name]]].append((p, q.detach().to(device, p.dtype)))
        dt = torch.float64
        self.sizes = torch.tensor([sum(p.numel() for p, _ in ps) for ps in self.pairs],
                                  dtype=dt, device=device)
        self.s_prior = torch.tensor([float(sigma_prior[g]) for g in self.groups], dtype=dt,
                                    device=device)
        # lr_sigma = 0: σ is not trained, so no gradient flows through the draws' noise (with
        # means="moved" and a frozen encoder, the backward pass then stops at the head)
        learn = spec.lr_sigma > 0
        self.log_ratio = torch.zeros(len(self.groups), dtype=dt, device=device,
                                     requires_grad=learn and spec.sigma == "groups")
        self.log_scale = torch.zeros((), dtype=dt, device=device,
                                     requires_grad=learn and spec.sigma == "scale")
        with torch.no_grad():  # a group moved: the trained model differs from the prior there
            self.trained = [spec.means == "all" or any(not torch.equal(p, q) for p, q in ps)
                            for ps in self.pairs]
            if spec.init == "prior":
                for ps in self.pairs:
                    for p, q in ps:
                        p.copy_(q)
            # ‖μ_g − μ₀,g‖² of the groups whose means stay (constant during training)
            self.fixed = [None if t else sum((p.double() - q.double()).square().sum()
                                             for p, q in ps)
                          for t, ps in zip(self.trained, self.pairs)]
        for g, ps in enumerate(self.pairs):
            for p, _ in ps:
                p.requires_grad_(self.trained[g])
        self.spec, self.n, self.device, self.tm = spec, n, device, tm
        draws = WeightDraws if tm.is_lm else GradRowNoise
        self.hooks = draws(self.model, {name: index[groups[name]] for name, _ in self.named},
                           generator)

    def trainable(self) -> list[torch.Tensor]:
        """The means that are trained (the parameters of the groups ``spec.means`` selects)."""
        return [p for g, ps in enumerate(self.pairs) if self.trained[g] for p, _ in ps]

    def sigma_prior(self) -> torch.Tensor:
        """σ_P per group (float64): the fixed one, times t when the scale is learned."""
        return self.s_prior * torch.exp(self.log_scale)

    def sigma_post(self) -> torch.Tensor:
        """σ_Q per group (float64)."""
        return self.sigma_prior() * torch.exp(self.log_ratio)

    def learned(self) -> torch.Tensor:
        """The σ parameters that ``spec.sigma`` trains (a leaf tensor)."""
        return self.log_scale if self.spec.sigma == "scale" else self.log_ratio

    def kl(self) -> torch.Tensor:
        """KL(Q‖P) in float64, differentiable in ``log_ratio`` and in the distances
        ‖μ_g − μ₀,g‖² (a leaf, ``self.dist``: :meth:`backward` carries its gradient to μ, so
        no autograd graph is built over every weight)."""
        dt = torch.float64
        with torch.no_grad():
            self.diffs = [[p - q for p, q in ps] if t else []
                          for t, ps in zip(self.trained, self.pairs)]
            # float32 sums (4× faster on a CPU than float64 ones; this only steers training:
            # the certificate's distances are summed in float64 by tune.group_distances)
            dist = torch.stack([sum((d.square().sum().double() for d in ds),
                                    torch.zeros((), dtype=dt, device=self.device))
                                if f is None else f
                                for ds, f in zip(self.diffs, self.fixed)])
        self.dist = dist.requires_grad_(True)
        return kl_groups(self.dist, self.sizes, self.log_ratio, self.sigma_prior())

    def surrogate(self, inputs: Mapping[str, torch.Tensor],
                  y: torch.Tensor | None) -> torch.Tensor:
        """Per row, the bounded loss at a draw of Q (inside ``hooks``): the clipped
        cross-entropy of a classifier (every row its own draw), the smoothed log-loss of a
        language model (one draw per batch)."""
        inputs = to_device(dict(inputs), self.device)
        self.hooks.set_sigma(self.sigma_post().to(self.named[0][1].dtype))
        if self.tm.is_lm:
            inputs, targets, keep = lm_targets(self.tm, inputs)
            logits = self.hooks.forward(**inputs).logits
            if self.tm.task == "causal_lm":
                logits = logits[:, :-1]
            return smoothed_token_loss(logits, targets, keep, self.spec.smoothing)
        y = y.to(self.device)
        self.hooks.start_pass(int(y.shape[0]))
        return bounded_cross_entropy(self.model(**inputs).logits, y, self.spec.p_min)

    def __call__(self, inputs: Mapping[str, torch.Tensor],
                 y: torch.Tensor | None) -> torch.Tensor:
        """The objective on one batch at draws of Q (:meth:`surrogate`)."""
        loss = self.surrogate(inputs, y).mean()
        return objective(loss.double(), self.kl(), self.n, self.spec.delta,
                         self.spec.objective)

    def backward(self, obj: torch.Tensor) -> None:
        """Gradients of ``obj`` (a value of this objective) in μ and ``log_ratio``: autograd,
        plus ∂obj/∂‖μ_g − μ₀,g‖² · 2(μ − μ₀) on every weight of group g (no host sync)."""
        obj.backward()
        coef = (2 * self.dist.grad).to(self.named[0][1].dtype)
        with torch.no_grad():
            for g, ps in enumerate(self.pairs):
                for (p, _), d in zip(ps, self.diffs[g]):  # no diffs: a mean that stays
                    if p.grad is None:
                        p.grad = d * coef[g]
                    else:
                        p.grad.add_(d * coef[g])
        self.diffs = []


def train_bound_posterior(tm: TaskModel, prior: TaskModel, data: Batched,
                          device: torch.device, groups: Mapping[str, str],
                          sigma_prior: Mapping[str, float], spec: BoundTraining,
                          progress: Progress | None = None) -> Learned:
    """Train μ (``tm.model``'s weights, in place) and σ_Q,g (one per group of ``groups``,
    ``{parameter name: group}``, starting at ``sigma_prior``) on ``data`` (S) by the pathwise
    gradient of ``spec.objective`` with prior N(``prior`` weights, diag ``sigma_prior``²); see
    the module docstring. The model is left in eval mode (dropout off, as in the certificate).
    A language model is trained on its smoothed log-loss at ``spec.smoothing`` (required).

    μ takes SGD steps (momentum): Adam's per-coordinate steps of size ~lr would move every
    coordinate, and the KL counts every coordinate's move. ln(σ_Q,g/σ_P,g) takes Adam steps of
    ``lr_sigma``/√d_g (the KL's curvature there is 2·d_g). ``spec`` is checked by
    :class:`BoundObjective` before anything moves."""
    t0 = time.monotonic()
    gen = torch.Generator(device=device).manual_seed(spec.seed + 20_000)
    f = BoundObjective(tm, prior, device, groups, sigma_prior, spec, data.n, gen)
    order = np.random.default_rng(spec.seed + 30_000)
    means = f.trainable()
    opt_mu = (torch.optim.SGD(means, lr=spec.lr_mu, momentum=spec.momentum) if means
              else None)
    leaf = f.learned()
    opt_s = torch.optim.Adam([leaf], lr=spec.lr_sigma) if leaf.requires_grad else None
    step_scale = (torch.ones((), dtype=leaf.dtype, device=device) if spec.sigma == "scale"
                  else 1 / torch.sqrt(f.sizes))
    batches = split_batches(data.batches, logit_rows(tm, data.seq_len, device))
    total = spec.epochs * len(batches)
    out = Learned(groups=f.groups, sigma_post=[], sigma_prior=f.s_prior.tolist(),
                  trained=[g for g, t in zip(f.groups, f.trained) if t])
    with f.hooks:
        for _ in range(spec.epochs):
            acc = torch.zeros((), dtype=torch.float64, device=device)
            for b in order.permutation(len(batches)):
                obj = f(*batches[int(b)])
                if opt_mu is not None:
                    opt_mu.zero_grad(set_to_none=True)
                if opt_s is not None:
                    opt_s.zero_grad(set_to_none=True)
                f.backward(obj)
                if opt_mu is not None:
                    opt_mu.step()
                if opt_s is not None:
                    before = leaf.detach().clone()
                    opt_s.step()
                    with torch.no_grad():  # the Adam step of group g, scaled by 1/√d_g
                        leaf.copy_(before + (leaf - before) * step_scale)
                acc += obj.detach()
                out.steps += 1
                if progress:
                    progress(out.steps, total, "training the bound-trained posterior")
            out.history.append(float(acc) / len(batches))  # the epoch's one sync
    out.sigma_post = f.sigma_post().detach().tolist()
    out.scale_factor = float(torch.exp(f.log_scale.detach()))
    out.seconds = time.monotonic() - t0
    return out


def best_scale(sizes: list[float], dist_sq: list[float], sigma_post: list[float],
               rho: list[float], grid: tuple[float, ...]) -> tuple[float, list[dict[str, float]]]:
    """The prior scale c on ``grid`` with the least KL(Q‖N(μ₀, diag (c·ρ_g)²)) (the Gibbs risk
    of Q does not depend on c, so this c gives the least bound); float64, cancellation-free."""
    from ...engine.kernels import var_ratio_div_float

    rows = []
    for c in grid:
        kl = sum(d * var_ratio_div_float(s, c * r) / 2 + q / (2 * (c * r) ** 2)
                 for d, q, s, r in zip(sizes, dist_sq, sigma_post, rho))
        rows.append({"scale": float(c), "KL": float(kl)})
    best = min(rows, key=lambda r: r["KL"])
    return best["scale"], rows


def add_bound_posterior(stats: Any, tm: TaskModel, prior: TaskModel, data: Batched,
                        device: torch.device, spec: BoundTraining, *, draws: int,
                        seed: int, delta_mc: float = 0.01, prior_source: str | None = None,
                        progress: Progress | None = None) -> Learned:
    """Train the bound-trained Gibbs posterior around ``tm`` (in place) on ``data`` (S), with
    the prior N(``prior``'s weights, diag (c·ρ_g)²) of the per-group σ search already in
    ``stats`` (``provenance.gibbs_groups``: ρ, c, and whether ρ is free), then measure its
    Gibbs risk on S with ``draws`` fresh passes (seed ``seed``, never a training seed) and
    write the curve ``gibbs_risk_learned``, the scalar ``gibbs_learned_units`` and the record
    ``provenance.gibbs_learned`` that ``pac_bayes_kl_gaussian_learned_mc`` reads. A language
    model is trained and measured on its smoothed log-loss at the α of ``stats``
    (``smoothing_alpha``)."""
    from ...engine.functions import kl_inv_upper
    from ...stats import Curve, Quantity
    from .gibbs import MonteCarlo
    from .tune import SCALE_GRID, final_risk, group_distances, sigma_groups

    rec = stats.provenance.get("gibbs_groups")
    if not isinstance(rec, dict):
        raise BoundcalcError("the bound-trained posterior needs the per-group σ search first "
                             "(its prior shape ρ and scale): measure with tune data")
    groups = sigma_groups(tm.model)
    shape = dict(zip(rec["groups"], rec["shape"]))
    if set(shape) != set(groups.values()):
        raise BoundcalcError("provenance.gibbs_groups: its groups are not the model's")
    c0 = float(rec["scale"])
    alpha = _smoothing(stats) if tm.is_lm else 0.0
    if tm.is_lm:
        spec = dataclasses.replace(spec, smoothing=alpha)
    learned = train_bound_posterior(tm, prior, data, device, groups,
                                    {g: c0 * r for g, r in shape.items()}, spec, progress)
    names = learned.groups
    dist = group_distances(tm.model, prior.model, groups)
    sizes = [dist[g][0] for g in names]
    dist_sq = [dist[g][1] for g in names]
    rho = [float(shape[g]) for g in names]
    if spec.sigma == "scale":  # σ_Q,g = σ_P,g = c·ρ_g at the grid point nearest c0·t
        snap = min(SCALE_GRID, key=lambda x: abs(math.log(x / (c0 * learned.scale_factor))))
        learned.sigma_post = [snap * r for r in rho]
    c, scale_rows = best_scale(sizes, dist_sq, learned.sigma_post, rho, SCALE_GRID)
    sig_of = dict(zip(names, learned.sigma_post))
    fin = final_risk(tm, data, device, {n: sig_of[g] for n, g in groups.items()},
                     MonteCarlo(draws, seed, alpha), progress)
    units, mean = fin.n_losses, fin.mean
    upper = max(mean, kl_inv_upper(mean, math.log(2 / delta_mc) / units))
    stats.curves[CURVE] = Curve(
        "scale", np.array([c]), np.array([mean]), ci=np.array([[mean, upper]]),
        confidence=1 - delta_mc, estimated=True, n_samples=units,
        method=(f"Monte Carlo on S of the bound-trained Gibbs posterior N(μ, diag σ_Q,g²) "
                f"(provenance.gibbs_learned): {fin.how}; seed {seed}, fresh draws (never the "
                f"training draws); ci = [Ê, kl⁻¹(Ê, ln(2/δ′)/N)], N = {units}, δ′ = {delta_mc}"))
    stats.scalars[UNITS] = Quantity(float(units), method=(
        f"independent [0, 1] Monte Carlo losses of the bound-trained Gibbs posterior: {fin.how}"))
    stats.provenance[RECORD] = {
        "posterior": "the bound-trained Gibbs posterior N(μ, diag σ_Q,g²): μ and σ_Q,g trained "
                     "on S on a PAC-Bayes objective (docs/sources/pac_bayes.md §7)",
        "groups": names, "rule": rec.get("rule"), "n_params": sizes, "dist_sq": dist_sq,
        "shape": rho, "shape_j": [dict(zip(rec["groups"], rec.get("shape_j", [])))
                                  .get(g) for g in names],
        "shape_disjoint_from_S": bool(rec["shape_disjoint_from_S"]),
        "shape_chosen_on": rec.get("shape_chosen_on"), "shape_note": rec.get("shape_note"),
        "tune_data": rec.get("tune_data"), "tune_shared_rows": rec.get("tune_shared_rows"),
        "sigma_post": learned.sigma_post, "sigma_prior_trained_with": learned.sigma_prior,
        "scale": c, "scale_grid": list(SCALE_GRID), "scale_trained_with": c0,
        "scale_learned": c0 * learned.scale_factor if spec.sigma == "scale" else None,
        "scale_chosen_on": "the least KL over the declared grid with the learned posterior "
                           f"(it depends on S): charged ln {len(SCALE_GRID)}",
        "scale_search": scale_rows, "prior_centre": prior_source,
        "training": {"objective": spec.objective, "epochs": spec.epochs, "steps": learned.steps,
                     "sigma": spec.sigma, "init": spec.init, "means": spec.means,
                     "groups_trained": learned.trained,
                     "lr_mu": spec.lr_mu, "momentum": spec.momentum,
                     "lr_sigma": spec.lr_sigma, "p_min": spec.p_min, "delta": spec.delta,
                     "seed": spec.seed, "objective_per_epoch": learned.history,
                     "seconds": round(learned.seconds, 2),
                     "loss": (f"−ln((1−α)p_y + α/V)/ln(V/α) per predicted token, α = "
                              f"{alpha:g} (the certified loss); one weight draw per batch"
                              if tm.is_lm else
                              f"−ln max(p_y, {spec.p_min:g}) / ln(1/{spec.p_min:g})")},
        "mc": {"mode": fin.mode, "passes": fin.passes, "rows_per_unit": fin.rows_per_unit,
               "units": units, "delta_mc": delta_mc, "seed": seed, "samples_per_pass": data.n},
    }
    return learned


def _smoothing(stats: Any) -> float:
    """The prediction smoothing α the language model's Gibbs risk was measured with
    (``scalars.smoothing_alpha``); a one-line error when the stats have none."""
    q = stats.scalars.get("smoothing_alpha")
    if q is None:
        raise BoundcalcError("the bound-trained posterior of a language model needs the "
                             "smoothing α of its measurement (scalars.smoothing_alpha)")
    return float(q.value)
