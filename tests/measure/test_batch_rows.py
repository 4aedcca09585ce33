"""Batches sized to the card (issue 40 item 2): on CUDA the rows per batch of the data side come
from the measured peak memory of one forward with a posterior draw per row on the first batch
(``torch.cuda.mem_get_info`` and the peak-memory reading are faked here, the forward is real),
unless the batch size is given; on a CPU the default of 32 rows stays. The choice is recorded
in provenance and named by the Monte Carlo progress line."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from boundcalc.errors import BoundcalcError
from boundcalc.limits import set_memory_budget
from boundcalc.measure.data.batch_rows import DEFAULT_ROWS, batch_rows
from boundcalc.measure.data.dataset_io import Batched
from boundcalc.measure.data.hf import TaskModel
from boundcalc.measure.data.options import MeasureOptions
from boundcalc.measure.device import MemoryMeter
from tests._measure_helpers import TEXT_LABELS, TEXTS, single_thread, tiny_text_checkpoints
from tests.measure.test_row_noise_ops import _bert

GiB = 1 << 30
CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def one_thread():
    with single_thread():
        yield


class FakeCard:
    """``torch.cuda``'s memory readings for a card where the forward takes ``fixed`` bytes plus
    ``per_row`` bytes per row it sees (read from the model's last forward), ``free`` bytes free."""

    def __init__(self, monkeypatch, model, *, fixed: int, per_row: int, free: int):
        self.fixed, self.per_row, self.free = fixed, per_row, free
        self.rows: list[int] = []
        self.noisy: list[bool] = []
        self.resets = 0
        query = model.bert.encoder.layer[0].attention.self.query

        def seen(mod, args, kwargs):
            self.rows.append(kwargs["input_ids"].shape[0])
            self.noisy.append(bool(query._forward_hooks))  # row-wise noise hooks in place

        model.register_forward_pre_hook(seen, with_kwargs=True)
        for name, fn in {"synchronize": lambda device=None: None,
                         "reset_peak_memory_stats": self._reset,
                         "memory_allocated": lambda device=None: 5 * GiB,
                         "memory_reserved": lambda device=None: 5 * GiB,
                         "max_memory_allocated": self._peak,
                         "mem_get_info": lambda device=None: (self.free, 80 * GiB)}.items():
            monkeypatch.setattr(torch.cuda, name, fn)

    def _reset(self, device=None):
        self.resets += 1
        self.rows.clear()

    def _peak(self, device=None):
        return 5 * GiB + self.fixed + self.per_row * max(self.rows)  # forwards one by one


def _bert_data(rows_per_batch: int, batches: int):
    model, inputs = _bert()  # 6 rows of 16 ids
    ids = inputs["input_ids"].repeat(8, 1)[:rows_per_batch]
    y = torch.arange(rows_per_batch) % 2
    tm = TaskModel(model, "sequence_classification", "bert", 2)
    data = Batched([({"input_ids": ids, "attention_mask": torch.ones_like(ids)}, y)] * batches,
                   rows_per_batch * batches, 16, "rows", "rows")
    return tm, data


def test_on_a_card_the_rows_are_the_most_the_measured_peak_lets_fit(monkeypatch):
    set_memory_budget(None)
    tm, data = _bert_data(8, 5)  # 40 rows in batches of 8
    card = FakeCard(monkeypatch, tm.model, fixed=2 * GiB, per_row=GiB, free=60 * GiB)
    meter = MemoryMeter(torch.device("cuda"))
    rows, rec = batch_rows(tm, data, CPU, None, per_sample=True, meter=meter)
    # the first batch (8 rows) peaked at 2 + 8 = 10 GiB; the budget is half of the 60 GiB free
    # the data pass's forward, then one with row-wise noise, each on the first batch
    assert card.resets == 1 and card.noisy == [False, True]
    assert rows == 30 * 8 // 10 == 24
    assert rec["peak_bytes"] == 10 * GiB and rec["room_bytes"] == 30 * GiB
    assert rec["measured_rows"] == 8 and "24 rows fit" in rec["rule"]
    card.free = 200 * GiB  # room for more rows than DATA has: every row in one batch
    card.noisy.clear()
    assert batch_rows(tm, data, CPU, None, per_sample=False, meter=meter)[0] == 40
    assert card.noisy == [False]  # without per-sample draws only the data pass's forward
    card.free = 4 * GiB  # a full card: still one row at a time, never zero
    assert batch_rows(tm, data, CPU, None, per_sample=True, meter=meter)[0] == 1


def test_a_given_batch_size_wins_and_a_cpu_keeps_32_rows():
    tm, data = _bert_data(8, 2)
    assert batch_rows(tm, data, CPU, None, per_sample=True) == (
        DEFAULT_ROWS, {"rows": 32, "rule": "the default on a CPU"})
    rows, rec = batch_rows(tm, data, torch.device("cuda"), 12, per_sample=True)
    assert rows == 12 and rec["rule"].startswith("given (") and "12" in rec["rule"]
    for bad in (0, -3, 2.5, True):
        with pytest.raises(BoundcalcError, match="batch_size|batch-size"):
            MeasureOptions(batch_size=bad)
    assert MeasureOptions().batch_size is None


def test_provenance_and_progress_name_the_rows(tmp_path):
    from boundcalc.measure.data.task_measure import measure_task

    tiny_text_checkpoints(tmp_path)
    pd.DataFrame({"text": TEXTS, "label": TEXT_LABELS}).to_csv(tmp_path / "d.csv", index=False)
    for given, rows, rule in ((None, 32, "the default on a CPU"), (4, 4, "given")):
        lines: list[str] = []
        stats = measure_task(str(tmp_path / "cls"), str(tmp_path / "d.csv"), device="cpu",
                             sigmas=(0.01,), draws=1, hessian_probes=0, batch_size=given,
                             progress=lambda done, total, what: lines.append(what))
        rec = json.loads(json.dumps(stats.provenance["batch_size"]))
        assert rec["rows"] == rows and rec["rule"].startswith(rule)
        assert any(f"batches of {min(rows, 6)} rows" in ln for ln in lines
                   if ln.startswith("Gibbs risk")), lines
