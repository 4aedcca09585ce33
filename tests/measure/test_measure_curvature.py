"""Hutchinson trace vs the exact Hessian; Gaussian noise; Monte Carlo kl upper end."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from _measure_helpers import one_thread  # noqa: F401  (autouse fixture)

from boundcalc.errors import BoundcalcError, DomainError
from boundcalc.measure.data.curvature import hutchinson_trace
from boundcalc.measure.data.gibbs import monte_carlo_gibbs_risk, perturbed
from tests._measure_helpers import tiny_mlp


def _tiny_mlp():
    return tiny_mlp(20)


def _exact_hessian(model, X, y):
    from tests._measure_helpers import exact_hessian

    Hm, names, sizes = exact_hessian(model, X, y)
    return Hm.numpy(), names, sizes


def test_hutchinson_ci_contains_exact_trace_and_shrinks():
    model, X, y = _tiny_mlp()
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params <= 300
    Hm, names, sizes = _exact_hessian(model, X, y)
    exact = float(np.trace(Hm))

    def closure():
        return ((model(X) - y) ** 2).mean()

    small = hutchinson_trace(model, closure, n_probes=400, seed=1)
    big = hutchinson_trace(model, closure, n_probes=1600, seed=1)
    for est in (small, big):
        q = est.total
        assert q.estimated and q.confidence == 0.95 and "400" in small.total.method
        assert q.ci[0] <= exact <= q.ci[1], (exact, q.ci)
    width = lambda q: q.ci[1] - q.ci[0]
    assert width(big.total) < 0.75 * width(small.total)
    # per-group estimates target the diagonal-block traces and add up to the total
    offsets = np.cumsum([0] + sizes)
    block = {}
    for i, name in enumerate(names):
        g = f"layer.{name.split('.')[0]}"
        block[g] = block.get(g, 0.0) + np.trace(Hm[offsets[i]:offsets[i + 1],
                                                   offsets[i]:offsets[i + 1]])
    assert set(big.groups) == set(block) == {"layer.0", "layer.2", "layer.4"}
    # three group intervals at once: Bonferroni, each at 1 − 0.05/3 (≈ 98.3 %, here 99 %)
    wide = hutchinson_trace(model, closure, n_probes=1600, seed=1, confidence=0.99)
    assert wide.total.value == big.total.value
    for g, q in wide.groups.items():
        assert q.ci[0] - 1e-9 <= block[g] <= q.ci[1] + 1e-9, (g, block[g], q.ci)
    assert sum(q.value for q in big.groups.values()) == pytest.approx(big.total.value)


def test_hutchinson_is_reproducible_and_validates():
    model, X, y = _tiny_mlp()
    closure = lambda: ((model(X) - y) ** 2).mean()
    a = hutchinson_trace(model, closure, n_probes=8, seed=4)
    b = hutchinson_trace(model, closure, n_probes=8, seed=4)
    assert a.total.value == b.total.value
    with pytest.raises(Exception, match="n_probes"):
        hutchinson_trace(model, closure, n_probes=1)


def test_injected_noise_has_std_sigma_and_is_undone():
    torch.manual_seed(0)
    model = torch.nn.Linear(300, 200).double()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    sigma = 0.03
    with perturbed(model, sigma, torch.Generator().manual_seed(7)):
        diff = torch.cat([(p.detach() - before[n]).reshape(-1)
                          for n, p in model.named_parameters()]).numpy()
    assert diff.size == 300 * 200 + 200
    assert np.std(diff) == pytest.approx(sigma, rel=0.02)
    assert abs(np.mean(diff)) < 4 * sigma / math.sqrt(diff.size)
    for n, p in model.named_parameters():
        assert torch.equal(p.detach(), before[n])


def _independent_kl_upper(q, c):
    def kl(a, b):
        t = 0.0
        if a > 0:
            t += a * math.log(a / b)
        if a < 1:
            t += (1 - a) * math.log((1 - a) / (1 - b))
        return t

    lo, hi = q, 1.0 - 1e-15
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if kl(q, mid) <= c else (lo, mid)
    return hi


def test_monte_carlo_kl_upper_end():
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 1).double()
    X = torch.randn(200, 5, dtype=torch.float64)
    y = (X[:, 0] > 0).double()

    def zero_one():
        return ((model(X)[:, 0] > 0).double() != y).double().mean()

    res = monte_carlo_gibbs_risk(model, zero_one, sigma=0.3, k=40, delta_prime=0.05, seed=2)
    assert res.losses.shape == (40,) and np.all((res.losses >= 0) & (res.losses <= 1))
    assert res.mean.value == pytest.approx(res.losses.mean()) and res.mean.estimated
    ref = _independent_kl_upper(res.mean.value, math.log(2 / 0.05) / 40)
    assert res.upper.value >= res.mean.value
    assert res.upper.value == pytest.approx(ref, abs=1e-9)
    assert res.upper.confidence == pytest.approx(0.95)
    # the draws really perturb the model: the losses are not all equal
    assert np.unique(res.losses).size > 1


def test_monte_carlo_rejects_loss_outside_unit_interval():
    model = torch.nn.Linear(2, 1).double()
    with pytest.raises(DomainError, match=r"\[0, 1\]"):
        monte_carlo_gibbs_risk(model, lambda: torch.tensor(1.5), sigma=0.1, k=3)


def test_trace_groups_align_with_stats_groups_and_round_trip(tmp_path):
    from _measure_helpers import tiny_bert

    from boundcalc.measure import attach_hessian_trace, measure, param_groups
    from boundcalc.stats import load_stats

    ids = torch.tensor([[1, 5, 7, 2]])
    sdpa = tiny_bert()
    if sdpa.config._attn_implementation == "sdpa":  # fused attention has no double backward
        with pytest.raises(BoundcalcError, match="eager"):
            hutchinson_trace(sdpa, lambda: sdpa(input_ids=ids).last_hidden_state.pow(2).mean(),
                             n_probes=2, groups=None)
    model = tiny_bert(attn="eager")
    closure = lambda: model(input_ids=ids).last_hidden_state.pow(2).mean()
    groups = param_groups(model)
    assert groups["encoder.layer.1.output.dense.weight"] == "layer.1"
    assert groups["embeddings.word_embeddings.weight"] == "embeddings"
    trace = hutchinson_trace(model, closure, n_probes=4, groups=groups, seed=0)
    stats = attach_hessian_trace(measure(model, progress=False, raw=False), trace)
    back = load_stats(stats.save(tmp_path / "s.json"))
    names = back.groups["names"]
    assert back.scalars["hessian_trace"].estimated
    assert back.groups["estimated"] == {"hessian_trace": True}
    per = dict(zip(names, back.groups["stats"]["hessian_trace"]))
    assert per["layer.0"] == pytest.approx(trace.groups["layer.0"].value)
    assert sum(per.values()) == pytest.approx(trace.total.value)


def _batch_terms(model, X, y, size):
    """The mean squared error as one term per batch of ``size`` samples (share-weighted)."""
    n = X.shape[0]
    return [lambda a=a: ((model(X[a:a + size]) - y[a:a + size]) ** 2).sum() / n
            for a in range(0, n, size)]


@pytest.mark.parametrize("method,inner", [("autograd", 1), ("autograd", 3), ("func", 1),
                                          ("func", 4)])
def test_streamed_quadratic_forms_equal_the_whole_graph_double_backward(method, inner):
    from boundcalc.measure.data.curvature import _hvp_batch, draw_probes, quadratic_forms

    model, X, y = _tiny_mlp()
    params = list(model.parameters())
    probes = draw_probes(params, 7, torch.Generator().manual_seed(3))
    assert all(p.dtype == torch.int8 and set(p.unique().tolist()) == {-1, 1} for p in probes)
    # the old path: one graph over all samples, double backward one probe at a time
    loss = ((model(X) - y) ** 2).mean()
    grads = torch.autograd.grad(loss, params, create_graph=True)
    vs = [v.double() for v in probes]
    hv = _hvp_batch(list(grads), params, vs, False)
    old = torch.stack([(v * h).reshape(7, -1).sum(1) for v, h in zip(vs, hv)])
    new = quadratic_forms(model, _batch_terms(model, X, y, 6), probes, method=method,
                          inner=inner)
    assert new.shape == (len(params), 7) and new.dtype == torch.float64
    torch.testing.assert_close(new, old, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("method", ["autograd", "func"])
def test_streamed_hutchinson_mean_agrees_with_the_exact_trace(method):
    model, X, y = _tiny_mlp()
    exact = float(np.trace(_exact_hessian(model, X, y)[0]))
    # a 99.9 % interval: a miss is then a real disagreement, not the 1-in-20 of a 95 % one
    est = hutchinson_trace(model, _batch_terms(model, X, y, 7), n_probes=600, seed=11,
                           method=method, confidence=0.999)
    q = est.total
    assert q.ci[0] <= exact <= q.ci[1], (exact, q.ci)
    assert q.ci[1] - q.ci[0] < 0.5 * abs(exact)  # the interval is informative
    # the per-probe samples are those of the one-closure (whole-sample) estimate, same seed
    whole = hutchinson_trace(model, lambda: ((model(X) - y) ** 2).mean(), n_probes=600, seed=11,
                             method="autograd", confidence=0.999)
    np.testing.assert_allclose(est.samples, whole.samples, rtol=1e-10, atol=1e-12)


def test_seeded_probes_are_the_same_however_they_are_batched():
    from boundcalc.measure.data.curvature import SeededProbes, probe_batch, quadratic_forms

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert probe_batch(20, 10**6, 4, cpu) == 1  # a CPU: one probe through the retained graph
    assert probe_batch(20, 10**6, 4, cuda, budget=2**30) == 16  # 2^28 B / (4 copies × 4 MB)
    assert probe_batch(20, 10**9, 4, cuda, budget=2**30) == 1
    model, X, y = _tiny_mlp()
    params = list(model.parameters())
    src = SeededProbes(params, 7, seed=5)
    all7, mid = src(0, 7), src(2, 5)
    assert all(a.dtype == torch.int8 and a.shape == (7, *p.shape) for a, p in zip(all7, params))
    assert all(torch.equal(a[2:5], m) for a, m in zip(all7, mid))
    assert not torch.equal(all7[0][0], all7[0][1])  # different probes
    other = SeededProbes(params, 7, seed=6)(0, 7)
    assert not all(torch.equal(a, b) for a, b in zip(all7, other))
    terms = _batch_terms(model, X, y, 5)
    one = quadratic_forms(model, terms, src, method="autograd", inner=1)
    three = quadratic_forms(model, terms, src, method="autograd", inner=3)
    listed = quadratic_forms(model, terms, all7, method="autograd")
    torch.testing.assert_close(three, one, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(listed, one, rtol=1e-12, atol=1e-12)
    # the whole estimate does not depend on the probe batch either
    a = hutchinson_trace(model, terms, n_probes=9, seed=1, batch_size=1)
    b = hutchinson_trace(model, terms, n_probes=9, seed=1, batch_size=4, method="func")
    np.testing.assert_allclose(a.samples, b.samples, rtol=1e-10, atol=1e-12)


def test_func_hvps_fall_back_to_double_backward_where_forward_mode_has_no_rule(monkeypatch):
    from boundcalc.measure.data import curvature
    from boundcalc.measure.data.curvature import draw_probes, quadratic_forms

    from tests._measure_helpers import Cube

    model, X, y = _tiny_mlp()
    terms = [lambda: Cube.apply(model(X) - y).mean()]
    probes = draw_probes(list(model.parameters()), 3, torch.Generator().manual_seed(0))
    with pytest.raises(Exception):
        quadratic_forms(model, terms, probes, method="func")
    ref = quadratic_forms(model, terms, probes, method="autograd")
    monkeypatch.setattr(curvature, "_use_func", lambda method, p: method != "autograd")  # "CUDA"
    torch.testing.assert_close(quadratic_forms(model, terms, probes, method="auto"), ref)
