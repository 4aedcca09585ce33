"""Hessian probes stacked under ``torch.func`` (forward-over-reverse, vmap over probes): the same
quadratic forms as the per-probe double-backward loop and as an explicit Hessian (float64,
relative 1e-10), P probes in ⌈P / chunk⌉ passes of each term with the chunk from the memory
budget, and a fallback to the loop, recorded in one line, where torch.func cannot trace."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from boundcalc.limits import set_memory_budget
from tests._measure_helpers import Cube, exact_hessian, tiny_mlp
from boundcalc.measure.data import curvature
from boundcalc.measure.data.curvature import (SeededProbes, draw_probes, hutchinson_trace,
                                              probe_batch, quadratic_forms)

MATMULS = {"aten.mm.default", "aten.addmm.default", "aten.bmm.default"}


def _mlp():
    return tiny_mlp(18)


def _terms(model, X, y, size=6):
    n = X.shape[0]
    return [lambda a=a: ((model(X[a:a + size]) - y[a:a + size]) ** 2).sum() / n
            for a in range(0, n, size)]


def _explicit_forms(model, X, y, probes):
    """v_pᵀ (H v)_p for every probe v and parameter tensor p, from the explicit Hessian H of
    the mean squared error (autograd.functional.hessian)."""
    H, names, sizes = exact_hessian(model, X, y)
    V = torch.cat([v.reshape(v.shape[0], -1).double() for v in probes], 1)  # (b, dim)
    off = np.cumsum([0] + sizes)
    VHV = V * (V @ H)
    return torch.stack([VHV[:, off[i]:off[i + 1]].sum(1) for i in range(len(sizes))])


class _Census(TorchDispatchMode):
    """Counts the matmul kernels that actually run (below vmap: a stacked pass is one call)."""

    def __init__(self):
        super().__init__()
        self.matmuls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if str(func) in MATMULS:
            self.matmuls += 1
        return func(*args, **(kwargs or {}))


def _forwards(model):
    calls = [0]
    model.register_forward_pre_hook(lambda m, a: calls.__setitem__(0, calls[0] + 1))
    return calls


def test_stacked_products_equal_the_loop_and_the_explicit_hessian():
    model, X, y = _mlp()
    params = list(model.parameters())
    probes = draw_probes(params, 7, torch.Generator().manual_seed(3))
    exact = _explicit_forms(model, X, y, probes)
    loop = quadratic_forms(model, _terms(model, X, y), probes, method="autograd", inner=1)
    notes: list[str] = []
    stacked = quadratic_forms(model, _terms(model, X, y), probes, method="func", inner=3,
                              notes=notes)
    # float64 on a 113-parameter model: relative 1e-10 (what is left is summation order)
    torch.testing.assert_close(stacked, loop, rtol=1e-10, atol=1e-13)
    torch.testing.assert_close(stacked, exact, rtol=1e-10, atol=1e-13)
    assert notes == ["torch.func forward-over-reverse (jvp of grad), up to 3 probes stacked "
                     "under vmap per pass of each term"]
    # the Hutchinson estimate itself: the same per-probe samples by either route
    a = hutchinson_trace(model, _terms(model, X, y), n_probes=9, seed=2, method="autograd")
    b = hutchinson_trace(model, _terms(model, X, y), n_probes=9, seed=2, method="func")
    np.testing.assert_allclose(b.samples, a.samples, rtol=1e-10, atol=1e-13)
    assert b.total.estimated and a.total.method == b.total.method  # labelling unchanged
    assert "stacked under vmap" in b.route and "one probe at a time" in a.route


@pytest.mark.parametrize("P,chunk", [(7, 3), (7, 7), (5, 1), (8, 4)])
def test_p_probes_take_ceil_p_over_chunk_stacked_passes(P, chunk):
    model, X, y = _mlp()
    terms = _terms(model, X, y)  # 3 terms
    calls = _forwards(model)
    src = SeededProbes(list(model.parameters()), 1, seed=0)
    with _Census() as one:
        quadratic_forms(model, terms, src, method="func", inner=1)
    per_pass, per_pass_forwards = one.matmuls, calls[0]
    assert per_pass > 0 and per_pass_forwards == len(terms)
    calls[0] = 0
    src = SeededProbes(list(model.parameters()), P, seed=0)
    with _Census() as many:
        quadratic_forms(model, terms, src, method="func", inner=chunk)
    passes = math.ceil(P / chunk)
    assert calls[0] == passes * len(terms)
    assert many.matmuls == passes * per_pass
    if chunk > 1:  # the loop would take P passes
        assert many.matmuls < P * per_pass


def test_the_chunk_follows_the_memory_budget():
    model, X, y = _mlp()
    n_par = sum(p.numel() for p in model.parameters())  # 113 float64 values
    per_probe = 4 * n_par * 8  # probe, tangent, gradient, product
    cpu = torch.device("cpu")
    assert probe_batch(9, n_par, 8, cpu) == 1  # the CPU's default route: one probe a call
    assert probe_batch(9, n_par, 8, cpu, budget=4 * per_probe * 3, stacked=True) == 3
    calls = _forwards(model)
    terms = _terms(model, X, y)
    try:
        set_memory_budget(4 * per_probe * 3)  # room for three stacked probes
        tr = hutchinson_trace(model, terms, n_probes=9, seed=1, method="func", groups=None)
        assert calls[0] == 3 * len(terms)  # ⌈9 / 3⌉ passes of each term
        assert "up to 3 probes" in tr.route
        calls[0] = 0
        set_memory_budget(1 << 30)
        tr = hutchinson_trace(model, terms, n_probes=9, seed=1, method="func", groups=None)
        assert calls[0] == len(terms)  # all nine in one pass
    finally:
        set_memory_budget(None)


def _hooked_mlp():
    """A model with a forward hook that reads its activations to numpy (as logging hooks do):
    torch.func's wrapped tensors refuse that."""
    model, X, y = _mlp()
    seen = []
    model[1].register_forward_hook(lambda m, a, out: seen.append(out.detach().numpy().mean()))
    return model, X, y


@pytest.mark.parametrize("build,loss", [
    (_mlp, lambda m, X, y: Cube.apply(m(X) - y).mean()),
    (_hooked_mlp, lambda m, X, y: ((m(X) - y) ** 2).mean())])
def test_untraceable_models_fall_back_to_the_loop_with_a_note(monkeypatch, build, loss):
    model, X, y = build()
    terms = [lambda: loss(model, X, y)]
    probes = draw_probes(list(model.parameters()), 4, torch.Generator().manual_seed(0))
    with pytest.raises(Exception):
        quadratic_forms(model, terms, probes, method="func", inner=2)
    ref = quadratic_forms(model, terms, probes, method="autograd")
    monkeypatch.setattr(curvature, "_use_func", lambda method, p: method != "autograd")  # "CUDA"
    notes: list[str] = []
    got = quadratic_forms(model, terms, probes, method="auto", inner=2, notes=notes)
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-14)
    assert len(notes) == 1 and "\n" not in notes[0]
    assert notes[0].startswith("double backward through each term's retained graph, up to 2 "
                               "probes per call (fallback: torch.func could not trace the model: ")
    tr = hutchinson_trace(model, terms, n_probes=4, seed=0, groups=None)
    assert "fallback: torch.func could not trace the model" in tr.route
    assert tr.total.estimated


class _FakeMeter:
    """A card's memory meter: every one-probe pass peaks at ``peak`` bytes, ``room`` free."""

    def __init__(self, peak: int, room: int):
        self.peak_bytes, self.room_bytes, self.starts = peak, room, 0

    def start(self):
        self.starts += 1

    def peak(self):
        return self.peak_bytes

    def room(self):
        return self.room_bytes


def test_on_a_card_the_first_pass_measures_one_probe_and_sizes_the_stack(monkeypatch):
    model, X, y = _mlp()
    terms = _terms(model, X, y)  # 3 terms
    probes = draw_probes(list(model.parameters()), 7, torch.Generator().manual_seed(1))
    ref = quadratic_forms(model, terms, probes, method="autograd")
    meter = _FakeMeter(peak=100, room=250)  # room for two probes a pass
    monkeypatch.setattr(curvature, "_memory_meter", lambda dev: meter)
    calls = _forwards(model)
    notes: list[str] = []
    got = quadratic_forms(model, terms, probes, method="func", inner=7, notes=notes)
    torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-13)
    assert meter.starts == 1  # measured once, on the first pass
    # first term: 1 probe, then 6 in passes of 2; the others: ⌈7 / 2⌉ = 4 passes each
    assert calls[0] == (1 + 3) + 4 + 4
    assert notes == ["torch.func forward-over-reverse (jvp of grad), up to 2 probes stacked "
                     "under vmap per pass of each term (sized from the peak memory of a "
                     "one-probe pass)"]


def test_a_stack_that_runs_out_of_memory_is_halved_for_every_later_pass(monkeypatch):
    model, X, y = _mlp()
    terms = _terms(model, X, y)
    probes = draw_probes(list(model.parameters()), 8, torch.Generator().manual_seed(2))
    ref = quadratic_forms(model, terms, probes, method="autograd")
    real, sizes = curvature._hvp_func, []

    def tight(model, names, params, term, vs):
        sizes.append(vs[0].shape[0])
        if vs[0].shape[0] > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (stand-in)")
        return real(model, names, params, term, vs)

    monkeypatch.setattr(curvature, "_hvp_func", tight)
    got = quadratic_forms(model, terms, probes, method="func", inner=8)
    torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-13)
    # 8 → 4 → 2 on the first term, then 2 a pass: no term retries the larger stacks
    assert sizes == [8, 4] + [2] * 4 + [2] * 4 + [2] * 4


def test_repeated_traces_measure_the_stack_once(monkeypatch):
    """P̂ takes many traces of one model (perturbed weights, same shapes): the one-probe
    measuring pass runs for the first only, the others reuse its stack size."""
    model, X, y = _mlp()
    terms = _terms(model, X, y)  # 3 terms
    meter = _FakeMeter(peak=100, room=250)
    monkeypatch.setattr(curvature, "_memory_meter", lambda dev: meter)
    calls = _forwards(model)
    sized: list[int] = []
    first = hutchinson_trace(model, terms, n_probes=7, seed=3, method="func", groups=None,
                             sized=sized)
    assert sized == [2] and meter.starts == 1 and calls[0] == (1 + 3) + 4 + 4
    calls[0] = 0
    again = hutchinson_trace(model, terms, n_probes=7, seed=3, method="func", groups=None,
                             sized=sized)
    assert meter.starts == 1 and calls[0] == 3 * 4  # ⌈7 / 2⌉ passes of each term
    np.testing.assert_allclose(again.samples, first.samples, rtol=1e-12, atol=1e-14)
    assert "up to 2 probes" in again.route
