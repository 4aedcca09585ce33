"""Data statistics: input norms, losses, pooled-feature sigma_min, data files."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from _measure_helpers import one_thread  # noqa: F401  (autouse fixture)
from _measure_helpers import save_safetensors, tiny_bert

from boundcalc.errors import BoundcalcError
from boundcalc.measure import measure
from boundcalc.measure.samples import input_stats, load_data


def test_float_input_stats_match_numpy():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(7, 5, 3))
    stats = input_stats(load_data({"inputs": X}))
    assert stats["n"].value == 7 and stats["seq_len"].value == 5
    assert stats["input_token_norm_max"].value == pytest.approx(np.linalg.norm(X, axis=-1).max())
    assert stats["input_fro_max"].value == pytest.approx(max(np.linalg.norm(x) for x in X))


@pytest.mark.parametrize("suffix", [".npz", ".pt", ".safetensors"])
def test_token_ids_file_uses_token_embedding(tmp_path, suffix):
    model = tiny_bert()
    ckpt = save_safetensors(model, tmp_path / "m")
    ids = torch.tensor([[1, 4, 9], [2, 2, 49]])
    path = tmp_path / f"data{suffix}"
    if suffix == ".npz":
        np.savez(path, inputs=ids.numpy(), targets=np.array([0, 1]))
    elif suffix == ".pt":
        torch.save({"inputs": ids, "targets": torch.tensor([0, 1])}, path)
    else:
        save_file({"inputs": ids, "targets": torch.tensor([0, 1])}, str(path))
    stats = measure(ckpt, data=path, progress=False)
    E = model.embeddings.word_embeddings.weight.detach().double().numpy()
    norms = np.linalg.norm(E, axis=1)
    assert stats.scalars["n"].value == 2 and stats.scalars["seq_len"].value == 3
    assert stats.scalars["input_token_norm_max"].value == pytest.approx(norms[ids.numpy()].max())
    fro = np.sqrt((norms[ids.numpy()] ** 2).sum(1)).max()
    assert stats.scalars["input_fro_max"].value == pytest.approx(fro)
    assert "word_embeddings" in stats.scalars["input_fro_max"].method
    assert stats.provenance["data"] == str(path)


def test_loss_and_feature_stats_on_live_module():
    torch.manual_seed(0)
    enc = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True), 1,
        enable_nested_tensor=False).double().eval()
    X = torch.randn(10, 4, 16, dtype=torch.float64)
    y = torch.rand(10, dtype=torch.float64)

    def loss(model, xb, yb):
        return (model(xb).mean((1, 2)) - yb).abs().clamp(max=1.0)

    def features(model, xb):
        return model(xb).mean(1)

    stats = measure(enc, data={"inputs": X, "targets": y}, loss=loss, features=features,
                    init=enc, progress=False)
    with torch.no_grad():
        ref = loss(enc, X, y).numpy()
        F = features(enc, X).numpy()
    assert stats.scalars["loss_mean"].value == pytest.approx(ref.mean())
    assert stats.scalars["loss_min"].value == pytest.approx(ref.min())
    assert stats.scalars["loss_max"].value == pytest.approx(ref.max())
    sv = np.linalg.svd(F, compute_uv=False)
    assert stats.scalars["feature_sigma_min"].value == pytest.approx(sv[-1], rel=1e-9)
    assert stats.scalars["feature_sigma_min_init"].value == pytest.approx(sv[-1], rel=1e-9)
    assert stats.scalars["dist_init_total"].value == 0.0


def test_bad_data_is_reported():
    with pytest.raises(BoundcalcError, match="empty data"):
        load_data({"inputs": np.zeros((0, 4, 3))})
    with pytest.raises(BoundcalcError, match="empty data"):
        load_data({"inputs": torch.zeros((3, 0), dtype=torch.long)})
    with pytest.raises(BoundcalcError, match="B x T x d"):
        load_data({"inputs": np.zeros((3, 4))})
    with pytest.raises(BoundcalcError, match="first dimension of 3"):
        load_data({"inputs": np.zeros((3, 2, 2)), "targets": np.zeros(4)})
    with pytest.raises(BoundcalcError, match="no 'inputs'"):
        load_data({"x": np.zeros((3, 2, 2))})
    with pytest.raises(BoundcalcError, match="NaN"):
        load_data({"inputs": np.full((1, 2, 2), np.nan)})
    with pytest.raises(BoundcalcError, match="token ids must lie"):
        measure(tiny_bert(), data={"inputs": torch.tensor([[1, 500]])}, progress=False)
