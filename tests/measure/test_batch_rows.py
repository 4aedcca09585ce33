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


class LargestTensor(MemoryMeter):
    """A meter whose peak is the largest tensor an operator produced during the measured pass
    (a lower bound of the card's real peak; a CPU has no allocator statistics), with ``room``
    bytes of room."""

    def __init__(self, room: int):
        super().__init__(torch.device("cpu"))
        self._room, self.largest = room, 0

    def start(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        meter = self

        class Watch(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for t in out if isinstance(out, (tuple, list)) else (out,):
                    if isinstance(t, torch.Tensor):
                        meter.largest = max(meter.largest, t.numel() * t.element_size())
                return out

        self.mode = Watch()
        self.mode.__enter__()

    def peak(self) -> int:
        self.mode.__exit__(None, None, None)
        return self.largest

    def room(self) -> int:
        return self._room


def test_a_language_model_is_sized_by_its_forward_not_a_float64_log_softmax():
    """The GPT-2 of the H200 check (2048 × 256 ids, vocabulary 50,257) was sized from its
    forward alone and the data pass then asked for 131 GiB for the float64 log-softmax of every
    row's logits. Since issue 51 the data side takes that log-sum-exp in float64 one row at a
    time (:mod:`boundcalc.measure.data.lm_loss`), so the calibration's peak is the forward's own
    float32 logits, rows × T × V × 4 bytes, and never the batch's float64 rows × (T − 1) × V × 8.
    Here V = 3,000 and T = 16, batches of 8 rows."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    V, T, rows = 3000, 16, 8
    model = GPT2LMHeadModel(GPT2Config(vocab_size=V, n_embd=16, n_layer=1, n_head=2,
                                       n_positions=T)).eval()
    ids = torch.randint(0, V, (rows, T))
    tm = TaskModel(model, "causal_lm", "gpt2", V)
    data = Batched([({"input_ids": ids, "attention_mask": torch.ones_like(ids)}, None)] * 4,
                   4 * rows, T, "ids", "ids")
    f32, f64 = rows * T * V * 4, rows * (T - 1) * V * 8
    meter = LargestTensor(room=100 * f32)  # tied embeddings: whole-model draws, no row hooks
    got, rec = batch_rows(tm, data, CPU, None, per_sample=False, meter=meter)
    assert rec["peak_bytes"] == f32 < f64  # the logits of the forward, nothing wider
    assert got == 32  # 100 batches' worth of room, capped at the 32 rows of DATA
    meter = LargestTensor(room=2 * f32)
    assert rows < batch_rows(tm, data, CPU, None, per_sample=False, meter=meter)[0] <= 2 * rows


def test_certify_readers_take_the_size_the_card_takes(tmp_path, monkeypatch):
    """certify's held-out, disagreement and bound-trained passes read their rows through
    ``read_sized``: on the H200 the bound-trained posterior's Monte Carlo ran in batches of 32
    rows at 0.67 steps/s while measure's ran in batches of 1,000. On a (faked) card with room
    for 24 rows the 40 rows come back in batches of 24 and 16; on a CPU in batches of 32."""
    from boundcalc.measure.data.batch_rows import read_sized

    from boundcalc.measure.data.hf import load_task_model

    set_memory_budget(None)
    tiny_text_checkpoints(tmp_path)
    tm = load_task_model(tmp_path / "cls", CPU)
    texts = [f"row {i} of the held-out texts" for i in range(40)]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"text": t, "label": i % 2}) + "\n"
                            for i, t in enumerate(texts)))
    sizes = lambda d: [next(iter(b[0].values())).shape[0] for b in d.batches]  # noqa: E731
    assert sizes(read_sized(path, tm, CPU, max_length=16)) == [32, 8]
    card = FakeCard(monkeypatch, tm.model, fixed=0, per_row=GiB, free=2 * 32 * GiB)
    got = read_sized(path, tm, CPU, max_length=16, meter=MemoryMeter(torch.device("cuda")))
    assert card.noisy == [False, True] and sizes(got) == [32, 8]  # 32 rows fit: as read
    card.free, card.noisy[:] = 2 * 24 * GiB, []
    got = read_sized(path, tm, CPU, max_length=16, meter=MemoryMeter(torch.device("cuda")))
    assert sizes(got) == [24, 16] and got.n == 40
