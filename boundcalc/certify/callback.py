"""The ``train`` callback of :func:`boundcalc.certify.certify`: what a user's own training loop
may return, and how certify takes it.

:func:`trained` calls the loop on the model certify built (the base with its new head, or the
prior) and takes, by what the loop returned:

- ``None`` or a record (a mapping with no tensor): the model it was given, trained in place;
- a model (an ``nn.Module`` with ``save_pretrained``): that model, e.g. a trained copy;
- a state dict (a mapping of names to tensors, every value a tensor): loaded into the model it
  was given, every name and shape required.

Anything else is refused in one line, and so is a result whose parameters differ from the
model's in name or shape (a replaced head with another class count): certify saves, reloads
and measures that model as the classifier of its classes. The record kept beside the weights
says a custom loop trained them (:data:`CUSTOM`); ``report.json`` says so too
(:func:`loop_record`).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import torch

from ..errors import BoundcalcError

CUSTOM = "custom: a custom training loop trained it"
DEFAULT = "default: boundcalc.certify.train.train_classifier"


def loop_record(custom: bool) -> str:
    """What ``report.json`` says about the loop that trained the prior and model/."""
    if not custom:
        return DEFAULT + " (Adam on the cross-entropy; the posterior with the proximal pull)"
    return (f"{CUSTOM} (the train callback trained the prior and model/; certify "
            "gave it the prior's data for the prior and S for the posterior, and cannot see "
            "what else it read: the certificate holds only if the prior never saw S)")


def trained(train_fn: Callable[..., Any], custom: bool, model: Any, tokenizer: Any,
            texts: Sequence[str], labels: Sequence[int], spec: Any,
            progress: Any = None) -> tuple[Any, Any]:
    """``(model, record)`` after the loop ran (module docstring); the default loop gets
    ``progress``, a custom one does not."""
    if not custom:
        return model, train_fn(model, tokenizer, texts, labels, spec, progress=progress)
    shapes = _shapes(model)
    out = train_fn(model, tokenizer, texts, labels, spec)
    what = "the train callback"  # an argument of the Python API alone (the CLI has none)
    if out is None or (isinstance(out, Mapping) and not any(
            isinstance(v, torch.Tensor) for v in out.values())):
        result, record = model, {"loop": CUSTOM, "returned": "None: trained in place",
                                 "record": out}
    elif isinstance(out, torch.nn.Module):
        if not callable(getattr(out, "save_pretrained", None)):
            raise BoundcalcError(f"{what} returned a {type(out).__name__} for the {spec.stage}, "
                                 "which is no transformers model (no save_pretrained): return "
                                 "the model it was given, trained, or a trained copy of it")
        result, record = out, {"loop": CUSTOM, "returned": "a trained model"}
    elif isinstance(out, Mapping) and all(isinstance(v, torch.Tensor) for v in out.values()):
        _check_shapes(shapes, {k: tuple(v.shape) for k, v in out.items()}, what, spec.stage,
                      "state dict")
        with torch.no_grad():
            model.load_state_dict(dict(out), strict=True)
        result, record = model, {"loop": CUSTOM, "returned": "a state dict"}
    else:
        raise BoundcalcError(f"{what} returned {type(out).__name__} for the {spec.stage}, which "
                             "certify cannot use: return None (the model trained in place), "
                             "the trained model, or its state_dict")
    _check_shapes(shapes, _shapes(result), what, spec.stage, "model")
    return result, record


def _shapes(model: Any) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def _check_shapes(want: Mapping[str, tuple[int, ...]], got: Mapping[str, tuple[int, ...]],
                  what: str, stage: str, kind: str) -> None:
    """Refuse a result whose parameters differ from the model given in names or shapes."""
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    changed = sorted(k for k in set(want) & set(got) if want[k] != got[k])
    if not (missing or extra or changed):
        return
    if changed:
        k = changed[0]
        detail = f"'{k}' has shape {list(got[k])}, the model given {list(want[k])}"
    elif missing:
        detail = f"'{missing[0]}' is missing" + (f" ({len(missing)} in all)"
                                                 if len(missing) > 1 else "")
    else:
        detail = f"'{extra[0]}' is not a parameter of the model given"
    raise BoundcalcError(f"{what} returned a {kind} for the {stage} whose parameters differ from "
                         f"the model it was given ({detail}): certify saves, reloads and "
                         "measures that model as the classifier of its classes; train the "
                         "model given, keeping every parameter's name and shape (a new head "
                         "included)")
