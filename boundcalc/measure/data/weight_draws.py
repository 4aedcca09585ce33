"""Whole-weight draws of a Gaussian posterior for the bound-trained posterior's language-model
path (:mod:`.bound_posterior`): θ = μ + σ_Q,g·ε through ``torch.func.functional_call``, one
draw per forward pass, differentiable in μ and σ."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from .curvature import _params


class WeightDraws:
    """Whole-weight draws θ = μ + σ_Q,g·ε (ε ∼ N(0, I), one per parameter and forward pass)
    for a model row-wise draws do not cover (a language model such as GPT-2): the forward
    runs the module on θ by ``torch.func.functional_call`` (tied weights stay tied), so the
    loss is differentiable in μ (the module's parameters) and in σ (:meth:`set_sigma`). The
    same interface as :class:`GradRowNoise` (a context; :meth:`start_pass`; ``forward``)."""

    def __init__(self, model: nn.Module, group_of: Mapping[str, int],
                 generator: torch.Generator) -> None:
        self.model, self.gen = model, generator
        self.named = [(n, p) for n, p in _params(model)]
        self.index = [group_of[n] for n, _ in self.named]
        self._sigma: torch.Tensor | None = None

    def __enter__(self) -> "WeightDraws":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def set_sigma(self, sigma: torch.Tensor) -> None:
        """σ_Q per group for the next forward passes (as :meth:`GradRowNoise.set_sigma`)."""
        self._sigma = sigma

    def start_pass(self, rows: int) -> None:
        """Nothing to prepare: one draw per forward pass, whatever its rows."""

    def forward(self, **inputs: torch.Tensor) -> Any:
        """The model's output at one fresh draw θ ∼ N(μ, diag σ_Q,g²)."""
        from torch.func import functional_call

        theta = {n: p + self._sigma[g] * torch.randn(p.shape, generator=self.gen,
                                                     device=p.device, dtype=p.dtype)
                 for (n, p), g in zip(self.named, self.index)}
        return functional_call(self.model, theta, (), inputs, tie_weights=True)
