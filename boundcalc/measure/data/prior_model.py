"""The prior as a predictor: what ``tune_data``'s σ search runs, and where the per-group prior
N(w₀, diag σ_g²) is centred.

``--init`` is often the pretrained base a classifier was fine-tuned from, and a base has no task
head (the bundled MiniLM is a bare encoder). The weights side already centres the prior there:
every tensor the base has is matched by name, and the tensors it lacks (the new head) are
centred at ``head_init`` (``zero`` by default, or ``random:SEED``; :mod:`..prior`). The data side
needs that same centre as a model it can run, so :func:`prior_task_model` builds it:

- ``init`` a folder whose config names a task head: that checkpoint, loaded as it is;
- otherwise (a bare encoder, a state dict, ``zero``, ``random:SEED``): the **model's own
  architecture** holding the prior centre's tensors, the head at ``head_init``; the tensors
  taken from ``head_init`` are listed.

Contract: the returned model's parameters equal, tensor by tensor, the centre the weights side
uses for the KL (``PriorCentre.get``), so the σ search and the certificate see one prior. An
init that cannot centre the model (a tensor inside a transformer layer missing, a shape that
differs) is refused here, before any pass over the data.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from ...errors import CheckpointError
from ...words import keyword
from .hf import TaskModel, load_task_model, read_config, task_of


def _has_head(init: Any) -> bool:
    if not isinstance(init, (str, Path)) or not Path(init).is_dir():
        return False
    return task_of(read_config(Path(init))) is not None


def prior_task_model(init: Any, tm: TaskModel, head_init: Any, device: torch.device, *,
                     load: Any = None) -> tuple[TaskModel, dict[str, Any]]:
    """The prior centre of ``tm`` as a runnable :class:`TaskModel`, and a provenance record
    (module docstring). ``load(path, device)``: the loader of a prior folder with a task head
    (default :func:`~.hf.load_task_model`)."""
    if _has_head(init):
        prior = (load or load_task_model)(init, device)
        if prior.n_outputs != tm.n_outputs or prior.task != tm.task:
            raise CheckpointError(f"{init}: its head ({prior.architecture}, {prior.n_outputs} "
                                  f"outputs) is not the model's ({tm.architecture}, "
                                  f"{tm.n_outputs} outputs): the prior must have the model's "
                                  "head, or no head at all")
        return prior, {"kind": "checkpoint with a task head", "init": str(init)}
    from ..architectures import build_layer_map
    from ..io import open_source
    from ..prior import open_centre

    src = open_source(tm.model)
    lmap = build_layer_map(src)
    centre = open_centre(src, init, head_init,
                         layer_names=[e.name for e in lmap.entries if e.layer is not None],
                         model_obj=tm.model)
    try:
        centre.check(centre.names())
        model = copy.deepcopy(tm.model)
        state = model.state_dict()
        with torch.no_grad():
            for name in centre.names():
                if name in state:
                    state[name].copy_(centre.get(name).to(state[name].dtype))
    finally:
        centre.close()
    model.eval()
    prior = TaskModel(model, tm.task, tm.architecture, tm.n_outputs, tm.tokenizer, str(init))
    record = {"kind": "the model's architecture at the prior centre", "init": str(init),
              "head_init": centre.head_spec.text, "head_tensors": list(centre.head),
              "note": (f"{init} has no task head: the σ search runs the model's architecture "
                       f"with {init}'s tensors and the {len(centre.head)} tensor(s) it lacks "
                       f"centred at {centre.head_spec.text} ({keyword('head_init')}), the "
                       "centre of the per-group prior")}
    return prior, record


def head_share(tm: TaskModel, prior: TaskModel, record: dict[str, Any]) -> dict[str, Any] | None:
    """Where the distance ‖w − w₀‖² (hence the isotropic KL ‖w − w₀‖²/(2σ²), whatever σ) of a
    model measured against a headless ``init`` comes from: the head tensors the prior lacks
    (``record["head_tensors"]``, centred at ``head_init``) and the rest (the body's distance
    from the base); None for a prior with its own head. With the body's share large, no
    centring of the head (a head fitted on the tune rows, say) could make the KL small: only
    a prior whose body is near the model's (one trained on rows disjoint from S, then
    fine-tuned from: what certify does) can."""
    heads = set(record.get("head_tensors") or ())
    if not heads:
        return None
    mine = dict(tm.model.named_parameters())
    head = body = 0.0
    with torch.no_grad():
        for name, p0 in prior.model.named_parameters():
            d = float((mine[name].double() - p0.double()).pow(2).sum())
            if name in heads:
                head += d
            else:
                body += d
    total = head + body
    share = head / total if total > 0 else 0.0
    return {"head_tensors": sorted(heads), "head_dist_sq": head, "body_dist_sq": body,
            "head_share": share,
            "text": (f"the isotropic KL ‖w − w₀‖²/(2σ²): {100 * share:.1f} % from the head "
                     f"{init_head_text(heads)} (‖Δ‖² {head:.4g} from its centre "
                     f"{record.get('head_init')}), {100 * (1 - share):.1f} % from the body's "
                     f"distance to {record.get('init')} (‖Δ‖² {body:.4g}): a head centred "
                     f"elsewhere would remove at most {100 * share:.1f} % of it; where the rows "
                     "are vacuous, what makes them tight is a prior with its own head trained "
                     "on rows disjoint from S and a model fine-tuned from it (certify does "
                     "both)")}


def init_head_text(heads: set[str]) -> str:
    """'classifier.bias, classifier.weight' (at most three names, then how many more)."""
    names = sorted(heads)
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
