"""Target 3: Hutchinson Hessian trace against PyHessian's ``trace()``.

Model: a small pre-LayerNorm Transformer classifier (token + position embeddings, 2 blocks of
4-head attention written out as softmax(QKᵀ/√d)V, GELU FFN, mean pooling, linear head;
d = 64, FFN 128, sequence 16, 68k parameters, float32), trained for 60 Adam steps on a synthetic
task (label = whether token 0 occurs more often than token 1) so the Hessian is not the one at
initialisation. Data: the same first 128 training sequences for both, one full batch,
cross-entropy (and, as context, a tiny batch of 8 sequences, where per-op overhead dominates).

boundcalc: ``hutchinson_trace(model, closure, n_probes=K, groups=None)`` (probes batched through
``is_grads_batched``, 16 at a time), including its forward pass and first backward.

PyHessian 0.1: ``hessian(model, CrossEntropyLoss(), data=(X, y), cuda=...)`` (its forward pass
and ``backward(create_graph=True)``) then ``.trace(maxIter=K, tol=-inf)``: the tolerance is set
so that it never stops early and uses exactly K probes. Its only compatibility need with torch
2.13 is to zero ``.grad`` before each construction (it accumulates the create_graph gradient
into ``.grad``, so a second construction would otherwise see 2x the gradient).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from common import Record, interleaved, ratio_record


class Block(nn.Module):
    def __init__(self, d: int, heads: int, ff: int):
        super().__init__()
        self.h, self.dh = heads, d // heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.ff1, self.ff2 = nn.Linear(d, ff), nn.Linear(ff, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        y = self.ln1(x)
        q, k, v = (m(y).view(B, T, self.h, self.dh).transpose(1, 2)
                   for m in (self.q, self.k, self.v))
        att = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(self.dh), dim=-1)
        x = x + self.o((att @ v).transpose(1, 2).reshape(B, T, D))
        return x + self.ff2(nn.functional.gelu(self.ff1(self.ln2(x))))


class TinyTransformer(nn.Module):
    def __init__(self, vocab: int = 16, d: int = 64, heads: int = 4, layers: int = 2,
                 ff: int = 128, seq: int = 16, classes: int = 2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(seq, d) * 0.02)
        self.blocks = nn.ModuleList(Block(d, heads, ff) for _ in range(layers))
        self.head = nn.Linear(d, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.emb(x) + self.pos
        for b in self.blocks:
            h = b(h)
        return self.head(h.mean(1))


def trained_model(device: str, n: int = 256, steps: int = 60):
    torch.manual_seed(0)
    X = torch.randint(0, 16, (n, 16))
    y = ((X == 0).sum(1) > (X == 1).sum(1)).long()
    model = TinyTransformer()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(model(X), y).backward()
        opt.step()
    model.zero_grad(set_to_none=True)
    return model.to(device).eval(), X.to(device), y.to(device)


def t_ci(samples: np.ndarray, conf: float = 0.95) -> tuple[float, float]:
    from scipy import stats as sps

    k = samples.size
    half = float(sps.t.ppf((1 + conf) / 2, k - 1)) * samples.std(ddof=1) / math.sqrt(k)
    return float(samples.mean() - half), float(samples.mean() + half)


def _one(quick: bool, device: str, n: int, rid: str, need: float | None) -> Record:
    from boundcalc.measure.curvature import hutchinson_trace

    probes = 50 if quick else 100
    reps = 2 if quick else 3
    model, X, y = trained_model(device)
    X, y = X[:n], y[:n]
    n_params = sum(p.numel() for p in model.parameters())
    crit = nn.CrossEntropyLoss()
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def ours():
        est = hutchinson_trace(model, lambda: crit(model(X), y), n_probes=probes, groups=None,
                               seed=1)
        sync()
        return est

    from pyhessian import hessian

    def theirs():
        model.zero_grad(set_to_none=True)
        h = hessian(model, crit, data=(X, y), cuda=device.startswith("cuda"))
        vhv = h.trace(maxIter=probes, tol=float("-inf"))
        model.zero_grad(set_to_none=True)
        sync()
        return np.asarray(vhv, dtype=float)

    timings, res = interleaved({"boundcalc": ours, "pyhessian": theirs}, reps)
    est, vhv = res["boundcalc"], res["pyhessian"]
    ci = est.total.ci
    ph_ci = t_ci(vhv)
    agree = bool(ci[0] <= float(vhv.mean()) <= ci[1] and ph_ci[0] <= est.total.value <= ph_ci[1])
    rec = ratio_record(
        rid, f"Hutchinson tr∇²L, {probes} Rademacher probes, small Transformer ({n_params} "
        f"params), {n} sequences × 16 tokens", timings["boundcalc"], timings["pyhessian"],
        "PyHessian 0.1 hessian(...).trace(maxIter=K, tol=-inf) (incl. its setup backward)",
        need or 1.0, device, boundcalc_estimate=est.total.value, boundcalc_ci95=list(ci),
        pyhessian_estimate=float(vhv.mean()), pyhessian_ci95=list(ph_ci),
        probes=len(vhv), estimates_agree=agree,
        agreement_rule="each estimate lies in the other's 95% t-interval",
        boundcalc_call=f"hutchinson_trace(model, closure, n_probes={probes}, groups=None) "
                       "(default batch_size=16 probes through is_grads_batched)")
    if need is None:
        rec.target, rec.met = "context (no target)", None
    elif not agree:
        rec.met = False
    return rec


def run(quick: bool, device: str) -> list[Record]:
    try:
        import pyhessian  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return [Record("hessian_trace_vs_pyhessian", "Hutchinson trace vs PyHessian",
                       ">= 2x faster", None, None, "pyhessian", None, None, device,
                       details={"error": f"pyhessian not importable: {exc}"[:300]})]
    # compute-bound: the per-probe work is a double backward over 128 × 16 tokens
    out = [_one(quick, device, 128, "hessian_trace_vs_pyhessian", 2.0)]
    # overhead-bound (tiny batch): where batching probes can pay off on a CPU
    out.append(_one(quick, device, 8, "hessian_trace_vs_pyhessian_tiny_batch", None))
    return out
