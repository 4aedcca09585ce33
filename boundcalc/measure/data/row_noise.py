"""A fresh posterior draw for every row of a batch, without copying the weights (monte_carlo.md §2).

For u ∼ N(0, σ²I) on the weights of the supported modules, the output of each module on one row
is drawn from its exact distribution given the module's input, by forward hooks that add a
noise term to the unperturbed output (the local reparameterisation of Kingma, Salimans &
Welling 2015, written for a whole sequence):

* ``nn.Linear`` y = x(W + E)ᵀ + (b + e): for the row's T × in input X, the columns of XEᵀ are
  independent N(0, σ²XXᵀ); with Xᵀ = QR (QR of the in × T matrix) XXᵀ = RᵀR, so XEᵀ has the
  law of σ·Rᵀξ with ξ a T × out standard normal matrix: T·out normals instead of in·out (when
  T ≥ in, X·σEᵀ with E drawn directly);
* ``nn.Embedding``: one noise vector per *distinct* id of the row (repeated tokens share it);
  rows of the table the row does not use do not change its output, so they are not drawn;
* ``nn.LayerNorm`` y = x̂(γ + ε_γ) + (β + ε_β) = y + x̂ε_γ + ε_β, ε per row.

The weights themselves are never modified. Exactness needs every trainable parameter to be
owned by exactly one such module (no tied weights) and every owning module to run at most once
per forward pass; :func:`unsupported_reason` checks the first statically, the hooks check the
second on every pass. Noise is drawn on the model's device, in the parameter dtype, from the
given device generator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from ...errors import BoundcalcError

SUPPORTED = (nn.Linear, nn.Embedding, nn.LayerNorm)


def _owners(model: nn.Module) -> dict[int, list[tuple[str, nn.Module, str]]]:
    """id(parameter) -> [(module path, module, attribute)] over every module holding it."""
    out: dict[int, list[tuple[str, nn.Module, str]]] = {}
    for path, mod in model.named_modules(remove_duplicate=False):
        for attr, p in mod._parameters.items():
            if p is not None:
                out.setdefault(id(p), []).append((path, mod, attr))
    return out


def unsupported_reason(model: nn.Module, names: list[str]) -> str | None:
    """Why row-wise draws would not be exact for ``model`` (None: they are)."""
    owners = _owners(model)
    params = dict(model.named_parameters())
    for name in names:
        own = {(id(m), a): (path, m) for path, m, a in owners.get(id(params[name]), [])}
        if len(own) != 1:
            return f"parameter '{name}' is shared by {len(own)} modules (tied weights)"
        path, mod = next(iter(own.values()))
        if type(mod) not in SUPPORTED:
            return (f"parameter '{name}' belongs to {type(mod).__name__} ('{path}'), not to "
                    "one of Linear, Embedding, LayerNorm")
        if isinstance(mod, nn.Embedding) and mod.max_norm is not None:
            return f"embedding '{path}' renormalises its rows (max_norm)"
        if isinstance(mod, nn.LayerNorm) and len(mod.normalized_shape) != 1:
            return f"layer norm '{path}' normalises over several axes"
    return None


class RowNoise:
    """Forward hooks giving each of ``rows`` rows its own draw u ∼ N(0, diag σ²) (see module
    docstring). Use as a context manager; set :attr:`rows` before each forward pass."""

    def __init__(self, model: nn.Module, sigma_of: Mapping[str, float],
                 generator: torch.Generator) -> None:
        reason = unsupported_reason(model, list(sigma_of))
        if reason is not None:
            raise BoundcalcError(f"per-sample Gibbs draws: {reason}; use --gibbs-mode whole")
        self.gen = generator
        self.rows = 0
        self.calls: dict[str, int] = {}
        owners = _owners(model)
        params = dict(model.named_parameters())
        self._plan: dict[nn.Module, tuple[str, dict[str, float]]] = {}
        for name, s in sigma_of.items():
            path, mod, attr = owners[id(params[name])][0]
            self._plan.setdefault(mod, (path, {}))[1][attr] = float(s)
        self._handles: list[Any] = []

    def __enter__(self) -> RowNoise:
        for mod, (path, sig) in self._plan.items():
            if not any(s > 0 for s in sig.values()):
                continue
            hook = {nn.Linear: self._linear, nn.Embedding: self._embedding,
                    nn.LayerNorm: self._layer_norm}[type(mod)]
            self._handles.append(mod.register_forward_hook(self._wrap(path, sig, hook),
                                                           with_kwargs=True))
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def start_pass(self, rows: int) -> None:
        """Before each forward pass: the number of rows (each gets its own draw)."""
        self.rows = rows
        self.calls.clear()

    def _wrap(self, path: str, sig: dict[str, float], fn: Callable) -> Callable:
        def hook(mod: nn.Module, args: tuple, kwargs: dict, out: torch.Tensor) -> torch.Tensor:
            n = self.calls.get(path, 0) + 1
            self.calls[path] = n
            if n > 1:
                raise BoundcalcError(f"per-sample Gibbs draws: module '{path}' ran twice in one "
                                     "forward pass, so its two uses would need the same "
                                     "draw; use --gibbs-mode whole")
            return fn(mod, args[0] if args else kwargs["input"], out, sig)
        return hook

    def _randn(self, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        return torch.randn(shape, generator=self.gen, device=like.device, dtype=like.dtype)

    def _rows_of(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` with its leading axis equal to :attr:`rows` (a broadcast axis of 1 expanded)."""
        R = self.rows
        if t.shape[0] == R:
            return t
        if t.shape[0] == 1:
            return t.expand(R, *t.shape[1:])
        raise BoundcalcError(f"per-sample Gibbs draws: a module saw {t.shape[0]} rows, "
                             f"expected {R}; use --gibbs-mode whole")

    def _linear(self, mod: nn.Linear, x: torch.Tensor, y: torch.Tensor,
                sig: dict[str, float]) -> torch.Tensor:
        R = self.rows
        x = self._rows_of(x)
        y = self._rows_of(y)
        d_in, d_out = mod.in_features, mod.out_features
        X = x.reshape(R, -1, d_in)
        T = X.shape[1]
        sw, sb = sig.get("weight", 0.0), sig.get("bias", 0.0)
        # noise = L·ξ with ξ standard normal: L = σ_w·Rᵀ (XXᵀ = RᵀR) or σ_w·X, and a last
        # column σ_b for the bias noise shared by the row's positions; one fused baddbmm
        cols = []
        if sw > 0:
            if T < d_in:
                work = X if X.dtype in (torch.float32, torch.float64) else X.float()
                r = torch.linalg.qr(work.transpose(1, 2), mode="r").R  # (R, T, T)
                cols.append(r.transpose(1, 2).to(y.dtype) * sw)
            else:
                cols.append(X.to(y.dtype) * sw)
        if sb > 0:
            cols.append(torch.full((R, T, 1), sb, dtype=y.dtype, device=y.device))
        L = cols[0] if len(cols) == 1 else torch.cat(cols, dim=2)
        xi = self._randn((R, L.shape[2], d_out), y)
        return torch.baddbmm(y.reshape(R, T, d_out), L, xi).reshape(y.shape)

    def _embedding(self, mod: nn.Embedding, ids: torch.Tensor, y: torch.Tensor,
                   sig: dict[str, float]) -> torch.Tensor:
        R = self.rows
        ids = self._rows_of(ids).reshape(R, -1)
        y = self._rows_of(y)
        key = torch.arange(R, device=ids.device)[:, None] * mod.num_embeddings + ids
        uniq, inv = torch.unique(key, return_inverse=True)
        e = self._randn((uniq.shape[0], mod.embedding_dim), y) * sig["weight"]
        return y + e[inv].reshape(y.shape)

    def _layer_norm(self, mod: nn.LayerNorm, x: torch.Tensor, y: torch.Tensor,
                    sig: dict[str, float]) -> torch.Tensor:
        R = self.rows
        x = self._rows_of(x)
        y = self._rows_of(y)
        d = y.shape[-1]
        mid = (1,) * (y.ndim - 2)
        out = y
        s = sig.get("weight", 0.0)
        if s > 0:
            xf = x.float() if x.dtype not in (torch.float32, torch.float64) else x
            var, mean = torch.var_mean(xf, dim=-1, keepdim=True, unbiased=False)
            xhat = ((xf - mean) * torch.rsqrt(var + mod.eps)).to(y.dtype)
            out = out + xhat * (self._randn((R, *mid, d), y) * s)
        s = sig.get("bias", 0.0)
        if s > 0:
            out = out + self._randn((R, *mid, d), y) * s
        return out
