"""Whether the per-row hooks of :mod:`.row_noise` are provably exact on one model's forward:
the hooks fail closed (issue 31 item 4).

The hooks add each row's noise at the output of the module that owns a parameter. That is the
law of a per-row weight draw only if (a) every noisy parameter is read inside its owning
module's forward and nowhere else (DeBERTa-v2's encoder reads ``rel_embeddings.weight``
directly: the hook never sees that use, so it would get no noise), (b) every owning module ran
(one that never ran may have had its parameter read by someone else), and (c) every hooked
call's leading axis is the row axis (a module applied to an R-long table without a batch axis
would hand entry r the draw of row r).

:func:`audit` checks all three on a real batch, without noise: it runs the forward on the first
``a`` and on the first ``b`` rows (a ≠ b) with the hooks quiet, recording the leading axis of
every hooked call and, under a ``TorchDispatchMode``, every aten operator that takes a noisy
parameter's storage while its owner is not among the modules whose forward is running. A call
is on the row axis when its leading axis is a in the first run and b in the second (or 1 in
both: broadcast to every row, which then gets its own draw). Anything else is a reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .row_noise import RowNoise


def _storage(t: torch.Tensor) -> int | None:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None


class _Reads(TorchDispatchMode):
    """Records noisy parameters read by an aten operator while their owner is not running."""

    def __init__(self, owners: dict[int, tuple[str, nn.Module]], running: list[nn.Module]):
        super().__init__()
        self.owners = owners
        self.running = running
        self.outside: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        for x in tree_flatten((args, kwargs or {}))[0]:
            if isinstance(x, torch.Tensor):
                hit = self.owners.get(_storage(x))
                if hit is not None and not any(m is hit[1] for m in self.running):
                    if hit[0] not in self.outside:
                        self.outside.append(hit[0])
        return func(*args, **(kwargs or {}))


def audit(model: nn.Module, sigma_of: Mapping[str, float], run: Callable[[int], Any],
          rows: int) -> str | None:
    """Why per-row hooks are not provably exact for ``model`` (None: they are). ``run(k)`` runs
    the model's forward on the first k rows of a batch of ``rows``; it is called twice (once
    when ``rows`` is 1) under ``torch.no_grad``, without noise."""
    hooks = RowNoise(model, sigma_of, torch.Generator(device="cpu"))
    owned = {**hooks._plan, **hooks._replay}
    owners: dict[int, tuple[str, nn.Module]] = {}
    for mod, (path, sig) in owned.items():
        for attr, s in sig.items():
            ptr = _storage(mod._parameters[attr]) if s > 0 else None
            if ptr is not None:
                owners[ptr] = (f"{path}.{attr}" if path else attr, mod)
    noisy = {path: mod for mod, (path, sig) in owned.items() if any(s > 0 for s in sig.values())}
    running: list[nn.Module] = []
    handles = []
    def enter(m: nn.Module, args: tuple) -> None:
        running.append(m)

    def leave(m: nn.Module, args: tuple, out: Any) -> None:
        running.pop()

    for mod in model.modules():
        handles.append(mod.register_forward_pre_hook(enter))
        handles.append(mod.register_forward_hook(leave, always_call=True))
    sizes = (1,) if rows < 2 else ((2, 3) if rows >= 3 else (1, 2))
    leads: list[dict[str, list[int]]] = []
    reads = _Reads(owners, running)
    try:
        with hooks, torch.no_grad():
            hooks._quiet = True
            for k in sizes:
                hooks.leads = {}
                running.clear()
                with reads:
                    run(k)
                leads.append(hooks.leads)
    finally:
        for h in handles:
            h.remove()
    if reads.outside:
        return (f"parameter '{reads.outside[0]}' is read outside its module's forward, where no "
                "hook sees it")
    idle = [p for p in noisy if p not in leads[0]]
    if idle:
        return (f"module '{idle[0] or type(model).__name__}' never ran in a forward pass, so its "
                "parameters may be used where no hook sees them")
    for path in noisy:
        got = [lead.get(path, []) for lead in leads]
        if any(len(g) != len(got[0]) for g in got):
            return f"module '{path}' ran a different number of times for different row counts"
        for calls in zip(*got):
            if not (list(calls) == list(sizes) or all(c == 1 for c in calls)):
                return (f"module '{path or type(model).__name__}' was called on a leading axis "
                        f"of {calls[0]} for {sizes[0]} rows: not provably the row axis")
    return None
