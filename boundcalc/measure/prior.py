"""The PAC-Bayes prior centre (``--init``), aligned tensor by tensor with the model.

A centre is one of

* ``checkpoint``: weights on disk or in memory, usually the pretrained checkpoint the model was
  fine-tuned from. Its names are matched with the model's across the usual prefixes of a task
  model and its base model (``bert.``, ``roberta.``, ``model.``, ``transformer.``, ``vit.``, …
  and the config's ``model_type``), in both directions, and every pair is shape-checked;
* ``zero``: the origin (distance = ‖w‖);
* ``random:SEED``: the model's own initialisation re-drawn with ``torch.manual_seed(SEED)`` on a
  fresh instance of its architecture (Hugging Face ``post_init``, or ``reset_parameters`` of a
  plain torch module). It never sees data.

Tensors of the model that have no counterpart in a checkpoint centre and lie outside the
transformer layers (the new task head, a new pooler) get the *head centre* (``zero`` or
``random:SEED``), and are listed by name. A missing tensor inside a layer is an error: the init
is then another architecture. All three kinds are chosen without the data; the choice of kind
is the user's, made before the bound's sample is seen.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError, one_line
from ..limits import check_allocation
from ..prior_spec import hint, CentreSpec, is_keyword, parse_centre, parse_head_init  # noqa: F401
from ..words import option
from .io import DictSource, TensorSource, open_source

BASE_PREFIXES = ("bert", "roberta", "xlm-roberta", "roberta_prelayernorm", "electra",
                 "camembert", "deberta", "distilbert", "albert", "model", "transformer", "vit",
                 "gpt2", "base_model", "backbone")
"""First components that a task model puts before its base model's names (base_model_prefix)."""


# ---- drawing the model's own initialisation ------------------------------------------------

def _fresh_hf(config: Any, seed: int, cls: Any = None) -> dict[str, torch.Tensor]:
    import transformers

    archs = getattr(config, "architectures", None) or []
    if cls is None:
        cls = next((getattr(transformers, a, None) for a in archs
                    if isinstance(a, str) and getattr(transformers, a, None) is not None), None)
    try:
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            if cls is None:  # a bare base model
                return dict(transformers.AutoModel.from_config(config).state_dict())
            return dict(cls(config).state_dict())
    except Exception as exc:  # transformers raises many types for configs it cannot build
        text = (str(exc).strip().splitlines() or [exc.__class__.__name__])[0][:100]
        raise CheckpointError(f"random:{seed}: cannot build a fresh "
                              f"{getattr(cls, '__name__', 'model')} from the config "
                              f"({exc.__class__.__name__}: {text})") from None


def draw_initialisation(model: Any, seed: int) -> dict[str, torch.Tensor]:
    """The model's own initialisation drawn with ``torch.manual_seed(seed)`` (never from data).

    ``model``: a Hugging Face folder (its ``config.json`` names the architecture), a file inside
    one, or a live module (a ``transformers`` model is rebuilt from its config; a plain torch
    module is copied and every submodule's ``reset_parameters`` is called in module order)."""
    if isinstance(model, torch.nn.Module):
        config = getattr(model, "config", None)
        if config is not None and hasattr(model, "post_init"):
            return _fresh_hf(copy.deepcopy(config), seed, type(model))
        fresh = copy.deepcopy(model)
        reset = 0
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            for sub in fresh.modules():
                for attr in ("reset_parameters", "_reset_parameters"):
                    if callable(getattr(sub, attr, None)):
                        getattr(sub, attr)()
                        reset += 1
                        break
        if not reset:
            raise CheckpointError(f"random:{seed}: <{type(model).__name__}> has no "
                                  "reset_parameters to re-draw its initialisation; give "
                                  f"{option('init')} a checkpoint or zero")
        return dict(fresh.state_dict())
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        folder = path if path.is_dir() else path.parent
        if not (folder / "config.json").is_file():
            raise CheckpointError(f"random:{seed}: {one_line(str(model))} has no config.json "
                                  "naming its architecture, so its initialisation cannot be "
                                  f"re-drawn; give {option('init')} a checkpoint or zero")
        import transformers

        try:
            config = transformers.AutoConfig.from_pretrained(str(folder), local_files_only=True)
        except Exception as exc:  # transformers raises many types for odd configs
            text = (str(exc).strip().splitlines() or [exc.__class__.__name__])[0][:100]
            raise CheckpointError(f"random:{seed}: {folder}/config.json cannot be read by "
                                  f"transformers ({text})") from None
        return _fresh_hf(config, seed)
    raise CheckpointError(f"random:{seed}: a {type(model).__name__} carries no architecture to "
                          f"re-draw; give {option('init')} a checkpoint or zero")


# ---- matching names across prefixes --------------------------------------------------------

def _prefixes(*configs: Mapping[str, Any] | None) -> list[str]:
    out = [""] + [p + "." for p in BASE_PREFIXES]
    for cfg in configs:
        mt = (cfg or {}).get("model_type")
        if isinstance(mt, str) and mt and len(mt) < 64:
            out += [mt + ".", mt.replace("-", "_") + "."]
    return list(dict.fromkeys(out))


def match_prefixes(model_names: Iterable[str], init_names: Iterable[str],
                   prefixes: Iterable[str] = ("",)) -> tuple[str, str, int]:
    """The pair (model prefix, init prefix) under which most model names find an init name:
    ``pi + n[len(pm):]`` for names ``n`` starting with ``pm``. Ties go to no prefix."""
    names = list(model_names)
    have = set(init_names)
    pre = list(dict.fromkeys([""] + list(prefixes)))
    # only prefixes that occur: keeps this linear in the names for checkpoints with many tensors
    pms = [p for p in pre if not p or any(n.startswith(p) for n in names)]
    pis = [p for p in pre if not p or any(n.startswith(p) for n in have)]
    best = ("", "", sum(1 for n in names if n in have))
    for pm in pms:
        for pi in pis:
            if pm == pi:
                continue
            count = sum(1 for n in names if n.startswith(pm) and pi + n[len(pm):] in have)
            if count > best[2]:
                best = (pm, pi, count)
    return best


class PriorCentre(TensorSource):
    """The prior centre as a :class:`TensorSource` under the *model's* names.

    ``get(name)`` returns the matched init tensor, zeros, or the re-drawn initialisation;
    ``head`` lists the model tensors that took the head centre. ``layer_names``: names inside a
    transformer layer (a missing one is an error, not a head tensor)."""

    def __init__(self, model: TensorSource, spec: CentreSpec, head: CentreSpec,
                 layer_names: Iterable[str] = (), model_obj: Any = None,
                 init_src: TensorSource | None = None) -> None:
        self.model, self.spec, self.head_spec = model, spec, head
        self._model_obj = model_obj if model_obj is not None else model.source
        self._layer = set(layer_names)
        self._drawn: dict[float, dict[str, torch.Tensor]] = {}
        self.config = model.config
        self.source = spec.text
        self.head: list[str] = []
        self.unused: list[str] = []
        self.prefix = ("", "")
        self.matched = 0
        self._map: dict[str, str] = {}
        self.init: TensorSource | None = None
        if spec.kind == "random":
            self._check_draw(spec.seed)
            self.init = DictSource(draw_initialisation(self._model_obj, spec.seed), spec.text,
                                   model.config)
        elif spec.kind == "checkpoint":
            self.init = init_src if init_src is not None else open_source(spec.source)
            self.source = self.init.source
        if self.init is not None:
            self._align()

    def _align(self) -> None:
        init = self.init
        model_names = [n for n in self.model.names() if self.model.is_float(n)]
        init_names = [n for n in init.names() if init.is_float(n)]
        pm, pi, count = match_prefixes(model_names, init_names,
                                       _prefixes(self.model.config, init.config))
        if count == 0:
            raise CheckpointError(f"{init.source}: init shares no tensor name with the model "
                                  f"(model e.g. '{model_names[0]}', init e.g. "
                                  f"'{init_names[0] if init_names else '-'}', also tried the "
                                  "prefixes bert., roberta., model., transformer., vit., …)")
        self.prefix, self.matched = (pm, pi), count
        have = set(init_names)
        for n in model_names:
            if n.startswith(pm) and pi + n[len(pm):] in have:
                self._map[n] = pi + n[len(pm):]
        used = set(self._map.values())
        self.unused = sorted(n for n in init_names if n not in used)

    def check(self, names: Iterable[str]) -> None:
        """Shape-check every matched pair among ``names`` and settle every unmatched one: a
        head tensor (listed in ``head``) or, inside a layer, an error naming it."""
        for n in names:
            tied = self.model.tied_to(n)
            if tied is not None:
                continue
            if self.spec.kind == "zero":
                continue
            if n in self._map:
                a, b = tuple(self.init.shape(self._map[n])), tuple(self.model.shape(n))
                if a != b:
                    where = "" if self._map[n] == n else f" (init name '{self._map[n]}')"
                    raise CheckpointError(f"{self.init.source}: tensor '{n}'{where} has shape "
                                          f"{list(a)} in the init but {list(b)} in the model")
                continue
            if n in self._layer:
                raise CheckpointError(f"{self.init.source}: init has no tensor '{n}' (the model "
                                      f"has shape {list(self.model.shape(n))}); a tensor inside "
                                      "a transformer layer must come from the init")
            if n not in self.head:
                self.head.append(n)
        self.head.sort()

    def names(self) -> list[str]:
        return [n for n in self.model.names() if self.model.is_float(n)]

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.model.shape(name))

    def is_float(self, name: str) -> bool:
        return True

    def dtype_name(self, name: str) -> str:
        return self.model.dtype_name(name)

    def get(self, name: str) -> torch.Tensor:
        tied = self.model.tied_to(name)
        if tied is not None:
            return self.get(tied)
        if self.spec.kind == "zero":
            return torch.zeros(self.shape(name), dtype=torch.float32)
        if name in self._map:
            return self.init.get(self._map[name])
        if name in self._layer:
            raise CheckpointError(f"{self.init.source}: init has no tensor '{name}'")
        return self._head_tensor(name)

    def _check_draw(self, seed: int | None) -> None:
        """A fresh draw holds the whole model in float32: refuse it above the memory budget."""
        total = 0
        for n in self.model.names():
            size = 1
            for d in self.model.shape(n):
                size *= int(d)
            total += size
        check_allocation(4.0 * total, f"random:{seed}: a fresh draw of the whole model")

    def _head_tensor(self, name: str) -> torch.Tensor:
        if self.head_spec.kind == "zero":
            return torch.zeros(self.shape(name), dtype=torch.float32)
        seed = self.head_spec.seed
        if seed not in self._drawn:
            self._check_draw(seed)
            self._drawn[seed] = draw_initialisation(self._model_obj, seed)
        t = self._drawn[seed].get(name)
        if t is None or tuple(t.shape) != self.shape(name):
            raise CheckpointError(f"{option('head_init', f'random:{seed}')}: a fresh draw of the "
                                  f"model has no tensor '{name}' of shape "
                                  f"{list(self.shape(name))}")
        return t

    def close(self) -> None:
        if self.init is not None:
            self.init.close()

    def provenance(self) -> dict[str, Any]:
        """What the stats file records about the centre (``provenance.prior``)."""
        head_params = 0
        for n in self.head:
            size = 1
            for s in self.model.shape(n):
                size *= int(s)
            head_params += size
        out: dict[str, Any] = {"kind": self.spec.kind, "init": self.spec.text}
        out["data_independent"] = (True if self.spec.kind != "checkpoint" else
                                   "declared by the user: the checkpoint must not have been fit "
                                   "on the bound's sample")
        if self.spec.kind == "random":
            out["seed"] = self.spec.seed
            out["method"] = ("the model's own initialisation, a fresh instance of its "
                             f"architecture drawn after torch.manual_seed({self.spec.seed})")
        elif self.spec.kind == "zero":
            out["method"] = "the origin: every tensor 0"
        else:
            out["method"] = "the weights of the checkpoint, matched by name"
        if self.spec.kind != "zero":
            out.update({"prefix_model": self.prefix[0], "prefix_init": self.prefix[1],
                        "matched_tensors": self.matched,
                        "head_init": self.head_spec.text, "head_tensors": list(self.head),
                        "head_params": head_params,
                        "unused_init_tensors": self.unused[:50],
                        "n_unused_init_tensors": len(self.unused)})
        out["summary"] = self.summary()
        return out

    def summary(self) -> str:
        """One line for the terminal."""
        if self.spec.kind == "zero":
            return "prior centre: zero (the origin; data-independent)"
        if self.spec.kind == "random":
            what = (f"random:{self.spec.seed} (the model's own initialisation, re-drawn with "
                    "this seed; data-independent)")
        else:
            what = f"{self.source}"
            if self.prefix != ("", ""):
                what += (f" (names matched as '{self.prefix[0]}…' ↔ '{self.prefix[1]}…', "
                         f"{self.matched} tensors)")
        line = f"prior centre: {what}"
        if self.head:
            shown = ", ".join(self.head[:4]) + (", …" if len(self.head) > 4 else "")
            line += (f"; {len(self.head)} tensor(s) absent from it centred at "
                     f"{self.head_spec.text}: {shown}")
        return line


def open_centre(model: TensorSource, init: Any, head_init: Any = None,
                layer_names: Iterable[str] = (), model_obj: Any = None) -> PriorCentre:
    """The prior centre for ``model`` (an open source) from an ``--init`` value."""
    spec = parse_centre(init)
    head = parse_head_init(head_init)
    src = None
    if spec.kind == "checkpoint" and isinstance(spec.source, TensorSource):
        src = spec.source
    return PriorCentre(model, spec, head, layer_names, model_obj, src)
