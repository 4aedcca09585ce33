"""Which weights are coded, the model a code decodes to, and their fingerprints.

The coded vector is what differs from a prior fixed before the data: every float weight
(``select="all"``, prior 0) or the difference from the prior centre (``"delta"``: a checkpoint,
``zero`` or ``random:SEED`` matched to the model's names by :func:`.compression.centre_state`).
Tensors given by the caller (a LoRA adapter, a subspace vector) are coded as they are
(:func:`.compression.compress`'s ``coded=``).

Contract: :func:`coded_vector` and :func:`decoded_state` are inverse layouts: decoding the coded
vector itself gives back the model's float tensors (in float64). Fingerprints are 'sha256:' and
16 hex digits, equal for equal inputs.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ...errors import BoundcalcError
from ...words import option
from .options import SELECTIONS  # declared with the option that chooses one


def _float_tensors(obj: Any, what: str) -> dict[str, torch.Tensor]:
    if isinstance(obj, torch.nn.Module):
        obj = obj.state_dict()
    if not isinstance(obj, Mapping):
        raise BoundcalcError(f"{what}: expected an nn.Module or a mapping of tensors")
    return {k: v.detach() for k, v in obj.items()
            if isinstance(v, torch.Tensor) and v.is_floating_point()}


def require_init(init: Any) -> None:
    """A delta needs the weights it is from: a one-line error when ``init`` is None."""
    if init is None:
        raise BoundcalcError(f"{option('select', 'delta')} needs {option('init')} (the weights "
                             "the delta is from)")


def coded_vector(model: Any, init: Any = None, select: str = "all") -> tuple[np.ndarray,
                                                                            list[tuple[str, tuple]]]:
    """The vector to code (float64) and its layout ``[(name, shape), ...]``."""
    if select not in SELECTIONS:
        raise BoundcalcError(f"{option('select')} must be one of {', '.join(SELECTIONS)}, got "
                             f"'{select}'")
    W = _float_tensors(model, "model")
    if select == "delta":
        require_init(init)
        W0 = _float_tensors(init, "init")
        for k, v in W.items():
            if k not in W0 or tuple(W0[k].shape) != tuple(v.shape):
                raise BoundcalcError(f"init: tensor '{k}' is missing or has another shape")
    layout = [(k, tuple(v.shape)) for k, v in sorted(W.items())]
    parts = [(W[k].double() - (W0[k].double() if select == "delta" else 0.0)).reshape(-1)
             for k, _ in layout]
    if not parts:
        raise BoundcalcError("model: no float tensors to code")
    return torch.cat(parts).cpu().numpy(), layout


def decoded_state(vec: np.ndarray, layout: Sequence[tuple[str, tuple]], init: Any = None,
                  select: str = "all") -> dict[str, torch.Tensor]:
    """Tensors θ₀ + decoded vector (θ₀ = 0 for ``select="all"``)."""
    W0 = _float_tensors(init, "init") if select == "delta" else {}
    out, pos = {}, 0
    for name, shape in layout:
        size = int(np.prod(shape)) if shape else 1
        t = torch.from_numpy(vec[pos:pos + size].copy()).reshape(shape)
        if select == "delta":
            t = W0[name].double() + t
        out[name] = t
        pos += size
    return out


def with_state(model: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> torch.nn.Module:
    """A copy of ``model`` in eval mode with the tensors of ``state`` loaded (each cast to the
    model's own dtype); ``model`` itself is untouched."""
    q = copy.deepcopy(model)
    own = q.state_dict()
    q.load_state_dict({k: (state[k].to(own[k].dtype) if k in state else v)
                       for k, v in own.items()})
    return q.eval()


def code_fingerprint(codes: np.ndarray, codebook: np.ndarray, select: str) -> str:
    """'sha256:…' of a code: the selection, the integer codes and the float64 codebook (the
    quantized model's name in the notes of the stats it was measured on)."""
    h = hashlib.sha256()
    h.update(select.encode())
    h.update(np.ascontiguousarray(codes.astype(np.int64)).tobytes())
    h.update(np.ascontiguousarray(codebook.astype(np.float64)).tobytes())
    return "sha256:" + h.hexdigest()[:16]


def model_fingerprint(state: Mapping[str, torch.Tensor]) -> str:
    """'sha256:…' of a model's weights: each tensor's name, shape and float32 bytes, in name
    order (the decoded model as it is loaded; equal weights give equal fingerprints)."""
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().to(torch.float32).contiguous().cpu()
        h.update(name.encode())
        h.update(repr(tuple(t.shape)).encode())
        h.update(t.numpy().tobytes())
    return "sha256:" + h.hexdigest()[:16]

