"""The subspace Gibbs posterior (boundcalc/measure/data/subspace.py): every row's output at its
draw is the output of an explicit model whose weights are the prior's plus c·B·(z + s_Q·E) for
that row's E (and a variant sharing one draw over the rows, or with the wrong scale, is not);
its Monte Carlo Gibbs risk equals independent explicit weight draws within both intervals; the
KL is the closed form computed here at 50 digits; the training gradient is the objective's
finite difference;
the subspace's size and refusals."""

from __future__ import annotations

import copy
import math

import mpmath as mp
import numpy as np
import pytest
import torch

from _reference import kl_inv_exact
from boundcalc.errors import BoundcalcError
from boundcalc.measure.data.subspace import (Subspace, SubspaceSpec, gibbs_errors, kl_subspace,
                                             train_subspace)
from tests._measure_helpers import single_thread
from tests.measure.test_bound_posterior import _tiny

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def one_thread():
    with single_thread():
        yield


def _subspace(rank=2, sigma=0.3, layers="all", seed=0):
    """The tiny BERT's prior with random coordinates z (so the mean is not the prior) and a
    posterior std large enough that the draws change predictions."""
    tm, tp, data = _tiny(seed)
    sub = Subspace(tp, SubspaceSpec(rank=rank, sigma_prior=sigma, layers=layers), CPU)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for s in sub.sites:
            s.z.copy_(0.3 * torch.randn(s.z.shape, generator=g))
    return sub, data


def _explicit(sub, weights_of):
    """A copy of the prior model with each adapted weight replaced by ``weights_of(site)``."""
    m = copy.deepcopy(sub.tm.model)
    mods = dict(m.named_modules())
    with torch.no_grad():
        for s in sub.sites:
            mods[s.path].weight.copy_(weights_of(s))
    return m


def _batched_with_draws(sub, inputs, seed=5):
    sub.record = []
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad(), sub.draws(gen):
        sub.start_pass(int(inputs["input_ids"].shape[0]))
        logits = sub.tm.model(**inputs).logits
    eps = {p: e for p, e in sub.record}
    sub.record = None
    return logits, eps


@pytest.mark.parametrize("broken", [None, "shared", "scale"])
def test_each_row_is_an_explicit_model_at_its_own_draw(broken):
    sub, data = _subspace()
    inputs, _ = data.batches[0]
    logits, eps = _batched_with_draws(sub, inputs)
    assert set(eps) == {s.path for s in sub.sites}  # every site drew once for the pass
    s_q = sub.sigma_post
    mismatch = 0
    for r in range(inputs["input_ids"].shape[0]):
        def w(site, r=r):
            e = eps[site.path][0 if broken == "shared" else r]
            s = s_q * (2 if broken == "scale" else 1)
            a = site.z + s * e
            return site.module.weight + site.scale * (a if site.basis is None else site.basis @ a)
        m = _explicit(sub, w)
        with torch.no_grad():
            one = m(**{k: v[r:r + 1] for k, v in inputs.items()}).logits[0]
        mismatch += not torch.allclose(one, logits[r], rtol=1e-4, atol=1e-5)
    if broken is None:
        assert mismatch == 0
    else:  # the broken law is caught on (nearly) every row
        assert mismatch >= inputs["input_ids"].shape[0] - 1


def test_monte_carlo_gibbs_risk_equals_explicit_draws_within_its_interval():
    sub, data = _subspace(sigma=0.6)
    passes = 12
    mc = gibbs_errors(sub, data, passes, seed=11)
    assert mc.shape == (passes, data.n)
    g = torch.Generator().manual_seed(99)
    s_q = sub.sigma_post
    errs = []
    for inputs, y in data.batches:
        for r in range(y.shape[0]):
            for _ in range(passes):
                def w(site):
                    a = site.z + s_q * torch.randn(site.z.shape, generator=g)
                    return site.module.weight + site.scale * (
                        a if site.basis is None else site.basis @ a)
                with torch.no_grad():
                    lg = _explicit(sub, w)(**{k: v[r:r + 1] for k, v in inputs.items()}).logits
                errs.append(float(lg.argmax(-1).item() != int(y[r])))
    N = len(errs)
    a, b = float(mc.mean()), float(np.mean(errs))
    c = math.log(2 / 1e-3) / N
    assert 0.05 < a < 0.95  # the draws matter: the test can fail
    for x, y in ((a, b), (b, a)):  # each inside the other's two-sided interval
        assert y <= float(kl_inv_exact(x, c)) and 1 - y <= float(kl_inv_exact(1 - x, c))
    # the noise matters: at s_Q = 0 the rows' errors are the mean's, another value
    sub.log_sigma.fill_(-60.0)
    zero = gibbs_errors(sub, data, 1, seed=3)
    assert not np.array_equal(np.repeat(zero, passes, 0), mc)


def test_kl_is_the_closed_form_at_50_digits():
    sub, _ = _subspace()
    d, sp = sub.dim, 0.3
    sub.log_sigma.fill_(math.log(0.27))
    with mp.workdps(50):
        q = sum(mp.mpf(float(x)) ** 2 for s in sub.sites for x in s.z.double().flatten())
        r2 = (mp.mpf(0.27) / mp.mpf(sp)) ** 2
        exact = q / (2 * mp.mpf(sp) ** 2) + d * (r2 - 1 - mp.log(r2)) / 2
    assert float(sub.kl(sp)) == pytest.approx(float(exact), rel=1e-12)
    assert kl_subspace(float(q), d, 0.27, sp) == pytest.approx(float(exact), rel=1e-12)
    assert kl_subspace(0.0, d, sp, sp) == 0.0  # Q = P


def test_dimension_by_hand_and_zero_coordinates_are_the_prior():
    tm, tp, data = _tiny()
    inputs, _ = data.batches[0]
    with torch.no_grad():
        before = tp.model(**inputs).logits
    sub = Subspace(tp, SubspaceSpec(rank=3), CPU)
    # hidden 16, intermediate 32: q, k, v, o, intermediate, pooler take 16 inputs, output 32;
    # rank 3 each; the head 2 × 16
    assert sub.dim == 3 * (16 * 6 + 32) + 2 * 16
    with torch.no_grad(), sub.draws(None, noise=False):
        sub.start_pass(8)
        assert torch.equal(tp.model(**inputs).logits, before)
    assert Subspace(tp, SubspaceSpec(layers="head"), CPU).dim == 2 * 16
    assert Subspace(tp, SubspaceSpec(rank=1, layers="attention"), CPU).dim == 16 * 4 + 2 * 16


def test_the_training_gradient_is_the_objectives_finite_difference():
    """The pathwise gradient in z and ln s_Q at fixed draws (float64) is the central finite
    difference of the objective along a random direction; a short training runs its steps and
    leaves the prior's weights frozen."""
    from boundcalc.measure.data.bound_posterior import bounded_cross_entropy, objective

    tm, tp, data = _tiny(1, dtype=torch.float64)
    sub = Subspace(tp, SubspaceSpec(rank=2, sigma_prior=0.2), CPU)
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for s in sub.sites:
            s.z.copy_(0.1 * torch.randn(s.z.shape, generator=g, dtype=torch.float64))
    inputs, y = data.batches[0]
    leaves = [s.z for s in sub.sites] + [sub.log_sigma]

    def f():
        with sub.draws(torch.Generator().manual_seed(5)):
            sub.start_pass(8)
            loss = bounded_cross_entropy(tp.model(**inputs).logits, y, 1e-4).mean()
        return objective(loss, sub.kl(0.2), data.n, 0.05)

    for t in leaves:
        t.requires_grad_(True)
    f().backward()
    grads = [t.grad.clone() for t in leaves]
    dirs = [torch.randn(t.shape, generator=g, dtype=torch.float64) for t in leaves]
    h = 1e-5
    with torch.no_grad():
        vals = []
        for sign in (1, -1):
            for t, v in zip(leaves, dirs):
                t.add_(sign * h * v)
            vals.append(float(f()))
            for t, v in zip(leaves, dirs):
                t.sub_(sign * h * v)
    fd = (vals[0] - vals[1]) / (2 * h)
    an = sum(float((gr * v).sum()) for gr, v in zip(grads, dirs))
    assert abs(an) > 1e-6 and an == pytest.approx(fd, rel=1e-5)
    for t in leaves:
        t.requires_grad_(False)
        t.grad = None
    fit = train_subspace(Subspace(tp, SubspaceSpec(rank=2, epochs=2), CPU), data)
    assert fit.steps == 2 * 3 and len(fit.history) == 2 and all(map(math.isfinite, fit.history))
    assert not any(p.requires_grad for p in tp.model.parameters())  # the prior stays frozen


def test_refusals():
    tm, tp, data = _tiny()
    for bad, match in [(dict(layers="ffn"), "layers 'ffn'"), (dict(rank=0), "rank"),
                       (dict(sigma_prior=-1.0), "sigma_prior"),
                       (dict(sigma_grid=(0.1, 0.1)), "repeats"),
                       (dict(objective="x"), "objective 'x'")]:
        with pytest.raises(BoundcalcError, match=match):
            Subspace(tp, SubspaceSpec(**bad), CPU)
    from boundcalc.measure.data.hf import TaskModel

    lm = TaskModel(tp.model, "causal_lm", "GPT2LMHeadModel", 2)
    with pytest.raises(BoundcalcError, match="needs the smoothing"):
        Subspace(lm, SubspaceSpec(), CPU)
    with pytest.raises(BoundcalcError, match="needs the smoothing"):
        Subspace(lm, SubspaceSpec(smoothing=0.01, layers="head"), CPU)
    for bad, match in [(dict(smoothing=1.5), "smoothing"), (dict(fit_epochs=-1), "fit_epochs"),
                       (dict(fit_lr=float("nan")), "fit_lr")]:
        with pytest.raises(BoundcalcError, match=match):
            Subspace(tp, SubspaceSpec(**bad), CPU)


def test_the_record_pays_for_a_prior_grid_and_keeps_its_least_kl():
    """``add_subspace_posterior`` with a grid of prior stds: J = |grid| recorded for the entry,
    the chosen s_P the grid's least KL by hand; fixed s_P: J = 1; N = passes × n; the Monte
    Carlo seed may not be the training seed."""
    from boundcalc.measure.data.gibbs import MonteCarlo
    from boundcalc.measure.data.subspace_record import add_subspace_posterior
    from boundcalc.stats import Stats

    tm, tp, data = _tiny()
    grid = (0.01, 0.05, 0.2)
    st = Stats()
    sub, fit = add_subspace_posterior(st, tp, data, CPU, SubspaceSpec(rank=2, epochs=1,
                                                                      sigma_grid=grid),
                                      MonteCarlo(2, 123))
    sc = {k: q.value for k, q in st.scalars.items()}
    assert sc["subspace_prior_grid"] == 3 and sc["gibbs_subspace_units"] == 2 * data.n
    kls = {s: kl_subspace(sc["subspace_dist_sq"], sub.dim, fit.sigma_post, s) for s in grid}
    assert sc["subspace_sigma_prior"] == min(kls, key=kls.get)
    assert st.scalars["gibbs_subspace_mean"].ci[1] >= sc["gibbs_subspace_mean"]
    st2 = Stats()
    add_subspace_posterior(st2, _tiny()[1], data, CPU, SubspaceSpec(rank=2, epochs=0),
                           MonteCarlo(1, 5))
    assert st2.scalars["subspace_prior_grid"].value == 1
    assert st2.scalars["subspace_dist_sq"].value == 0  # no training: z = 0, the prior
    with pytest.raises(BoundcalcError, match="training seed"):
        add_subspace_posterior(Stats(), _tiny()[1], data, CPU, SubspaceSpec(epochs=0),
                               MonteCarlo(1, 60_000))


def test_a_module_run_twice_in_one_pass_is_refused():
    from torch import nn

    from boundcalc.measure.data.hf import TaskModel

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.head = nn.Linear(4, 4), nn.Linear(4, 2)

        def forward(self, x):
            return self.head(self.lin(self.lin(x)))

    sub = Subspace(TaskModel(Twice(), "sequence_classification", "Twice", 2), SubspaceSpec(),
                   CPU)
    with torch.no_grad(), sub.draws(torch.Generator().manual_seed(0)):
        sub.start_pass(3)
        with pytest.raises(BoundcalcError, match="'lin' ran twice"):
            sub.tm.model(torch.randn(3, 4))


@pytest.mark.parametrize("broken", [None, "untransposed"])
def test_a_language_models_rows_are_explicit_gpt2_models_at_their_draws(broken):
    """GPT-2's Conv1D layers (weight d_in × d_out) are adapted as W0 + c·(B·A)ᵀ; its tied head
    stays out. Each row's smoothed log-loss (α = 0.05) from one batched pass equals the loss of
    an explicit copy of the prior at that row's draw, computed by hand (numpy); the variant that
    forgets the transpose (wrong shape: B·A reshaped as d_in × d_out) is caught."""
    from tests.measure.test_bound_posterior import ALPHA, _smoothed_by_hand, _tiny_lm

    _, tp, data = _tiny_lm(rows=8)
    sub = Subspace(tp, SubspaceSpec(rank=2, sigma_prior=0.5, smoothing=ALPHA), CPU)
    paths = {s.path for s in sub.sites}
    assert paths == {"transformer.h.0.attn.c_attn", "transformer.h.0.attn.c_proj",
                     "transformer.h.0.mlp.c_fc", "transformer.h.0.mlp.c_proj"}
    assert all(s.transposed for s in sub.sites) and sub.dim == 2 * (8 + 8 + 8 + 32)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for s in sub.sites:
            s.z.copy_(0.4 * torch.randn(s.z.shape, generator=g, dtype=s.z.dtype))
    from boundcalc.measure.data.subspace import row_losses

    inputs, _ = data.batches[0]
    sub.record = []
    with torch.no_grad(), sub.draws(torch.Generator().manual_seed(5)):
        batched = row_losses(sub, inputs, None, "risk").numpy()
    eps = dict(sub.record)
    sub.record = None
    mismatch = 0
    for r in range(8):
        def w(site, r=r):
            d = site.scale * site.basis @ (site.z + sub.sigma_post * eps[site.path][r])
            return site.module.weight + (d.reshape(site.module.weight.shape)
                                         if broken else d.T)
        m = _explicit(sub, w)
        one = {k: v[r:r + 1] for k, v in inputs.items()}
        with torch.no_grad():
            lg = m(**one).logits.numpy()
        by_hand = _smoothed_by_hand(lg, one["input_ids"].numpy(), one["attention_mask"].numpy())
        mismatch += not np.isclose(by_hand[0], batched[r], rtol=1e-9, atol=1e-12)
    assert mismatch == (0 if broken is None else 8)


def test_the_cross_entropy_fit_moves_z_and_lowers_the_loss_then_the_bound_starts_there():
    """``fit_epochs``: the deterministic subspace model's cross-entropy on S falls from the
    prior's (z = 0), z moves (‖z‖² recorded), and with no bound epochs the posterior mean is
    exactly the fit; the fit's batch order and the bound's draws are separate seeds."""
    from boundcalc.measure.data.subspace import pieces, row_losses

    tm, tp, data = _tiny(0)

    def ce(sub):
        with torch.no_grad(), sub.draws(None, noise=False):
            return float(sum(row_losses(sub, i, y, "fit").sum() for i, y in pieces(sub, data)))

    sub = Subspace(tp, SubspaceSpec(rank=2, fit_epochs=4, fit_lr=1.0, epochs=0), CPU)
    before = ce(sub)
    fit = train_subspace(sub, data)
    after = ce(sub)
    assert fit.fit_dist_sq > 0 and len(fit.fit_history) == 4
    assert float(sub.dist_sq()) == pytest.approx(fit.fit_dist_sq, rel=1e-12)
    assert after < 0.95 * before  # the fit lowered S's cross-entropy (14.87 < 16.61 once)
    # from the fit, one bound epoch: z is trained further (it starts at the fit, not at 0)
    sub2 = Subspace(tp, SubspaceSpec(rank=2, fit_epochs=4, fit_lr=1.0, epochs=1), CPU)
    fit2 = train_subspace(sub2, data)
    assert fit2.fit_dist_sq == pytest.approx(fit.fit_dist_sq, rel=1e-9)  # the same fit
    moved = float(sum((a.z - b.z).square().sum() for a, b in zip(sub.sites, sub2.sites)))
    assert 0 < moved < fit.fit_dist_sq
