"""The disagreement of a model with its own Gibbs posterior (measure/data/disagreement.py;
docs/sources/disagreement.md §2): one exact posterior draw per row, checked per row against
explicit whole-weight draws written here; labels never read; what it writes into a stats file
and the whole-file checks that guard it; one-line refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from boundcalc.errors import BoundcalcError, StatsError
from boundcalc.measure.data.dataset_io import Batched
from boundcalc.measure.data.disagreement import (SEED_OFFSET, add_disagreement, group_sigma,
                                                 measure_disagreement)
from boundcalc.measure.data.hf import TaskModel
from boundcalc.measure.data.tune import sigma_groups
from boundcalc.stats import Curve, Quantity, Stats, load_stats
from tests._measure_helpers import single_thread

CPU = torch.device("cpu")
SIGMA = 0.03  # where the tiny model's four rows disagree with their draws at rates 0 to ~0.35


@pytest.fixture(scope="module")
def tiny():
    """A 1-layer BERT classifier with 3 classes whose logits are far enough apart that a draw
    at σ = 0.03 flips some rows often, some rarely, one never; and four rows of token ids."""
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, num_labels=3, max_position_embeddings=16,
                     initializer_range=0.3)
    model = BertForSequenceClassification(cfg).eval()
    ids = torch.randint(1, 50, (4, 8), generator=torch.Generator().manual_seed(1))
    tm = TaskModel(model, "sequence_classification", "BertForSequenceClassification", 3,
                   None, "tiny")
    return tm, ids


def _rows(ids: torch.Tensor, labels: torch.Tensor | None = None, batch: int = 256) -> Batched:
    mask = torch.ones_like(ids)
    batches = [({"input_ids": ids[lo:lo + batch], "attention_mask": mask[lo:lo + batch]},
                None if labels is None else labels[lo:lo + batch])
               for lo in range(0, ids.shape[0], batch)]
    return Batched(batches, ids.shape[0], ids.shape[1], "rows", f"{ids.shape[0]} rows")


def _explicit_rates(model, ids: torch.Tensor, sigma: float, draws: int) -> np.ndarray:
    """Per row, the fraction of ``draws`` whole weight vectors w = θ + σ·ξ (every parameter
    replaced in the model) whose argmax differs from θ's: the law measured, by definition."""
    theta = {n: p.detach().clone() for n, p in model.named_parameters()}
    gen = torch.Generator().manual_seed(12345)
    mask = torch.ones_like(ids)
    with torch.no_grad():
        base = model(input_ids=ids, attention_mask=mask).logits.argmax(-1)
        flips = torch.zeros(ids.shape[0])
        try:
            for _ in range(draws):
                for n, p in model.named_parameters():
                    p.copy_(theta[n] + sigma * torch.randn(p.shape, generator=gen))
                flips += (model(input_ids=ids, attention_mask=mask).logits.argmax(-1)
                          != base).float()
        finally:
            for n, p in model.named_parameters():
                p.copy_(theta[n])
    return (flips / draws).numpy()


def test_each_rows_disagreement_follows_explicit_weight_draws(tiny):
    tm, ids = tiny
    sigma = {n: SIGMA for n, _ in tm.model.named_parameters()}
    R = K = 600
    with single_thread():
        ref = _explicit_rates(tm.model, ids, SIGMA, K)
        got = []
        for r in range(ids.shape[0]):  # the row repeated R times: R independent draws of it
            d = measure_disagreement(tm, _rows(ids[r:r + 1].repeat(R, 1)), CPU, sigma,
                                     seed=r)
            assert d.rows == R and d.engine == "hooks" and d.note is None
            got.append(d.count / R)
        wrong = _explicit_rates(tm.model, ids, 2 * SIGMA, K)  # another law: twice the σ
    got = np.array(got)

    def agree(a: np.ndarray, b: np.ndarray) -> list[bool]:
        """Per row: two binomial estimates of one rate, within 4.5 standard errors."""
        out = []
        for g, p in zip(a, b):
            pbar = (g * R + p * K) / (R + K)
            out.append(abs(g - p) <= 4.5 * math.sqrt(pbar * (1 - pbar) * (1 / R + 1 / K)))
        return out

    assert all(agree(got, ref)), (got, ref)
    assert ref.max() > 0.2 and ref.min() < 0.02  # rates from rare to frequent
    assert not all(agree(got, wrong)), (got, wrong)  # the comparison tells σ from 2σ
    # the rows' total over one pass is the sum of per-row indicators: a whole count
    whole = measure_disagreement(tm, _rows(ids.repeat(50, 1), batch=64), CPU, sigma, seed=7)
    assert 0 < whole.count < whole.rows == 200 and whole.mean == whole.count / 200


def test_labels_are_never_read(tiny):
    tm, ids = tiny
    sigma = {n: SIGMA for n, _ in tm.model.named_parameters()}
    rows = ids.repeat(30, 1)
    with single_thread():
        none = measure_disagreement(tm, _rows(rows), CPU, sigma, seed=3)
        wrong = measure_disagreement(tm, _rows(rows, torch.randint(0, 3, (rows.shape[0],))),
                                     CPU, sigma, seed=3)
    assert none.count == wrong.count and none.rows == 120


def _gibbs_stats(model, scale: float = 0.5) -> Stats:
    """A stats file with the per-group Gibbs measurement's record and one-point curve, each
    group its own σ_g (matrices 0.03, vectors 0.01)."""
    groups = sorted(set(sigma_groups(model).values()))
    sig = [0.03 if g.endswith(":matrix") else 0.01 for g in groups]
    st = Stats()
    st.scalars["n"] = Quantity(100.0)
    st.curves["gibbs_risk_groups"] = Curve("scale", np.array([scale]), np.array([0.1]),
                                           estimated=True, n_samples=600)
    st.provenance["gibbs_groups"] = {"groups": groups, "sigma": sig, "scale": scale}
    return st


def test_group_sigma_gives_each_parameter_its_groups_sigma(tiny):
    tm, _ = tiny
    per = group_sigma(tm.model, _gibbs_stats(tm.model).provenance["gibbs_groups"])
    params = dict(tm.model.named_parameters())
    assert set(per) == set(params)
    for n, p in params.items():  # matrices 0.03, vectors (biases, norms) 0.01
        assert per[n] == (0.03 if p.ndim >= 2 else 0.01), n


def test_add_disagreement_writes_what_the_entry_reads(tiny, tmp_path):
    tm, ids = tiny
    st = _gibbs_stats(tm.model)
    rows = _rows(ids.repeat(25, 1))
    with single_thread():
        got = add_disagreement(st, tm, rows, CPU, seed=4)
        again = measure_disagreement(tm, rows, CPU, group_sigma(
            tm.model, st.provenance["gibbs_groups"]), seed=4 + SEED_OFFSET)
    assert got.count == again.count and got.rows == 100
    c = st.curves["disagreement_groups"]
    assert c.param == "scale" and list(c.at) == [0.5] and c.n_samples == 100
    assert c.value[0] == got.count / 100
    rec = st.provenance["disagreement_groups"]
    assert rec["disagreements"] == got.count and rec["labels"] == "unused"
    assert rec["sigma"] == st.provenance["gibbs_groups"]["sigma"]
    assert st.scalars["disagreement_rows"].value == 100
    st.save(tmp_path / "s.json")
    back = load_stats(tmp_path / "s.json")  # the whole-file checks pass
    assert back.curves["disagreement_groups"].value[0] == got.count / 100


@pytest.mark.parametrize("edit, says", [
    (lambda d: d["provenance"]["disagreement_groups"].update(disagreements=3), "contradicts"),
    (lambda d: d["scalars"]["disagreement_rows"].update(value=99), "contradicts"),
    (lambda d: d["curves"]["disagreement_groups"].update(value=[0.333]), "whole count"),
    (lambda d: d["curves"]["disagreement_groups"].update(at=[1.0]), "scale and σ vector"),
    (lambda d: d["provenance"]["disagreement_groups"].update(sigma=[0.5]), "scale and σ vector"),
])
def test_a_stats_file_whose_disagreement_contradicts_itself_is_refused(tiny, tmp_path, edit,
                                                                        says):
    import json

    from boundcalc.stats import stats_from_json

    tm, ids = tiny
    st = _gibbs_stats(tm.model)
    with single_thread():
        add_disagreement(st, tm, _rows(ids.repeat(5, 1)), CPU, seed=0)
    doc = st.to_json()
    doc.pop("curves_sha256", None)  # the edit is the point, not the hash
    edit(doc)
    with pytest.raises(StatsError) as exc:
        stats_from_json(json.loads(json.dumps(doc)))
    assert says in str(exc.value) and "\n" not in str(exc.value)


def test_refusals_are_one_line(tiny):
    tm, ids = tiny
    sigma = {n: SIGMA for n, _ in tm.model.named_parameters()}
    empty = Batched([], 0, 8, "empty.jsonl", "0 rows")
    with pytest.raises(BoundcalcError, match=r"m = 0"):
        measure_disagreement(tm, empty, CPU, sigma)
    lm = TaskModel(tm.model, "causal_lm", "GPT2LMHeadModel", 50, None, "lm")
    with pytest.raises(BoundcalcError, match="classifiers"):
        measure_disagreement(lm, _rows(ids), CPU, sigma)
    tm.model.train()
    try:
        with pytest.raises(BoundcalcError, match="training mode"):
            measure_disagreement(tm, _rows(ids), CPU, sigma)
    finally:
        tm.model.eval()
    with pytest.raises(StatsError, match="gibbs_groups"):
        add_disagreement(Stats(), tm, _rows(ids), CPU)
    st = _gibbs_stats(tm.model)
    st.provenance["gibbs_groups"]["groups"][0] = "another:matrix"
    with pytest.raises(StatsError, match="not the model it was measured on"):
        add_disagreement(st, tm, _rows(ids), CPU)
