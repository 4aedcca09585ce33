"""Data statistics: input scales, sequence length, losses and pooled-feature conditioning.

A data file (``.pt``, ``.npz`` or ``.safetensors``) holds ``inputs`` (or ``input_ids``) — float
embeddings of shape B × T × d or integer token ids of shape B × T — and optionally ``targets``
(or ``labels``; first dimension B).
For token ids the input norms are those of the model's token-embedding rows (positional
embeddings are not added); this is stated in the quantity's ``method``.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import BoundcalcError
from ..limits import check_allocation
from ..files import check_regular_file
from .safety import MAX_ABS_WEIGHT, check_archive
from ..stats import Quantity

LossFn = Callable[[torch.nn.Module, torch.Tensor, Any], torch.Tensor]
FeatureFn = Callable[[torch.nn.Module, torch.Tensor], torch.Tensor]


@dataclass
class DataSample:
    """Inputs (B × T × d floats or B × T token ids), optional targets, and where they came from."""

    inputs: torch.Tensor
    targets: Any = None
    source: str = "<data>"

    @property
    def n(self) -> int:
        return int(self.inputs.shape[0])


def _as_tensor(value: Any, what: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise BoundcalcError(f"{what}: object arrays are not accepted")
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, (list, tuple)):
        try:
            return torch.as_tensor(np.asarray(value))
        except (TypeError, ValueError, RuntimeError):
            pass
    raise BoundcalcError(f"{what}: expected a tensor or array, got {type(value).__name__}")


INPUT_KEYS = ("inputs", "input_ids")  # the names a tensor file may give its inputs, in order
TARGET_KEYS = ("targets", "labels")


def read_tensor_file(path: str | os.PathLike,
                     err: type[BoundcalcError] = BoundcalcError) -> dict[str, Any]:
    """The mapping stored in a ``.pt``/``.pth`` (plain tensors only), ``.npz`` or
    ``.safetensors`` file: the one reader of tensor data files (``measure --data`` and
    ``--compress`` alike). The path is checked with ``stat`` first (a regular file), its size
    and a zip container's declared contents against the memory budget."""
    path = Path(path)
    if not os.path.lexists(path):
        raise err(f"{path}: no such data file")
    suffix = path.suffix.lower()
    st = check_regular_file(path, err, "data file")
    check_allocation(st.st_size, f"{path}: data file of {st.st_size} bytes")
    check_archive(path, err)
    try:
        if suffix in (".pt", ".pth"):
            obj = torch.load(str(path), map_location="cpu", weights_only=True)
        elif suffix == ".npz":
            with np.load(str(path), allow_pickle=False) as z:
                obj = {k: z[k] for k in z.files}
        elif suffix == ".safetensors":
            from safetensors.torch import load_file

            obj = load_file(str(path))
        else:
            raise err(f"{path}: unknown data format (expected .pt, .npz or .safetensors with "
                      "an 'inputs' entry)")
    except BoundcalcError:
        raise
    except MemoryError:
        raise err(f"{path}: does not fit in memory") from None
    except pickle.UnpicklingError:
        raise err(f"{path}: refused to load: the pickle needs code execution; store plain "
                  "tensors") from None
    except Exception as exc:
        msg = (str(exc).strip().splitlines() or [exc.__class__.__name__])[0][:120]
        raise err(f"{path}: not a readable data file ({msg})") from None
    if not isinstance(obj, Mapping):
        raise err(f"{path}: expected a mapping with an 'inputs' entry, got "
                  f"{type(obj).__name__}")
    return dict(obj)


_read_file = read_tensor_file  # the former private name


def load_data(obj: Any) -> DataSample:
    """Accept a path, a ``{"inputs", "targets"}`` mapping, an ``(inputs, targets)`` pair, a tensor
    or a :class:`DataSample`; check shapes and emptiness."""
    if isinstance(obj, DataSample):
        sample = obj
    else:
        source = "<data>"
        if isinstance(obj, (str, os.PathLike)):
            source = str(obj)
            obj = _read_file(Path(obj))
        if isinstance(obj, Mapping):
            key = next((k for k in INPUT_KEYS if k in obj), None)
            if key is None:
                raise BoundcalcError(f"{source}: no 'inputs' or 'input_ids' entry (found "
                                     f"{', '.join(map(str, list(obj)[:5])) or 'nothing'})")
            inputs = obj[key]
            targets = next((obj[k] for k in TARGET_KEYS if k in obj), None)
        elif isinstance(obj, (tuple, list)) and len(obj) == 2:
            inputs, targets = obj
        else:
            inputs, targets = obj, None
        sample = DataSample(_as_tensor(inputs, f"{source}: inputs"), targets, source)
    x = sample.inputs
    where = f"{sample.source}: inputs"
    if x.is_floating_point():
        if x.ndim != 3:
            raise BoundcalcError(f"{where}: float inputs must be B x T x d, got shape "
                                 f"{list(x.shape)}")
    elif x.dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8):
        if x.ndim != 2:
            raise BoundcalcError(f"{where}: token ids must be B x T, got shape {list(x.shape)}")
    else:
        raise BoundcalcError(f"{where}: expected float embeddings or integer token ids, "
                             f"got dtype {x.dtype}")
    if x.numel() == 0:
        raise BoundcalcError(f"{where}: empty data (shape {list(x.shape)}); need at least one "
                             "sample of at least one token")
    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        raise BoundcalcError(f"{where}: contains NaN or infinite values")
    if x.is_floating_point() and float(x.abs().max()) > MAX_ABS_WEIGHT:
        raise BoundcalcError(f"{where}: has values beyond {MAX_ABS_WEIGHT:g}; their statistics "
                             f"would overflow double precision")
    if sample.targets is not None:
        t = sample.targets
        if not isinstance(t, torch.Tensor):
            t = _as_tensor(t, f"{sample.source}: targets")
        if t.ndim == 0 or t.shape[0] != x.shape[0]:
            raise BoundcalcError(f"{sample.source}: targets have shape {list(t.shape)}, expected "
                                 f"a first dimension of {x.shape[0]} (one per sample)")
        sample.targets = t
    return sample


def input_stats(sample: DataSample, token_embedding: torch.Tensor | None = None,
                embedding_name: str | None = None) -> dict[str, Quantity]:
    """``n``, ``seq_len``, ``input_token_norm_max`` and ``input_fro_max`` (max over samples
    of ‖X‖_F)."""
    x = sample.inputs
    out = {"n": Quantity(float(x.shape[0])), "seq_len": Quantity(float(x.shape[1]))}
    if x.is_floating_point():
        norms = torch.linalg.vector_norm(x.double(), dim=-1)
        method = "from the float inputs"
    elif token_embedding is not None:
        ids = x.long()
        vocab = token_embedding.shape[0]
        if int(ids.min()) < 0 or int(ids.max()) >= vocab:
            raise BoundcalcError(f"{sample.source}: token ids must lie in [0, {vocab}), found "
                                 f"{int(ids.min())}..{int(ids.max())}")
        norms = torch.linalg.vector_norm(token_embedding.double(), dim=-1)[ids]
        method = f"token-embedding rows of '{embedding_name}' (no positional embeddings)"
    else:
        return out
    out["input_token_norm_max"] = Quantity(float(norms.max()), method=method)
    out["input_fro_max"] = Quantity(float(norms.square().sum(-1).sqrt().max()), method=method)
    return out


def _batches(sample: DataSample, batch_size: int):
    for lo in range(0, sample.n, batch_size):
        hi = min(sample.n, lo + batch_size)
        t = sample.targets[lo:hi] if sample.targets is not None else None
        yield sample.inputs[lo:hi], t


def per_sample_losses(model: torch.nn.Module, loss: LossFn, sample: DataSample,
                      batch_size: int = 256) -> np.ndarray:
    """Evaluate ``loss(model, inputs, targets)`` → per-sample losses (B,), without gradients."""
    if sample.targets is None:
        raise BoundcalcError(f"{sample.source}: a loss needs targets; the data has none")
    values = []
    with torch.no_grad():
        for xb, yb in _batches(sample, batch_size):
            lb = loss(model, xb, yb)
            if not isinstance(lb, torch.Tensor) or lb.shape != (xb.shape[0],):
                raise BoundcalcError(f"loss: expected per-sample losses of shape ({xb.shape[0]},), "
                                     f"got {getattr(lb, 'shape', type(lb).__name__)}")
            values.append(lb.detach().double().cpu())
    out = torch.cat(values).numpy()
    if not np.all(np.isfinite(out)):
        raise BoundcalcError(f"loss: {int(np.sum(~np.isfinite(out)))} non-finite per-sample losses")
    return out


def loss_stats(losses: np.ndarray) -> dict[str, Quantity]:
    """``loss_mean``, ``loss_min``, ``loss_max`` of per-sample losses."""
    method = f"over {losses.size} samples"
    return {"loss_mean": Quantity(float(np.mean(losses)), method=method),
            "loss_min": Quantity(float(np.min(losses)), method=method),
            "loss_max": Quantity(float(np.max(losses)), method=method)}


def feature_sigma_min(model: torch.nn.Module, features: FeatureFn, sample: DataSample,
                      batch_size: int = 256) -> Quantity:
    """Smallest singular value α of the B × d_m matrix of pooled features ``features(model, X)``."""
    parts = []
    with torch.no_grad():
        for xb, _ in _batches(sample, batch_size):
            fb = features(model, xb)
            if not isinstance(fb, torch.Tensor) or fb.ndim != 2 or fb.shape[0] != xb.shape[0]:
                raise BoundcalcError(f"features: expected a ({xb.shape[0]}, d_m) tensor, got "
                                     f"{getattr(fb, 'shape', type(fb).__name__)}")
            parts.append(fb.detach().double().cpu())
    F = torch.cat(parts)
    if not bool(torch.isfinite(F).all()):
        raise BoundcalcError("features: non-finite pooled features")
    sv = torch.linalg.svdvals(F)
    return Quantity(float(sv[-1]), method=f"smallest of the {sv.numel()} singular values of the "
                                          f"{F.shape[0]}x{F.shape[1]} pooled-feature matrix")
