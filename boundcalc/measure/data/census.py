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
  called.

Only what runs under ``torch`` dispatch is seen: a Python-side loop is not an operator.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

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


class Census(TorchDispatchMode):
    """Counts of the aten operators run inside it (``ops``, by name) and of the host
    synchronisations among them and among the host copies (``syncs``, by name). Use as a
    context manager; :attr:`n_ops` and :attr:`n_syncs` are the totals, :attr:`views` the
    operators among them that only make a view of a tensor (no kernel runs)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.views = 0  # operators that only make a view (no kernel on a card)
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
        if (name in SYNC_OPS or _bool_index(name, args)
                or _repeat_without_size(name, kwargs)):
            self.syncs[name] += 1
        return func(*args, **kwargs)

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


def forward_census(model: torch.nn.Module, inputs: dict[str, torch.Tensor], sigma: float,
                   seed: int = 0) -> dict[str, dict[str, int]]:
    """Operators, host synchronisations and FLOPs of one plain forward of ``inputs`` and of one
    forward with a posterior draw per row (:class:`.row_noise.RowNoise`, deferred; σ on every
    parameter; counted on a second pass, after the one-time checks of the first):
    ``{"plain": {...}, "per_sample": {...}}``, each with ``ops``, ``kernels`` (the operators
    that are not views), ``syncs`` and ``flops``."""
    from torch.utils.flop_counter import FlopCounterMode

    from .gibbs import device_generator
    from .inputs import mask_is_full, model_call
    from .row_noise import RowNoise

    rows = next(iter(inputs.values())).shape[0]
    inputs = model_call(inputs, mask_is_full(inputs))  # as the passes call the model
    sig = {n: sigma for n, _ in model.named_parameters()}
    out: dict[str, dict[str, int]] = {}
    with torch.no_grad():
        with Census() as c, FlopCounterMode(display=False) as f:
            model(**inputs)
        out["plain"] = _counts(c, f)
        with RowNoise(model, sig, device_generator(model, seed), deferred=True) as hooks:
            hooks.start_pass(rows)
            model(**inputs)
            with Census() as c, FlopCounterMode(display=False) as f:
                hooks.start_pass(rows)
                model(**inputs)
        out["per_sample"] = _counts(c, f)
    return out


def _counts(c: Census, flops: Any) -> dict[str, int]:
    return {"ops": c.n_ops, "kernels": c.n_ops - c.views, "syncs": c.n_syncs,
            "flops": flops.get_total_flops()}


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
