"""Curvature of a live model (pac_bayes.md §3): Hessian traces.

* :func:`hutchinson_trace`: tr ∇²L ≈ mean of vᵀHv over Rademacher probes v, in total and per
  parameter group, with a t confidence interval. The loss may be given as terms (one per batch
  of samples): vᵀHv is linear in L, so it is accumulated term by term and no graph over the
  whole sample is ever kept. Hessian-vector products by :func:`quadratic_forms`:
  forward-over-reverse with ``torch.func`` (``jvp`` of ``grad``, ``vmap`` over probes) on CUDA,
  double backward through one term's graph elsewhere or where ``torch.func`` has no rule.
* :func:`param_groups`, :func:`attach_hessian_trace`: the stats file's groups.

The Gaussian-perturbation side (Monte Carlo Gibbs risk) is :mod:`.gibbs`.

``loss_fn`` is always a closure ``() -> scalar tensor`` evaluated at the model's current weights.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ...errors import BoundcalcError, DomainError
from ...stats import Quantity, Stats
from ..device import MemoryMeter

Closure = Callable[[], torch.Tensor]
Progress = Callable[[int, int, str], None]
GroupSpec = str | Mapping[str, str] | Callable[[str], str] | None
_LAYER = re.compile(r"(?:^|\.)(\d+)\.")


@dataclass
class HessianTrace:
    """Hutchinson estimate of tr ∇²L: total, per group, and the per-probe samples."""

    total: Quantity
    groups: dict[str, Quantity] = field(default_factory=dict)
    samples: np.ndarray | None = None
    hvps: int | None = None  # Hessian-vector products spent
    route: str | None = None  # how the products were computed (hvp_route), for provenance


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


HVP_METHODS = ("auto", "func", "autograd")
Terms = Closure | Sequence[Closure]


class _ClosureModule(torch.nn.Module):
    """Wraps a loss closure so that ``torch.func.functional_call`` can swap the model's
    parameters under it (the closure calls the model, a submodule of this wrapper)."""

    def __init__(self, model: torch.nn.Module, fn: Closure):
        super().__init__()
        self.m = model
        self.fn = fn

    def forward(self) -> torch.Tensor:
        return self.fn().reshape(())


def _terms(loss_fn: Terms) -> list[Closure]:
    terms = [loss_fn] if callable(loss_fn) else list(loss_fn)
    if not terms or not all(callable(t) for t in terms):
        raise BoundcalcError("hutchinson_trace: loss_fn must be a closure or a non-empty "
                             "sequence of closures")
    return terms


def _checked(loss: Any, who: str) -> torch.Tensor:
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise BoundcalcError(f"{who}: loss_fn must return a scalar tensor")
    return loss.reshape(())


def _poison(out: torch.Tensor, loss: torch.Tensor) -> None:
    """Make every entry of ``out`` NaN where ``loss`` is not finite, on the device (no host
    synchronisation): the one read-back of the estimate then refuses it."""
    out.add_(torch.where(torch.isfinite(loss.detach()), 0.0, math.nan))


def probe_batch(n_probes: int, n_params: int, itemsize: int, device: torch.device,
                budget: int | None = None, stacked: bool | None = None) -> int:
    """Probes pushed through one Hessian-vector-product call, from the memory budget.

    Probes are never stored: probe k is drawn from its own seed where and when it is used
    (see :class:`SeededProbes`). A vmapped product holds about four float copies per probe
    (probe, tangent, gradient, product): a quarter of the budget goes to them, at most 32
    probes a pass. ``stacked``: whether the products are vmapped (``torch.func``); default:
    on CUDA. Unstacked (double backward on a CPU, the fastest there: benchmarks/) the answer
    is 1. Without an explicit ``--memory-budget`` the budget is
    :func:`~boundcalc.measure.device.work_budget_for` the device (half a card's free memory,
    a quarter of the available RAM); a vmapped call that still runs out of memory is retried
    with half the probes.
    """
    from ..device import work_budget_for

    if stacked is None:
        stacked = device.type == "cuda"
    if not stacked:
        return 1
    if budget is None:
        budget = work_budget_for(device)
    return max(1, min(n_probes, 32, budget // 4 // max(1, 4 * n_params * itemsize)))


def _hvp_func(model: torch.nn.Module, names: list[str], params: list[torch.Tensor],
              term: Closure, vs: list[torch.Tensor]) -> list[torch.Tensor]:
    """H v for a batch of probes ``vs`` (leading dim b): forward-over-reverse (``jvp`` of
    ``grad``), ``vmap`` over the probes; one forward per call, no retained graph."""
    from torch.func import functional_call, grad, jvp, vmap

    wrapper = _ClosureModule(model, term)
    keys = [f"m.{n}" for n in names]
    primals = tuple(p.detach() for p in params)

    def loss(*ps: torch.Tensor) -> torch.Tensor:
        return functional_call(wrapper, dict(zip(keys, ps)), (), strict=False)

    g = grad(loss, argnums=tuple(range(len(primals))))

    def hvp(*tangents: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return jvp(g, primals, tangents)[1]

    return list(vmap(hvp)(*vs))


def _use_func(method: str, param: torch.Tensor) -> bool:
    """``torch.func`` HVPs: asked for, or ``auto`` on CUDA. On a CPU double backward through the
    retained graph measured faster (MiniLM-L6 + 2-label head, 32 sentences of 11 tokens, one
    thread, loaded machine: 2.8 s a probe, 2.3 with 4 probes batched, vs 4.8 s for torch.func
    with or without vmap); one probe at a time keeps the activations of a single probe."""
    return method == "func" or (method == "auto" and param.is_cuda)


ProbeSource = Callable[[int, int], list[torch.Tensor]]


def quadratic_forms(model: torch.nn.Module, loss_fn: Terms,
                    probes: list[torch.Tensor] | SeededProbes, *,
                    method: str = "auto", inner: int = 1,
                    progress: Progress | None = None, what: str = "Hessian probes",
                    step: tuple[int, int] = (0, 1), notes: list[str] | None = None,
                    sized: list[int] | None = None) -> torch.Tensor:
    """v_pᵀ (H v)_p for every probe v and every trainable parameter tensor p (H: the Hessian
    of the summed terms; over Rademacher probes the mean of row p estimates tr H_pp, the
    trace of p's diagonal block, and the rows add up to vᵀHv), as a float64 tensor
    (n tensors × b) on the model's device. ``probes``: one (b, *p.shape) tensor per trainable parameter (any dtype; ±1 int8
    is the usual), or a :class:`SeededProbes` drawing them on demand. ``loss_fn``: a closure or terms whose sum is the loss (e.g. one per batch
    of samples, each weighted by its share); a term's graph is freed before the next one, so
    memory is one term's activations plus ``inner`` float probes.

    ``method``: ``func`` (forward-over-reverse with ``torch.func``: ``inner`` probes stacked
    and vmapped, so b probes cost ⌈b / inner⌉ passes of each term; on CUDA the first pass
    carries one probe and its measured peak memory lowers ``inner`` to what the memory
    budget holds, :class:`_Stack`), ``autograd`` (double
    backward through the term's retained graph, ``inner`` probes per call with
    ``is_grads_batched`` when ``inner`` > 1), ``auto`` (``func`` on CUDA, else ``autograd``;
    ``func`` falls back to ``autograd`` where ``torch.func`` cannot trace the model, e.g. an
    operation without a forward-mode or vmap rule). ``notes``: where given, the route taken is
    appended to it as one line (:func:`hvp_route`), the fallback's reason included.
    ``sized``: a one-element list holding the probes per stacked pass measured by an earlier
    call on the same model and terms (the one-probe measuring pass is then skipped); a
    measured size is written back into it.
    """
    if method not in HVP_METHODS:
        raise BoundcalcError(f"hessian method {method!r}: expected one of {', '.join(HVP_METHODS)}")
    named = _params(model)
    names, params = [n for n, _ in named], [p for _, p in named]
    if isinstance(probes, SeededProbes):
        source, b = probes, probes.n
    else:
        if len(probes) != len(params):
            raise BoundcalcError(f"quadratic_forms: {len(probes)} probe tensors for "
                                 f"{len(params)} parameters")
        source, b = (lambda lo, hi: [v[lo:hi] for v in probes]), probes[0].shape[0]
    terms = _terms(loss_fn)
    out = torch.zeros(len(params), b, dtype=torch.float64, device=params[0].device)
    use_func = _use_func(method, params[0])
    if use_func:
        known = sized[0] if sized else None
        stack = _Stack(min(inner, known) if known else inner,
                       None if known else _memory_meter(params[0].device))
        try:
            _run_terms(out, terms, progress, what, step,
                       lambda term: _accumulate_func(out, model, names, params, term,
                                                     source, b, stack))
            _note(notes, hvp_route("func", stack.n,
                                   measured=stack.meter is not None or bool(known)))
            if sized is not None and stack.meter is not None:
                sized[:] = [stack.n]
            return out
        except BoundcalcError:
            raise
        except Exception as exc:  # noqa: BLE001 - torch.func cannot trace it: double backward
            if method == "func":
                raise
            out.zero_()
            _note(notes, hvp_route("autograd", inner, fallback=exc))
    elif notes is not None:
        _note(notes, hvp_route("autograd", inner))
    return _run_terms(out, terms, progress, what, step,
                      lambda term: _accumulate_autograd(out, params, term, source, b, inner))


def hvp_route(method: str, inner: int, fallback: BaseException | None = None,
              measured: bool = False) -> str:
    """One line saying how the Hessian-vector products were computed (for provenance)."""
    if method == "func":
        return (f"torch.func forward-over-reverse (jvp of grad), up to {inner} probes stacked "
                "under vmap per pass of each term" + (
                    " (sized from the peak memory of a one-probe pass)" if measured else ""))
    how = ("double backward through each term's retained graph, "
           + ("one probe at a time" if inner <= 1 else f"up to {inner} probes per call"))
    if fallback is None:
        return how
    msg = (str(fallback).strip().splitlines() or [""])[0][:120]
    return (f"{how} (fallback: torch.func could not trace the model: "
            f"{type(fallback).__name__}: {msg})")


def _note(notes: list[str] | None, line: str) -> None:
    if notes is not None and line not in notes:
        notes.append(line)


def _run_terms(out: torch.Tensor, terms: list[Closure], progress: Progress | None, what: str,
               step: tuple[int, int], accumulate: Callable[[Closure], None]) -> torch.Tensor:
    done, total = step
    for t, term in enumerate(terms):
        if progress:
            progress(done + t, total, what)
        accumulate(term)
    return out


def _float(probe: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return probe.to(device=like.device, dtype=like.dtype)


_Meter = MemoryMeter


def _memory_meter(device: torch.device) -> MemoryMeter | None:
    """A :class:`~boundcalc.measure.device.MemoryMeter` on CUDA, else None (tests patch this
    to size stacks on the CPU)."""
    return MemoryMeter(device) if device.type == "cuda" else None


class _Stack:
    """Probes per stacked pass, shared by every term of one estimate. ``cap`` comes from the
    parameter count (:func:`probe_batch`); with a meter the first pass carries one probe and
    its peak memory (activations and tangents of one probe, plus the unbatched forward: an
    overestimate per probe) sizes the others, ``room // peak`` at most ``cap``. A pass that
    still runs out of memory halves the stack for every later pass too."""

    def __init__(self, cap: int, meter: _Meter | None):
        self.cap, self.meter = max(1, cap), meter
        self.n = 1 if meter is not None and cap > 1 else self.cap
        self.calibrating = meter is not None and cap > 1

    def measured(self, peak: int, room: int) -> None:
        self.n = max(1, min(self.cap, room // max(1, peak)))
        self.calibrating = False


def _accumulate_func(out: torch.Tensor, model: torch.nn.Module, names: list[str],
                     params: list[torch.Tensor], term: Closure, source: ProbeSource, b: int,
                     stack: _Stack) -> None:
    lo = 0
    while lo < b:
        hi = min(b, lo + stack.n)
        vs = [_float(v, p) for v, p in zip(source(lo, hi), params)]
        calibrating = stack.calibrating and stack.meter is not None
        if calibrating:
            stack.meter.start()
        try:
            hv = _hvp_func(model, names, params, term, vs)
        except torch.OutOfMemoryError:
            if hi - lo == 1:
                raise
            del vs
            stack.n = stack.cap = (hi - lo) // 2  # the vmapped probes' activations did not fit
            if params[0].is_cuda:
                torch.cuda.empty_cache()
            continue
        if calibrating:
            stack.measured(stack.meter.peak(), stack.meter.room())
        for j, (v, h) in enumerate(zip(vs, hv)):
            out[j, lo:hi] += (v * h).reshape(hi - lo, -1).sum(1, dtype=torch.float64)
        del vs, hv
        lo = hi


def _accumulate_autograd(out: torch.Tensor, params: list[torch.Tensor], term: Closure,
                         source: ProbeSource, b: int, inner: int) -> None:
    loss = _checked(term(), "hutchinson_trace")
    _poison(out, loss)
    grads = torch.autograd.grad(loss, params, create_graph=True, allow_unused=True)
    live = [i for i, g in enumerate(grads) if g is not None and g.requires_grad]
    if not live:
        return
    batched = inner > 1
    lo = 0
    while lo < b:
        hi = min(b, lo + inner)
        drawn = source(lo, hi)
        vs = [_float(drawn[i], params[i]) for i in live]
        del drawn
        args = ([grads[i] for i in live], [params[i] for i in live], vs)
        if hi - lo == 1:  # one probe: no stacked copies, dot products without temporaries
            _one_probe(out, lo, live, args)
            lo = hi
            continue
        try:
            try:
                hv = _hvp_batch(*args, batched)
            except RuntimeError:
                if not batched:
                    raise
                batched = False  # some op lacks a vmap rule: one probe at a time
                hv = _hvp_batch(*args, batched)
        except RuntimeError as exc:
            raise _no_second_derivatives(exc) from None
        for j, i in enumerate(live):
            out[i, lo:hi] += (vs[j] * hv[j]).reshape(hi - lo, -1).sum(1, dtype=torch.float64)
        lo = hi
    del grads, loss


def _no_second_derivatives(exc: RuntimeError) -> BoundcalcError:
    """The one-line error for a model autograd cannot differentiate twice (e.g. SDPA)."""
    msg = (str(exc).strip().splitlines() or ["RuntimeError"])[0][:140]
    return BoundcalcError(f"hutchinson_trace: no second derivatives through this model ({msg}); "
                          "use eager attention, e.g. attn_implementation='eager'")


class SeededProbes:
    """Rademacher probes drawn on demand: probe k of every parameter comes from a generator on
    ``device`` seeded with ``seed · 2²⁰ + k``, so a probe is the same wherever and however often
    it is drawn (every batch of samples sees the same probes without storing any), and the
    estimate does not depend on how probes are batched. Values are int8 ±1."""

    def __init__(self, params: list[torch.Tensor], n: int, seed: int,
                 device: torch.device | None = None):
        self.shapes = [tuple(p.shape) for p in params]
        self.n = n
        self.seed = seed
        self.device = device if device is not None else params[0].device
        self.gen = torch.Generator(device=self.device)

    def __call__(self, lo: int, hi: int) -> list[torch.Tensor]:
        rows: list[list[torch.Tensor]] = []
        for k in range(lo, hi):
            self.gen.manual_seed(self.seed * 2**20 + k)
            rows.append([torch.randint(0, 2, shape, generator=self.gen, dtype=torch.int8,
                                       device=self.device).mul_(2).sub_(1)
                         for shape in self.shapes])
        if hi - lo == 1:
            return [t.unsqueeze(0) for t in rows[0]]
        return [torch.stack(ts) for ts in zip(*rows)]


def _one_probe(out: torch.Tensor, col: int, live: list[int],
               args: tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]) -> None:
    """Column ``col`` of ``out`` for one probe through the retained graph (rows ``live``)."""
    grads, params, vs = args
    try:
        hv = torch.autograd.grad(grads, params, grad_outputs=[v[0] for v in vs],
                                 retain_graph=True, allow_unused=True)
    except RuntimeError as exc:
        raise _no_second_derivatives(exc) from None
    for j, h in enumerate(hv):
        if h is not None:
            out[live[j], col] += torch.dot(vs[j][0].reshape(-1), h.reshape(-1)).double()
    del hv


def draw_probes(params: list[torch.Tensor], b: int, gen: torch.Generator) -> list[torch.Tensor]:
    """``b`` Rademacher probes per parameter, int8 ±1 on the generator's device (explicit
    probes for :func:`quadratic_forms`)."""
    dev = gen.device
    return [torch.randint(0, 2, (b, *p.shape), generator=gen, dtype=torch.int8, device=dev)
            .mul_(2).sub_(1) for p in params]


def hutchinson_trace(model: torch.nn.Module, loss_fn: Terms, *, n_probes: int = 100,
                     groups: GroupSpec = "layer", seed: int = 0, confidence: float = 0.95,
                     batch_size: int | None = None, method: str = "auto",
                     progress: Progress | None = None, what: str = "Hessian trace",
                     probe_device: str | torch.device | None = None,
                     sized: list[int] | None = None) -> HessianTrace:
    """Hutchinson estimate of tr ∇²L(θ) with Rademacher probes, total and per group.

    ``loss_fn``: a closure, or a sequence of closures whose sum is L (e.g. one per batch of
    samples, weighted by its share): vᵀHv is accumulated term by term, so memory is one term's
    activations plus the probes in flight (drawn on demand on the model's device from per-probe
    seeds, :class:`SeededProbes`; how many go through one call: :func:`probe_batch`, capped by
    ``batch_size``).
    ``method``: see :func:`quadratic_forms`; the route taken (a fallback and its reason
    included) is ``.route`` of the result. ``probe_device``: where the probes are drawn
    (default: the model's device; ``"cpu"`` gives the CPU's probes, hence its numbers, on any
    device). A group's estimate uses the same probes restricted
    to its parameters (the trace of its diagonal Hessian block); the group estimates add up to
    the total, probe by probe. ``sized``: see :func:`quadratic_forms` (repeated traces of one
    model, as for P̂, measure the stack's memory once).
    """
    if n_probes < 2:
        raise BoundcalcError(f"hutchinson_trace: n_probes must be >= 2, got {n_probes}")
    if not 0 < confidence < 1:
        raise BoundcalcError(f"hutchinson_trace: confidence must lie in (0, 1), got {confidence}")
    if method not in HVP_METHODS:
        raise BoundcalcError(f"hessian method {method!r}: expected one of {', '.join(HVP_METHODS)}")
    named = _params(model)
    terms = _terms(loss_fn)
    group_of = _group_of(groups)
    labels = [group_of(n) if group_of else "all" for n, _ in named]
    order = list(dict.fromkeys(labels))
    params = [p for _, p in named]
    dev = params[0].device
    n_par = sum(p.numel() for p in params)
    inner = probe_batch(n_probes, n_par, params[0].element_size(), dev,
                        stacked=_use_func(method, params[0]))
    if batch_size is not None:
        inner = max(1, min(inner, batch_size))
    source = SeededProbes(params, n_probes, seed,
                          torch.device(probe_device) if probe_device is not None else dev)
    index = torch.tensor([order.index(g) for g in labels], device=dev)
    per_group = torch.zeros(len(order), n_probes, dtype=torch.float64, device=dev)
    notes: list[str] = []
    quad = quadratic_forms(model, terms, source, method=method, inner=inner, progress=progress,
                           what=f"{what}: {n_probes} probes", step=(0, len(terms)), notes=notes,
                           sized=sized)
    per_group.index_add_(0, index, quad)
    if progress:
        progress(len(terms), len(terms), what)
    per_group_np = per_group.cpu().numpy()  # the one host readback
    method_text = f"hutchinson, {n_probes} Rademacher probes, seed {seed}"
    total_samples = per_group_np.sum(0)

    def quantity(samples: np.ndarray) -> Quantity:
        if not np.all(np.isfinite(samples)):
            raise DomainError("hutchinson_trace: non-finite loss or Hessian-vector products")
        mean, se, ci = t_interval(samples, confidence)
        if not all(math.isfinite(x) for x in (mean, se, *ci)):
            raise DomainError("hutchinson_trace: non-finite Hessian-vector products")
        return Quantity(mean, estimated=True, stderr=se, ci=ci, confidence=confidence,
                        method=method_text)

    out = HessianTrace(quantity(total_samples), samples=total_samples, hvps=n_probes,
                       route="; ".join(notes))
    if group_of is not None:
        out.groups = {g: quantity(per_group_np[i]) for i, g in enumerate(order)}
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
