"""The weights side's route on a card (measure/weights/route.py), run on the CPU with a stand-in
card: the layers are shared between one card worker and the host's workers, each layer measured
whole by one side, and the statistics are those of the plain route to 1e-12 whoever measured
which layer; a layer the card fails on is measured by the host; errors are raised, not lost."""

from __future__ import annotations

import threading

import pytest
import torch

from boundcalc.measure import measure
from boundcalc.measure.weights import pipeline, route
from boundcalc.words import NO_VALUE, Words, option, use_words

from test_weights_batched import _assert_same, _bert, _llama


def _stand_in_card(monkeypatch, n_host: int) -> list[tuple[int, str]]:
    """Route the CPU like a card; the card's layout (batched, one readback per layer) on the
    card worker's thread. Returns (layer, thread) per layer computation."""
    seen: list[tuple[int, str]] = []
    real = pipeline._layer_matrices

    def spy(lmap, layer, W, W0, raw, grid):
        seen.append((layer, threading.current_thread().name))
        return real(lmap, layer, W, W0, raw, grid)

    monkeypatch.setattr(pipeline, "routed", lambda dev: True)
    monkeypatch.setattr(pipeline, "host_workers", lambda hidden: n_host)
    monkeypatch.setattr(pipeline, "_layer_matrices", spy)
    monkeypatch.setattr(pipeline, "_batched",
                        lambda W: threading.current_thread().name == route.CARD_THREAD)
    return seen


def _deep_bert(seed: int):
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    return BertModel(BertConfig(hidden_size=32, num_hidden_layers=6, num_attention_heads=4,
                                intermediate_size=64, vocab_size=50,
                                max_position_embeddings=16)).eval()


@pytest.mark.parametrize("make,n_host", [(_bert, 2), (_llama, 1), (_deep_bert, 2),
                                         (_deep_bert, 0)])
def test_shared_layers_equal_the_plain_route(monkeypatch, make, n_host):
    model, init = make(0), make(1)
    plain = measure(model, init=init, progress=False, device="cpu", grid=[0, 0.5, 2])
    assert "weights_route" not in plain.provenance  # the CPU alone is not routed
    seen = _stand_in_card(monkeypatch, n_host)
    shared = measure(model, init=init, progress=False, device="cpu", grid=[0, 0.5, 2])
    _assert_same(plain, shared, rel=1e-12)
    rec = shared.provenance["weights_route"]
    n_layers = plain.model["n_layers"]
    # every layer measured exactly once, by the side the record names
    assert sorted(rec["card_layers"] + rec["host_layers"]) == list(range(n_layers))
    assert sorted(layer for layer, _ in seen) == list(range(n_layers))
    by_card = sorted(layer for layer, name in seen if name == route.CARD_THREAD)
    assert by_card == rec["card_layers"]
    if n_host == 0:  # the card alone (what the benchmarks use for the card's own numbers)
        assert rec["host_layers"] == []
    assert f"{n_host} host worker(s)" in rec["rule"]


def test_a_layer_the_card_fails_on_is_measured_by_the_host(monkeypatch):
    model = _deep_bert(0)
    plain = measure(model, progress=False, device="cpu")
    _stand_in_card(monkeypatch, 0)  # the card alone: every layer goes to it first
    real = pipeline._layer_matrices

    def card_fails_on_odd_layers(lmap, layer, W, W0, raw, grid):
        if threading.current_thread().name == route.CARD_THREAD and layer % 2 and \
                pipeline._batched(W["q"]) and not getattr(W["q"], "_host_retry", False):
            for t in W.values():
                t._host_retry = True
            raise torch.OutOfMemoryError("CUDA out of memory (stand-in)")
        return real(lmap, layer, W, W0, raw, grid)

    monkeypatch.setattr(pipeline, "_layer_matrices", card_fails_on_odd_layers)
    shared = measure(model, progress=False, device="cpu")
    _assert_same(plain, shared, rel=1e-12)
    rec = shared.provenance["weights_route"]
    assert rec["card_layers"] == [0, 2, 4] and rec["host_layers"] == [1, 3, 5]


def test_an_error_in_a_layer_is_raised_not_lost(monkeypatch):
    model = _deep_bert(0)
    _stand_in_card(monkeypatch, 2)
    real = pipeline._layer_matrices

    def failing(lmap, layer, W, W0, raw, grid):
        if layer == 3:
            raise RuntimeError("LAPACK failed on layer 3")
        return real(lmap, layer, W, W0, raw, grid)

    monkeypatch.setattr(pipeline, "_layer_matrices", failing)
    with pytest.raises(Exception, match="LAPACK failed on layer 3"):
        measure(model, progress=False, device="cpu")
    # the workers are gone: no thread of the route is left behind
    assert not [t for t in threading.enumerate() if t.name.startswith("boundcalc-weights")]


class _Marked(Words):
    """Words no front end uses, to see which words a worker thread speaks."""

    def option(self, name, value=NO_VALUE):
        return f"<{name}>"


@pytest.mark.parametrize("routed_like_a_card", [False, True])
def test_worker_threads_speak_the_callers_words(monkeypatch, routed_like_a_card):
    """A layer measured in a worker thread (the host's pool, or the card's and host's workers)
    names options in the words of the caller's scope, as the caller's own thread does: the
    CLI's flags inside a command, not the API's keywords."""
    said: list[tuple[str, str]] = []
    real = pipeline._layer_matrices

    def speaking(lmap, layer, W, W0, raw, grid):
        said.append((threading.current_thread().name, option("tune_data", 5)))
        return real(lmap, layer, W, W0, raw, grid)

    model, init = _deep_bert(0), _deep_bert(1)
    if routed_like_a_card:
        monkeypatch.setattr(pipeline, "routed", lambda dev: True)
        monkeypatch.setattr(pipeline, "host_workers", lambda hidden: 2)
    else:
        monkeypatch.setattr(pipeline, "layer_workers", lambda hidden, dev: 3)
    monkeypatch.setattr(pipeline, "_layer_matrices", speaking)
    with use_words(_Marked()):
        measure(model, init=init, progress=False, device="cpu", grid=[0, 0.5, 2])
    assert len(said) == 6
    here = threading.current_thread().name
    assert any(name != here for name, _ in said)  # the layers really ran in other threads
    assert {text for _, text in said} == {"<tune_data>"}
    assert option("tune_data", 5) == "tune_data=5"  # the scope ended with the block


def test_a_card_still_warming_takes_no_layer_and_is_not_waited_for(monkeypatch):
    """A cold card (its context and solver still loading) takes no layer: the host's workers
    measure every layer, the statistics are the plain route's, and measure returns while the
    card is still warming (the warm-up is held until after measure returned); the card's
    thread then ends by itself."""
    model, init = _deep_bert(0), _deep_bert(1)
    plain = measure(model, init=init, progress=False, device="cpu", grid=[0, 0.5, 2])
    seen = _stand_in_card(monkeypatch, 2)
    release, started = threading.Event(), threading.Event()

    def cold(card):
        started.set()
        assert release.wait(30), "measure waited for the card's warm-up"

    monkeypatch.setattr(route, "warm_up", cold)
    shared = measure(model, init=init, progress=False, device="cpu", grid=[0, 0.5, 2])
    assert started.is_set() and not release.is_set()  # returned with the card still cold
    release.set()
    _assert_same(plain, shared, rel=1e-12)
    rec = shared.provenance["weights_route"]
    assert rec["card_layers"] == [] and rec["host_layers"] == list(range(6))
    assert rec["card_warm_s"] is None  # not warm when the record was taken
    assert all(name != route.CARD_THREAD for _, name in seen)
    for t in [t for t in threading.enumerate() if t.name == route.CARD_THREAD]:
        t.join(10)
        assert not t.is_alive()


def test_a_card_that_cannot_start_works_as_a_host_worker(monkeypatch):
    """The card alone (no host workers) whose warm-up fails: its worker measures every layer
    on the host, the record names the error."""
    model = _deep_bert(0)
    plain = measure(model, progress=False, device="cpu")
    _stand_in_card(monkeypatch, 0)

    def broken(card):
        raise RuntimeError("CUDA driver initialization failed (stand-in)")

    monkeypatch.setattr(route, "warm_up", broken)
    shared = measure(model, progress=False, device="cpu")
    _assert_same(plain, shared, rel=1e-12)
    rec = shared.provenance["weights_route"]
    assert rec["card_layers"] == [] and rec["host_layers"] == list(range(6))
    assert "driver initialization failed" in rec["card_error"]
