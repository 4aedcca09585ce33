"""Which modules the per-row posterior draws of :class:`.row_noise.RowNoise` serve, and why a
model cannot be served: the static check behind its exactness (monte_carlo.md §2).

:func:`plan` sorts the modules owning the parameters to be perturbed into those whose output
gets a noise term by a hook (:data:`SUPPORTED`: Linear, Embedding, LayerNorm, Conv2d) and the
other modules holding parameters directly, run with their own parameters drawn per row; it
refuses, with its reason, a parameter shared by several modules (tied weights), a supported
module whose law the hooks do not write (an embedding with ``max_norm``, a layer norm over
several axes, a grouped or string-padded convolution) and two such modules one inside the
other. Contract: torch modules are only read here, never called or changed.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import nn

from ...errors import BoundcalcError
from ...words import option

SUPPORTED = (nn.Linear, nn.Embedding, nn.LayerNorm, nn.Conv2d)
NAMES = "Linear, Embedding, LayerNorm, Conv2d"
Plan = dict[nn.Module, tuple[str, dict[str, float]]]


def refused(why: str) -> BoundcalcError:
    """The error of a model the per-sample draws cannot serve: ``why``, and the way out."""
    return BoundcalcError(f"per-sample Gibbs draws: {why}; use {option('gibbs_mode', 'whole')}")


def _owners(model: nn.Module) -> dict[int, list[tuple[str, nn.Module, str]]]:
    """id(parameter) -> [(module path, module, attribute)] over every module holding it."""
    out: dict[int, list[tuple[str, nn.Module, str]]] = {}
    for path, mod in model.named_modules(remove_duplicate=False):
        for attr, p in mod._parameters.items():
            if p is not None:
                out.setdefault(id(p), []).append((path, mod, attr))
    return out


def _module_problem(path: str, mod: nn.Module) -> str | None:
    if isinstance(mod, nn.Embedding) and mod.max_norm is not None:
        return f"embedding '{path}' renormalises its rows (max_norm)"
    if isinstance(mod, nn.LayerNorm) and len(mod.normalized_shape) != 1:
        return f"layer norm '{path}' normalises over several axes"
    if isinstance(mod, nn.Conv2d) and (mod.groups != 1 or mod.padding_mode != "zeros"
                                       or isinstance(mod.padding, str)):
        return f"convolution '{path}' has groups, a padding mode or string padding"
    return None


def plan(model: nn.Module, sigma_of: Mapping[str, float]) -> tuple[Plan, Plan, str | None]:
    """``(hooked, replayed, reason)``: the supported modules whose outputs get noise terms, the
    other modules owning parameters directly (a ViT's ``cls_token``), which are run one row at
    a time with their own parameters drawn per row, and why neither would be exact (None)."""
    owners = _owners(model)
    params = dict(model.named_parameters())
    hooked: Plan = {}
    replayed: Plan = {}
    for name, s in sigma_of.items():
        own = {(id(m), a): (path, m, a) for path, m, a in owners.get(id(params[name]), [])}
        if len(own) != 1:
            return {}, {}, f"parameter '{name}' is shared by {len(own)} modules (tied weights)"
        path, mod, attr = next(iter(own.values()))
        target = hooked if type(mod) in SUPPORTED else replayed
        problem = _module_problem(path, mod) if target is hooked else None
        if problem:
            return {}, {}, problem
        target.setdefault(mod, (path, {}))[1][attr] = float(s)
    paths = [p for p, _ in replayed.values()]
    for p in paths:
        inner = next((q for q in paths if q != p and (p == "" or q.startswith(p + "."))), None)
        if inner is not None:
            return {}, {}, (f"modules '{p or type(model).__name__}' and '{inner}' both hold "
                            f"parameters outside {NAMES}, one inside the other")
    return hooked, replayed, None


def unsupported_reason(model: nn.Module, names: list[str]) -> str | None:
    """Why row-wise draws would not be exact for ``model`` (None: they are)."""
    return plan(model, {n: 1.0 for n in names})[2]
