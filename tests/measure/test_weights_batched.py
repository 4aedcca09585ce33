"""The CUDA layout of the weights side (batched SVDs, statistics kept on the device, one host
readback per layer), run on the CPU by forcing it, against the per-matrix path that the CPU
takes; on a machine with CUDA also the real device path against the CPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from _measure_helpers import one_thread  # noqa: F401  (autouse fixture)

from boundcalc.measure import measure
from boundcalc.measure.weights import pipeline, spectra
from boundcalc.measure.weights.spectra import (finish, matrix_parts, matrix_stats, svdvals,
                                               svdvals_many, to_host)


def _bert(seed: int):
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    return BertModel(BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=128, vocab_size=50,
                                max_position_embeddings=16)).eval()


def _llama(seed: int):  # gated FFN and grouped KV heads (4 query heads over 2)
    from transformers import LlamaConfig, LlamaModel

    torch.manual_seed(seed)
    return LlamaModel(LlamaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, intermediate_size=48,
                                  vocab_size=50)).eval()


def _count_to_host(monkeypatch) -> list[int]:
    """Patch pipeline.to_host with a counter; returns the list it appends to (one per call)."""
    calls: list[int] = []
    real = pipeline.to_host

    def counted(parts):
        calls.append(len(parts))
        return real(parts)

    monkeypatch.setattr(pipeline, "to_host", counted)
    return calls


def _assert_same(plain, batched, rel: float = 1e-12) -> None:
    assert len(plain.matrices) == len(batched.matrices)
    for a, b in zip(plain.matrices, batched.matrices):
        assert (a.type, a.layer, a.head, a.name, a.shape) == (b.type, b.layer, b.head, b.name,
                                                              b.shape)
        assert set(a.stats) == set(b.stats)
        for key, v in a.stats.items():
            assert b.stats[key] == pytest.approx(v, rel=rel, abs=0), (a.name, key)
        assert (a.singular_values is None) == (b.singular_values is None), a.name
        if a.singular_values is not None:
            np.testing.assert_allclose(b.singular_values, a.singular_values, rtol=rel,
                                       atol=rel * a.singular_values[0], err_msg=a.name)


@pytest.mark.parametrize("case", ["bert", "bert_init", "bert_init_ffn_only", "llama_init"])
def test_batched_layer_path_equals_the_per_matrix_path(monkeypatch, case):
    make = _llama if case.startswith("llama") else _bert
    kw = {"init": make(1)} if "init" in case else {}
    kw.update(raw="ffn_only" not in case, grid=[0, 0.5, 2])
    model = make(0)
    calls = _count_to_host(monkeypatch)
    plain = measure(model, progress=False, device="cpu", **kw)
    assert calls == []  # the CPU takes the per-matrix path
    monkeypatch.setattr(pipeline, "_batched", lambda W: True)
    batched = measure(model, progress=False, device="cpu", **kw)
    assert len(calls) == 2 and calls[0] == len(plain.matrices) // 2  # one readback per layer
    _assert_same(plain, batched)
    types = {m.type for m in plain.matrices}
    assert {"QK", "V", "M_in", "M_out"} <= types and ("q" in types) == kw["raw"]
    if "init" in case:
        assert all("dist_init_spectral" in m.stats for m in plain.matrices)
    if case.startswith("llama"):
        assert "M_gate" in types


def test_batched_layer_function_reads_back_once_and_converts_nothing_before(monkeypatch):
    """Per layer exactly one to_host call, and no tensor→Python conversion (each a host
    synchronisation on CUDA) happens before it."""
    model, init = _bert(0), _bert(1)
    from boundcalc.measure.architectures import build_layer_map
    from boundcalc.measure.io import open_source

    src = open_source(model)
    lmap = build_layer_map(src)
    W, W0 = pipeline._layer_inputs(src, open_source(init), lmap, 0, {}, {}, torch.device("cpu"))
    events: list[str] = []
    real_to_host = pipeline.to_host

    def to_host(parts):
        events.append("to_host")
        return real_to_host(parts)

    monkeypatch.setattr(pipeline, "to_host", to_host)
    for name in ("__float__", "__int__", "__bool__", "item", "tolist", "numpy"):
        real = getattr(torch.Tensor, name)

        def spy(self, *a, _real=real, _name=name, **k):
            events.append(_name)
            return _real(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, spy)
    out = pipeline._layer_matrices_batched(lmap, 0, W, W0, True, None)
    monkeypatch.undo()
    assert events.count("to_host") == 1
    assert events.index("to_host") == 0, events[:5]  # conversions only after the readback
    assert len(events) > 1 and len(out) == 6 + 2 * lmap.n_heads + 2  # BERT: no gate


def test_svdvals_many_mixed_shapes_equal_per_matrix_svdvals(monkeypatch):
    g = torch.Generator().manual_seed(3)
    shapes = [(12, 12), (30, 12), (12, 30), (12, 12), (7, 5), (40, 12), (12, 40), (5, 7)]
    mats = [torch.randn(*s, generator=g, dtype=torch.float64) for s in shapes]
    one = [svdvals(W) for W in mats]
    for cap in (spectra._STACK_BYTES, 12 * 12 * 8):  # one stack per shape; one matrix per call
        monkeypatch.setattr(spectra, "_STACK_BYTES", cap)
        many = svdvals_many(mats)
        assert len(many) == len(mats)
        for W, a, b in zip(mats, one, many):
            assert b.shape == (min(W.shape),)
            np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-12, atol=0)
            dense = np.linalg.svd(W.numpy(), compute_uv=False)
            np.testing.assert_allclose(b.numpy(), dense, rtol=1e-12)
    assert svdvals_many([]) == []


def test_to_host_packs_every_tensor_back_to_its_place():
    g = torch.Generator().manual_seed(5)
    W, W0 = (torch.randn(9, 4, generator=g, dtype=torch.float64) for _ in range(2))
    V = torch.randn(6, 6, generator=g, dtype=torch.float64)
    parts = [matrix_parts(W, W0=W0), matrix_parts(V)]
    host = to_host(parts)
    assert host is not parts and host[0] is not parts[0]
    for p, h in zip(parts, host):
        assert p.keys() == h.keys()
        for k, v in p.items():
            if isinstance(v, torch.Tensor):
                assert h[k].shape == v.shape and torch.equal(h[k], v), k
            else:
                assert h[k] == v
    stats, sv = finish(host[0])
    assert stats == matrix_stats(W, W0=W0)[0]
    assert stats["dist_init_spectral"] == pytest.approx(
        np.linalg.svd((W - W0).numpy(), compute_uv=False)[0], rel=1e-12)
    assert finish(host[1])[0] == matrix_stats(V)[0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_takes_the_batched_path_and_equals_the_cpu(monkeypatch):
    model, init = _bert(0), _bert(1)
    cpu = measure(model, init=init, progress=False, device="cpu")
    calls = _count_to_host(monkeypatch)
    monkeypatch.setattr(pipeline, "host_workers", lambda hidden: 0)  # the card alone
    gpu = measure(model, init=init, progress=False, device="cuda")
    assert gpu.provenance["weights_route"]["card_layers"] == [0, 1]
    assert len(calls) == 2
    _assert_same(cpu, gpu, rel=1e-10)
