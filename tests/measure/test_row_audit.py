"""The per-sample hooks fail closed (issue 31 item 4): a noisy parameter read outside its
module's forward (DeBERTa-v2's ``rel_embeddings.weight``, read by the encoder), a module that
never ran, or a module called on an R-long tensor without a batch axis makes the Gibbs estimate
fall back to whole mode (``auto``) or to one weight draw per row (``sample``), with one line
saying why; the models the hooks are exact on keep them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from boundcalc.measure.data.dataset_io import Batched
from boundcalc.measure.data.gibbs import MonteCarlo, gibbs_estimate
from boundcalc.measure.data.hf import TaskModel
from boundcalc.measure.data.row_audit import audit
from tests._measure_helpers import single_thread

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def one_thread():
    with single_thread():
        yield


def _task(model, inputs, y, name):
    tm = TaskModel(model.eval(), "sequence_classification", name, int(y.max()) + 1)
    n = y.shape[0]
    return tm, Batched([(inputs, y)], n, 8, "test rows", f"{n} test rows")


def _deberta():
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

    torch.manual_seed(0)
    cfg = DebertaV2Config(vocab_size=40, hidden_size=16, num_hidden_layers=1,
                          num_attention_heads=2, intermediate_size=32,
                          max_position_embeddings=16, relative_attention=True,
                          position_buckets=4, pos_att_type=["p2c", "c2p"], num_labels=2)
    model = DebertaV2ForSequenceClassification(cfg)
    ids = torch.randint(0, 40, (5, 8))
    return model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


class UnbatchedTable(torch.nn.Module):
    """A Linear applied to a 5-row table (no batch axis) whose mean is added to every row: with
    R = 5 rows the table's entries look like rows (each would get a different draw)."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Embedding(5, 4)
        self.mix = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        t = self.mix(self.table(torch.arange(5)))  # (5, 4): not the rows of x
        return type("Out", (), {"logits": self.head(x + t.mean(0))})()


def test_deberta_rel_embeddings_read_outside_their_module_fall_back_to_whole():
    model, inputs = _deberta()
    names = {n: 1.0 for n, _ in model.named_parameters()}
    with torch.no_grad():
        why = audit(model, names, lambda k: model(**{a: v[:k] for a, v in inputs.items()}), 5)
    assert "rel_embeddings.weight" in why and "outside its module" in why
    tm, data = _task(model, inputs, torch.tensor([0, 1, 0, 1, 1]), "DebertaV2")
    est = gibbs_estimate(tm, data, CPU, [0.05], MonteCarlo(2, 0, 0.01, mode="auto"))
    assert est.mode == "whole" and est.engine == "weights" and est.n_losses == 2
    assert "rel_embeddings.weight" in est.note and "\n" not in est.note
    assert "rel_embeddings.weight" in est.describe()
    est = gibbs_estimate(tm, data, CPU, [0.05], MonteCarlo(1, 0, 0.01, mode="sample"))
    assert est.mode == "sample" and est.engine == "loop" and est.n_losses == 5


def test_a_module_on_an_r_long_unbatched_table_is_not_taken_for_the_rows():
    torch.manual_seed(0)
    model = UnbatchedTable()
    x, y = torch.randn(5, 4), torch.tensor([0, 1, 0, 1, 0])
    names = {n: 1.0 for n, _ in model.named_parameters()}
    with torch.no_grad():
        why = audit(model, names, lambda k: model(x[:k]), 5)
    assert "'mix'" in why or "'table'" in why
    assert "not provably the row axis" in why
    tm, data = _task(model, {"x": x}, y, "UnbatchedTable")
    est = gibbs_estimate(tm, data, CPU, [0.1], MonteCarlo(2, 0, 0.01))
    assert est.mode == "whole" and "row axis" in est.note


def test_a_noisy_module_that_never_runs_falls_back_and_exact_models_keep_the_hooks():
    class Idle(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.used = torch.nn.Linear(4, 2)
            self.spare = torch.nn.Linear(4, 2)
            self.config = SimpleNamespace()  # what the row-memory estimate reads

        def forward(self, x):
            return type("Out", (), {"logits": self.used(x)})()

    torch.manual_seed(0)
    x, y = torch.randn(6, 4), torch.tensor([0, 1, 0, 1, 0, 1])
    tm, data = _task(Idle(), {"x": x}, y, "Idle")
    est = gibbs_estimate(tm, data, CPU, [0.1], MonteCarlo(1, 0, 0.01))
    assert est.mode == "whole" and "'spare' never ran" in est.note
    # the same model without the spare module: hooks, N = 6 losses per pass
    tm.model.spare = None
    est = gibbs_estimate(tm, data, CPU, [0.1], MonteCarlo(1, 0, 0.01))
    assert est.mode == "sample" and est.engine == "hooks" and est.note is None
    # a BERT classifier and a ViT (the replayed embeddings) pass the audit
    from transformers import BertConfig, BertForSequenceClassification, ViTConfig, \
        ViTForImageClassification
    bert = BertForSequenceClassification(BertConfig(
        vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=16, num_labels=2)).eval()
    ids = torch.randint(0, 40, (4, 8))
    vit = ViTForImageClassification(ViTConfig(
        image_size=8, patch_size=2, num_channels=1, hidden_size=16, num_hidden_layers=1,
        num_attention_heads=2, intermediate_size=32, num_labels=3)).eval()
    px = torch.randn(4, 1, 8, 8)
    with torch.no_grad():
        for model, run in ((bert, lambda k: bert(input_ids=ids[:k])),
                           (vit, lambda k: vit(pixel_values=px[:k]))):
            assert audit(model, {n: 1.0 for n, _ in model.named_parameters()}, run, 4) is None
