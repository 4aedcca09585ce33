"""Curvature of a live model (pac_bayes.md §3): Hessian traces.

* :func:`hutchinson_trace`: tr ∇²L ≈ mean of vᵀHv over Rademacher probes v, with Hessian-vector
  products by double backward (probes batched with ``is_grads_batched`` where autograd allows),
  in total and per parameter group, with a t confidence interval.
* :func:`param_groups`, :func:`attach_hessian_trace`: the stats file's groups.

The Gaussian-perturbation side (Monte Carlo Gibbs risk) is :mod:`.gibbs`.

``loss_fn`` is always a closure ``() -> scalar tensor`` evaluated at the model's current weights.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from ...errors import BoundcalcError, DomainError
from ...stats import Quantity, Stats

Closure = Callable[[], torch.Tensor]
GroupSpec = str | Mapping[str, str] | Callable[[str], str] | None
_LAYER = re.compile(r"(?:^|\.)(\d+)\.")


@dataclass
class HessianTrace:
    """Hutchinson estimate of tr ∇²L: total, per group, and the per-probe samples."""

    total: Quantity
    groups: dict[str, Quantity] = field(default_factory=dict)
    samples: np.ndarray | None = None
    hvps: int | None = None  # Hessian-vector products spent


def _params(model: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not params:
        raise BoundcalcError(f"{type(model).__name__}: has no trainable parameters")
    return params


def layer_group(name: str) -> str:
    """Default grouping: ``layer.i`` for the first integer path component, else ``other``."""
    m = _LAYER.search(name)
    return f"layer.{int(m.group(1))}" if m else "other"


def _group_of(groups: GroupSpec) -> Callable[[str], str] | None:
    if groups is None:
        return None
    if groups == "layer":
        return layer_group
    if isinstance(groups, Mapping):
        def lookup(name: str) -> str:
            if name not in groups:
                raise BoundcalcError(f"groups: parameter '{name}' has no group")
            return str(groups[name])
        return lookup
    if callable(groups):
        return lambda name: str(groups(name))
    raise BoundcalcError(f"groups: expected None, 'layer', a mapping or a callable, got {groups!r}")


def t_interval(samples: np.ndarray, confidence: float) -> tuple[float, float, tuple[float, float]]:
    """Mean, standard error and two-sided Student-t interval of i.i.d. samples."""
    k = samples.size
    mean = float(samples.mean())
    stderr = float(samples.std(ddof=1) / math.sqrt(k))
    from scipy import stats as sps  # deferred: scipy.stats costs ~1 s of `measure`'s start

    half = float(sps.t.ppf((1 + confidence) / 2, k - 1)) * stderr
    return mean, stderr, (mean - half, mean + half)


def _rademacher(shape: tuple[int, ...], like: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    v = torch.randint(0, 2, shape, generator=gen, dtype=torch.int8)
    return (v.to(like.dtype) * 2 - 1).to(like.device)


def _hvp_batch(grads: list[torch.Tensor], params: list[torch.Tensor],
               vs: list[torch.Tensor], batched: bool) -> list[torch.Tensor]:
    """Hessian-vector products for a batch of probes (leading dim b) of every parameter."""
    if batched:
        hv = torch.autograd.grad(grads, params, grad_outputs=vs, retain_graph=True,
                                 allow_unused=True, is_grads_batched=True)
        return [torch.zeros_like(v) if h is None else h for h, v in zip(hv, vs)]
    rows = []
    for i in range(vs[0].shape[0]):
        hv = torch.autograd.grad(grads, params, grad_outputs=[v[i] for v in vs],
                                 retain_graph=True, allow_unused=True)
        rows.append([torch.zeros_like(v[i]) if h is None else h for h, v in zip(hv, vs)])
    return [torch.stack([r[j] for r in rows]) for j in range(len(vs))]


def hutchinson_trace(model: torch.nn.Module, loss_fn: Closure, *, n_probes: int = 100,
                     groups: GroupSpec = "layer", seed: int = 0, confidence: float = 0.95,
                     batch_size: int = 16) -> HessianTrace:
    """Hutchinson estimate of tr ∇²L(θ) with Rademacher probes, total and per group.

    A group's estimate uses the same probes restricted to its parameters (the trace of its
    diagonal Hessian block); the group estimates add up to the total, probe by probe.
    """
    if n_probes < 2:
        raise BoundcalcError(f"hutchinson_trace: n_probes must be >= 2, got {n_probes}")
    if not 0 < confidence < 1:
        raise BoundcalcError(f"hutchinson_trace: confidence must lie in (0, 1), got {confidence}")
    named = _params(model)
    group_of = _group_of(groups)
    labels = [group_of(n) if group_of else "all" for n, _ in named]
    order = list(dict.fromkeys(labels))
    loss = loss_fn()
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise BoundcalcError("hutchinson_trace: loss_fn must return a scalar tensor")
    if not bool(torch.isfinite(loss)):
        raise DomainError(f"hutchinson_trace: loss is not finite ({float(loss)})")
    params = [p for _, p in named]
    grads = torch.autograd.grad(loss.reshape(()), params, create_graph=True, allow_unused=True)
    live = [i for i, g in enumerate(grads) if g is not None and g.requires_grad]
    gen = torch.Generator().manual_seed(seed)
    per_group = np.zeros((len(order), n_probes))
    # Batched probes (vmap over double backward) pay off on a GPU; on a CPU one probe at a time
    # through the retained graph is faster (benchmarks/: 130 ms vs 66 ms per probe).
    batched = any(p.is_cuda for p in params)
    for lo in range(0, n_probes, batch_size):
        b = min(batch_size, n_probes - lo)
        vs = [_rademacher((b, *p.shape), p, gen) for p in params]
        if not live:
            continue
        args = ([grads[i] for i in live], [params[i] for i in live], [vs[i] for i in live])
        try:
            try:
                hv = _hvp_batch(*args, batched)
            except RuntimeError:
                if not batched:
                    raise
                batched = False  # some op lacks a vmap rule: fall back to one probe at a time
                hv = _hvp_batch(*args, batched)
        except RuntimeError as exc:
            msg = (str(exc).strip().splitlines() or ["RuntimeError"])[0][:140]
            raise BoundcalcError(f"hutchinson_trace: no second derivatives through this model "
                                 f"({msg}); use eager attention, e.g. "
                                 "attn_implementation='eager'") from None
        for j, i in enumerate(live):
            quad = (vs[i] * hv[j]).reshape(b, -1).sum(1).detach().double().cpu().numpy()
            per_group[order.index(labels[i]), lo:lo + b] += quad
    method = f"hutchinson, {n_probes} Rademacher probes, seed {seed}"
    total_samples = per_group.sum(0)

    def quantity(samples: np.ndarray) -> Quantity:
        mean, se, ci = t_interval(samples, confidence)
        if not all(math.isfinite(x) for x in (mean, se, *ci)):
            raise DomainError("hutchinson_trace: non-finite Hessian-vector products")
        return Quantity(mean, estimated=True, stderr=se, ci=ci, confidence=confidence,
                        method=method)

    out = HessianTrace(quantity(total_samples), samples=total_samples, hvps=n_probes)
    if group_of is not None:
        out.groups = {g: quantity(per_group[i]) for i, g in enumerate(order)}
    return out


def param_groups(model: torch.nn.Module, n_heads: int | None = None,
                 mapping: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{parameter name: stats group}`` from the model's layer map (``layer.i``, ``embeddings``,
    ``head``); parameters the map excludes (e.g. tied copies) get the group ``excluded``."""
    from ..architectures import build_layer_map
    from ..io import open_source

    lmap = build_layer_map(open_source(model), n_heads=n_heads, mapping=mapping)
    group = {e.name: e.group for e in lmap.entries}
    return {n: group.get(n, "excluded") for n, _ in model.named_parameters()}


def attach_hessian_trace(stats: Stats, trace: HessianTrace) -> Stats:
    """Store a trace estimate in ``stats``: scalar ``hessian_trace`` and, per stats group,
    ``hessian_trace`` and ``hessian_trace_stderr`` (marked estimated). Groups without trainable
    parameters get 0. Returns ``stats``."""
    stats.scalars["hessian_trace"] = trace.total
    if trace.groups:
        names = list(stats.groups.get("names", []))
        unknown = sorted(set(trace.groups) - set(names) - {"excluded"})
        if unknown:
            raise BoundcalcError(f"hessian trace group '{unknown[0]}' is not a stats group "
                                 f"({', '.join(names[:6])}); estimate with "
                                 "groups=param_groups(model)")
        zero = Quantity(0.0, stderr=0.0)
        per = [trace.groups.get(n, zero) for n in names]
        stats.groups.setdefault("stats", {})["hessian_trace"] = [q.value for q in per]
        stats.groups["stats"]["hessian_trace_stderr"] = [q.stderr or 0.0 for q in per]
        stats.groups.setdefault("estimated", {})["hessian_trace"] = True
    return stats
