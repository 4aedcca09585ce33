"""One host synchronisation per pass and few operators per batch (issue 40 items 3 and 4),
proven on the CPU with an operator census (a ``TorchDispatchMode`` counting the operators that
force a card to report back: value reads, data-dependent shapes, copies to the host).

On a BERT-shaped and a ViT-shaped tiny model: the Monte Carlo Gibbs estimate, the data pass and
the Hessian trace (double backward and ``torch.func``) synchronise as often at 4 batches as at
1, the Monte Carlo loop once more per extra pass; a forward with a posterior draw per row
issues no synchronisation and at most 3× the operators of the plain forward of the same batch.
"""

from __future__ import annotations

import pytest
import torch

from boundcalc.measure.data.census import Census, forward_census, pass_syncs
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
def test_syncs_per_pass_do_not_grow_with_the_batches(build):
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
