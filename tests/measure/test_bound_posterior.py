"""The bound-trained Gibbs posterior (boundcalc/measure/data/bound_posterior.py): its training
draws have the law of explicit weight draws, the certificate's Monte Carlo Gibbs risk of the
learned posterior equals explicit weight draws within its interval, the objective's gradient
in σ (and in μ) is its finite difference, the objective and KL are the paper's formulas
computed here by hand, and a short training lowers the objective. For a language model (a tiny
GPT-2): the surrogate is the smoothed log-loss at a whole-weight draw computed by hand, the KL
and its gradients are the formulas by hand, and the learned posterior's Monte Carlo Gibbs risk
equals explicit weight draws within its interval."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from boundcalc.errors import BoundcalcError
from boundcalc.measure.data.bound_posterior import (BoundObjective, BoundTraining, best_scale,
                                                    bounded_cross_entropy, kl_groups, objective,
                                                    train_bound_posterior)
from boundcalc.measure.data.dataset_io import Batched
from boundcalc.measure.data.gibbs import MonteCarlo, Perturber
from boundcalc.measure.data.hf import TaskModel
from boundcalc.measure.data.tune import final_risk, sigma_groups
from tests._measure_helpers import single_thread

CPU = torch.device("cpu")


def _spec(**kw):
    """The settings these tests were written for: σ_Q per group, μ from model/ (the record's
    defaults are certify's, scale and prior, since issue 53 declared them once)."""
    return BoundTraining(**{"sigma": "groups", "init": "model", **kw})


@pytest.fixture(autouse=True)
def one_thread():
    with single_thread():
        yield


def _tiny(seed: int = 0, hidden: int = 16, dtype=torch.float32):
    """A 1-layer BERT classifier (random weights), its prior (the same weights moved a little)
    and 24 rows of 8 tokens (some ids repeated within a row) in batches of 8."""
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=30, hidden_size=hidden, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=2 * hidden,
                     max_position_embeddings=16, num_labels=2,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertForSequenceClassification(cfg).to(dtype).eval()
    prior = copy.deepcopy(model)
    with torch.no_grad():
        for p in prior.parameters():
            p.add_(0.01 * torch.randn_like(p))
    ids = torch.randint(0, 12, (24, 8))  # 12 ids over 8 positions: repeats in most rows
    y = (ids[:, 1] % 2).long()
    batches = [({"input_ids": ids[i:i + 8], "attention_mask": torch.ones_like(ids[i:i + 8])},
                y[i:i + 8]) for i in range(0, 24, 8)]
    tm = TaskModel(model, "sequence_classification", "BertForSequenceClassification", 2)
    tp = TaskModel(prior, "sequence_classification", "BertForSequenceClassification", 2)
    return tm, tp, Batched(batches, 24, 8, "test rows", "24 test rows")


def _sigmas(tm, base: float = 0.05):
    """A different σ for every group (so a wrong group map shows)."""
    groups = sigma_groups(tm.model)
    names = sorted(set(groups.values()))
    return groups, {g: base * (1 + 0.3 * i) for i, g in enumerate(names)}


# ---- formulas by hand ---------------------------------------------------------------------

def test_objective_and_kl_are_the_formulas():
    L, KL, n, d = 0.2, 30.0, 1000, 0.05
    B = (KL + math.log(2 * math.sqrt(n) / d)) / (2 * n)
    t = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    assert math.isclose(float(objective(t(L), t(KL), n, d, "quad")),
                        (math.sqrt(L + B) + math.sqrt(B)) ** 2, rel_tol=1e-14)
    assert math.isclose(float(objective(t(L), t(KL), n, d, "classic")), L + math.sqrt(B),
                        rel_tol=1e-14)
    with pytest.raises(BoundcalcError, match="objective 'lambda'"):
        objective(t(L), t(KL), n, d, "lambda")
    # KL of diagonal Gaussians, coordinate by coordinate: ½[s_Q²/s_P² + Δ²/s_P² − 1 + ln(s_P²/s_Q²)]
    sizes, dist, sq, sp = [3.0, 5.0], [0.02, 0.5], [0.011, 0.2], [0.01, 0.25]
    by_hand = sum(dg * 0.5 * (a ** 2 / b ** 2 - 1 + math.log(b ** 2 / a ** 2)) + q / (2 * b ** 2)
                  for dg, q, a, b in zip(sizes, dist, sq, sp))
    got = kl_groups(t(dist), t(sizes), torch.log(t(sq) / t(sp)), t(sp))
    assert math.isclose(float(got), by_hand, rel_tol=1e-12)
    # the scale choice: the least KL over the grid, each KL by hand
    c, rows = best_scale(sizes, dist, sq, [0.01, 0.25], (0.5, 1.0, 2.0))
    hand = [sum(dg * 0.5 * (a ** 2 / (s * b) ** 2 - 1 + math.log((s * b) ** 2 / a ** 2))
                + q / (2 * (s * b) ** 2) for dg, q, a, b in zip(sizes, dist, sq, sp))
            for s in (0.5, 1.0, 2.0)]
    assert [r["KL"] for r in rows] == pytest.approx(hand, rel=1e-12)
    assert c == (0.5, 1.0, 2.0)[int(np.argmin(hand))]


def test_bounded_cross_entropy_clips_and_scales():
    logits = torch.tensor([[0.0, 0.0], [30.0, -30.0], [-30.0, 30.0]])
    y = torch.tensor([0, 0, 0])
    got = bounded_cross_entropy(logits, y, 1e-4).tolist()
    assert got[0] == pytest.approx(math.log(2) / math.log(1e4), rel=1e-6)
    assert got[1] == pytest.approx(0.0, abs=1e-6)
    assert got[2] == pytest.approx(1.0, rel=1e-6)  # p_y ≈ e^{-60} is clipped at 1e-4


def test_settings_are_checked():
    for bad in (dict(objective="lambda"), dict(epochs=0), dict(lr_mu=-1.0),
                dict(p_min=0.0), dict(momentum=1.0)):
        with pytest.raises(BoundcalcError, match=f"^{next(iter(bad))}="):  # the record's words
            BoundTraining(**bad).check()


# ---- the law of the draws -------------------------------------------------------------------

def _explicit(tm, data, sig_of, draws, seed, fn):
    """Mean of ``fn(logits, y)`` over ``draws`` explicit weight draws θ + u, u ∼ N(0, diag σ²),
    every draw evaluated on all rows; and the standard error of the per-draw means."""
    pert = Perturber(tm.model, torch.Generator().manual_seed(seed))
    means = []
    try:
        for _ in range(draws):
            pert.draw(sig_of)
            with torch.no_grad():
                vals = [fn(tm.model(**x).logits, y) for x, y in data.batches]
            means.append(float(torch.cat(vals).double().mean()))
    finally:
        pert.restore()
    return float(np.mean(means)), float(np.std(means, ddof=1) / math.sqrt(draws))


def test_training_draws_have_the_law_of_weight_draws():
    tm, tp, data = _tiny()
    groups, sig = _sigmas(tm, 0.08)
    f = BoundObjective(tm, tp, CPU, groups, sig, _spec(), data.n,
                       torch.Generator().manual_seed(3))
    passes, values = 150, []
    with torch.no_grad(), f.hooks:
        f.hooks.set_sigma(f.sigma_post().float())
        for _ in range(passes):
            for x, y in data.batches:
                f.hooks.start_pass(8)
                values.append(bounded_cross_entropy(tm.model(**x).logits, y, 1e-4))
    rows = torch.stack(values).double().reshape(passes, -1).mean(1)
    hooks_mean, hooks_se = float(rows.mean()), float(rows.std() / math.sqrt(passes))
    sig_of = {n: sig[g] for n, g in groups.items()}
    exp_mean, exp_se = _explicit(tm, data, sig_of, 300, 5,
                                 lambda lg, y: bounded_cross_entropy(lg, y, 1e-4))
    with torch.no_grad():
        base = float(torch.cat([bounded_cross_entropy(tm.model(**x).logits, y, 1e-4)
                                for x, y in data.batches]).mean())
    assert abs(exp_mean - base) > 8 * exp_se  # the noise moves the loss: the test can fail
    assert abs(hooks_mean - exp_mean) <= 4 * math.hypot(hooks_se, exp_se)


def test_learned_gibbs_risk_matches_explicit_draws_within_its_interval():
    tm, tp, data = _tiny(1)
    groups, sig = _sigmas(tm, 0.05)
    learned = train_bound_posterior(tm, tp, data, CPU, groups, sig,
                                    _spec(epochs=2, lr_mu=1e-2, lr_sigma=0.5))
    assert learned.steps == 6 and len(learned.history) == 2
    assert learned.sigma_post != pytest.approx(learned.sigma_prior, rel=1e-9)  # σ_Q moved
    sig_of = {n: dict(zip(learned.groups, learned.sigma_post))[g] for n, g in groups.items()}
    fin = final_risk(tm, data, CPU, sig_of, MonteCarlo(40, 11, 0.0))
    assert fin.mode == "sample" and fin.n_losses == 40 * 24
    exp_mean, exp_se = _explicit(tm, data, sig_of, 400, 7,
                                 lambda lg, y: (lg.argmax(-1) != y).double())
    # the certificate's one-sided interval [Ê, kl⁻¹] and a two-sided normal one, both ways
    from boundcalc.engine.functions import kl_inv_upper

    upper = kl_inv_upper(fin.mean, math.log(2 / 0.01) / fin.n_losses)
    assert exp_mean - 4 * exp_se <= upper
    se = math.sqrt(max(fin.mean * (1 - fin.mean), 1e-4) / fin.n_losses)
    assert abs(fin.mean - exp_mean) <= 4 * math.hypot(se, exp_se)
    assert 0.02 < exp_mean < 0.98  # neither trivially 0 nor 1


# ---- gradients ------------------------------------------------------------------------------

@pytest.mark.parametrize("hidden", [16, 4])  # Gram factor (T < d_in) and X·Ξ (T ≥ d_in)
def test_gradient_in_sigma_and_mu_is_the_finite_difference(hidden):
    tm, tp, data = _tiny(2, hidden=hidden, dtype=torch.float64)
    groups, sig = _sigmas(tm, 0.05)
    f = BoundObjective(tm, tp, CPU, groups, sig, _spec(), 1000,
                       torch.Generator().manual_seed(0))
    x, y = data.batches[0]

    def value() -> torch.Tensor:
        f.hooks.gen.manual_seed(9)  # the same draws ξ at every evaluation: a function of σ, μ
        return f(x, y)

    with f.hooks:
        obj = value()
        f.backward(obj)
        g_sigma = f.log_ratio.grad.clone()
        w = dict(tm.model.named_parameters())["bert.encoder.layer.0.attention.self.query.weight"]
        g_mu = float(w.grad[0, 0])
        h = 1e-5
        with torch.no_grad():
            for i in range(len(f.groups)):
                f.log_ratio[i] += h
                up = float(value())
                f.log_ratio[i] -= 2 * h
                down = float(value())
                f.log_ratio[i] += h
                fd = (up - down) / (2 * h)
                assert fd == pytest.approx(float(g_sigma[i]), rel=1e-4, abs=1e-9), f.groups[i]
            w[0, 0] += h
            up = float(value())
            w[0, 0] -= 2 * h
            down = float(value())
            w[0, 0] += h
    assert (up - down) / (2 * h) == pytest.approx(g_mu, rel=1e-4, abs=1e-9)
    assert float(g_sigma.abs().max()) > 1e-6  # σ matters to the objective


def test_training_lowers_the_objective_and_a_language_model_needs_its_smoothing():
    tm, tp, data = _tiny(3)
    groups, sig = _sigmas(tm, 0.05)
    learned = train_bound_posterior(tm, tp, data, CPU, groups, sig,
                                    _spec(epochs=6, lr_mu=0.05, lr_sigma=0.3,
                                                  objective="classic"))
    assert learned.history[-1] < learned.history[0]
    lm = TaskModel(tm.model, "causal_lm", "x", 30)
    with pytest.raises(BoundcalcError, match="smoothing α"):
        train_bound_posterior(lm, tp, data, CPU, groups, sig, _spec())
    with pytest.raises(BoundcalcError, match=r"smoothing=1.0: expected a number in \(0, 1\)"):
        BoundTraining(smoothing=1.0).check()


def test_learned_scale_moves_prior_and_posterior_together_from_the_prior():
    """sigma="scale": σ_Q,g = σ_P,g = t·σ_g (KL without a variance term, by hand); its gradient
    in ln t is the finite difference; init="prior" starts μ at the prior (distance 0)."""
    tm, tp, data = _tiny(4, dtype=torch.float64)
    groups, sig = _sigmas(tm, 0.05)
    spec = _spec(sigma="scale", init="prior")
    f = BoundObjective(tm, tp, CPU, groups, sig, spec, 1000, torch.Generator().manual_seed(0))
    ref = dict(tp.model.named_parameters())
    assert all(torch.equal(p, ref[n]) for n, p in tm.model.named_parameters())
    assert f.learned() is f.log_scale
    with torch.no_grad():
        f.log_scale += math.log(1.3)
        for p in tm.model.parameters():
            p.add_(0.01)
    kl = float(f.kl().detach())
    by_hand = sum(sum(p.numel() for n, p in tm.model.named_parameters() if groups[n] == g)
                  * 0.01 ** 2 / (2 * (1.3 * s) ** 2) for g, s in sig.items())
    assert kl == pytest.approx(by_hand, rel=1e-9)
    x, y = data.batches[0]

    def value() -> torch.Tensor:
        f.hooks.gen.manual_seed(9)
        return f(x, y)

    with f.hooks:
        f.backward(value())
        g = float(f.log_scale.grad)
        h = 1e-6
        with torch.no_grad():
            f.log_scale += h
            up = float(value())
            f.log_scale -= 2 * h
            down = float(value())
    assert (up - down) / (2 * h) == pytest.approx(g, rel=1e-4)
    tm2, tp2, data2 = _tiny(5)
    learned = train_bound_posterior(tm2, tp2, data2, CPU, groups, sig,
                                    _spec(sigma="scale", epochs=3, lr_sigma=0.2))
    assert learned.scale_factor != 1.0
    assert learned.sigma_post == pytest.approx([learned.scale_factor * s for s in
                                                learned.sigma_prior], rel=1e-9)
    with pytest.raises(BoundcalcError, match="sigma='each': expected one of"):
        BoundTraining(sigma="each").check()


# ---- language models: the smoothed log-loss, whole-weight draws -----------------------------

ALPHA = 0.1


def _tiny_lm(seed: int = 0, dtype=torch.float64, rows: int = 48):
    """A 1-layer GPT-2 (vocabulary 20, width 8; Conv1D layers and tied embeddings, so the
    Monte Carlo draws whole weights per chunk of rows), its prior (the weights moved a
    little) and ``rows`` rows of 8 tokens in batches of 8, the last row of each batch padded
    after its fifth token."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=20, n_positions=16, n_embd=8, n_layer=1, n_head=2,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None,
                     eos_token_id=None, pad_token_id=19)
    model = GPT2LMHeadModel(cfg).to(dtype).eval()
    prior = copy.deepcopy(model)
    with torch.no_grad():
        for p in prior.parameters():
            p.add_(0.02 * torch.randn_like(p))
    ids = torch.randint(0, 19, (rows, 8))
    mask = torch.ones_like(ids)
    mask[7::8, 5:] = 0
    ids = ids.masked_fill(mask == 0, 19)
    batches = [({"input_ids": ids[i:i + 8], "attention_mask": mask[i:i + 8]}, None)
               for i in range(0, rows, 8)]
    tm = TaskModel(model, "causal_lm", "GPT2LMHeadModel", 20)
    tp = TaskModel(prior, "causal_lm", "GPT2LMHeadModel", 20)
    return tm, tp, Batched(batches, rows, 8, "test rows", f"{rows} test rows")


def _smoothed_by_hand(logits: np.ndarray, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per row: the mean over positions t ≥ 1 with mask 1 of −ln((1−α)p_t + α/V)/ln(V/α),
    p_t the softmax probability of token t given the logits at t − 1 (loops, numpy)."""
    V = logits.shape[-1]
    out = []
    for lg, row, m in zip(logits, ids, mask):
        vals = []
        for t in range(1, len(row)):
            if m[t]:
                z = np.exp(lg[t - 1] - lg[t - 1].max())
                p = z[row[t]] / z.sum()
                vals.append(-math.log((1 - ALPHA) * p + ALPHA / V) / math.log(V / ALPHA))
        out.append(sum(vals) / len(vals))
    return np.array(out)


def test_lm_surrogate_is_the_smoothed_loss_at_a_weight_draw_by_hand():
    tm, tp, data = _tiny_lm()
    groups, sig = _sigmas(tm, 0.05)
    f = BoundObjective(tm, tp, CPU, groups, sig, _spec(smoothing=ALPHA), data.n,
                       torch.Generator().manual_seed(4))
    x, _ = data.batches[0]
    with torch.no_grad(), f.hooks:
        got = f.surrogate(x, None).numpy()
    # the same draw by hand: ε in the order of the named parameters, from the same seed
    gen, drawn = torch.Generator().manual_seed(4), copy.deepcopy(tm.model)
    with torch.no_grad():
        for n, p in drawn.named_parameters():
            p.add_(sig[groups[n]] * torch.randn(p.shape, generator=gen, dtype=p.dtype))
        logits = drawn(**x).logits.numpy()
        plain = tm.model(**x).logits.numpy()
    ids, mask = x["input_ids"].numpy(), x["attention_mask"].numpy()
    assert got == pytest.approx(_smoothed_by_hand(logits, ids, mask), rel=1e-10)
    assert not np.allclose(got, _smoothed_by_hand(plain, ids, mask), rtol=1e-3)  # noise counts
    with pytest.raises(BoundcalcError, match="smoothing"):
        BoundObjective(tm, tp, CPU, groups, sig, _spec(), data.n, torch.Generator())


def test_lm_kl_and_its_gradient_by_hand():
    tm, tp, data = _tiny_lm(1)
    groups, sig = _sigmas(tm, 0.05)
    f = BoundObjective(tm, tp, CPU, groups, sig, _spec(smoothing=ALPHA), data.n,
                       torch.Generator().manual_seed(0))
    r = torch.linspace(-0.2, 0.3, len(f.groups), dtype=torch.float64)
    with torch.no_grad():
        f.log_ratio.copy_(r)
    ref = dict(tp.model.named_parameters())
    d = {g: sum(p.numel() for n, p in tm.model.named_parameters() if groups[n] == g)
         for g in f.groups}
    dist = {g: sum(float((p.detach() - ref[n].detach()).double().square().sum())
                   for n, p in tm.model.named_parameters() if groups[n] == g) for g in f.groups}
    by_hand = sum(d[g] * 0.5 * (math.exp(2 * ri) - 1 - 2 * ri) + dist[g] / (2 * sig[g] ** 2)
                  for g, ri in zip(f.groups, r.tolist()))
    kl = f.kl()
    assert float(kl.detach()) == pytest.approx(by_hand, rel=1e-10)
    f.backward(kl)
    for n, p in tm.model.named_parameters():  # ∂KL/∂μ = (μ − μ₀)/σ_P,g²
        assert torch.allclose(p.grad, (p - ref[n]).detach() / sig[groups[n]] ** 2,
                              rtol=1e-9, atol=0)
    want = [d[g] * (math.exp(2 * ri) - 1) for g, ri in zip(f.groups, r.tolist())]
    assert f.log_ratio.grad.tolist() == pytest.approx(want, rel=1e-10)


def test_lm_learned_gibbs_risk_matches_explicit_draws_within_its_interval():
    tm, tp, data = _tiny_lm(2, dtype=torch.float32)
    groups, sig = _sigmas(tm, 0.1)
    before = {n: p.detach().clone() for n, p in tm.model.named_parameters()}
    learned = train_bound_posterior(tm, tp, data, CPU, groups, sig,
                                    _spec(epochs=3, lr_mu=0.05, lr_sigma=0.3,
                                                  sigma="scale", smoothing=ALPHA))
    assert learned.steps == 18 and learned.scale_factor != 1.0
    assert any(not torch.equal(p, before[n]) for n, p in tm.model.named_parameters())
    sig_of = {n: dict(zip(learned.groups, learned.sigma_post))[g] for n, g in groups.items()}
    fin = final_risk(tm, data, CPU, sig_of, MonteCarlo(60, 11, ALPHA))
    assert fin.mode == "chunk" and fin.rows_per_unit == 8 and fin.n_losses == 60 * 6

    def by_hand(logits, x):
        return torch.from_numpy(_smoothed_by_hand(logits.double().numpy(),
                                                  x["input_ids"].numpy(),
                                                  x["attention_mask"].numpy()))

    pert = Perturber(tm.model, torch.Generator().manual_seed(7))
    means = []
    try:
        for _ in range(150):
            pert.draw(sig_of)
            with torch.no_grad():
                means.append(float(torch.cat([by_hand(tm.model(**x).logits, x)
                                              for x, _ in data.batches]).mean()))
    finally:
        pert.restore()
    exp_mean, exp_se = float(np.mean(means)), float(np.std(means, ddof=1) / math.sqrt(150))
    from boundcalc.engine.functions import kl_inv_upper

    upper = kl_inv_upper(fin.mean, math.log(2 / 0.01) / fin.n_losses)
    assert exp_mean - 4 * exp_se <= upper
    mc_se = float(np.std(means, ddof=1)) * math.sqrt(6) / math.sqrt(fin.n_losses)  # unit spread
    assert abs(fin.mean - exp_mean) <= 4 * math.hypot(mc_se, exp_se) + 1e-3
    with torch.no_grad():
        plain = float(torch.cat([by_hand(tm.model(**x).logits, x)
                                 for x, _ in data.batches]).mean())
    assert abs(exp_mean - plain) > 4 * exp_se  # the noise moves the loss: the test can fail


def test_moved_means_train_only_the_groups_the_model_changed():
    """means="moved": the prior equals the model except in the classifier, so only the head
    groups' means train; every other weight stays bit for bit, and the KL is the moved group's
    distance by hand."""
    tm, tp, data = _tiny(6)
    with torch.no_grad():  # the prior: the model, but with another classifier
        for (n, p), q in zip(tm.model.named_parameters(), tp.model.parameters()):
            if not n.startswith("classifier"):
                q.copy_(p)
    groups, sig = _sigmas(tm, 0.05)
    moved = {groups[n] for n in ("classifier.weight", "classifier.bias")}
    before = {n: p.detach().clone() for n, p in tm.model.named_parameters()}
    learned = train_bound_posterior(tm, tp, data, CPU, groups, sig,
                                    _spec(epochs=2, lr_mu=0.05, means="moved"))
    assert sorted(learned.trained) == sorted(moved)
    for n, p in tm.model.named_parameters():
        if groups[n] in moved:
            continue
        assert torch.equal(p.detach(), before[n]), n
    assert not torch.equal(tm.model.classifier.weight.detach(), before["classifier.weight"])
    # the KL: the classifier's distance alone (the frozen groups are the prior there)
    tm2, tp2, _ = _tiny(6)
    with torch.no_grad():
        for (n, p), q in zip(tm2.model.named_parameters(), tp2.model.parameters()):
            q.copy_(p)
        tm2.model.classifier.weight.add_(0.1)
    f = BoundObjective(tm2, tp2, CPU, groups, sig, _spec(means="moved"), 100,
                       torch.Generator().manual_seed(0))
    cls = groups["classifier.weight"]
    assert [g for g, t in zip(f.groups, f.trained) if t] == [cls]
    assert [n for n, p in tm2.model.named_parameters() if p.requires_grad] == [
        n for n in dict(tm2.model.named_parameters()) if groups[n] == cls]
    by_hand = tm2.model.classifier.weight.numel() * 0.1 ** 2 / (2 * sig[cls] ** 2)
    assert float(f.kl().detach()) == pytest.approx(by_hand, rel=1e-5)
    # lr_sigma = 0: σ stays the prior's and only the head's means move
    tm3, tp3, data3 = _tiny(6)
    with torch.no_grad():
        for (n, p), q in zip(tm3.model.named_parameters(), tp3.model.parameters()):
            if not n.startswith("classifier"):
                q.copy_(p)
    fixed = train_bound_posterior(tm3, tp3, data3, CPU, groups, sig, _spec(
        sigma="scale", init="prior", means="moved", lr_sigma=0.0, lr_mu=0.05, epochs=2))
    assert fixed.scale_factor == 1.0 and fixed.sigma_post == pytest.approx(fixed.sigma_prior)
    ref = dict(tp3.model.named_parameters())
    assert all(torch.equal(p, ref[n]) for n, p in tm3.model.named_parameters()
               if groups[n] not in moved)
    assert not torch.equal(tm3.model.classifier.weight, ref["classifier.weight"])
    with pytest.raises(BoundcalcError, match="means='some': expected one of"):
        BoundTraining(means="some").check()
