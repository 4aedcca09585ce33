"""One host synchronisation per pass and few operators per batch (issue 40 items 3 and 4),
proven on the CPU with an operator census (a ``TorchDispatchMode`` counting the operators that
force a card to report back: value reads, data-dependent shapes, copies to the host).

On a BERT-shaped and a ViT-shaped tiny model: the Monte Carlo Gibbs estimate, the data pass and
the Hessian trace (double backward and ``torch.func``) synchronise as often at 4 batches as at
1, the Monte Carlo loop once more per extra pass; a forward with a posterior draw per row
issues no synchronisation and at most 3× the operators of the plain forward of the same batch.

The noise hook of a Linear makes no add or copy over its output and allocates nothing of its
size but the draws (before the bias noise rode the product: 2 such passes and 3 such tensors
per call); its FLOPs are the hand count of the Gram and the product with the bias column.
"""

from __future__ import annotations

import math

import pytest
import torch

from boundcalc.measure.data.census import (Census, HookCensus, flop_counter, forward_census,
                                           hook_census, pass_syncs)
from boundcalc.measure.data.dataset_io import Batched
from boundcalc.measure.data.hf import TaskModel
from tests._measure_helpers import single_thread
from tests.measure.test_row_noise_ops import _bert, _vit

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def one_thread():
    with single_thread():
        yield


def test_the_census_counts_what_makes_a_card_report_back():
    x = torch.tensor([0.5, -1.0, 2.0])
    tolist = torch.Tensor.tolist
    with Census() as c:
        y = (x * 2 + 1).exp()  # three operators, nothing read back
    assert c.n_syncs == 0 and c.n_ops == 3 and torch.isfinite(y).all()
    with Census() as c:
        float(x.sum())  # a value read
        bool(x[0] > 0)  # a truth value
        x.nonzero()  # a data-dependent shape
        x[x > 0]  # boolean indexing: a nonzero inside
        torch.unique(x)
        x.tolist()  # a copy to the host
        x.cpu()
    assert c.n_syncs == 7, c.syncs
    assert c.syncs["tolist"] == 1 and c.syncs["cpu"] == 1
    assert torch.Tensor.tolist is tolist  # unpatched on exit
    assert x.tolist() == [0.5, -1.0, 2.0]


def _task(build, batches: int):
    model, inputs = build()
    rows = next(iter(inputs.values())).shape[0]
    vit = "pixel_values" in inputs
    classes = 3 if vit else 2
    tm = TaskModel(model, "image_classification" if vit else "sequence_classification",
                   "census", classes)
    y = torch.arange(rows) % classes
    return tm, Batched([(inputs, y)] * batches, rows * batches, 16, "census", "census rows")


@pytest.mark.parametrize("build", [_bert, _vit], ids=["bert", "vit"])
def test_syncs_per_pass_do_not_grow_with_the_batches(build, monkeypatch):
    # the card's route, counted on the CPU: a card defers a Gram without a factor to one read
    # per pass; a CPU repairs such rows on the spot, where a host read costs nothing
    from boundcalc.measure.data import gibbs

    monkeypatch.setattr(gibbs, "defers", lambda device: True)
    one, four = _task(build, 1), _task(build, 4)
    counts = {}
    for stage, passes in (("gibbs", 1), ("gibbs", 3), ("data", 1), ("hessian", 1),
                          ("hessian_func", 1)):
        for tm, data in (one, four):
            c = pass_syncs(stage, tm, data, CPU, passes=passes)
            counts[stage, passes, data.n] = c.n_syncs
        n1, n4 = one[1].n, four[1].n
        assert counts[stage, passes, n4] == counts[stage, passes, n1], (stage, counts)
    # the Monte Carlo loop: one read per pass, beyond the one-time checks of the hooks
    assert counts["gibbs", 3, n1] - counts["gibbs", 1, n1] == 2
    # the data pass and the Hessian trace: one copy to the host each
    assert counts["data", 1, n1] == counts["hessian", 1, n1] == 1
    assert counts["hessian_func", 1, n1] == 1


@pytest.mark.parametrize("build", [_bert, _vit], ids=["bert", "vit"])
def test_a_per_sample_forward_reads_nothing_back_and_issues_at_most_3x_the_operators(build):
    model, inputs = build()
    got = forward_census(model, inputs, 0.01)
    plain, noisy = got["plain"], got["per_sample"]
    assert noisy["syncs"] == 0
    assert plain["ops"] < noisy["ops"] <= 3 * plain["ops"], got
    assert noisy["kernels"] <= 3 * plain["kernels"], got  # the same, views left out
    assert plain["flops"] < noisy["flops"] <= 2.5 * plain["flops"], got


def test_the_hook_census_counts_new_memory_and_the_passes_over_an_output_by_hand():
    y, a, b = torch.randn(2, 3, 4), torch.randn(2, 3, 5), torch.randn(2, 5, 4)
    c = HookCensus()
    with c:
        c.enter("Linear", y.numel())
        out = torch.baddbmm(y, a, b)  # new memory of y's size: y copied into it first
        out.add_(1.0)  # an add over it, in place: a pass, no memory
        torch.randn(2, 1, 4)  # smaller than the output: memory, no pass
        c.leave()
        c.enter("Linear", y.numel())
        y.baddbmm_(a, b)  # in place: nothing but the product
        float(y.sum())  # a value read
        c.leave()
        torch.add(y, y)  # outside a hook: not attributed
    k = c.kinds["Linear"]
    assert k["calls"] == 2 and k["op:baddbmm"] == 1 and k["op:baddbmm_"] == 1
    assert k["full_allocs"] == 1 and k["passes"] == 2 and k["adds_copies"] == 2
    assert k["bytes"] == 4 * (2 * 3 * 4 + 2 * 4 + 1)  # out, the draws, the sum
    assert k["syncs"] == 1 and c.n_syncs == 1
    assert c.bytes == k["bytes"] + 4 * 2 * 3 * 4
    with flop_counter() as f:
        y.baddbmm_(a, b)
        torch.baddbmm(y, a, b)
    assert f.get_total_flops() == 2 * (2 * 2 * 3 * 5 * 4)


# per call of a Linear's hook before the bias noise rode the product (d4c4e55): the tiny BERT /
# ViT of test_row_noise_ops; bytes per batch of the whole per-sample forward the same
BEFORE = {"bert": {"adds_copies": 2, "full_allocs": 3, "bytes": 107_784, "kernels": 5,
                   "batch_bytes": 3_484_960},
          "vit": {"adds_copies": 2, "full_allocs": 3, "bytes": 123_447, "kernels": 5,
                  "batch_bytes": 3_627_336}}


@pytest.mark.parametrize("build", [_bert, _vit], ids=["bert", "vit"])
def test_a_linear_hook_makes_no_pass_over_its_output(build):
    model, inputs = build()
    before = BEFORE["vit" if "pixel_values" in inputs else "bert"]
    R = next(iter(inputs.values())).shape[0]
    shapes = {}  # module: (T, d_in, d_out) seen in a plain forward
    def seen(m, args, out):
        if isinstance(m, torch.nn.Conv2d):
            shapes[m] = (out[0, 0].numel(), m.in_channels * math.prod(m.kernel_size),
                         m.out_channels)
        else:
            shapes[m] = (args[0].numel() // (R * m.in_features), m.in_features, m.out_features)
    handles = [m.register_forward_hook(seen) for m in model.modules()
               if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))]
    with torch.no_grad():
        model(**inputs)
    for h in handles:
        h.remove()
    per = hook_census(model, inputs, 0.01)
    lin = per["Linear"]
    assert lin["adds_copies"] == 0 < before["adds_copies"]
    # the draws only (a classifier 2 wide is no wider than its factor with the bias column)
    assert lin["full_allocs"] <= 1 + 1 / lin["calls"] < before["full_allocs"]
    assert lin["bytes"] <= 0.55 * before["bytes"]
    assert lin["kernels"] <= before["kernels"]
    norm = per["LayerNorm"]  # one pass over x̂ instead of an addcmul and an add over y
    assert norm["adds_copies"] == 1 and norm["full_allocs"] == 1
    assert all(k["syncs"] == 0 for k in per.values()), per
    got = forward_census(model, inputs, 0.01)
    assert got["per_sample"]["syncs"] == 0
    assert got["per_sample"]["bytes"] <= 0.75 * before["batch_bytes"]
    # FLOPs: the Gram XXᵀ and the product [L, 1]·ξ of every hooked Linear / Conv2d (all on
    # the Gram route here, with T < d_out), beside the plain forward's own
    noise = sum(2 * R * T * T * d_in + 2 * R * T * (T + 1) * d_out
                for T, d_in, d_out in shapes.values())
    assert got["per_sample"]["flops"] - got["plain"]["flops"] == noise
