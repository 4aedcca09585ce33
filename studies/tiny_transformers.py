"""Small trainable Transformers for the studies of the source papers (CPU-sized, float32 or float64).

* :class:`SparseMajorityTransformer`: the one-layer model of Trauger & Tewari's official
  experiment (``run_experiment.py``, norm_bounds.md §6.3), ported from Keras: a 2-head
  ``MultiHeadAttention(key_dim=64)`` with biases and output projection → ReLU → ``Dense(64)`` →
  the CLS position → a linear 64 → 2 head. Keras initialisers are reproduced
  (:meth:`~SparseMajorityTransformer.keras_init`), and :class:`KerasSGD` is Keras' momentum
  update ``v ← μv − ηg; w ← w + v`` (torch's SGD puts η outside the velocity, which differs
  once η changes every epoch). :meth:`~SparseMajorityTransformer.forward_ids` is the same
  function evaluated from token ids, about ten times cheaper (training uses it).
* :class:`BooleanTransformer`: the model Lintilhac & Shaikh train on Boolean targets
  (sharper_picture.md §6, authors' ``transformer.py``): one-hot positions concatenated with a
  learned bit embedding, no LayerNorm, single-head attention without output projection whose
  logits are scaled by 2 ln(n)/√E, residual attention and ReLU-MLP sublayers, a scalar readout
  at the final (CLS) position.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn


# ---------------------------------------------------------------------------------------------
# Trauger & Tewari: one-layer, two-head model of the sparse-majority experiment
# ---------------------------------------------------------------------------------------------

class SparseMajorityTransformer(nn.Module):
    """Keras ``MHA(2 heads, key_dim 64) → ReLU → Dense(64) → [CLS] → Linear(64 → 2)`` in torch.

    Tensor layout (torch ``(out, in)``): ``q, k, v``: Linear(d, heads·key_dim) with bias (the Keras
    kernels ``(d, heads, key_dim)`` flattened), ``o``: Linear(heads·key_dim, d) with bias, ``dense``:
    Linear(d, d), ``head``: Linear(d, 2). Entrywise norms are unchanged by that reshaping.

    Only the CLS query's attention row is computed: every other position's output is discarded
    by the model (the head reads the last position, and nothing mixes positions after the single
    attention layer), so this is exactly the Keras forward pass, at 1/(T+1) of its cost.
    """

    def __init__(self, d: int = 64, heads: int = 2, key_dim: int = 64, n_classes: int = 2):
        super().__init__()
        self.d, self.heads, self.key_dim = d, heads, key_dim
        inner = heads * key_dim
        self.q = nn.Linear(d, inner)
        self.k = nn.Linear(d, inner)
        self.v = nn.Linear(d, inner)
        self.o = nn.Linear(inner, d)
        self.dense = nn.Linear(d, d)
        self.head = nn.Linear(d, n_classes)

    @torch.no_grad()
    def keras_init(self, generator: torch.Generator) -> None:
        """Keras defaults: glorot_uniform kernels (fans from the full Keras kernel shape), zero
        biases, and ``random_normal`` (std 0.05) for the hand-written last linear layer."""
        d, h, kd = self.d, self.heads, self.key_dim
        # Keras fans for a rank-3 kernel: receptive = prod(shape[:-2]),
        # fan_in = shape[-2]·receptive, fan_out = shape[-1]·receptive
        qkv_limit = math.sqrt(6.0 / (h * d + kd * d))      # kernel (d, h, kd)
        out_limit = math.sqrt(6.0 / (kd * h + d * h))      # kernel (h, kd, d)
        dense_limit = math.sqrt(6.0 / (d + d))             # kernel (d, d)
        for lin, lim in ((self.q, qkv_limit), (self.k, qkv_limit), (self.v, qkv_limit),
                         (self.o, out_limit), (self.dense, dense_limit)):
            lin.weight.copy_((torch.rand(lin.weight.shape, generator=generator) * 2 - 1) * lim)
            lin.bias.zero_()
        self.head.weight.copy_(torch.randn(self.head.weight.shape, generator=generator) * 0.05)
        self.head.bias.zero_()

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """X: (B, T+1, d) embedded sequences (CLS last) → (B, 2) logits."""
        B, n, _ = X.shape
        h, kd = self.heads, self.key_dim
        cls = X[:, -1:, :]
        q = self.q(cls).view(B, 1, h, kd).transpose(1, 2) / math.sqrt(kd)   # (B, h, 1, kd)
        k = self.k(X).view(B, n, h, kd).transpose(1, 2)                     # (B, h, n, kd)
        v = self.v(X).view(B, n, h, kd).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(-2, -1), dim=-1)                 # (B, h, 1, n)
        z = (att @ v).transpose(1, 2).reshape(B, h * kd)
        return self.head(self.dense(torch.relu(self.o(z))))

    def forward_ids(self, ids: torch.Tensor, tokens: torch.Tensor, pe: torch.Tensor
                    ) -> torch.Tensor:
        """The same function as :meth:`forward` on ``X[b, t] = tokens[ids[b, t]] + pe[t]``,
        computed without forming X.

        ids: (B, n) integer token ids (CLS last), tokens: (V, d), pe: (n, d) → (B, 2) logits.
        Linear maps distribute over the sum, so every key and value is a positional part
        ``W pe_t + b`` plus one of V token parts ``W tokens_v``, and only the last (CLS) query
        is needed. Scores and values are therefore gathered from (n + V) precomputed rows
        instead of B·n matrix products. Exact up to floating-point rounding (tests compare both).
        """
        B, n = ids.shape
        h, kd = self.heads, self.key_dim
        q = self.q(tokens[ids[:, -1]] + pe[-1]).view(B, h, kd) / math.sqrt(kd)  # last query
        wk = self.k.weight.view(h, kd, -1)
        wv = self.v.weight.view(h, kd, -1)
        k_pos = torch.einsum("nd,hkd->hnk", pe, wk) + self.k.bias.view(h, 1, kd)
        v_pos = torch.einsum("nd,hkd->hnk", pe, wv) + self.v.bias.view(h, 1, kd)
        k_tok = torch.einsum("vd,hkd->hvk", tokens, wk)
        v_tok = torch.einsum("vd,hkd->hvk", tokens, wv)
        s_pos = torch.einsum("hnk,bhk->bhn", k_pos, q)                     # (B, h, n)
        s_tok = torch.einsum("hvk,bhk->bhv", k_tok, q)                     # (B, h, V)
        s_tok = torch.gather(s_tok, 2, ids.unsqueeze(1).expand(B, h, n))   # (B, h, n)
        att = torch.softmax(s_pos + s_tok, dim=-1)
        onehot = torch.nn.functional.one_hot(ids, tokens.shape[0]).to(att.dtype)
        tok_weight = torch.einsum("bhn,bnv->bhv", att, onehot)             # (B, h, V)
        z = (torch.einsum("bhn,hnk->bhk", att, v_pos)
             + torch.einsum("bhv,hvk->bhk", tok_weight, v_tok)).reshape(B, h * kd)
        return self.head(self.dense(torch.relu(self.o(z))))

    def named_tensors_keras(self) -> list[tuple[str, torch.Tensor]]:
        """Trainable tensors under the Keras variable names of the official code."""
        names = {"q.weight": "query/kernel", "q.bias": "query/bias", "k.weight": "key/kernel",
                 "k.bias": "key/bias", "v.weight": "value/kernel", "v.bias": "value/bias",
                 "o.weight": "attention_output/kernel", "o.bias": "attention_output/bias",
                 "dense.weight": "dense/kernel", "dense.bias": "dense/bias",
                 "head.weight": "linear_matrix", "head.bias": "linear_bias"}
        return [(names[n], p) for n, p in self.named_parameters()]


class KerasSGD:
    """Keras SGD with momentum: ``v ← μ v − η g``, ``w ← w + v`` (no Nesterov, no decay)."""

    def __init__(self, params: Iterable[nn.Parameter], lr: float, momentum: float):
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.momentum = float(lr), float(momentum)
        self.velocity = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for p, v in zip(self.params, self.velocity):
            if p.grad is None:
                continue
            v.mul_(self.momentum).add_(p.grad, alpha=-self.lr)
            p.add_(v)


# ---------------------------------------------------------------------------------------------
# Lintilhac & Shaikh: two-layer, one-head Transformer on Boolean strings
# ---------------------------------------------------------------------------------------------

class _Block(nn.Module):
    def __init__(self, width: int, ffn: int, logit_scale: float, dropout: float):
        super().__init__()
        self.q = nn.Linear(width, width, bias=False)
        self.k = nn.Linear(width, width, bias=False)
        self.v = nn.Linear(width, width, bias=False)
        self.ffn_in = nn.Linear(width, ffn)
        self.ffn_out = nn.Linear(ffn, width)
        self.logit_scale = logit_scale
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = (self.q(x) @ self.k(x).transpose(-2, -1)) * self.logit_scale
        x = x + self.drop(torch.softmax(logits, dim=-1)) @ self.v(x)
        return x + self.ffn_out(self.drop(torch.relu(self.ffn_in(x))))


class BooleanTransformer(nn.Module):
    """Lintilhac–Shaikh's trained model: ``n_layers`` × (attention + MLP), 1 head, no LayerNorm.

    Input: bits ``x ∈ {0,1}^T`` as a (B, T) integer tensor; a CLS token is appended at position T.
    Token t is ``[e_t ; emb(b_t)]`` with a fixed one-hot position ``e_t ∈ R^{T+1}`` and a learned
    embedding of the symbol (0, 1 or CLS) in ``R^{d_emb}``; width ``E = T + 1 + d_emb``. Attention
    logits are ``(x W_Q)(x W_K)ᵀ · 2 ln(T+1)/√E`` (the authors' log scaling, with the sequence
    length counting CLS). The output is a scalar read linearly from the CLS position.
    """

    def __init__(self, T: int, d_emb: int = 30, ffn: int = 128, n_layers: int = 2,
                 dropout: float = 0.0):
        super().__init__()
        self.T = T
        self.width = T + 1 + d_emb
        scale = 2.0 * math.log(T + 1) / math.sqrt(self.width)
        self.embed = nn.Embedding(3, d_emb)  # 0, 1, CLS
        self.blocks = nn.ModuleList(_Block(self.width, ffn, scale, dropout)
                                    for _ in range(n_layers))
        self.readout = nn.Linear(self.width, 1)
        self.register_buffer("positions", torch.eye(T + 1), persistent=False)

    def forward(self, bits: torch.Tensor) -> torch.Tensor:
        """(B, T) bits → (B,) real outputs."""
        B = bits.shape[0]
        cls = torch.full((B, 1), 2, dtype=torch.long, device=bits.device)
        tokens = torch.cat([bits.long(), cls], dim=1)
        pos = self.positions.to(self.embed.weight.dtype).expand(B, -1, -1)
        x = torch.cat([pos, self.embed(tokens)], dim=-1)
        for block in self.blocks:
            x = block(x)
        return self.readout(x[:, -1, :]).squeeze(-1)


def parameter_norm(model: nn.Module) -> float:
    """‖θ‖₂ over all trainable parameters (float64 accumulation)."""
    return math.sqrt(sum(float(p.detach().double().square().sum())
                         for p in model.parameters() if p.requires_grad))


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
