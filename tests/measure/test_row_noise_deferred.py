"""Rank-deficient rows stay exact without a synchronisation per Linear (issue 40 item 3): in
deferred mode the hooks only count the rows whose Gram has no Cholesky factor; the Monte Carlo
loop reads the count once per pass and runs such a batch again with the same draws, repaired.
The estimate is then bit for bit the one of the synchronous hooks (whose law the Gram-route
tests check against σ²·XXᵀ), and a module that failed once is repaired on the spot afterwards,
so only the first batch is run twice."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from boundcalc.measure.data.dataset_io import Batched
from boundcalc.measure.data.gibbs import MonteCarlo, device_generator, gibbs_estimate
from boundcalc.measure.data.hf import TaskModel
from boundcalc.measure.data.row_noise import RowNoise
from tests._measure_helpers import single_thread

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def one_thread():
    with single_thread():
        yield


class Patches(torch.nn.Module):
    """A Linear over 6 positions of width 24 (the Gram route), mean-pooled, and a 3-way head."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(24, 24)
        self.head = torch.nn.Linear(24, 3)
        self.config = SimpleNamespace(num_attention_heads=1)  # read when sizing row chunks

    def forward(self, x):
        return type("Out", (), {"logits": self.head(torch.tanh(self.proj(x)).mean(1))})()


def _data():
    torch.manual_seed(0)
    model = Patches().eval()
    batches = []
    for b in range(4):
        x = torch.randn(5, 6, 24)
        x[b % 5, 3] = x[b % 5, 0]  # one row per batch with a repeated position: rank 5 < 6
        batches.append(({"x": x}, torch.arange(5) % 3))
    tm = TaskModel(model, "image_classification", "patches", 3)
    return tm, Batched(batches, 20, 6, "patches", "20 rows")


def _synchronous(tm, data, sigma: float, passes: int, seed: int) -> list[float]:
    """The per-pass mean 0-1 error with the default (synchronous) hooks, by hand."""
    sig = {n: sigma for n, _ in tm.model.named_parameters()}
    means = []
    with torch.no_grad(), RowNoise(tm.model, sig, device_generator(tm.model, seed)) as hooks:
        for _ in range(passes):
            total = 0.0
            for inputs, y in data.batches:
                hooks.start_pass(y.shape[0])
                wrong = (tm.model(**inputs).logits.argmax(-1) != y).double()
                total += float(wrong.sum())
            means.append(total / data.n)
    return means


def test_deferred_passes_equal_the_synchronous_hooks_bit_for_bit(monkeypatch):
    from boundcalc.measure.data import gibbs

    monkeypatch.setattr(gibbs, "defers", lambda device: True)  # as on a card
    tm, data = _data()
    forwards = []
    tm.model.proj.register_forward_pre_hook(lambda m, a: forwards.append(a[0].shape[0]))
    est = gibbs_estimate(tm, data, CPU, [0.3], MonteCarlo(3, 7, 0.01, mode="sample"))
    assert est.engine == "hooks"
    seen = list(forwards)
    ref = _synchronous(tm, data, 0.3, 3, 7)
    assert est.means[0].tolist() == ref
    # the batches whose float32 Gram of the Linear's input (the data itself) has no factor
    failing = sum(bool((torch.linalg.cholesky_ex(x @ x.transpose(1, 2)).info != 0).any())
                  for x in (b[0]["x"] for b in data.batches))
    assert failing >= 1
    # after the audit's two noiseless forwards on 2 and 3 rows: 3 passes of 4 batches, and
    # the first pass's failing batches once more; the module was then repaired on the spot,
    # so no batch of a later pass ran twice
    assert seen == [2, 3] + [5] * (3 * 4 + failing), seen


def test_on_a_cpu_failed_rows_are_repaired_on_the_spot_and_no_batch_runs_twice():
    """On a CPU a host read costs nothing: the hooks repair on the spot (issue 44: the replays
    made MiniLM's Monte Carlo passes 1.5–2.5× dearer), with the very losses of the
    synchronous hooks."""
    from boundcalc.measure.data.gibbs import defers

    assert not defers(CPU) and defers(torch.device("cuda"))
    tm, data = _data()
    forwards = []
    tm.model.proj.register_forward_pre_hook(lambda m, a: forwards.append(a[0].shape[0]))
    est = gibbs_estimate(tm, data, CPU, [0.3], MonteCarlo(3, 7, 0.01, mode="sample"))
    seen = list(forwards)
    assert est.means[0].tolist() == _synchronous(tm, data, 0.3, 3, 7)
    assert seen == [2, 3] + [5] * (3 * 4), seen  # the audit's two, then no replay


def test_deferred_hooks_count_the_failed_rows_and_replay_the_same_draws():
    tm, data = _data()
    sig = {n: 0.3 for n, _ in tm.model.named_parameters()}
    inputs, y = data.batches[0]
    with torch.no_grad(), RowNoise(tm.model, sig, torch.Generator().manual_seed(1),
                                   deferred=True) as hooks:
        mark = hooks.mark()
        hooks.start_pass(5)
        tm.model(**inputs)
        assert int(hooks.failures()) == 1  # row 0's Gram is singular
        after = hooks.gen.get_state()
        with hooks.replay(mark):
            hooks.start_pass(5)
            replayed = tm.model.proj(inputs["x"])
        assert torch.equal(hooks.gen.get_state(), after)  # the stream goes on where it was
        with hooks.replay(mark):
            hooks.start_pass(5)
            again = tm.model.proj(inputs["x"])
    assert torch.equal(replayed, again)  # the same draws, the same repair
    # the repeated position shares its noise in the repaired row, as X·Eᵀ must
    assert torch.allclose(replayed[0, 3], replayed[0, 0], atol=1e-5)
