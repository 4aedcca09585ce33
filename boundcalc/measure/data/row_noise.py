"""A fresh posterior draw for every row of a batch, without copying the weights (monte_carlo.md §2).

For u ∼ N(0, σ²I) on the weights of the supported modules, the output of each module on one row
is drawn from its exact distribution given the module's input, by forward hooks that add a
noise term to the unperturbed output (the local reparameterisation of Kingma, Salimans &
Welling 2015, written for a whole sequence):

* ``nn.Linear`` y = x(W + E)ᵀ + (b + e): for the row's T × in input X, the columns of XEᵀ are
  independent N(0, σ²XXᵀ); with L the Cholesky factor of the T × T Gram (LLᵀ = XXᵀ), XEᵀ has
  the law of σ·Lξ with ξ a T × out standard normal matrix: T·out normals instead of in·out,
  and T²·(in + out) multiply-adds instead of a QR (when T ≥ in, or for a row whose Gram is
  singular, X·σEᵀ with E drawn directly); no QR, SVD, eigen- or linear solve runs per batch;
  the bias noise rides the same product as a last column σ_b/σ_w of L where T < out, and the
  product is added into the output in place (no copy of it, no add over it);
* ``nn.Embedding``: one noise vector per *distinct* id of the row (repeated tokens share it);
  rows of the table the row does not use do not change its output, so they are not drawn;
* ``nn.LayerNorm`` y = x̂(γ + ε_γ) + (β + ε_β) = y + x̂ε_γ + ε_β, ε per row (formed in one
  pass over x̂);
* ``nn.Conv2d`` (no groups, zero padding): a Linear map of the row's unfolded patches;
* any other module holding parameters directly (a ViT's ``cls_token`` and position table) is
  run with its own parameters set to θ + u_r for row r: in one call with the draws stacked
  along the parameters' leading axis of 1 where a noisy check shows this equals running the
  rows one at a time, else one row at a time (restored after); in both cases once it has
  been checked, without noise, to give the batched result row by row.

The weights of hooked modules are never modified; outside autograd a hook adds its noise into
the module's fresh output in place (:meth:`RowNoise._own`). The Gram changes with every batch
(X carries the noise of the modules before), so each batch factors its own. Exactness needs
every trainable parameter to be owned by exactly one module (no tied weights) and every owning
module to run at most once per forward pass; :func:`.row_noise_plan.plan` checks the first
statically, the hooks check the second on every pass. Noise is drawn on the model's device, in
the parameter dtype, from the given device generator (the draws whose amount depends on the data
from a second one, see :class:`RowNoise`). In ``deferred`` mode no hook reads anything back
from the device.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

# the static check of what the hooks serve (:mod:`.row_noise_plan`; SUPPORTED, refused and
# unsupported_reason re-exported: callers import them from here)
from .row_noise_plan import (SUPPORTED, plan, refused,  # noqa: F401
                             unsupported_reason)


def _split(x: Any, b: int, lead: int) -> Any:
    """Row ``b`` of a tensor argument with ``lead`` rows (anything else unchanged)."""
    if isinstance(x, torch.Tensor) and x.ndim > 0 and x.shape[0] == lead and lead > 1:
        return x[b:b + 1]
    return x


def _row_call(forward: Callable, args: tuple, kwargs: dict, b: int, lead: int) -> Any:
    """``forward`` on row ``b`` of its tensor arguments."""
    return forward(*(_split(x, b, lead) for x in args),
                   **{k: _split(v, b, lead) for k, v in kwargs.items()})


def _same_rows(whole: Any, rows: list[Any], R: int) -> bool:
    """Whether a batched output equals its R one-row outputs, to float tolerance."""
    return (isinstance(whole, torch.Tensor) and whole.shape[0] == R
            and all(isinstance(r, torch.Tensor) and r.shape[0] == 1 for r in rows)
            and torch.allclose(torch.cat(rows), whole, rtol=1e-4,
                               atol=1e-5 * float(whole.abs().max()) + 1e-12))


def _gram_cholesky(X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(L, info)``: the batched Cholesky factor of the T × T Grams XXᵀ (formed in float32,
    float64 for float64 inputs) and ``cholesky_ex``'s per-row ``info`` (0: L is exact for that
    row; else the row's L is not usable). No host synchronisation."""
    work = X if X.dtype in (torch.float32, torch.float64) else X.float()
    return torch.linalg.cholesky_ex(torch.bmm(work, work.transpose(1, 2)))


def _gram_factor(X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(L, bad)``: L (R, T, T) lower triangular with LLᵀ = XXᵀ row by row (zero for the
    rows in ``bad``), and the indices of the rows whose Gram has no Cholesky factor even in
    float64 (None when every row has one): :func:`_gram_cholesky`, the failed rows retried in
    float64. Reading which rows failed is a host synchronisation."""
    L, info = _gram_cholesky(X)
    failed = info.nonzero().flatten()
    if failed.numel() == 0:
        return L, None
    if L.dtype != torch.float64:
        X64 = X.index_select(0, failed).double()
        L64, info64 = torch.linalg.cholesky_ex(torch.bmm(X64, X64.transpose(1, 2)))
        ok = info64 == 0
        L = L.index_copy(0, failed, torch.where(ok[:, None, None], L64, 0).to(L.dtype))
        failed = failed[~ok]
    else:
        L = L.index_fill(0, failed, 0.0)
    return L, failed if failed.numel() else None


def _gram_is_cheaper(T: int, d_in: int, d_out: int) -> bool:
    """Whether a row's noise costs less by the T × T Gram's Cholesky factor (T²·(d_in + d_out)
    multiply-adds, T³/3 for the factor, T·d_out normals) than directly as X·Ξ (T·d_in·d_out
    multiply-adds, d_in·d_out normals); both are exact. The Gram needs T < d_in to pay."""
    gram = T * T * (d_in + d_out) + T ** 3 / 3 + T * d_out
    return T < d_in and gram < T * d_in * d_out + d_in * d_out


def _aux_seed(seed: int, batch: int) -> int:
    """The seed of the auxiliary generator for batch ``batch`` of a RowNoise seeded ``seed``."""
    digest = hashlib.blake2b(f"row_noise aux {seed} {batch}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


class RowNoise:
    """Forward hooks giving each of ``rows`` rows its own draw u ∼ N(0, diag σ²) (see module
    docstring). Use as a context manager; call :meth:`start_pass` before each forward pass.

    Draws come from ``generator``, except the two kinds whose amount depends on the data: the
    direct draws of rows whose Gram has no factor and the noisy check of a replayed module,
    which come from an auxiliary generator seeded afresh for every pass from ``generator``'s
    seed and the pass's index. So the main stream a pass consumes depends on its shapes only.

    ``deferred``: a Linear or Conv2d never synchronises with the host. A row whose Gram has
    no Cholesky factor in the working precision is not repaired but counted (:meth:`failures`,
    on the device); the caller reads the count once per pass and runs each pass that had one
    again with :meth:`replay`, which repairs such rows exactly as the default mode does (a
    float64 retry, else the direct draw). A pass and its replay consume the same draws, so a
    pass without a failure is exactly its replay, and the result is the replay's in every
    case: the same law as the default mode. A module whose rows failed once is repaired on
    the spot in the passes after (one synchronisation each) instead of being replayed."""

    def __init__(self, model: nn.Module, sigma_of: Mapping[str, float],
                 generator: torch.Generator, *, deferred: bool = False) -> None:
        hooked, replayed, reason = plan(model, sigma_of)
        if reason is not None:
            raise refused(reason)
        self.gen = generator
        self.aux = torch.Generator(device=generator.device)
        self.deferred = deferred
        self._replaying = False
        self._seed = int(generator.initial_seed())
        self._next = self._batch = 0  # index of the next and of the current pass
        self._infos: list[torch.Tensor] = []
        self._sticky: set[str] = set()  # modules repaired on the spot in deferred mode
        self._path = ""
        self.rows = 0
        self.calls: dict[str, int] = {}
        self._plan = hooked
        self._replay = replayed
        self._quiet = False
        self.leads: dict[str, list[int]] | None = None  # recorded while quiet (row_audit)
        self._checked: set[str] = set()
        self._stacked: set[str] = set()
        self._handles: list[Any] = []
        self._forwards: list[tuple[nn.Module, Any]] = []
        self._columns: dict[tuple, torch.Tensor] = {}  # see _with_column

    def __enter__(self) -> RowNoise:
        for mod, (path, sig) in self._plan.items():
            if not any(s > 0 for s in sig.values()):
                continue
            hook = {nn.Linear: self._linear, nn.Embedding: self._embedding,
                    nn.LayerNorm: self._layer_norm, nn.Conv2d: self._conv}[type(mod)]
            self._handles.append(mod.register_forward_hook(self._wrap(path, sig, hook),
                                                           with_kwargs=True))
        for mod, (path, sig) in self._replay.items():
            if any(s > 0 for s in sig.values()):
                self._forwards.append((mod, mod.__dict__.get("forward")))
                mod.forward = self._replayer(mod, path, sig, mod.forward)
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        for mod, before in self._forwards:
            if before is None:
                del mod.forward
            else:
                mod.forward = before
        self._forwards.clear()

    def start_pass(self, rows: int) -> None:
        """Before each forward pass: the number of rows (each gets its own draw)."""
        self.rows = rows
        self.calls.clear()
        self._infos.clear()
        if not self._replaying:
            self._batch = self._next
            self._next += 1
        self.aux.manual_seed(_aux_seed(self._seed, self._batch))

    def mark(self) -> tuple[torch.Tensor, int]:
        """Before :meth:`start_pass`: what :meth:`replay` needs to run the coming pass again
        (the main generator's state and the pass's index; no host synchronisation)."""
        return self.gen.get_state(), self._next

    def failures(self) -> torch.Tensor | None:
        """After a deferred pass: the number of rows, summed over the Linears and Conv2ds, whose
        Gram had no Cholesky factor (an int64 tensor on the device), or None when no Gram
        route was deferred in the pass."""
        if not self._infos:
            return None
        return torch.cat(self._infos).count_nonzero()

    @contextmanager
    def replay(self, mark: tuple[torch.Tensor, int]) -> Iterator[None]:
        """Inside it, the pass ``mark`` was taken before runs again (call :meth:`start_pass`
        and the forward pass) with the same draws, every failed row repaired; the generator
        continues afterwards where it was."""
        state, batch = mark
        after = self.gen.get_state()
        self._replaying, self._batch = True, batch
        self.gen.set_state(state)
        try:
            yield
        finally:
            self.gen.set_state(after)
            self._replaying = False

    def _wrap(self, path: str, sig: dict[str, float], fn: Callable) -> Callable:
        def hook(mod: nn.Module, args: tuple, kwargs: dict, out: torch.Tensor) -> torch.Tensor:
            if self._quiet:
                self._lead(path, (*args, *kwargs.values()))
                return out
            self._count(path)
            self._path = path
            return fn(mod, args[0] if args else kwargs["input"], out, sig)
        return hook

    def _lead(self, path: str, values: tuple) -> None:
        """Record the leading axis of a call's first tensor argument (0: none) when auditing."""
        if self.leads is not None:
            lead = next((int(x.shape[0]) if x.ndim > 0 else 0 for x in values
                         if isinstance(x, torch.Tensor)), 0)
            self.leads.setdefault(path, []).append(lead)

    def _count(self, path: str) -> None:
        n = self.calls.get(path, 0) + 1
        self.calls[path] = n
        if n > 1:
            raise refused(f"module '{path}' ran twice in one forward pass, so its two uses "
                          "would need the same draw")

    def _replayer(self, mod: nn.Module, path: str, sig: dict[str, float],
                  forward: Callable) -> Callable:
        """``mod.forward`` with its own parameters drawn for each row (the hooks inside it see
        its rows as usual). Refused unless its rows are independent (checked once, without
        noise, against the batched call). Where every noisy parameter has a leading axis of 1
        (a ViT's ``cls_token`` and position table), the R draws are stacked along that axis
        and the rows run in one call, once a noisy check has shown that this equals running
        the rows one at a time with their own draws; otherwise the rows run one at a time."""
        params = {a: mod._parameters[a] for a, s in sig.items() if s > 0}

        def replay(*args: Any, **kwargs: Any) -> torch.Tensor:
            if self._quiet:
                self._lead(path, (*args, *kwargs.values()))
                return forward(*args, **kwargs)
            self._count(path)
            R = self.rows
            lead = next((x.shape[0] for x in (*args, *kwargs.values())
                         if isinstance(x, torch.Tensor) and x.ndim > 0), 1)
            if lead not in (1, R):
                raise refused(f"module '{path}' saw {lead} rows, expected {R}")
            if path not in self._checked:
                self._check_rows(path, forward, args, kwargs, R, lead)
                if R > 1 and all(p.ndim > 0 and p.shape[0] == 1 for p in params.values()):
                    self._check_stacked(mod, path, sig, params, forward, args, kwargs, R, lead)
            if path in self._stacked:
                return self._run_stacked(mod, sig, params, forward, args, kwargs, R)
            return self._run_rows(path, sig, params, forward, args, kwargs, R, lead)
        return replay

    def _draw_rows(self, params: dict[str, torch.Tensor], sig: dict[str, float],
                   R: int, gen: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """θ + u_r for r < R, stacked along each parameter's leading axis of 1."""
        return {a: p.detach() + self._randn((R, *p.shape[1:]), p, gen) * sig[a]
                for a, p in params.items()}

    @staticmethod
    def _with_params(mod: nn.Module, values: dict[str, torch.Tensor], fn: Callable) -> Any:
        """``fn()`` with ``mod``'s parameters replaced by the given tensors (restored after)."""
        before = {a: mod._parameters[a] for a in values}
        try:
            mod._parameters.update(values)
            return fn()
        finally:
            mod._parameters.update(before)

    def _run_stacked(self, mod: nn.Module, sig: dict[str, float], params: dict, forward: Callable,
                     args: tuple, kwargs: dict, R: int) -> torch.Tensor:
        draws = self._draw_rows(params, sig, R)
        return self._with_params(mod, draws, lambda: forward(*args, **kwargs))

    def _run_rows(self, path: str, sig: dict[str, float], params: dict, forward: Callable,
                  args: tuple, kwargs: dict, R: int, lead: int) -> torch.Tensor:
        saved = {a: p.detach().clone() for a, p in params.items()}
        outs = []
        calls = dict(self.calls)  # the modules inside run once per row
        try:
            self.rows = 1
            for b in range(R):
                self.calls.clear()
                self.calls.update(calls)
                for a, p in params.items():
                    p.normal_(0.0, sig[a], generator=self.gen).add_(saved[a])
                out = _row_call(forward, args, kwargs, b, lead)
                if not isinstance(out, torch.Tensor):
                    raise refused(f"module '{path}' returns {type(out).__name__}, not a "
                                  "tensor")
                outs.append(out)
        finally:
            self.rows = R
            for a, p in params.items():
                p.copy_(saved[a])
        return torch.cat(outs)

    def _check_rows(self, path: str, forward: Callable, args: tuple, kwargs: dict, R: int,
                    lead: int) -> None:
        self._quiet = True
        try:
            whole = forward(*args, **kwargs)
            rows = [_row_call(forward, args, kwargs, b, lead) for b in range(R)]
        finally:
            self._quiet = False
        if not _same_rows(whole, rows, R):
            raise refused(f"module '{path}' does not treat its rows independently")
        self._checked.add(path)

    def _check_stacked(self, mod: nn.Module, path: str, sig: dict[str, float], params: dict,
                       forward: Callable, args: tuple, kwargs: dict, R: int, lead: int) -> None:
        """Mark ``path`` stackable if one call with the R draws stacked gives, row by row, what
        R calls with one draw each give (the hooks inside kept quiet, so only the draws of
        ``mod``'s own parameters differ between rows)."""
        self._quiet = True
        try:
            draws = self._draw_rows(params, sig, R, self.aux)
            try:
                whole = self._with_params(mod, draws, lambda: forward(*args, **kwargs))
                rows = [self._with_params(mod, {a: d[b:b + 1] for a, d in draws.items()},
                                          lambda b=b: _row_call(forward, args, kwargs, b, lead))
                        for b in range(R)]
            except Exception:  # noqa: BLE001 - stacked draws do not fit its code: row by row
                return
        finally:
            self._quiet = False
        if _same_rows(whole, rows, R):
            self._stacked.add(path)

    def _randn(self, shape: tuple[int, ...], like: torch.Tensor,
               gen: torch.Generator | None = None) -> torch.Tensor:
        return torch.randn(shape, generator=gen or self.gen, device=like.device,
                           dtype=like.dtype)

    def _rows_of(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` with its leading axis equal to :attr:`rows` (a broadcast axis of 1 expanded)."""
        R = self.rows
        if t.shape[0] == R:
            return t
        if t.shape[0] == 1:
            return t.expand(R, *t.shape[1:])
        raise refused(f"a module saw {t.shape[0]} rows, expected {R}")

    def _own(self, y: torch.Tensor) -> bool:
        """Whether a hook may add the noise into the module's output ``y`` in place: outside
        autograd (the Monte Carlo passes), and ``y`` holds one row per row (not an axis of 1
        broadcast) in one dense block. A module's output is its own fresh tensor, replaced by
        the hook's result; a hook registered before these on the same module, or a global
        forward hook, that keeps the output sees it with the noise added."""
        return (not torch.is_grad_enabled() and y.ndim > 0 and y.shape[0] == self.rows
                and y.is_contiguous())

    def _affine(self, X: torch.Tensor, y3: torch.Tensor, sw: float, sb: float,
                own: bool = False) -> torch.Tensor:
        """y3 + X·Eᵀ + 1·eᵀ for one draw (E, e) per row: X (R, T, d_in), y3 (R, T, d_out);
        ``own``: y3 may be written in place (:meth:`_own`).

        The columns of X·Eᵀ are N(0, σ_w²·XXᵀ), so X·Eᵀ has the law of σ_w·L·ξ for any L with
        LLᵀ = XXᵀ and ξ a T × d_out standard normal matrix. L is the Cholesky factor of the
        T × T Gram (no QR, SVD or solve: one batched ``cholesky_ex``) where that costs less
        than taking X itself with ξ d_in × d_out (:func:`_gram_is_cheaper`, never when
        T ≥ d_in). A row whose Gram is not numerically positive definite in the working
        precision is retried in float64, and one still refused (repeated rows of
        X: rank < T) gets its noise as X·Ξ directly, Ξ a d_in × d_out draw of the auxiliary
        generator: exact either way (deferred mode: counted instead, see the class). The bias
        noise σ_b·e is a last row of the same draw ξ, shared by the row's positions.

        One matrix product adds it all: on the Gram route with T < d_out the factor gets a
        last column σ_b/σ_w (F = [L, (σ_b/σ_w)·1], so σ_w·F·ξ = σ_w·L·ξ_{<T} + σ_b·1·ξ_T:
        the same draw, the same sum, to rounding; copying L moves fewer numbers than an add
        over the output) where the product carries σ_b/σ_w as exactly as an add would
        (:func:`_exact_in`), else the bias noise is added after the product. Written into y3
        in place when ``own``: no copy of the output, no new output-sized tensor but ξ."""
        R, T, d_in = X.shape
        d_out = y3.shape[2]
        F = None
        bad = None
        fold = False  # the bias noise rides the product as F's last column
        if sw > 0:
            if _gram_is_cheaper(T, d_in, d_out):
                if self.deferred and not self._replaying and self._path not in self._sticky:
                    F, info = _gram_cholesky(X)
                    self._infos.append(info)
                else:
                    F, bad = _gram_factor(X)
                    if bad is not None:
                        self._sticky.add(self._path)
                fold = sb > 0 and T < d_out and _exact_in(sb / sw, y3.dtype, y3.device)
                F = self._with_column(F, sb / sw).to(y3.dtype) if fold else F.to(y3.dtype)
            else:
                F = X.to(y3.dtype)
        k = 0 if F is None else F.shape[2]
        xi = self._randn((R, k + (sb > 0 and not fold), d_out), y3)
        out = y3
        if F is not None:
            w = xi if fold or sb == 0 else xi[:, :k]
            out = out.baddbmm_(F, w, alpha=sw) if own else torch.baddbmm(out, F, w, alpha=sw)
            own = True  # a new tensor, or y3 already written
        if sb > 0 and not fold:
            b = xi[:, k:] if k else xi
            out = out.add_(b, alpha=sb) if own else torch.add(out, b, alpha=sb)
        if bad is not None:  # rank-deficient rows: their Cholesky part is 0
            Xb = X.index_select(0, bad).to(y3.dtype)
            direct = torch.bmm(Xb, self._randn((bad.shape[0], d_in, d_out), y3, self.aux))
            out = out.index_add_(0, bad, direct, alpha=sw)
        return out

    def _with_column(self, L: torch.Tensor, value: float) -> torch.Tensor:
        """``[L, value·1]`` (R, T, T + 1) by one ``cat`` along L's columns (``cholesky_ex``
        lays L out column by column, so L is copied in one straight pass); the column's
        constant is made once per value, dtype and device."""
        key = (value, L.dtype, L.device)
        one = self._columns.get(key)
        if one is None:
            one = self._columns[key] = torch.full((1, 1, 1), value, dtype=L.dtype,
                                                  device=L.device)
        R, T, _ = L.shape
        return torch.cat([L.mT, one.expand(R, 1, T)], dim=1).mT

    def _linear(self, mod: nn.Linear, x: torch.Tensor, y: torch.Tensor,
                sig: dict[str, float]) -> torch.Tensor:
        R = self.rows
        own = self._own(y)
        x = self._rows_of(x)
        y = self._rows_of(y)
        X = x.reshape(R, -1, mod.in_features)
        y3 = y.reshape(R, X.shape[1], mod.out_features)
        out = self._affine(X, y3, sig.get("weight", 0.0), sig.get("bias", 0.0), own)
        return out.reshape(y.shape)

    def _conv(self, mod: nn.Conv2d, x: torch.Tensor, y: torch.Tensor,
              sig: dict[str, float]) -> torch.Tensor:
        """A convolution is a Linear map of each row's unfolded patches (L × C·kh·kw)."""
        R = self.rows
        x = self._rows_of(x)
        y = self._rows_of(y)
        if x.ndim != 4:
            raise refused("a Conv2d input without a batch axis")
        P = torch.nn.functional.unfold(x, mod.kernel_size, mod.dilation, mod.padding, mod.stride)
        X = P.transpose(1, 2)  # (R, L, C·kh·kw)
        y3 = y.reshape(R, mod.out_channels, -1).transpose(1, 2)
        out = self._affine(X, y3, sig.get("weight", 0.0), sig.get("bias", 0.0))
        return out.transpose(1, 2).reshape(y.shape)

    def _embedding(self, mod: nn.Embedding, ids: torch.Tensor, y: torch.Tensor,
                   sig: dict[str, float]) -> torch.Tensor:
        """One noise vector per distinct id of a row, without a host synchronisation: a
        position takes the draw of the row's first position holding the same id (a stable
        sort and a search find it), so repeated ids share their noise. Added into the output
        in place where :meth:`_own` allows."""
        R = self.rows
        own = self._own(y)
        ids = ids.reshape(ids.shape[0] if ids.ndim > 1 else 1, -1)  # (R or 1, T)
        if ids.shape[0] > 1 and ids.stride(0) == 0:  # one row of ids broadcast to every row
            ids = ids[:1]
        ids = ids.contiguous()
        T = ids.shape[1]
        y = self._rows_of(y)
        s, perm = ids.sort(dim=1, stable=True)
        first = self._rows_of(perm.gather(1, torch.searchsorted(s, ids)))
        d = mod.embedding_dim
        e = self._randn((R, T, d), y).gather(1, first.unsqueeze(2).expand(R, T, d))
        e = e.reshape(y.shape)
        return y.add_(e, alpha=sig["weight"]) if own else torch.add(y, e, alpha=sig["weight"])

    def _layer_norm(self, mod: nn.LayerNorm, x: torch.Tensor, y: torch.Tensor,
                    sig: dict[str, float]) -> torch.Tensor:
        """y + x̂·ε_γ + ε_β with ε_γ, ε_β drawn together, one pair per row: with weight noise,
        x̂·(γ + ε_γ) + (β + ε_β) in one pass over x̂ (the affine-free normalisation of x,
        recomputed in float32 at least), which equals it to rounding; bias noise alone is
        added into y (in place where :meth:`_own` allows)."""
        R = self.rows
        own = self._own(y)
        y = self._rows_of(y)
        sw, sb = sig.get("weight", 0.0), sig.get("bias", 0.0)
        parts = (sw > 0) + (sb > 0)
        if not parts:
            return y
        z = self._randn((R, parts, *(1,) * (y.ndim - 2), y.shape[-1]), y)
        if sw == 0:
            return y.add_(z[:, 0], alpha=sb) if own else torch.add(y, z[:, 0], alpha=sb)
        x = self._rows_of(x)
        xf = x.float() if x.dtype not in (torch.float32, torch.float64) else x
        xhat = nn.functional.layer_norm(xf, mod.normalized_shape, eps=mod.eps)
        gamma = torch.add(mod.weight.to(xhat.dtype), z[:, 0], alpha=sw)
        beta = mod.bias.to(xhat.dtype) if mod.bias is not None else None
        if sb > 0:
            beta = z[:, 1].to(xhat.dtype) * sb if beta is None else \
                torch.add(beta, z[:, 1], alpha=sb)
        if torch.is_grad_enabled():  # autograd takes no out= argument
            out = xhat * gamma if beta is None else torch.addcmul(beta, xhat, gamma)
        else:  # in place over x̂, a tensor of its own
            out = xhat.mul_(gamma) if beta is None else torch.addcmul(beta, xhat, gamma, out=xhat)
        return out.to(y.dtype)


def _exact_in(c: float, dtype: torch.dtype, device: torch.device) -> bool:
    """Whether a batched product in ``dtype`` on ``device`` carries ``c`` as exactly as an add
    with the scale ``c`` would: any ``c`` in float64, and in float32 unless TF32 matmuls are
    on (a CUDA device with ``allow_tf32``); else only a ``c`` with as many significant bits as
    the product keeps (TF32 and float16: 11, bfloat16: 8; 1 when σ_b = σ_w), so that folding
    σ_b/σ_w into the factor never rounds the bias noise's scale."""
    tf32 = device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32
    if dtype == torch.float64 or (dtype == torch.float32 and not tf32):
        return True
    bits = {torch.bfloat16: 7}.get(dtype, 10)  # mantissa bits: TF32, float16 10; bfloat16 7
    m, e = math.frexp(c)
    return (m * 2 ** (bits + 1)).is_integer() and -12 <= e <= 14
