"""Rows per batch of the data side (issue 40 item 2): the data pass and the Monte Carlo passes
take DATA in batches of the same size, which is

* the user's ``batch_size`` when given;
* on a CPU, :data:`DEFAULT_ROWS` (the default before the card's size was measured);
* on a card, the most rows whose memory fits the budget: the data side's own code (the data
  pass, which keeps every layer's hidden states; a language model's logits in chunks of rows
  and their log-sum-exp in float64 one row at a time, :mod:`.lm_loss`, so the size follows the
  model, not its vocabulary; then a Monte Carlo step with a posterior draw per row where the Monte Carlo passes use the
  row-wise hooks) runs once on the first batch of
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
    measured = next(iter(data.batches[0][0].values())).shape[0]

    def run() -> None:  # one after the other: the peak is the larger of the two
        first_data_pass(tm, data, device)
        if per_sample:
            first_monte_carlo_step(tm, data, device)

    rows, record = rows_that_fit(run, measured, data.n, meter or MemoryMeter(device))
    what = ("the data pass and a Monte Carlo step with a posterior draw per row" if per_sample
            else "the data pass")
    return rows, {"rows": rows, **record,
                  "rule": (f"sized to the card: {what} on the first {measured} rows peaked at "
                           f"{record['peak_bytes']} bytes; {rows} rows fit the budget of "
                           f"{record['room_bytes']} bytes (at most the {data.n} rows of DATA)")}


def read_sized(path: Any, tm: TaskModel, device: torch.device, *, max_length: int,
               given: int | None = None, per_sample: bool = True,
               meter: MemoryMeter | None = None, columns: Any = None) -> Batched:
    """``path`` read for ``tm`` (already on ``device``) in batches of :func:`batch_rows` rows:
    read once in batches of ``given`` or :data:`DEFAULT_ROWS` rows, and again in the size the
    card takes when that differs (as :func:`~.task_measure.measure_task` does), so that every
    reader of the data side (certify's held-out and bound-trained passes too) batches alike.
    ``meter``: as in :func:`batch_rows`. ``columns``: ``path``'s columns already read
    (:func:`~.dataset_io.read_columns`), batched without reading the file again."""
    from .dataset_io import batches_of, read_columns

    read = columns if columns is not None else read_columns(path, {"text", "label"})
    first = given or DEFAULT_ROWS
    data = batches_of(read, tm, max_length=max_length, batch_size=first)
    rows, _ = batch_rows(tm, data, device, given, per_sample=per_sample, meter=meter)
    return data if rows == first else batches_of(read, tm, max_length=max_length,
                                                 batch_size=rows)


def first_data_pass(tm: TaskModel, data: Batched, device: torch.device) -> None:
    """The data pass itself (:func:`.data_pass.run_pass`) on ``data``'s first batch: the
    forward with every layer's hidden states and what follows it (a language model's logits
    at most :func:`.lm_loss.logit_rows` rows at a time, float64 one row at a time)."""
    from dataclasses import replace

    from .data_pass import run_pass

    first = data.batches[0]
    run_pass(tm, replace(data, batches=[first], n=next(iter(first[0].values())).shape[0]),
             device, norms=True)


def first_monte_carlo_step(tm: TaskModel, data: Batched, device: torch.device) -> None:
    """One Monte Carlo step on ``data``'s first batch as :mod:`.gibbs` runs it
    (:func:`.gibbs._one_pass`): a posterior draw per row through the row-wise hooks, deferred
    where :func:`.gibbs.defers` says, the replay of a batch whose Gram had no factor included,
    then the bounded loss per row."""
    from .gibbs import _one_pass, defers, device_generator
    from .row_noise import RowNoise

    sig = {n: 1e-3 for n, p in tm.model.named_parameters() if p.requires_grad}
    with torch.no_grad(), RowNoise(tm.model, sig, device_generator(tm.model, 0),
                                   deferred=defers(device)) as hooks:
        _one_pass(tm, [data.batches[0]], device, 0.01, hooks, None, sig)
