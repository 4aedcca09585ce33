"""Rows per batch of the data side (issue 40 item 2): the data pass and the Monte Carlo passes
take DATA in batches of the same size, which is

* the user's ``batch_size`` when given;
* on a CPU, :data:`DEFAULT_ROWS` (the default before the card's size was measured);
* on a card, the most rows whose memory fits the budget: the forwards of the data side (the
  data pass's, which keeps every layer's hidden states, then one with a posterior draw per
  row where the Monte Carlo passes use the row-wise hooks) run once on the first batch of
  :data:`DEFAULT_ROWS` rows, and the larger of their measured peaks sizes the rest
  (:func:`~boundcalc.measure.device.rows_that_fit`, as the Hessian's probe stacks are sized),
  at most every row of DATA.

The Hessian terms take at most the given size, else :data:`DEFAULT_ROWS` rows: a gradient
pass holds far more memory per row than the forward measured here, and on a card the probes
stacked per pass are sized from the measured peak of a term instead (:mod:`.curvature`).

The choice and how it was made go into the stats file's ``provenance.batch_size``; the Monte
Carlo progress line names it.
"""

from __future__ import annotations

from typing import Any

import torch

from ...words import option
from ..device import MemoryMeter, rows_that_fit
from .dataset_io import Batched
from .hf import TaskModel
from .inputs import lm_targets, mask_is_full, model_call, to_device

DEFAULT_ROWS = 32  # rows per batch on a CPU, and of the batch a card's size is measured on


def batch_rows(tm: TaskModel, data: Batched, device: torch.device, given: int | None, *,
               per_sample: bool, meter: MemoryMeter | None = None) -> tuple[int, dict[str, Any]]:
    """``(rows, record)``: the rows per batch of the data side for ``data`` (read in batches
    of :data:`DEFAULT_ROWS` unless ``given``) on ``device`` (see the module docstring).
    ``per_sample``: whether the Monte Carlo passes draw per row with hooks (their forward is
    the one measured). ``meter``: the card's memory (default: a
    :class:`~boundcalc.measure.device.MemoryMeter` on a CUDA ``device``; on a CPU, without
    one, the default rows)."""
    if given is not None:
        return int(given), {"rows": int(given), "rule": f"given ({option('batch_size', given)})"}
    if meter is None and device.type != "cuda":
        return DEFAULT_ROWS, {"rows": DEFAULT_ROWS, "rule": "the default on a CPU"}
    inputs, y = data.batches[0]
    measured = next(iter(inputs.values())).shape[0]
    def run() -> None:  # one after the other: the peak is the larger of the two
        _plain_forward(tm, inputs, device)
        if per_sample:
            _noisy_forward(tm, inputs, device)

    rows, record = rows_that_fit(run, measured, data.n, meter or MemoryMeter(device))
    what = ("the data pass's forward and one with a posterior draw per row" if per_sample
            else "the data pass's forward")
    return rows, {"rows": rows, **record,
                  "rule": (f"sized to the card: {what} on the first {measured} rows peaked at "
                           f"{record['peak_bytes']} bytes; {rows} rows fit the budget of "
                           f"{record['room_bytes']} bytes (at most the {data.n} rows of DATA)")}


def _model_inputs(tm: TaskModel, host: dict[str, torch.Tensor], device: torch.device):
    inputs = to_device(host, device)
    if tm.is_lm:
        inputs = lm_targets(tm, inputs)[0]
    return model_call(inputs, mask_is_full(host))


def _plain_forward(tm: TaskModel, host: dict[str, torch.Tensor], device: torch.device) -> None:
    with torch.no_grad():
        tm.model(**_model_inputs(tm, host, device), output_hidden_states=True)


def _noisy_forward(tm: TaskModel, host: dict[str, torch.Tensor], device: torch.device) -> None:
    from .gibbs import device_generator
    from .row_noise import RowNoise

    sig = {n: 1e-3 for n, p in tm.model.named_parameters() if p.requires_grad}
    inputs = _model_inputs(tm, host, device)
    with torch.no_grad(), RowNoise(tm.model, sig, device_generator(tm.model, 0),
                                   deferred=True) as hooks:
        hooks.start_pass(next(iter(host.values())).shape[0])
        tm.model(**inputs)
