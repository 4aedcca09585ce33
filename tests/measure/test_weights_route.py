"""The weights side's route on a card (measure/weights/route.py), run on the CPU with a stand-in
card: the first layer is measured on the card and the host at once, the other layers go to the
faster, and the statistics are those of the plain route to 1e-12 whichever is chosen."""

from __future__ import annotations

import threading

import pytest
import torch

from boundcalc.measure import measure
from boundcalc.measure.weights import pipeline, route

from test_weights_batched import _assert_same, _bert, _llama


def test_choose_compares_the_expected_times_of_the_other_layers():
    # 11 layers left, 16 host workers: host ⌈11/16⌉·0.2 = 0.2 s, card 11·0.03 = 0.33 s
    assert route.choose(0.03, 0.2, 11, 16) == "host"
    assert route.choose(0.01, 0.2, 11, 16) == "card"  # 0.11 s < 0.2 s
    assert route.choose(0.1, 0.2, 11, 1) == "card"  # 1.1 s < 2.2 s
    assert route.choose(0.2, 0.2, 3, 1) == "host"  # a tie goes to the host
    assert route.choose(0.5, 0.1, 0, 4) == "host"  # nothing left: the host's numbers


@pytest.mark.parametrize("make,chosen", [(_bert, "card"), (_bert, "host"), (_llama, "card"),
                                         (_llama, "host")])
def test_the_route_on_a_stand_in_card_equals_the_plain_route(monkeypatch, make, chosen):
    model, init = make(0), make(1)
    plain = measure(model, init=init, progress=False, device="cpu", grid=[0, 0.5, 2])
    assert "weights_route" not in plain.provenance  # the CPU route is not timed
    on_card: list[tuple[int, bool]] = []
    main = threading.main_thread()

    def card_layout(W):  # the card computes from the main thread, the host in other threads
        here = threading.current_thread() is main
        on_card.append((len(on_card), here))
        return here

    monkeypatch.setattr(pipeline, "routed", lambda dev: True)
    monkeypatch.setattr(pipeline, "_batched", card_layout)
    monkeypatch.setattr(route, "choose", lambda *a: chosen)
    seen = {}
    real = route.Route.first

    def first(self, compute, W, W0, layer, n_left):
        seen.update(layer=layer, n_left=n_left, host_tensors=all(not t.is_cuda
                                                                  for t in W.values()))
        return real(self, compute, W, W0, layer, n_left)

    monkeypatch.setattr(route.Route, "first", first)
    routed = measure(model, init=init, progress=False, device="cpu", grid=[0, 0.5, 2])
    assert seen == {"layer": 0, "n_left": 1, "host_tensors": True}
    _assert_same(plain, routed, rel=1e-12)
    rec = routed.provenance["weights_route"]
    assert rec["device"] == "cpu" and "layer 0 measured on both" in rec["rule"]
    # layer 0 ran in both layouts; layer 1 only in the chosen one
    layouts = [here for _, here in on_card]
    assert True in layouts and False in layouts
    if chosen == "card":  # layer 1 from the main thread, the card's layout
        assert layouts.count(True) == 2 and layouts.count(False) == 1
    else:
        assert layouts.count(True) == 1


def test_an_error_on_the_host_side_of_the_first_layer_is_raised_not_lost(monkeypatch):
    model = _bert(0)
    monkeypatch.setattr(pipeline, "routed", lambda dev: True)
    calls = []
    real = pipeline._layer_matrices

    def failing(lmap, layer, W, W0, raw, grid):
        calls.append(threading.current_thread() is threading.main_thread())
        if not calls[-1]:
            raise RuntimeError("host LAPACK failed")
        return real(lmap, layer, W, W0, raw, grid)

    monkeypatch.setattr(pipeline, "_layer_matrices", failing)
    with pytest.raises(Exception, match="host LAPACK failed"):
        measure(model, progress=False, device="cpu")
