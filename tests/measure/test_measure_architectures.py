"""Layer maps of tiny models built from transformers configs, and checkpoint formats."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest
import torch

from _measure_helpers import one_thread  # noqa: F401  (autouse fixture)
from _measure_helpers import (get, np_weights, save_safetensors, save_sharded, save_state_dict,
                              tiny_bert, tiny_gpt2, tiny_llama, tiny_torch_encoder, tiny_vit,
                              top_sv)

import boundcalc.measure.io as mio
from boundcalc.errors import CheckpointError
from boundcalc.measure import build_layer_map, measure, open_source

N, H, DH = 32, 4, 8


def _check_heads(stats, q, k, v, o, layer, kv_of=lambda h: h):
    """Compare stored per-head spectra with numpy products of manually sliced weights."""
    for h in range(stats.model["n_heads"]):
        qs, ks = slice(h * DH, (h + 1) * DH), slice(kv_of(h) * DH, (kv_of(h) + 1) * DH)
        QK = q[qs].T @ k[ks]
        V = v[ks].T @ o.T[qs]
        np.testing.assert_allclose(get(stats, "QK", layer, h).singular_values, top_sv(QK, DH),
                                   rtol=1e-8, atol=1e-12)
        np.testing.assert_allclose(get(stats, "V", layer, h).singular_values, top_sv(V, DH),
                                   rtol=1e-8, atol=1e-12)
        assert get(stats, "QK", layer, h).stats["norm_21"] == \
            pytest.approx(np.linalg.norm(QK, axis=0).sum(), rel=1e-10)


def test_gpt2_conv1d_split_and_transpose():
    model = tiny_gpt2()
    w = np_weights(model)
    stats = measure(model, progress=False)
    assert stats.model["architecture"] == "gpt2" and stats.model["intermediate"] == 4 * N
    for layer in range(2):
        c_attn = w[f"h.{layer}.attn.c_attn.weight"]  # Conv1D: (in, out) = (N, 3N)
        q, k, v = (c_attn[:, i * N:(i + 1) * N].T for i in range(3))
        o = w[f"h.{layer}.attn.c_proj.weight"].T
        _check_heads(stats, q, k, v, o, layer)
        assert get(stats, "q", layer).stats["norm_21"] == \
            pytest.approx(np.linalg.norm(q, axis=0).sum())
        f_in = w[f"h.{layer}.mlp.c_fc.weight"].T  # torch (out, in) = (4N, N)
        m_in = get(stats, "M_in", layer)
        assert m_in.shape == (N, 4 * N)
        np.testing.assert_allclose(m_in.singular_values, top_sv(f_in.T), rtol=1e-9)
        assert m_in.stats["norm_21"] == pytest.approx(np.linalg.norm(f_in.T, axis=0).sum())
        assert get(stats, "M_out", layer).shape == (4 * N, N)
    roles = [(e["role"], e.get("rows")) for e in stats.layer_map
             if e["name"] == "h.0.attn.c_attn.weight"]
    assert roles == [("q", [0, N]), ("k", [N, 2 * N]), ("v", [2 * N, 3 * N])]


def test_gpt2_tied_head_is_excluded_and_params_counted_once():
    model = tiny_gpt2(lm_head=True)
    stats = measure(model, progress=False)
    assert {"name": "lm_head.weight", "reason": "tied to 'transformer.wte.weight' (same storage)"} \
        in stats.excluded
    assert stats.model["n_params"] == sum(p.numel() for p in model.parameters())


def test_llama_grouped_query_attention():
    model = tiny_llama()
    w = np_weights(model)
    stats = measure(model, progress=False)
    m = stats.model
    assert (m["architecture"], m["n_heads"], m["n_kv_heads"], m["ffn"]) == ("llama", 4, 2, "gated")
    for layer in range(2):
        p = f"layers.{layer}."
        q, k = w[p + "self_attn.q_proj.weight"], w[p + "self_attn.k_proj.weight"]
        v, o = w[p + "self_attn.v_proj.weight"], w[p + "self_attn.o_proj.weight"]
        assert k.shape == (2 * DH, N)
        _check_heads(stats, q, k, v, o, layer, kv_of=lambda h: h // 2)
        np.testing.assert_allclose(get(stats, "M_in", layer).singular_values,
                                   top_sv(w[p + "mlp.up_proj.weight"].T), rtol=1e-9)
        np.testing.assert_allclose(get(stats, "M_gate", layer).singular_values,
                                   top_sv(w[p + "mlp.gate_proj.weight"].T), rtol=1e-9)
        assert get(stats, "M_out", layer).shape == (48, N)
    assert any("up_proj" in note for note in m["notes"])
    init = tiny_llama(seed=1)
    w0 = np_weights(init)
    with_init = measure(model, init=init, progress=False)
    q0, k0 = w0["layers.1.self_attn.q_proj.weight"], w0["layers.1.self_attn.k_proj.weight"]
    q1, k1 = w["layers.1.self_attn.q_proj.weight"], w["layers.1.self_attn.k_proj.weight"]
    qs, ks = slice(3 * DH, 4 * DH), slice(1 * DH, 2 * DH)  # query head 3 uses kv head 1
    D = q1[qs].T @ k1[ks] - q0[qs].T @ k0[ks]
    assert get(with_init, "QK", 1, 3).stats["dist_init_spectral"] == \
        pytest.approx(np.linalg.norm(D, 2), rel=1e-9)
    # a different (wrong) kv assignment would give different spectra for head 1
    q, k = w["layers.0.self_attn.q_proj.weight"], w["layers.0.self_attn.k_proj.weight"]
    wrong = top_sv(q[DH:2 * DH].T @ k[DH:2 * DH], DH)
    assert not np.allclose(get(stats, "QK", 0, 1).singular_values, wrong, rtol=1e-3)


def test_vit_and_bert_and_torch_encoder_layer_maps():
    vit = measure(tiny_vit(), progress=False)
    assert vit.model["architecture"] == "vit" and vit.model["n_layers"] == 2
    assert any(e["role"] == "embedding" and "patch" in e["name"] for e in vit.layer_map)
    bert_model = tiny_bert()
    w = np_weights(bert_model)
    bert = measure(bert_model, progress=False)
    p = "encoder.layer.1."
    _check_heads(bert, w[p + "attention.self.query.weight"], w[p + "attention.self.key.weight"],
                 w[p + "attention.self.value.weight"], w[p + "attention.output.dense.weight"], 1)
    enc = tiny_torch_encoder()
    w = np_weights(enc)
    stats = measure(enc, progress=False)  # live module: heads read from nn.MultiheadAttention
    assert stats.model["architecture"] == "torch_transformer" and stats.model["n_heads"] == H
    for layer in range(2):
        inp = w[f"layers.{layer}.self_attn.in_proj_weight"]  # (3N, N): rows q; k; v
        _check_heads(stats, inp[:N], inp[N:2 * N], inp[2 * N:],
                     w[f"layers.{layer}.self_attn.out_proj.weight"], layer)


def _payload(stats):
    doc = stats.to_json()
    doc.pop("provenance")
    doc["model"].pop("model_type")  # from config.json, which a bare state_dict lacks
    return json.dumps(doc, sort_keys=True)


@pytest.mark.parametrize("fmt", ["safetensors", "sharded", "state_dict"])
def test_formats_round_trip_to_identical_stats(tmp_path, fmt):
    model = tiny_bert()
    live = measure(model, progress=False)
    if fmt == "safetensors":
        path = save_safetensors(model, tmp_path / "m")
    elif fmt == "sharded":
        path = save_sharded(model, tmp_path / "m")
    else:
        path = save_state_dict(model, tmp_path / "m.pt")
    loaded = measure(path, progress=False, n_heads=None if fmt != "state_dict" else H)
    assert _payload(loaded) == _payload(live)


def test_state_dict_without_config_needs_n_heads(tmp_path):
    path = save_state_dict(tiny_torch_encoder(), tmp_path / "enc.pt")
    with pytest.raises(CheckpointError, match="n_heads"):
        measure(path, progress=False)
    stats = measure(path, progress=False, n_heads=H)
    assert stats.model["n_heads"] == H and stats.model["head_dim"] == DH


class _CountingOpen:
    """Wraps safetensors.safe_open and counts tensor reads."""

    calls: list[str] = []
    bulk = 0

    def __init__(self, *args, **kwargs):
        self._h = _REAL_OPEN(*args, **kwargs)

    def __getattr__(self, item):
        if item == "get_tensors":
            _CountingOpen.bulk += 1
        return getattr(self._h, item)

    def get_tensor(self, name):
        _CountingOpen.calls.append(name)
        return self._h.get_tensor(name)


_REAL_OPEN = mio.safe_open


def test_sharded_loading_reads_one_tensor_at_a_time(tmp_path, monkeypatch):
    model = tiny_bert()
    folder = save_sharded(model, tmp_path / "m", n_shards=4)
    monkeypatch.setattr(mio, "safe_open", _CountingOpen)
    _CountingOpen.calls, _CountingOpen.bulk = [], 0
    src = open_source(folder)
    assert _CountingOpen.calls == []  # opening reads headers only
    it = src.iter_tensors()
    assert inspect.isgenerator(it)
    name, tensor = next(it)
    assert _CountingOpen.calls == [name] and isinstance(tensor, torch.Tensor)
    next(it)
    assert len(_CountingOpen.calls) == 2
    _CountingOpen.calls = []
    stats = measure(folder, progress=False)
    included = {e["name"] for e in stats.layer_map}
    # each included tensor is read exactly once, individually, and nothing is read in bulk
    assert sorted(_CountingOpen.calls) == sorted(included)
    assert _CountingOpen.bulk == 0


def test_init_distances_and_groups(tmp_path):
    model, init = tiny_bert(seed=1), tiny_bert(seed=2)
    w, w0 = np_weights(model), np_weights(init)
    stats = measure(save_safetensors(model, tmp_path / "m"),
                    init=save_safetensors(init, tmp_path / "i"), progress=False)
    p = "encoder.layer.0.attention.self."
    q, q0 = w[p + "query.weight"], w0[p + "query.weight"]
    m = get(stats, "q", 0)
    assert m.stats["dist_init_fro"] == pytest.approx(np.linalg.norm(q - q0))
    assert m.stats["dist_init_spectral"] == pytest.approx(np.linalg.norm(q - q0, 2))
    assert m.stats["dist_init_21"] == pytest.approx(np.linalg.norm(q - q0, axis=0).sum())
    k, k0 = w[p + "key.weight"], w0[p + "key.weight"]
    hs = slice(2 * DH, 3 * DH)
    D = q[hs].T @ k[hs] - q0[hs].T @ k0[hs]
    qk = get(stats, "QK", 0, 2)
    assert qk.stats["dist_init_spectral"] == pytest.approx(np.linalg.norm(D, 2), rel=1e-9)
    assert qk.stats["dist_init_fro"] == pytest.approx(np.linalg.norm(D), rel=1e-9)
    names = stats.groups["names"]
    assert names == ["layer.0", "layer.1", "embeddings", "head"]
    g = stats.groups["stats"]
    layer1 = [n for n in w if n.startswith("encoder.layer.1.")]
    assert g["dist_init_sq"][1] == pytest.approx(sum(((w[n] - w0[n]) ** 2).sum() for n in layer1))
    assert g["norm_sq"][1] == pytest.approx(sum((w[n] ** 2).sum() for n in layer1))
    assert g["n_params"][1] == sum(w[n].size for n in layer1)
    assert sum(g["n_params"]) == sum(p.numel() for p in model.parameters())
    total = np.sqrt(sum(((w[n] - w0[n]) ** 2).sum() for n in w))
    assert stats.scalars["dist_init_total"].value == pytest.approx(total, rel=1e-12)


def test_user_mapping_for_unknown_names():
    torch.manual_seed(0)
    sd = {}
    for l in range(2):
        for r in ("wq", "wk", "wv", "wo"):
            sd[f"blocks.{l}.{r}.weight"] = torch.randn(N, N)
        sd[f"blocks.{l}.up.weight"] = torch.randn(2 * N, N)
        sd[f"blocks.{l}.down.weight"] = torch.randn(N, 2 * N)
    sd["extra.thing"] = torch.randn(3)
    with pytest.raises(CheckpointError, match="unknown architecture.*mapping"):
        build_layer_map(open_source(sd), n_heads=H)
    mapping = {role: rf"blocks\.(?P<layer>\d+)\.{key}\.weight" for role, key in
               (("q", "wq"), ("k", "wk"), ("v", "wv"), ("o", "wo"), ("ffn_in", "up"),
                ("ffn_out", "down"))}
    stats = measure(sd, n_heads=H, mapping=mapping, progress=False)
    assert stats.model["architecture"] == "custom" and stats.model["n_layers"] == 2
    assert stats.excluded == [{"name": "extra.thing", "reason": "not matched by the user mapping"}]
    q, k = sd["blocks.1.wq.weight"].double().numpy(), sd["blocks.1.wk.weight"].double().numpy()
    np.testing.assert_allclose(get(stats, "QK", 1, 3).singular_values,
                               top_sv(q[3 * DH:].T @ k[3 * DH:], DH), rtol=1e-8)


def test_schatten_grid_in_stats():
    stats = measure(tiny_bert(), progress=False, grid=[0, 0.5, 2], raw=False)
    assert {m.type for m in stats.matrices} == {"QK", "V", "M_in", "M_out"}
    m = get(stats, "V", 0, 1)
    s = m.singular_values
    assert m.stats["schatten_0"] == m.stats["rank"]
    assert m.stats["schatten_0.5"] == pytest.approx(np.sum(s**0.5))
    assert m.stats["schatten_2"] == pytest.approx(m.stats["frobenius"] ** 2)
