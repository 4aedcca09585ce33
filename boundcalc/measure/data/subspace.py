"""The subspace Gibbs posterior: a Gaussian posterior on a few coordinates of a fixed,
low-dimensional subspace of the weights around the prior, trained on the PAC-Bayes bound
(docs/sources/pac_bayes.md §8; Li et al. 2018, Hu et al. 2021, Lotfi et al. 2022,
Pérez-Ortiz et al. 2021).

The subspace (every choice declared in :class:`SubspaceSpec`, fixed before S is read):

* every adapted ``nn.Linear`` m of the encoder (``layers``: ``all`` of them, the
  ``attention`` ones only, or none for ``head``) moves as W_m = W0_m + c_m·B_m·A_m, with
  W0_m the prior's weight, c_m its root-mean-square (read from the prior: free), B_m a fixed
  d_out × r Gaussian matrix with N(0, 1/r) entries drawn from ``basis_seed`` and the module's
  path (never from S), and A_m ∈ R^{r × d_in} the coordinates (a LoRA-shaped adapter whose
  "down" factor is random and frozen: the coordinates enter the output linearly);
* the classification head (the last ``nn.Linear`` with one output per class) moves as
  W_h = W0_h + c_h·A_h, its whole weight matrix being coordinates (B = I);
* biases, LayerNorms and embeddings stay at the prior's values.

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
    certificate's Monte Carlo step."""

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

    def check(self) -> None:
        """Refuse settings outside their domains (one line naming the setting)."""
        bad = None
        if self.layers not in SUBSPACE_LAYERS:
            bad = f"layers {self.layers!r}; expected one of {', '.join(SUBSPACE_LAYERS)}"
        elif self.objective not in OBJECTIVES:
            bad = f"objective {self.objective!r}; expected one of {', '.join(OBJECTIVES)}"
        elif self.rank < 1 or self.epochs < 0:
            bad = f"rank must be >= 1 and epochs >= 0 (got {self.rank}, {self.epochs})"
        elif not all(math.isfinite(s) and s > 0 for s in (self.sigma_prior, *self.sigma_grid)):
            bad = "sigma_prior and every point of sigma_grid must be finite and > 0"
        elif not all(math.isfinite(v) and v >= 0 for v in (self.lr, self.lr_sigma)):
            bad = f"lr and lr_sigma must be finite and >= 0 (got {self.lr}, {self.lr_sigma})"
        elif not (0 < self.p_min < 1 and 0 < self.delta < 1 and 0 < self.delta_mc < 1):
            bad = "p_min, delta and delta_mc must lie in (0, 1)"
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
    (d_out × r; None for the head, B = I) and the coordinates Z (r × d_in or d_out × d_in)."""

    path: str
    module: nn.Linear
    scale: float
    basis: torch.Tensor | None
    z: torch.Tensor

    def delta_weight(self, a: torch.Tensor) -> torch.Tensor:
        """c·B·A (c·A for the head): the weight change at coordinates ``a``."""
        return self.scale * (a if self.basis is None else self.basis @ a)


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
    per-row draws (:meth:`draws`). Refused for a language model and for a model without a
    Linear head."""

    def __init__(self, tm: TaskModel, spec: SubspaceSpec, device: torch.device) -> None:
        spec.check()
        if tm.is_lm:
            raise BoundcalcError("subspace posterior: classifiers only (a language model's "
                                 "head is tied to its embeddings)")
        self.tm, self.spec, self.device = tm, spec, device
        model = tm.model
        head = head_path(model, tm.n_outputs)
        self.sites: list[Site] = []
        for path, mod in model.named_modules():
            if not isinstance(mod, nn.Linear):
                continue
            is_head = path == head
            if not is_head and (spec.layers == "head" or (
                    spec.layers == "attention" and "attention" not in path)):
                continue
            w = mod.weight.detach()
            scale = float(w.double().square().mean().sqrt()) or 1.0
            basis = None
            rows = mod.out_features
            if not is_head:
                g = torch.Generator().manual_seed(_basis_seed(spec.basis_seed, path))
                basis = (torch.randn((mod.out_features, spec.rank), generator=g,
                                     dtype=torch.float64) / math.sqrt(spec.rank))
                basis = basis.to(device=device, dtype=w.dtype)
                rows = spec.rank
            z = torch.zeros((rows, mod.in_features), dtype=w.dtype, device=device)
            self.sites.append(Site(path, mod, scale, basis, z))
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
            X = x.reshape(R, -1, mod.in_features).to(site.z.dtype)
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


def train_subspace(sub: Subspace, data: Batched, progress: Progress | None = None
                   ) -> SubspaceFit:
    """Train z (Adam, ``spec.lr``) and ln s_Q (Adam, ``spec.lr_sigma``/√d) on ``data`` (S)
    by the pathwise gradient of the PAC-Bayes objective at the prior std ``spec.sigma_prior``:
    every row of every batch its own draw of Q; the model's own weights are frozen and it is
    left in eval mode (dropout off, as in the certificate)."""
    from .bound_posterior import bounded_cross_entropy, objective

    spec, dev = sub.spec, sub.device
    t0 = time.monotonic()
    model = sub.tm.model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    leaves = [s.z.requires_grad_(True) for s in sub.sites]
    sub.log_sigma.requires_grad_(True)
    opt = torch.optim.Adam(leaves, lr=spec.lr) if spec.lr > 0 else None
    opt_s = torch.optim.Adam([sub.log_sigma], lr=spec.lr_sigma / math.sqrt(sub.dim)) \
        if spec.lr_sigma > 0 else None
    gen = torch.Generator(device=dev).manual_seed(spec.seed + 60_000)
    order = np.random.default_rng(spec.seed + 70_000)
    fit = SubspaceFit(sub.sigma_post)
    total = spec.epochs * len(data.batches)
    with sub.draws(gen):
        for _ in range(spec.epochs):
            acc = torch.zeros((), dtype=torch.float64, device=dev)
            for b in order.permutation(len(data.batches)):
                inputs, y = data.batches[int(b)]
                y = y.to(dev)
                sub.start_pass(int(y.shape[0]))
                logits = model(**to_device(dict(inputs), dev)).logits
                loss = bounded_cross_entropy(logits, y, spec.p_min).mean()
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
            fit.history.append(float(acc) / len(data.batches))
    for s in sub.sites:
        s.z.requires_grad_(False)
    sub.log_sigma.requires_grad_(False)
    fit.sigma_post = sub.sigma_post
    fit.seconds = time.monotonic() - t0
    return fit


def gibbs_errors(sub: Subspace, data: Batched, passes: int, seed: int,
                 progress: Progress | None = None) -> np.ndarray:
    """The 0-1 error of every row of ``data`` in each of ``passes`` passes, every row of every
    pass at its own fresh draw of Q (generator seeded ``seed``): an array (passes, n)."""
    dev = sub.device
    gen = torch.Generator(device=dev).manual_seed(seed)
    out = []
    with torch.no_grad(), sub.draws(gen):
        for k in range(passes):
            errs = []
            for i, (inputs, y) in enumerate(data.batches):
                y = y.to(dev)
                sub.start_pass(int(y.shape[0]))
                logits = sub.tm.model(**to_device(dict(inputs), dev)).logits
                errs.append((logits.argmax(-1) != y).double())
                if progress:
                    progress(k * len(data.batches) + i + 1, passes * len(data.batches),
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
