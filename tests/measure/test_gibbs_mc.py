"""The Monte Carlo Gibbs risk at scale (docs/sources/monte_carlo.md): noise on the model's
device in the parameter dtype with an exact restore, a fresh posterior draw per sample by
row-wise forward hooks (checked in law against explicit weight draws), N = k·n losses reaching
the formulas (against an independent mpmath kl inverse), subsampling, and the memory budget.

Everything runs on a small BERT classifier trained in the fixture (a word decides the label),
with fixed seeds; the statistical comparisons allow four standard errors."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import boundcalc as bc
from boundcalc.cli import app
from boundcalc.errors import BoundcalcError, ResourceError
from boundcalc.limits import set_memory_budget
from boundcalc.measure.data.dataset_io import read_batches
from boundcalc.measure.data.gibbs import (MonteCarlo, Perturber, device_generator,
                                          gibbs_estimate, perturbed, resolve_mode, rows_per_chunk,
                                          _row_bytes)
from boundcalc.measure.data.hf import load_task_model
from boundcalc.measure.data.row_noise import RowNoise, unsupported_reason
from tests._measure_helpers import minilm_path, single_thread
from tests._reference import kl_inv_exact

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
runner = CliRunner()
CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def one_thread():
    with single_thread():
        yield


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 1-layer BERT (hidden 16) trained to zero error on 48 sentences whose label is the word
    'good' / 'bad' in them; saved with its tokenizer (``model``), its initialisation (``init``)
    and the data as CSV."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    out = tmp_path_factory.mktemp("gibbs")
    with single_thread():
        tok = AutoTokenizer.from_pretrained(minilm_path())
        rng = np.random.default_rng(0)
        words = "the cat dog sat ran on mat red blue big small house tree".split()
        texts, labels = [], []
        for i in range(48):
            w = list(rng.choice(words, size=rng.integers(3, 8)))
            w.insert(int(rng.integers(0, len(w))), "good" if i % 2 else "bad")
            texts.append(" ".join(w))
            labels.append(i % 2)
        torch.manual_seed(0)
        cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=16, num_hidden_layers=1,
                         num_attention_heads=2, intermediate_size=32, num_labels=2,
                         max_position_embeddings=64)
        model = BertForSequenceClassification(cfg)
        model.save_pretrained(out / "init")
        tok.save_pretrained(out / "init")
        enc = tok(texts, padding=True, return_tensors="pt")
        y = torch.tensor(labels)
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        model.train()
        for _ in range(60):
            loss = model(**enc, labels=y).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        model.save_pretrained(out / "model")
        tok.save_pretrained(out / "model")
        pcsv.write_csv(pa.table({"text": texts, "label": labels}), str(out / "data.csv"))
        tm = load_task_model(out / "model")
        batched = read_batches(out / "data.csv", tm, batch_size=16)
    assert (tm.model(**enc).logits.argmax(1) == y).all()
    return out, tm, batched, enc, y


def _plain_gibbs(model, enc, y, sigma: float, draws: int, seed: int) -> np.ndarray:
    """Independent reference: perturb every weight with CPU float64 noise, run, restore."""
    g = torch.Generator().manual_seed(seed)
    base = {n: p.detach().clone() for n, p in model.named_parameters()}
    errs = []
    with torch.no_grad():
        for _ in range(draws):
            for n, p in model.named_parameters():
                p.copy_(base[n] + (sigma * torch.randn(p.shape, generator=g,
                                                       dtype=torch.float64)).float())
            errs.append(float((model(**enc).logits.argmax(1) != y).double().mean()))
        for n, p in model.named_parameters():
            p.copy_(base[n])
    return np.array(errs)


@pytest.fixture(scope="module")
def plain(trained):
    """150 draws of the independent plain loop at σ = 0.1."""
    _, tm, _, enc, y = trained
    with single_thread():
        return _plain_gibbs(tm.model, enc, y, 0.1, 150, seed=11)


# ---- noise where the model is, exact restore ---------------------------------------------

def test_perturber_draws_in_the_parameter_dtype_and_restores_bit_for_bit(trained):
    _, tm, *_ = trained
    model = tm.model
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    pert = Perturber(model, device_generator(model, 3))
    for s in (0.5, 1e-3, {n: 0.1 for n in before}):
        pert.draw(s)
    diff = torch.cat([(p.detach() - before[n]).reshape(-1) for n, p in
                      model.named_parameters()]).double()
    assert diff.std().item() == pytest.approx(0.1, rel=0.01)  # the last draw: σ = 0.1 each
    assert all(p.dtype == torch.float32 for p in model.parameters())
    pert.restore()
    assert all(torch.equal(p.detach(), before[n]) for n, p in model.named_parameters())
    with perturbed(model, 0.3, device_generator(model, 4)) as pt:
        assert not torch.equal(model.classifier.weight, before["classifier.weight"])
        assert torch.equal(pt.saved["classifier.weight"], before["classifier.weight"])
    assert all(torch.equal(p.detach(), before[n]) for n, p in model.named_parameters())
    with pytest.raises(BoundcalcError, match="no noise level"):
        with perturbed(model, {"classifier.weight": 0.1}):
            pass
    assert all(torch.equal(p.detach(), before[n]) for n, p in model.named_parameters())


def test_same_seed_same_numbers_other_seed_other_numbers(trained):
    _, tm, batched, *_ = trained
    a = gibbs_estimate(tm, batched, CPU, [0.1], MonteCarlo(3, 5, 0.01))
    b = gibbs_estimate(tm, batched, CPU, [0.1], MonteCarlo(3, 5, 0.01))
    c = gibbs_estimate(tm, batched, CPU, [0.1], MonteCarlo(3, 6, 0.01))
    assert np.array_equal(a.means, b.means) and not np.array_equal(a.means, c.means)
    # a {parameter: σ} point with every σ equal is the same posterior, drawn the same way
    names = [n for n, _ in tm.model.named_parameters()]
    for mode in ("sample", "whole"):
        f = gibbs_estimate(tm, batched, CPU, [0.1], MonteCarlo(2, 5, 0.01, mode=mode))
        m = gibbs_estimate(tm, batched, CPU, [{n: 0.1 for n in names}],
                           MonteCarlo(2, 5, 0.01, mode=mode))
        assert np.array_equal(f.means, m.means)
    # σ = 0 on everything: the trained weights, error 0 in every pass
    zero = gibbs_estimate(tm, batched, CPU, [{n: 0.0 for n in names}], MonteCarlo(2, 5, 0.01))
    assert np.array_equal(zero.means, np.zeros((1, 2)))
    with pytest.raises(BoundcalcError, match="no noise level for parameter"):
        gibbs_estimate(tm, batched, CPU, [{"classifier.weight": 0.1}], MonteCarlo(2, 5, 0.01))


# ---- the row-wise draws are exact in law --------------------------------------------------

def test_linear_hook_has_the_law_of_an_explicit_weight_draw():
    torch.manual_seed(0)
    for d_in, T in ((12, 3), (3, 5)):  # T < d_in: QR route; T >= d_in: E drawn directly
        lin = torch.nn.Linear(d_in, 4).double()
        X = torch.randn(T, d_in, dtype=torch.float64)
        R, s = 20000, 0.3
        with torch.no_grad():
            y0 = lin(X)
            with RowNoise(lin, {"weight": s, "bias": 0.2}, torch.Generator().manual_seed(1)) as h:
                h.start_pass(R)
                out = lin(input=X.expand(R, T, d_in)) - y0  # a keyword input is seen too
        # Cov over rows of output unit 0 at the T positions: σ²·XXᵀ + σ_b²·11ᵀ
        assert out.shape == (R, T, 4)
        cov = torch.cov(out[:, :, 0].T)
        ref = s * s * X @ X.T + 0.04
        assert torch.allclose(cov, ref, atol=0.06 * float(ref.abs().max()))


def test_embedding_hook_shares_noise_between_repeated_ids_only():
    emb = torch.nn.Embedding(10, 6)
    ids = torch.tensor([[5, 5, 7]])
    with torch.no_grad(), RowNoise(emb, {"weight": 0.5}, torch.Generator().manual_seed(0)) as h:
        h.start_pass(4000)
        out = emb(ids) - emb.weight[ids]
    assert out.shape == (4000, 3, 6)
    assert torch.equal(out[:, 0], out[:, 1])  # the same table row, the same noise
    assert not torch.equal(out[:, 0], out[:, 2])
    assert out[:, [0, 2]].std().item() == pytest.approx(0.5, rel=0.03)
    assert abs(float(torch.corrcoef(torch.stack([out[:, 0, 0], out[:, 2, 0]]))[0, 1])) < 0.06
    assert abs(float(torch.corrcoef(torch.stack([out[:2000, 0, 0], out[2000:, 0, 0]]))[0, 1])) \
        < 0.08  # rows independent


def test_layer_norm_hook_variance_is_sigma_squared_times_xhat_squared_plus_one():
    ln = torch.nn.LayerNorm(8).double()
    x = torch.randn(1, 2, 8, dtype=torch.float64)
    xhat = torch.nn.functional.layer_norm(x, (8,))
    with torch.no_grad(), RowNoise(ln, {"weight": 0.2, "bias": 0.2},
                                   torch.Generator().manual_seed(2)) as h:
        h.start_pass(20000)
        out = ln(x) - torch.nn.functional.layer_norm(x, (8,), ln.weight, ln.bias)
    var = out.var(0)
    assert torch.allclose(var, 0.04 * (xhat[0] ** 2 + 1), rtol=0.06)


@pytest.mark.slow  # hundreds of explicit weight draws: 10-30 s on a busy 2-core machine
def test_row_hooks_give_the_logit_law_of_explicit_weight_draws(trained):
    """One sentence in 800 rows with hook noise against 800 explicit weight draws."""
    _, tm, _, enc, y = trained
    model, s, R = tm.model, 0.05, 800
    sig = {n: s for n, _ in model.named_parameters()}
    rows = {k: v[:1].expand(R, *v.shape[1:]).contiguous() for k, v in enc.items()}
    with torch.no_grad(), RowNoise(model, sig, device_generator(model, 5)) as h:
        h.start_pass(R)
        a = model(**rows).logits.double()
    g = torch.Generator().manual_seed(6)
    base = {n: p.detach().clone() for n, p in model.named_parameters()}
    ref = []
    with torch.no_grad():
        for _ in range(R):
            for n, p in model.named_parameters():
                p.copy_(base[n] + s * torch.randn(p.shape, generator=g))
            ref.append(model(**{k: v[:1] for k, v in enc.items()}).logits.double()[0])
        for n, p in model.named_parameters():
            p.copy_(base[n])
    c = torch.stack(ref)
    se = torch.sqrt(a.var(0) / R + c.var(0) / R)
    assert ((a.mean(0) - c.mean(0)).abs() < 4 * se).all()
    assert torch.allclose(a.std(0), c.std(0), rtol=0.14)  # SE of the ratio: about 3.5 %
    pa, pc = float((a.argmax(1) != y[0]).double().mean()), float((c.argmax(1) != y[0]).double()
                                                                  .mean())
    assert 0.05 < pc < 0.95 and abs(pa - pc) < 4 * math.sqrt(2 * pc * (1 - pc) / R)


@pytest.mark.slow  # hundreds of explicit weight draws: 10-30 s on a busy 2-core machine
def test_per_sample_and_whole_estimates_agree_with_an_independent_plain_loop(trained, plain):
    _, tm, batched, enc, y = trained
    s = 0.1
    per = gibbs_estimate(tm, batched, CPU, [s], MonteCarlo(40, 12, 0.01, mode="sample"))
    whole = gibbs_estimate(tm, batched, CPU, [s], MonteCarlo(150, 13, 0.01, mode="whole"))
    assert per.mode == "sample" and per.engine == "hooks" and per.n_losses == 40 * 48
    assert whole.mode == "whole" and whole.n_losses == 150
    p_se = plain.std(ddof=1) / math.sqrt(plain.size)
    e = per.means.mean()
    e_se = math.sqrt(per.means.var(ddof=1) / per.passes)  # passes are i.i.d.
    w_se = whole.means.std(ddof=1) / math.sqrt(whole.passes)
    assert 0.1 < plain.mean() < 0.6  # σ where the noise matters
    assert abs(e - plain.mean()) < 4 * math.hypot(e_se, p_se)
    assert abs(whole.means.mean() - plain.mean()) < 4 * math.hypot(w_se, p_se)
    # the per-sample passes spread far less than whole-sample draws: the point of N = k·n
    assert per.means.std() < whole.means.std()


def test_sample_mode_without_hooks_is_one_weight_draw_per_row(trained, plain, monkeypatch):
    _, tm, batched, enc, y = trained
    import boundcalc.measure.data.gibbs as gibbs

    monkeypatch.setattr(gibbs, "resolve_mode", lambda tm, mode: ("sample", "loop"))
    before = {n: p.detach().clone() for n, p in tm.model.named_parameters()}
    loop = gibbs.gibbs_estimate(tm, batched, CPU, [0.1], MonteCarlo(4, 14, 0.01, mode="sample"))
    assert loop.engine == "loop" and loop.n_losses == 4 * 48
    assert all(torch.equal(p.detach(), before[n]) for n, p in tm.model.named_parameters())
    se = math.hypot(math.sqrt(loop.means.var(ddof=1) / 4), plain.std(ddof=1) / math.sqrt(150))
    assert abs(loop.means.mean() - plain.mean()) < 4 * se


def test_auto_mode_falls_back_where_row_draws_would_not_be_exact(trained):
    _, tm, *_ = trained
    assert resolve_mode(tm, "auto") == ("sample", "hooks")
    assert resolve_mode(tm, "whole") == ("whole", "weights")

    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x):
            return self.lin(self.lin(x))

    class Mixing(torch.nn.Module):  # a raw parameter, and rows that see each other
        def __init__(self):
            super().__init__()
            self.scale = torch.nn.Parameter(torch.ones(3))

        def forward(self, x):
            return (x - x.mean(0)) * self.scale

    class Nested(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Mixing()
            self.shift = torch.nn.Parameter(torch.zeros(3))

    tied = torch.nn.Sequential(torch.nn.Embedding(5, 3), torch.nn.Linear(3, 5, bias=False))
    tied[1].weight = tied[0].weight
    assert "tied" in unsupported_reason(tied, [n for n, _ in tied.named_parameters()])
    assert "one inside the other" in unsupported_reason(Nested(), ["shift", "inner.scale"])
    mix = Mixing()
    assert unsupported_reason(mix, ["scale"]) is None  # replayed row by row, if rows separate
    with pytest.raises(BoundcalcError, match="rows independently"):
        with torch.no_grad(), RowNoise(mix, {"scale": 0.1}, torch.Generator()) as h:
            h.start_pass(4)
            mix(torch.randn(4, 3))
    assert "forward" not in mix.__dict__
    m = Twice()
    with pytest.raises(BoundcalcError, match="ran twice"):
        with torch.no_grad(), RowNoise(m, {"lin.weight": 0.1, "lin.bias": 0.1},
                                       torch.Generator()) as h:
            h.start_pass(2)
            m(torch.zeros(2, 3))


def test_replayed_module_runs_stacked_only_where_that_equals_one_row_at_a_time():
    """A raw parameter with a leading axis of 1 is stacked per row only when a noisy check
    shows the one call equals R single-row calls; a forward that would mix the stacked draws
    (a sum over the parameter, an index into it) or fails on them runs row by row, and either way each row sees its own
    draw: the row outputs follow the law of explicit weight draws."""

    class Add(torch.nn.Module):  # x + b: stacking b to (R, 3) is exact
        def __init__(self):
            super().__init__()
            self.b = torch.nn.Parameter(torch.zeros(1, 3))

        def forward(self, x):
            return x + self.b

    class Total(torch.nn.Module):  # x · Σ b: stacking would sum every row's draw together
        def __init__(self):
            super().__init__()
            self.b = torch.nn.Parameter(torch.ones(1, 3))

        def forward(self, x):
            return x * self.b.sum()

    class Index(torch.nn.Module):  # x + b[0]: stacked b makes b[0] row 0's draw for all
        def __init__(self):
            super().__init__()
            self.b = torch.nn.Parameter(torch.zeros(1, 3))

        def forward(self, x):
            return x + self.b[0].view(1, 3).expand(x.shape[0], 3).contiguous().view(-1, 3)

    class Raises(torch.nn.Module):  # a forward that fails outright on stacked parameters
        def __init__(self):
            super().__init__()
            self.b = torch.nn.Parameter(torch.zeros(1, 3))

        def forward(self, x):
            if self.b.shape[0] != 1:
                raise ValueError("expects one row of b")
            return x + self.b

    R = 4000
    for mod, stacked, var in ((Add(), {""}, 0.25), (Total(), set(), 3 * 0.25),
                              (Index(), set(), 0.25), (Raises(), set(), 0.25)):
        with torch.no_grad(), RowNoise(mod, {"b": 0.5}, torch.Generator().manual_seed(3)) as h:
            h.start_pass(R)
            out = mod(torch.ones(R, 3)).double()
        assert h._stacked == stacked
        assert "forward" not in mod.__dict__
        # rows independent with the law of one draw each: per-coordinate variance σ² (Add),
        # 3σ² (Total: x · (3 + Σu)), and rows uncorrelated
        v = out.var(0)
        assert ((v - var).abs() < 5 * var * math.sqrt(2 / R)).all(), v
        r = torch.corrcoef(torch.stack([out[:-1, 0], out[1:, 0]]))[0, 1]
        assert abs(float(r)) < 5 / math.sqrt(R)


# ---- N reaches the formulas ----------------------------------------------------------------

def test_n_losses_reach_the_curve_and_the_certified_entry(trained):
    from boundcalc.measure.data.task_measure import dr_point, measure_task

    out, *_ = trained
    st = measure_task(str(out / "model"), str(out / "data.csv"), str(out / "init"),
                      device="cpu", sigmas=(0.05, 0.1), draws=5, delta_mc=0.01,
                      hessian_probes=0, batch_size=16)
    n, N = 48, 5 * 48
    assert st.scalars["gibbs_draws"].value == N and st.scalars["gibbs_passes"].value == 5
    assert st.provenance["gibbs_mode"] == "sample"
    c = st.curves["gibbs_risk_mean"]
    assert c.n_samples == N and "not bitwise" in c.method and f"N = {N}" in c.method
    for v, (lo, hi) in zip(c.value, c.ci):
        assert lo == v and hi == pytest.approx(float(kl_inv_exact(v, math.log(2 * 2 / 0.01) / N)),
                                               rel=1e-9)
    r = bc.compute("pac_bayes_kl_gaussian_mc", st)
    j, s = dr_point(float(r.parameters["sigma"]))
    E = float(c.value[list(c.at).index(s)])
    dist = st.scalars["dist_init_total"].value
    upper = kl_inv_exact(E, math.log(2 / (0.01 / 2)) / N)
    delta_j = 0.05 * 6 / (math.pi ** 2 * j * j)
    ref = kl_inv_exact(upper, (dist ** 2 / (2 * s * s) + math.log(2 * math.sqrt(n) / delta_j)) / n)
    assert r.value == pytest.approx(float(ref), rel=1e-6) and r.value >= float(ref) * (1 - 1e-12)
    assert r.is_bound and r.delta == pytest.approx(0.06)


def test_monte_carlo_entry_with_n_losses_against_mpmath():
    for E, N in ((0.053, 30), (0.053, 9000), (0.0, 9000)):
        r = bc.compute("monte_carlo_gibbs_risk", values={"E_hat": E, "k": N, "delta_mc": 0.01})
        ref = float(kl_inv_exact(E, math.log(2 / 0.01) / N))
        assert ref <= r.value <= ref * (1 + 1e-9) + 1e-15
    # the MiniLM numbers: 30 whole-sample draws vs N = 30·300 per-sample losses
    # (δ′ = 0.01 split over 7 σ points)
    mc = {"E_hat": 0.053, "delta_mc": 0.01 / 7}
    assert bc.compute("monte_carlo_gibbs_risk", values={**mc, "k": 30}).value > 0.31
    assert bc.compute("monte_carlo_gibbs_risk", values={**mc, "k": 9000}).value < 0.07


# ---- subsampling and memory ----------------------------------------------------------------

def test_subsampled_passes_count_their_rows_and_estimate_the_same_risk(trained, plain):
    _, tm, batched, enc, y = trained
    per = gibbs_estimate(tm, batched, CPU, [0.1],
                         MonteCarlo(30, 21, 0.01, mode="sample", samples=100))
    whole = gibbs_estimate(tm, batched, CPU, [0.1],
                           MonteCarlo(60, 22, 0.01, mode="whole", samples=20))
    assert per.n_losses == 30 * 100 and whole.n_losses == 60  # m > n: with replacement
    assert per.subsampled and "with replacement" in per.describe()
    p_se = plain.std(ddof=1) / math.sqrt(plain.size)
    for est in (per, whole):
        se = math.sqrt(est.means.var(ddof=1) / est.passes)
        assert abs(est.means.mean() - plain.mean()) < 4 * math.hypot(se, p_se)


def test_rows_per_pass_respect_a_tiny_memory_budget(trained):
    _, tm, batched, *_ = trained
    per_row = _row_bytes(tm, batched.seq_len)
    seen = []
    try:
        set_memory_budget(3 * per_row)
        assert rows_per_chunk(tm, batched.seq_len, 16) == 3
        h = tm.model.bert.embeddings.word_embeddings.register_forward_hook(
            lambda m, a, o: seen.append(a[0].shape[0]))
        small = gibbs_estimate(tm, batched, CPU, [0.1], MonteCarlo(2, 0, 0.01))
        h.remove()
        # the first two forwards are the hooks' audit on 2 and 3 rows (row_audit), no noise
        assert seen[:2] == [2, 3]
        assert small.n_losses == 2 * 48 and max(seen) == 3 and sum(seen[2:]) == 2 * 48
        set_memory_budget(per_row // 2)
        with pytest.raises(ResourceError, match="memory budget") as exc:
            gibbs_estimate(tm, batched, CPU, [0.1], MonteCarlo(2, 0, 0.01))
        assert "\n" not in str(exc.value)
    finally:
        set_memory_budget(None)
    assert rows_per_chunk(tm, batched.seq_len, 16) == 16


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cpu_and_cuda_agree_within_monte_carlo_error_not_bitwise(trained):
    out, tm, batched, *_ = trained
    gpu = load_task_model(out / "model", "cuda")
    for mode in ("sample", "whole"):
        a = gibbs_estimate(tm, batched, CPU, [0.1], MonteCarlo(60, 0, 0.01, mode=mode))
        b = gibbs_estimate(gpu, batched, torch.device("cuda"), [0.1],
                           MonteCarlo(60, 0, 0.01, mode=mode))
        assert b.n_losses == a.n_losses and b.engine == a.engine
        se = math.hypot(math.sqrt(a.means.var(ddof=1) / 60), math.sqrt(b.means.var(ddof=1) / 60))
        assert abs(a.means.mean() - b.means.mean()) < 4 * se
        assert not np.array_equal(a.means, b.means)


def test_cli_flags_and_one_line_errors(trained, tmp_path):
    out, *_ = trained
    base = ["measure", str(out / "model"), "--init", str(out / "init"), "--data",
            str(out / "data.csv"), "--sigma", "0.1", "--draws", "2", "--hessian-probes", "0",
            "-o", str(tmp_path / "s.json")]
    res = runner.invoke(app, [*base, "--gibbs-mode", "whole", "--gibbs-samples", "10", "--json"])
    assert res.exit_code == 0, res.output[-1500:]
    doc = json.loads((tmp_path / "s.json").read_text())
    assert doc["scalars"]["gibbs_draws"]["value"] == 2
    assert doc["curves"]["gibbs_risk_mean"]["n_samples"] == 2
    assert "10 rows drawn uniformly with replacement" in doc["curves"]["gibbs_risk_mean"]["method"]
    res = runner.invoke(app, [*base, "--gibbs-samples", "10"])
    assert res.exit_code == 0, res.output[-1500:]
    assert "N = 20 losses per σ, sample mode" in " ".join(res.output.split())
    res = runner.invoke(app, [*base, "--gibbs-mode", "bogus"])
    assert res.exit_code != 0 and "--gibbs-mode" in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_data_side_threads_one_for_a_small_model_else_as_asked(trained, tmp_path):
    """The data side runs on one torch thread for a model no wider than 512 on a CPU, on
    ``--threads N`` when given, and records which; the caller's thread count is restored."""
    from transformers import BertConfig, BertForSequenceClassification

    from boundcalc.measure.threads import data_threads, widest_layer

    out, tm, *_ = trained
    assert widest_layer(tm.model) == 32  # intermediate 32; the 16-wide embeddings count 16
    assert data_threads(tm.model, CPU) == 1
    from boundcalc.measure.threads import available_cores

    # as asked, capped at the cores this process may use (issue 32)
    assert data_threads(tm.model, CPU, 1) == 1
    assert data_threads(tm.model, CPU, 3) == min(3, available_cores())
    wide = BertForSequenceClassification(BertConfig(vocab_size=50, hidden_size=64,
                                                    num_hidden_layers=1, num_attention_heads=2,
                                                    intermediate_size=600))
    assert widest_layer(wide) == 600 and data_threads(wide, CPU) is None
    assert data_threads(tm.model, torch.device("meta")) is None  # not a CPU: left alone
    base = ["measure", str(out / "model"), "--init", str(out / "init"), "--data",
            str(out / "data.csv"), "--sigma", "0.1", "--draws", "1", "--hessian-probes", "0",
            "--json"]
    before = torch.get_num_threads()
    for flags, want in (([], 1), (["--threads", "2"], 2)):
        res = runner.invoke(app, [*base, *flags, "-o", str(tmp_path / "t.json")])
        assert res.exit_code == 0, res.output[-1500:]
        doc = json.loads((tmp_path / "t.json").read_text())
        assert doc["provenance"]["threads"]["data_side"] == want
        assert torch.get_num_threads() == before
    res = runner.invoke(app, [*base, "--threads", "0"])
    assert res.exit_code != 0 and "--threads" in res.output


@pytest.mark.slow  # hundreds of explicit weight draws: 10-30 s on a busy 2-core machine
def test_vit_rows_replay_the_embeddings_and_match_explicit_weight_draws():
    """A ViT: Conv2d patches by hook, the raw cls_token / position table replayed per row."""
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    cfg = ViTConfig(image_size=8, patch_size=2, num_channels=1, hidden_size=16,
                    num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                    num_labels=3, attn_implementation="eager")
    model = ViTForImageClassification(cfg).eval()
    names = [n for n, _ in model.named_parameters()]
    assert unsupported_reason(model, names) is None
    raw = ["vit.embeddings.cls_token", "vit.embeddings.position_embeddings"]
    x = torch.randn(1, 1, 8, 8)
    R = 600
    for sig in ({n: 0.1 for n in names}, {n: (0.5 if n in raw else 0.0) for n in names}):
        with torch.no_grad(), RowNoise(model, sig, device_generator(model, 1)) as h:
            h.start_pass(R)
            a = model(pixel_values=x.expand(R, 1, 8, 8)).logits.double()
        assert "forward" not in model.vit.embeddings.__dict__  # the replay is undone
        assert h._stacked == {"vit.embeddings"}  # one call with the R draws stacked
        g = torch.Generator().manual_seed(2)
        base = {n: p.detach().clone() for n, p in model.named_parameters()}
        ref = []
        with torch.no_grad():
            for _ in range(R):
                for n, p in model.named_parameters():
                    p.copy_(base[n] + sig[n] * torch.randn(p.shape, generator=g))
                ref.append(model(pixel_values=x).logits.double()[0])
            for n, p in model.named_parameters():
                p.copy_(base[n])
        c = torch.stack(ref)
        se = torch.sqrt(a.var(0) / R + c.var(0) / R)
        assert ((a.mean(0) - c.mean(0)).abs() < 4 * se).all()
        assert torch.allclose(a.std(0), c.std(0), rtol=0.15) and (c.std(0) > 1e-3).all()
