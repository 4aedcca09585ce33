"""The subspace Gibbs posterior: a Gaussian posterior on a few coordinates of a fixed,
low-dimensional subspace of the weights around the prior, trained on the PAC-Bayes bound
(docs/sources/pac_bayes.md §8; Li et al. 2018, Hu et al. 2021, Lotfi et al. 2022,
Pérez-Ortiz et al. 2021).

The subspace (every choice declared in :class:`SubspaceSpec`, fixed before S is read):

* every adapted ``nn.Linear`` m of the encoder (or GPT-2's ``Conv1D``, the same map with its
  weight stored transposed; ``layers``: ``all`` of them, the ``attention`` ones only, or none
  for ``head``) moves as W_m = W0_m + c_m·B_m·A_m, with
  W0_m the prior's weight, c_m its root-mean-square (read from the prior: free), B_m a fixed
  d_out × r Gaussian matrix with N(0, 1/r) entries drawn from ``basis_seed`` and the module's
  path (never from S), and A_m ∈ R^{r × d_in} the coordinates (a LoRA-shaped adapter whose
  "down" factor is random and frozen: the coordinates enter the output linearly);
* the classification head (the last ``nn.Linear`` with one output per class) moves as
  W_h = W0_h + c_h·A_h, its whole weight matrix being coordinates (B = I);
* biases, LayerNorms and embeddings stay at the prior's values.

A language model (``tm.is_lm``) has no head of its own in the subspace (its output layer is tied
to the token embeddings): its adapted modules are the encoder's, and its loss is the certified
one, the prediction-smoothed log-loss at ``spec.smoothing`` averaged over a row's predicted
tokens (:func:`.lm_loss.smoothed_token_loss`, in [0, 1]), in training and in the Monte Carlo;
a classifier trains on the clipped cross-entropy and is measured on its 0-1 error.

All coordinates zero is the prior model exactly. The prior is P = N(0, s_P² I_d) over the d
coordinates, s_P fixed by a declared number before S (free) or chosen after training on a
declared grid (ln |grid| charged by the formula); the posterior is Q = N(z, s_Q² I_d), with z
and s_Q trained on S by the pathwise gradient of the PAC-Bayes objective
(:func:`.bound_posterior.objective`, with the bounded cross-entropy of that module), z starting
at 0. KL(Q‖P) = ‖z‖²/(2 s_P²) + d·(ρ² − 1 − ln ρ²)/2 with ρ = s_Q/s_P (:func:`kl_subspace`).

**Draws exact in law, and cheap.** A row r of a batch gets its own A^(r) = Z + s_Q·E^(r),
E^(r) standard normal of the coordinates' shape, for every adapted module: the module's
output on that row is then exactly x·(W0 + c·B·A^(r))ᵀ + b, computed as
y + c·((X·Zᵀ + s_Q·X·E^(r)ᵀ)·Bᵀ): a batched product through r columns, never a per-row copy of
a weight matrix. Unlike :mod:`.row_noise` there is no Gram factor to take: the per-row draw is
the coordinates themselves (r·d_in normals per module and row), so the same hooks serve the
training (with gradients in Z and s_Q) and the certificate's Monte Carlo (without).

The coordinates are written in units of the prior weights' scale c_m, so one s_P means the
same relative perturbation on every module.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from ...errors import BoundcalcError
from .dataset_io import Batched
from .hf import TaskModel
from .inputs import Progress, to_device
from .options import SUBSPACE_LAYERS

OBJECTIVES = ("quad", "classic")


@dataclass(frozen=True)
class SubspaceSpec:
    """The subspace and its training, fixed before S is read.

    ``rank`` r of each encoder adapter; ``layers`` which encoder Linears get one (``all``,
    ``attention``: the query/key/value/output projections, ``head``: none, the head alone);
    ``basis_seed`` of the frozen random matrices B; ``sigma_prior`` s_P, the prior's std of
    every coordinate (in units of each module's weight scale); ``sigma_grid``: when given, s_P
    is chosen after training on these values (the least KL; the formula charges ln |grid|) and
    ``sigma_prior`` is only where training starts; ``epochs`` passes over S; ``lr`` the Adam
    step of z; ``lr_sigma`` the Adam step of ln s_Q (scaled by 1/√d: the KL's curvature in
    ln s_Q is 2d); ``objective`` quad or classic; ``p_min`` the bounded cross-entropy's floor;
    ``delta`` the objective's δ; ``seed`` of the training draws; ``delta_mc`` the δ′ of the
    certificate's Monte Carlo step; ``fit_epochs`` passes over S of a plain cross-entropy fit
    of z at the mean (noise off, Adam ``fit_lr``; as LoRA fine-tuning does) before the training
    on the bound, which then starts from the fitted z (0: z starts at the prior); ``smoothing``
    α of a language model's smoothed log-loss (required for one, unused for a classifier)."""

    rank: int = 4
    layers: str = "all"
    basis_seed: int = 0
    sigma_prior: float = 0.05
    sigma_grid: tuple[float, ...] = ()
    epochs: int = 3
    lr: float = 1e-3
    lr_sigma: float = 0.05
    objective: str = "quad"
    p_min: float = 1e-4
    delta: float = 0.05
    seed: int = 0
    delta_mc: float = 0.01
    fit_epochs: int = 0
    fit_lr: float = 1e-3
    smoothing: float | None = None

    def check(self) -> None:
        """Refuse settings outside their domains (one line naming the setting)."""
        bad = None
        if self.layers not in SUBSPACE_LAYERS:
            bad = f"layers {self.layers!r}; expected one of {', '.join(SUBSPACE_LAYERS)}"
        elif self.objective not in OBJECTIVES:
            bad = f"objective {self.objective!r}; expected one of {', '.join(OBJECTIVES)}"
        elif self.rank < 1 or self.epochs < 0 or self.fit_epochs < 0:
            bad = (f"rank must be >= 1, epochs and fit_epochs >= 0 (got {self.rank}, "
                   f"{self.epochs}, {self.fit_epochs})")
        elif not all(math.isfinite(s) and s > 0 for s in (self.sigma_prior, *self.sigma_grid)):
            bad = "sigma_prior and every point of sigma_grid must be finite and > 0"
        elif not all(math.isfinite(v) and v >= 0 for v in (self.lr, self.lr_sigma,
                                                           self.fit_lr)):
            bad = (f"lr, lr_sigma and fit_lr must be finite and >= 0 (got {self.lr}, "
                   f"{self.lr_sigma}, {self.fit_lr})")
        elif not (0 < self.p_min < 1 and 0 < self.delta < 1 and 0 < self.delta_mc < 1):
            bad = "p_min, delta and delta_mc must lie in (0, 1)"
        elif self.smoothing is not None and not 0 < self.smoothing < 1:
            bad = f"smoothing must lie in (0, 1) (got {self.smoothing})"
        elif len(set(self.sigma_grid)) != len(self.sigma_grid):
            bad = "sigma_grid repeats a value"
        if bad:
            raise BoundcalcError(f"subspace posterior: {bad}")

    @property
    def prior_grid(self) -> int:
        """The number of prior scales the certificate pays for (1: s_P fixed before S)."""
        return max(1, len(self.sigma_grid))


def kl_subspace(dist_sq: Any, dim: int, sigma_post: Any, sigma_prior: Any) -> Any:
    """KL(N(z, s_Q² I_d) ‖ N(0, s_P² I_d)) = ‖z‖²/(2 s_P²) + d·(ρ² − 1 − ln ρ²)/2, ρ = s_Q/s_P;
    torch tensors or floats (ρ² − 1 − ln ρ² as expm1(2 ln ρ) − 2 ln ρ, no cancellation)."""
    if isinstance(sigma_post, torch.Tensor) or isinstance(dist_sq, torch.Tensor):
        lr = torch.log(torch.as_tensor(sigma_post, dtype=torch.float64)
                       / torch.as_tensor(sigma_prior, dtype=torch.float64))
        return dist_sq / (2 * sigma_prior ** 2) + dim * (torch.expm1(2 * lr) - 2 * lr) / 2
    lr = math.log(sigma_post / sigma_prior)
    return dist_sq / (2 * sigma_prior ** 2) + dim * (math.expm1(2 * lr) - 2 * lr) / 2


@dataclass
class Site:
    """One adapted module: its path, the module, the weight scale c, the frozen basis B
    (d_out × r; None for the head, B = I), the coordinates Z (r × d_in or d_out × d_in), d_in,
    and whether the module stores its weight transposed (GPT-2's ``Conv1D``: d_in × d_out)."""

    path: str
    module: nn.Module
    scale: float
    basis: torch.Tensor | None
    z: torch.Tensor
    d_in: int
    transposed: bool = False

    def delta_weight(self, a: torch.Tensor) -> torch.Tensor:
        """c·B·A (c·A for the head): the weight change at coordinates ``a``, in the shape the
        module stores its weight (transposed for a ``Conv1D``)."""
        d = self.scale * (a if self.basis is None else self.basis @ a)
        return d.T if self.transposed else d


def linear_shape(mod: nn.Module) -> tuple[int, int, bool] | None:
    """(d_in, d_out, transposed) of a module computing x·Wᵀ + b (``nn.Linear``) or x·W + b
    (a ``Conv1D`` of GPT-2: a weight of d_in × d_out and an ``nf`` attribute); None for any
    other module."""
    if isinstance(mod, nn.Linear):
        return mod.in_features, mod.out_features, False
    w = getattr(mod, "weight", None)
    if type(mod).__name__ == "Conv1D" and isinstance(w, torch.Tensor) and w.dim() == 2 \
            and getattr(mod, "nf", None) == w.shape[1]:
        return int(w.shape[0]), int(w.shape[1]), True
    return None


def head_path(model: nn.Module, n_outputs: int) -> str:
    """The classification head: the last ``nn.Linear`` with ``n_outputs`` outputs (one line
    naming the model when it has none)."""
    paths = [p for p, m in model.named_modules()
             if isinstance(m, nn.Linear) and m.out_features == n_outputs]
    if not paths:
        raise BoundcalcError(f"subspace posterior: {type(model).__name__} has no Linear head "
                             f"with {n_outputs} outputs")
    return paths[-1]


def _basis_seed(seed: int, path: str) -> int:
    digest = hashlib.blake2b(f"subspace basis {seed} {path}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


class Subspace:
    """The coordinates of ``tm``'s subspace around its current weights (the prior's: load the
    prior into ``tm``), their posterior std s_Q (``log_sigma``, a float64 leaf) and the
    per-row draws (:meth:`draws`). Refused for a classifier without a Linear head, for a
    language model without ``spec.smoothing`` or with ``layers="head"`` (its head is tied to
    its embeddings and stays out), and for a model with no module to adapt."""

    def __init__(self, tm: TaskModel, spec: SubspaceSpec, device: torch.device) -> None:
        spec.check()
        if tm.is_lm and (spec.smoothing is None or spec.layers == "head"):
            raise BoundcalcError("subspace posterior: a language model needs the smoothing α "
                                 "of its certified loss and layers all or attention (its head "
                                 "is tied to its embeddings)")
        self.tm, self.spec, self.device = tm, spec, device
        model = tm.model
        head = None if tm.is_lm else head_path(model, tm.n_outputs)
        tied = model.get_output_embeddings() if tm.is_lm else None
        self.sites: list[Site] = []
        for path, mod in model.named_modules():
            shape = linear_shape(mod)
            if shape is None or mod is tied:
                continue
            d_in, d_out, transposed = shape
            is_head = path == head
            if not is_head and (spec.layers == "head" or (
                    spec.layers == "attention" and "attention" not in path
                    and ".attn." not in f".{path}.")):
                continue
            w = mod.weight.detach()
            scale = float(w.double().square().mean().sqrt()) or 1.0
            basis = None
            rows = d_out
            if not is_head:
                g = torch.Generator().manual_seed(_basis_seed(spec.basis_seed, path))
                basis = (torch.randn((d_out, spec.rank), generator=g,
                                     dtype=torch.float64) / math.sqrt(spec.rank))
                basis = basis.to(device=device, dtype=w.dtype)
                rows = spec.rank
            z = torch.zeros((rows, d_in), dtype=w.dtype, device=device)
            self.sites.append(Site(path, mod, scale, basis, z, d_in, transposed))
        if not self.sites:
            raise BoundcalcError(f"subspace posterior: {type(model).__name__} has no module "
                                 f"to adapt with layers {spec.layers!r}")
        self.dim = sum(s.z.numel() for s in self.sites)
        self.log_sigma = torch.tensor(math.log(spec.sigma_prior), dtype=torch.float64,
                                      device=device)
        self.rows = 0
        self._seen: set[str] = set()  # the sites that ran in this pass
        self.noise = True
        self.gen: torch.Generator | None = None
        # set to a list to keep every (path, E) drawn (audits and tests: the draw of each row)
        self.record: list[tuple[str, torch.Tensor]] | None = None
        self._handles: list[Any] = []

    @property
    def sigma_post(self) -> float:
        return float(torch.exp(self.log_sigma.detach()))

    def dist_sq(self) -> torch.Tensor:
        """‖z‖² in float64 (differentiable in z)."""
        return sum(s.z.double().square().sum() for s in self.sites)

    def kl(self, sigma_prior: float) -> torch.Tensor:
        """KL(Q‖P) at the prior std ``sigma_prior`` (float64, differentiable)."""
        return kl_subspace(self.dist_sq(), self.dim, torch.exp(self.log_sigma), sigma_prior)

    def start_pass(self, rows: int) -> None:
        """Before each forward pass: the number of rows (each gets its own draw)."""
        self.rows = rows
        self._seen = set()

    @contextmanager
    def draws(self, generator: torch.Generator | None, noise: bool = True) -> Iterator[None]:
        """Inside it, every forward pass of ``tm.model`` runs at the posterior: each row at
        its own draw A^(r) = Z + s_Q·E^(r) (``noise``), or at the mean Z (not ``noise``)."""
        self.gen, self.noise = generator, noise
        for site in self.sites:
            self._handles.append(site.module.register_forward_hook(self._hook(site)))
        try:
            yield
        finally:
            for h in self._handles:
                h.remove()
            self._handles.clear()

    def _hook(self, site: Site) -> Any:
        def hook(mod: nn.Module, args: tuple, out: torch.Tensor) -> torch.Tensor:
            x = args[0]
            R = self.rows
            if site.path in self._seen:  # a second call would draw the same weights anew
                raise BoundcalcError(f"subspace posterior: module '{site.path}' ran twice in "
                                     "one forward pass (shared weights): its draws would not "
                                     "be one weight draw per row")
            self._seen.add(site.path)
            if x.shape[0] != R:
                raise BoundcalcError(f"subspace posterior: module '{site.path}' saw "
                                     f"{x.shape[0]} rows, expected {R}")
            X = x.reshape(R, -1, site.d_in).to(site.z.dtype)
            h = X @ site.z.T  # (R, T, k)
            if self.noise:
                eps = torch.randn((R, *site.z.shape), generator=self.gen, device=x.device,
                                  dtype=site.z.dtype)
                if self.record is not None:
                    self.record.append((site.path, eps.detach().clone()))
                sig = torch.exp(self.log_sigma).to(site.z.dtype)
                h = h + sig * torch.bmm(X, eps.transpose(1, 2))
            if site.basis is not None:
                h = h @ site.basis.T
            return out + (site.scale * h).reshape(out.shape).to(out.dtype)
        return hook

    def merge(self) -> None:
        """Write the posterior mean into the model's weights (W0 + c·B·Z); the hooks must not
        be active afterwards (the mean would be added twice)."""
        with torch.no_grad():
            for s in self.sites:
                s.module.weight.add_(s.delta_weight(s.z).to(s.module.weight.dtype))


@dataclass
class SubspaceFit:
    """What :func:`train_subspace` learned: s_Q, the objective per epoch, steps, seconds."""

    sigma_post: float
    history: list[float] = field(default_factory=list)
    steps: int = 0
    seconds: float = 0.0
    fit_history: list[float] = field(default_factory=list)
    fit_dist_sq: float = 0.0


def pieces(sub: Subspace, data: Batched) -> list:
    """The (inputs, labels) pieces of ``data`` that each run as one forward pass: a language
    model's batches cut to its logits budget (:func:`.lm_loss.logit_rows`), a classifier's as
    they are."""
    if not sub.tm.is_lm:
        return data.batches
    from .lm_loss import logit_rows, split_batches

    return split_batches(data.batches, logit_rows(sub.tm, data.seq_len, sub.device))


def row_losses(sub: Subspace, inputs: Any, y: Any, mode: str) -> torch.Tensor:
    """Per row of one piece, at the current draws (inside :meth:`Subspace.draws`): a language
    model's smoothed log-loss at ``spec.smoothing`` in every ``mode``; a classifier's
    cross-entropy (``fit``), clipped cross-entropy in [0, 1] (``bound``) or 0-1 error
    (``risk``)."""
    from .bound_posterior import bounded_cross_entropy

    tm, dev = sub.tm, sub.device
    inputs = to_device(dict(inputs), dev)
    if tm.is_lm:
        from .inputs import lm_targets
        from .lm_loss import smoothed_token_loss

        inputs, targets, keep = lm_targets(tm, inputs)
        sub.start_pass(int(targets.shape[0]))
        logits = tm.model(**inputs).logits
        if tm.task == "causal_lm":
            logits = logits[:, :-1]
        return smoothed_token_loss(logits, targets, keep, float(sub.spec.smoothing))
    y = y.to(dev)
    sub.start_pass(int(y.shape[0]))
    logits = tm.model(**inputs).logits
    if mode == "fit":
        return torch.nn.functional.cross_entropy(logits.float(), y, reduction="none")
    if mode == "bound":
        return bounded_cross_entropy(logits, y, sub.spec.p_min)
    return (logits.argmax(-1) != y).double()


def fit_cross_entropy(sub: Subspace, data: Batched, fit: SubspaceFit,
                      progress: Progress | None = None) -> None:
    """``spec.fit_epochs`` passes of Adam (``spec.fit_lr``) on the mean cross-entropy of the
    model at the coordinates z (noise off: the deterministic subspace model, a LoRA-style
    fine-tune whose down factors are random and frozen), on ``data`` (S); z is left at the fit
    and ‖z‖² after it in ``fit.fit_dist_sq``, the mean loss per epoch in ``fit.fit_history``.
    The batch order is its own (seed ``spec.seed`` + 50,000), no draw of Q is spent."""
    spec = sub.spec
    leaves = [s.z.requires_grad_(True) for s in sub.sites]
    opt = torch.optim.Adam(leaves, lr=spec.fit_lr)
    order = np.random.default_rng(spec.seed + 50_000)
    parts = pieces(sub, data)
    with sub.draws(None, noise=False):
        for e in range(spec.fit_epochs):
            acc = 0.0
            for i, b in enumerate(order.permutation(len(parts))):
                losses = row_losses(sub, *parts[int(b)], "fit")
                opt.zero_grad(set_to_none=True)
                losses.mean().backward()
                opt.step()
                acc += float(losses.detach().sum())
                if progress:
                    progress(e * len(parts) + i + 1, spec.fit_epochs * len(parts),
                             "fitting the subspace coordinates by cross-entropy")
            fit.fit_history.append(acc / data.n)
    fit.fit_dist_sq = float(sub.dist_sq().detach())


def train_subspace(sub: Subspace, data: Batched, progress: Progress | None = None
                   ) -> SubspaceFit:
    """Train z (Adam, ``spec.lr``) and ln s_Q (Adam, ``spec.lr_sigma``/√d) on ``data`` (S)
    by the pathwise gradient of the PAC-Bayes objective at the prior std ``spec.sigma_prior``:
    every row of every batch its own draw of Q; the model's own weights are frozen and it is
    left in eval mode (dropout off, as in the certificate). With ``spec.fit_epochs`` > 0, z
    starts at the cross-entropy fit (:func:`fit_cross_entropy`), else at 0."""
    from .bound_posterior import objective

    spec, dev = sub.spec, sub.device
    t0 = time.monotonic()
    model = sub.tm.model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    fit = SubspaceFit(sub.sigma_post)
    if spec.fit_epochs:
        fit_cross_entropy(sub, data, fit, progress)
    leaves = [s.z.requires_grad_(True) for s in sub.sites]
    sub.log_sigma.requires_grad_(True)
    opt = torch.optim.Adam(leaves, lr=spec.lr) if spec.lr > 0 else None
    opt_s = torch.optim.Adam([sub.log_sigma], lr=spec.lr_sigma / math.sqrt(sub.dim)) \
        if spec.lr_sigma > 0 else None
    gen = torch.Generator(device=dev).manual_seed(spec.seed + 60_000)
    order = np.random.default_rng(spec.seed + 70_000)
    parts = pieces(sub, data)
    total = spec.epochs * len(parts)
    with sub.draws(gen):
        for _ in range(spec.epochs):
            acc = torch.zeros((), dtype=torch.float64, device=dev)
            for b in order.permutation(len(parts)):
                loss = row_losses(sub, *parts[int(b)], "bound").mean()
                obj = objective(loss.double(), sub.kl(spec.sigma_prior), data.n, spec.delta,
                                spec.objective)
                for o in (opt, opt_s):
                    if o is not None:
                        o.zero_grad(set_to_none=True)
                obj.backward()
                for o in (opt, opt_s):
                    if o is not None:
                        o.step()
                acc += obj.detach()
                fit.steps += 1
                if progress:
                    progress(fit.steps, total, "training the subspace posterior")
            fit.history.append(float(acc) / len(parts))
    for s in sub.sites:
        s.z.requires_grad_(False)
    sub.log_sigma.requires_grad_(False)
    fit.sigma_post = sub.sigma_post
    fit.seconds = time.monotonic() - t0
    return fit


def gibbs_errors(sub: Subspace, data: Batched, passes: int, seed: int,
                 progress: Progress | None = None) -> np.ndarray:
    """The loss of every row of ``data`` (a classifier's 0-1 error, a language model's smoothed
    log-loss in [0, 1]: :func:`row_losses`) in each of ``passes`` passes, every row of every
    pass at its own fresh draw of Q (generator seeded ``seed``): an array (passes, n)."""
    dev = sub.device
    gen = torch.Generator(device=dev).manual_seed(seed)
    out = []
    parts = pieces(sub, data)
    with torch.no_grad(), sub.draws(gen):
        for k in range(passes):
            errs = []
            for i, (inputs, y) in enumerate(parts):
                errs.append(row_losses(sub, inputs, y, "risk").double())
                if progress:
                    progress(k * len(parts) + i + 1, passes * len(parts),
                             "Monte Carlo Gibbs risk of the subspace posterior")
            out.append(torch.cat(errs).cpu().numpy())
    return np.stack(out)


def gibbs_predictions(sub: Subspace, data: Batched, seed: int) -> np.ndarray:
    """One pass: the class each row of ``data`` gets at its own fresh draw of Q."""
    dev = sub.device
    gen = torch.Generator(device=dev).manual_seed(seed)
    preds = []
    with torch.no_grad(), sub.draws(gen):
        for inputs, y in data.batches:
            sub.start_pass(int(next(iter(inputs.values())).shape[0]))
            preds.append(sub.tm.model(**to_device(dict(inputs), dev)).logits.argmax(-1).cpu())
    return torch.cat(preds).numpy()


def sites_summary(sub: Subspace) -> list[dict[str, Any]]:
    """Per adapted module: path, coordinates, weight scale c, and ‖z‖² (for the record)."""
    return [{"path": s.path, "coords": int(s.z.numel()), "scale": s.scale,
             "head": s.basis is None, "dist_sq": float(s.z.double().square().sum())}
            for s in sub.sites]


def best_prior(dist_sq: float, dim: int, sigma_post: float,
               grid: tuple[float, ...]) -> tuple[float, list[dict[str, float]]]:
    """The prior std on ``grid`` with the least KL (the Gibbs risk of Q does not depend on it)."""
    rows = [{"sigma_prior": float(s), "KL": float(kl_subspace(dist_sq, dim, sigma_post, s))}
            for s in grid]
    best = min(rows, key=lambda r: r["KL"])
    return best["sigma_prior"], rows


def sigma_of(spec: SubspaceSpec) -> Mapping[str, Any]:
    """The declared prior of ``spec`` in words and numbers (for the record)."""
    if spec.sigma_grid:
        return {"rule": f"chosen after training on the declared grid of {spec.prior_grid} "
                        "values, the least KL: ln |grid| charged",
                "grid": list(spec.sigma_grid)}
    return {"rule": f"fixed before S: s_P = {spec.sigma_prior:g} (declared), free",
            "grid": [spec.sigma_prior]}
