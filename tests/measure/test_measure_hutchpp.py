"""Hutch++ Hessian trace against the exact trace of small real models (torch's full Hessian)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from boundcalc.errors import BoundcalcError
from boundcalc.measure import hutchinson_trace, hutchpp_trace


def _setup(seed: int = 0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3)).double()
    X = torch.randn(40, 6, dtype=torch.float64)
    y = torch.randint(0, 3, (40,))
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(50):  # a trained point, not the initialisation
        opt.zero_grad()
        nn.functional.cross_entropy(model(X), y).backward()
        opt.step()
    closure = lambda: nn.functional.cross_entropy(model(X), y)  # noqa: E731
    return model, closure


def _exact_trace(model, closure) -> float:
    """Σ_i ∂²L/∂θ_i², one autograd row of the full Hessian at a time."""
    params = list(model.parameters())
    grads = torch.autograd.grad(closure(), params, create_graph=True)
    g = torch.cat([x.reshape(-1) for x in grads])
    total = 0.0
    for i in range(g.numel()):
        row = torch.autograd.grad(g[i], params, retain_graph=True)
        total += float(torch.cat([r.reshape(-1) for r in row])[i])
    return total


def test_full_sketch_gives_the_exact_trace():
    model, closure = _setup()
    exact = _exact_trace(model, closure)
    dim = sum(p.numel() for p in model.parameters())
    est = hutchpp_trace(model, closure, sketch=dim, n_probes=4, seed=3)
    # Q spans the whole space: the residual is zero up to round-off
    assert est.total.value == pytest.approx(exact, rel=1e-9, abs=1e-9)
    assert est.hvps == 2 * dim + 4
    assert est.total.estimated


def test_small_sketch_interval_covers_the_exact_trace_with_fewer_products():
    model, closure = _setup(1)
    exact = _exact_trace(model, closure)
    plain = hutchinson_trace(model, closure, n_probes=200, groups=None, seed=5)
    h_plain = (plain.total.ci[1] - plain.total.ci[0]) / 2
    est = hutchpp_trace(model, closure, sketch=8, halfwidth=h_plain, pilot=10, seed=5)
    lo, hi = est.total.ci
    assert lo <= exact <= hi
    assert (hi - lo) / 2 <= h_plain * (1 + 1e-12)  # Stein's two-stage: half-width ≤ target
    n = est.hvps - 16
    assert n >= 11 and est.hvps < plain.hvps == 200
    assert "Stein" in est.total.method and "hutch++" in est.total.method


def test_fixed_probe_count_interval_is_exact_part_plus_residual_t_interval():
    from scipy import stats

    model, closure = _setup(2)
    est = hutchpp_trace(model, closure, sketch=4, n_probes=30, seed=9)
    res = est.samples  # per-probe totals: exact part + residual sample
    half = stats.t.ppf(0.975, 29) * res.std(ddof=1) / math.sqrt(30)
    assert est.total.ci == pytest.approx((res.mean() - half, res.mean() + half), rel=1e-12)
    assert est.hvps == 8 + 30


@pytest.mark.parametrize("kw, needle", [({"sketch": 0}, "sketch"), ({"n_probes": 1}, "n_probes"),
                                        ({"halfwidth": -1.0}, "halfwidth"),
                                        ({"confidence": 1.5}, "confidence")])
def test_bad_arguments_name_the_culprit(kw, needle):
    model, closure = _setup()
    with pytest.raises(BoundcalcError, match=needle):
        hutchpp_trace(model, closure, **kw)
