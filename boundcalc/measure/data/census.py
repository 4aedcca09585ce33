"""An operator census of the data side: how many aten operators a block of code issues and how
many of them force the host to wait for the device (issue 40 items 3 and 4).

On a card every operator is a kernel launch and every host synchronisation stalls the launch
queue until the card has caught up, so both counts bound how fast a pass can go whatever the
card. They are counted on any device, a CPU included, so that a test without a GPU checks them:

* :class:`Census` counts every aten operator that runs inside it (by name) and the host
  synchronisations among them: reading a value (``item``, ``bool``, ``float``: the operators
  ``_local_scalar_dense``, ``is_nonzero``, ``equal``), operators whose output shape depends on
  the data (``nonzero``, ``unique``, ``masked_select``, boolean indexing, ...), and the Python
  calls that copy a card's tensor to the host (``tolist``, ``cpu``; ``numpy`` needs a host
  tensor already), which on a CPU issue no operator at all and are counted where they are
  called;
* the bytes of the tensors the operators return fresh (:attr:`Census.bytes`: views, in-place
  results and ``out=`` arguments are not new memory), and, with :class:`HookCensus`, the same
  counts for the code of the per-sample noise hooks alone, per kind of module and per call
  (:func:`hook_census`).

Only what runs under ``torch`` dispatch is seen: a Python-side loop is not an operator, and
neither is what an operator does inside its kernel (an out-of-place ``baddbmm`` first copies
its input into its result: :func:`hook_census` counts that copy by name).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# operators that read a value back or whose output shape depends on the data
SYNC_OPS = frozenset({
    "_local_scalar_dense", "item", "is_nonzero", "equal", "nonzero", "argwhere",
    "masked_select", "_unique", "_unique2", "unique_dim", "unique_consecutive",
    "unique_dim_consecutive", "bincount", "_assert_async_msg_sync"})
HOST_COPIES = ("tolist", "cpu")  # Tensor methods that copy a card's tensor to the host


def _bool_index(func_name: str, args: tuple) -> bool:
    """Whether an ``index``/``index_put`` call selects by a boolean mask (a nonzero inside)."""
    if func_name not in ("index", "index_put", "index_put_", "_index_put_impl_"):
        return False
    idx = args[1] if len(args) > 1 else ()
    return any(isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8)
               for t in (idx or ()))


def _repeat_without_size(func_name: str, kwargs: dict) -> bool:
    return func_name == "repeat_interleave" and kwargs.get("output_size") is None


def _storage(t: torch.Tensor) -> int | None:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None


def _fresh(args: tuple, kwargs: dict, out: Any) -> list[torch.Tensor]:
    """The tensors among ``out`` on memory that none of the arguments holds (new memory)."""
    seen = {_storage(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
    fresh = []
    for t in tree_flatten(out)[0]:
        if isinstance(t, torch.Tensor) and _storage(t) not in seen:
            seen.add(_storage(t))
            fresh.append(t)
    return fresh


class Census(TorchDispatchMode):
    """Counts of the aten operators run inside it (``ops``, by name) and of the host
    synchronisations among them and among the host copies (``syncs``, by name). Use as a
    context manager; :attr:`n_ops` and :attr:`n_syncs` are the totals, :attr:`views` the
    operators among them that only make a view of a tensor (no kernel runs), :attr:`bytes` the
    bytes of the tensors they returned on new memory."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.views = 0  # operators that only make a view (no kernel on a card)
        self.bytes = 0
        self.syncs: Counter[str] = Counter()
        self._patches: list[tuple[str, Any]] = []

    @property
    def n_ops(self) -> int:
        return sum(self.ops.values())

    @property
    def n_syncs(self) -> int:
        return sum(self.syncs.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        self.ops[name] += 1
        self.views += bool(getattr(func, "is_view", False))
        sync = name in SYNC_OPS or _bool_index(name, args) or _repeat_without_size(name, kwargs)
        if sync:
            self.syncs[name] += 1
        out = func(*args, **kwargs)
        fresh = _fresh(args, kwargs, out)
        self.bytes += sum(t.untyped_storage().nbytes() for t in fresh)
        self._seen(func, name, sync, out, fresh)
        return out

    def _seen(self, func: Any, name: str, sync: bool, out: Any,
              fresh: list[torch.Tensor]) -> None:
        """Called after each operator (for :class:`HookCensus`)."""

    def __enter__(self) -> Census:
        for method in HOST_COPIES:
            before = getattr(torch.Tensor, method)
            self._patches.append((method, before))
            setattr(torch.Tensor, method, self._counting(method, before))
        try:
            return super().__enter__()
        except BaseException:
            self._unpatch()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            super().__exit__(*exc)
        finally:
            self._unpatch()

    def _unpatch(self) -> None:
        while self._patches:
            method, before = self._patches.pop()
            setattr(torch.Tensor, method, before)

    def _counting(self, method: str, before: Any) -> Any:
        census = self

        def counted(t: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            census.syncs[method] += 1
            return before(t, *args, **kwargs)
        counted.__name__ = method
        return counted


@contextmanager
def census() -> Iterator[Census]:
    """A :class:`Census` over the block."""
    with Census() as c:
        yield c


MATMULS = frozenset({"mm", "bmm", "addmm", "addmm_", "baddbmm", "baddbmm_", "matmul"})
DRAWS = frozenset({"randn", "normal", "normal_"})
ADDS_COPIES = frozenset({"add", "add_", "sub", "sub_", "addcmul", "addcmul_", "index_add",
                         "index_add_", "copy_", "clone", "_to_copy", "contiguous"})
COPYING = frozenset({"addmm", "baddbmm"})  # out of place: the input is copied into the result


class HookCensus(Census):
    """A :class:`Census` that also counts, per kind of module (``Linear``, ...), what runs
    between :meth:`enter` and :meth:`leave` (the per-sample noise hook of one call):
    ``kinds[kind]`` counts ``calls``, ``ops``, ``kernels`` (not views), ``bytes`` (new
    memory), ``syncs``, ``full_allocs`` (new tensors with at least as many elements as the
    module's output over all rows), ``passes`` (operators with such an output that are neither
    a matrix product nor a draw, plus one for each out-of-place ``addmm``/``baddbmm`` with one:
    ATen copies its input into its result first), ``adds_copies`` (the passes that are adds or
    copies, those hidden copies included) and ``op:NAME`` per operator."""

    def __init__(self) -> None:
        super().__init__()
        self.kinds: dict[str, Counter[str]] = {}
        self._kind: Counter[str] | None = None
        self._full = 0
        self._syncs = 0

    def enter(self, kind: str, full: int) -> None:
        """The hook of a module of ``kind`` starts; its output has ``full`` elements."""
        self._kind = self.kinds.setdefault(kind, Counter())
        self._kind["calls"] += 1
        self._full, self._syncs = full, self.n_syncs

    def leave(self) -> None:
        """The hook ends."""
        if self._kind is not None:
            self._kind["syncs"] += self.n_syncs - self._syncs
        self._kind = None

    def _seen(self, func: Any, name: str, sync: bool, out: Any,
              fresh: list[torch.Tensor]) -> None:
        k = self._kind
        if k is None:
            return
        view = bool(getattr(func, "is_view", False))
        k["ops"] += 1
        k[f"op:{name}"] += 1
        k["kernels"] += not view
        k["bytes"] += sum(t.untyped_storage().nbytes() for t in fresh)
        k["full_allocs"] += sum(t.numel() >= self._full for t in fresh)
        first = next((t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)), None)
        if view or first is None or first.numel() < self._full:
            return
        hidden = name in COPYING and any(t is first for t in fresh)
        passes = (name not in MATMULS and name not in DRAWS) + hidden
        k["passes"] += passes
        k["adds_copies"] += (name in ADDS_COPIES) + hidden


def hook_census(model: torch.nn.Module, inputs: dict[str, torch.Tensor], sigma: float,
                seed: int = 0) -> dict[str, dict[str, float]]:
    """What the per-sample noise hooks (:class:`.row_noise.RowNoise`, deferred, σ on every
    parameter, under ``torch.no_grad`` as the Monte Carlo passes run them) issue in one
    forward of ``inputs``, per kind of module and per call: ``{kind: {count: value per
    call}}`` with the counts of :class:`HookCensus` (``calls`` stays the number of calls);
    counted on a second pass, after the one-time checks of the first."""
    from .gibbs import device_generator
    from .inputs import mask_is_full, model_call
    from .row_noise import SUPPORTED, RowNoise

    rows = next(iter(inputs.values())).shape[0]
    inputs = model_call(inputs, mask_is_full(inputs))
    sig = {n: sigma for n, _ in model.named_parameters()}
    hooked = [m for m in model.modules()
              if isinstance(m, SUPPORTED) and any(True for _ in m.parameters(recurse=False))]
    c = HookCensus()

    def enter(m: torch.nn.Module, args: tuple, out: torch.Tensor) -> None:
        c.enter(type(m).__name__, rows * (out.numel() // max(out.shape[0], 1)))

    with torch.no_grad(), RowNoise(model, sig, device_generator(model, seed),
                                   deferred=True) as hooks:
        handles = [h for m in hooked for h in (
            m.register_forward_hook(enter, prepend=True),  # before the noise hook
            m.register_forward_hook(lambda *a: c.leave()))]  # after it
        try:
            hooks.start_pass(rows)
            model(**inputs)
            c.kinds.clear()
            with c:
                hooks.start_pass(rows)
                model(**inputs)
        finally:
            for h in handles:
                h.remove()
    return {kind: {key: (v if key == "calls" else v / k["calls"]) for key, v in k.items()}
            for kind, k in c.kinds.items()}


def _baddbmm_flops(self_shape: Any, a_shape: Any, b_shape: Any, *args: Any,
                   out_shape: Any = None, **kwargs: Any) -> int:
    """2·b·m·k·n: what ``FlopCounterMode`` counts for ``baddbmm`` (the product alone)."""
    b, m, k = a_shape
    return 2 * b * m * k * b_shape[-1]


def flop_counter() -> Any:
    """A silent ``FlopCounterMode`` that also counts the in-place ``baddbmm_`` (its registry
    has only the out-of-place product, so an in-place one would count as 0 FLOPs)."""
    from torch.utils.flop_counter import FlopCounterMode

    return FlopCounterMode(display=False,
                           custom_mapping={torch.ops.aten.baddbmm_: _baddbmm_flops})


def forward_census(model: torch.nn.Module, inputs: dict[str, torch.Tensor], sigma: float,
                   seed: int = 0) -> dict[str, dict[str, int]]:
    """Operators, host synchronisations and FLOPs of one plain forward of ``inputs`` and of one
    forward with a posterior draw per row (:class:`.row_noise.RowNoise`, deferred; σ on every
    parameter; counted on a second pass, after the one-time checks of the first):
    ``{"plain": {...}, "per_sample": {...}}``, each with ``ops``, ``kernels`` (the operators
    that are not views), ``syncs``, ``flops`` (:func:`flop_counter`) and ``bytes`` (new
    memory)."""
    from .gibbs import device_generator
    from .inputs import mask_is_full, model_call
    from .row_noise import RowNoise

    rows = next(iter(inputs.values())).shape[0]
    inputs = model_call(inputs, mask_is_full(inputs))  # as the passes call the model
    sig = {n: sigma for n, _ in model.named_parameters()}
    out: dict[str, dict[str, int]] = {}
    with torch.no_grad():
        with Census() as c, flop_counter() as f:
            model(**inputs)
        out["plain"] = _counts(c, f)
        with RowNoise(model, sig, device_generator(model, seed), deferred=True) as hooks:
            hooks.start_pass(rows)
            model(**inputs)
            with Census() as c, flop_counter() as f:
                hooks.start_pass(rows)
                model(**inputs)
        out["per_sample"] = _counts(c, f)
    return out


def _counts(c: Census, flops: Any) -> dict[str, int]:
    return {"ops": c.n_ops, "kernels": c.n_ops - c.views, "syncs": c.n_syncs,
            "flops": flops.get_total_flops(), "bytes": c.bytes}


def pass_syncs(what: str, tm: Any, data: Any, device: torch.device, *, passes: int = 1,
               sigma: float = 0.01, probes: int = 2) -> Census:
    """The census of one stage of the data side on ``data`` (a :class:`.dataset_io.Batched`):
    ``gibbs`` (:func:`.gibbs.gibbs_estimate`, ``passes`` passes at one σ in ``auto`` mode),
    ``data`` (:func:`.data_pass.run_pass`), ``hessian`` (:func:`.curvature.hutchinson_trace`
    with ``probes`` probes over one term per batch, by double backward as on a CPU),
    ``hessian_func`` (the same by ``torch.func``, the route taken on a card)."""
    from .curvature import hutchinson_trace
    from .data_pass import hessian_terms, run_pass
    from .gibbs import MonteCarlo, gibbs_estimate

    if what in ("hessian", "hessian_func"):
        terms, _ = hessian_terms(tm, data, device, data.n)
        for p in tm.model.parameters():
            p.requires_grad_(True)
        with Census() as c:
            hutchinson_trace(tm.model, terms, n_probes=probes, groups=None,
                             method="func" if what == "hessian_func" else "autograd")
        return c
    with Census() as c:
        if what == "gibbs":
            gibbs_estimate(tm, data, device, [sigma], MonteCarlo(passes, 0, 0.01))
        elif what == "data":
            run_pass(tm, data, device)
        else:
            raise ValueError(f"pass_syncs: unknown stage {what!r}")
    return c
