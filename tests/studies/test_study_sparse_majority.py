"""Study 2 (Trauger & Tewari sparse majority): the ported pieces against independent
computations, and the example end to end at reduced scale."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from studies import sparse_majority as sm
from studies.tiny_transformers import KerasSGD, SparseMajorityTransformer

from _study_helpers import (check_png, figure_refs, load_example,  # noqa: E402
                            run_capturing_figures)



# ---- data -------------------------------------------------------------------------------------

def test_positional_encoding_matches_the_official_double_loop():
    n, d = 7, 12
    pe = sm.positional_encoding(n, d)
    for j in range(n):
        for i in range(d):
            ref = math.sin(j / 10000 ** (i / d)) if i % 2 == 0 else math.cos(j / 10000 ** (i / d))
            assert pe[j, i] == pytest.approx(ref, abs=1e-12)


def test_token_embeddings_are_orthogonal_with_unit_l1_norm():
    zero, one, cls = sm.orthogonal_token_embeddings(np.random.default_rng(3), 64)
    for v in (zero, one, cls):
        assert np.abs(v).sum() == pytest.approx(1.0, abs=1e-12)
    for a, b in ((zero, one), (zero, cls), (one, cls)):
        assert abs(float(a @ b)) < 1e-14


def test_labels_are_the_majority_of_the_relevant_bits():
    data = sm.make_data(T=13, n_train=40, n_test=60, seed=5)
    assert len(set(data.relevant.tolist())) == 9 and max(data.relevant) < 13
    for row, label in zip(data.bits, data.labels):
        ones = sum(int(row[j]) for j in data.relevant)
        assert label == (1 if ones >= 5 else 0)
    X = data.embed(slice(0, 3), dtype=torch.float64).numpy()
    assert X.shape == (3, 14, 64)
    tok = {0: data.tokens[0], 1: data.tokens[1]}
    assert np.allclose(X[1, 4], tok[int(data.bits[1, 4])] + data.pe[4])
    assert np.allclose(X[2, 13], data.tokens[2] + data.pe[13])


def test_make_data_refuses_short_sequences():
    from boundcalc.errors import BoundcalcError

    with pytest.raises(BoundcalcError, match="below s=9"):
        sm.make_data(T=8, n_train=5, n_test=5, seed=0)


# ---- model and optimiser ----------------------------------------------------------------------

def _keras_reference_forward(model: SparseMajorityTransformer, X: np.ndarray) -> np.ndarray:
    """Full Keras MultiHeadAttention over every query position, in numpy, with Keras kernel
    layouts (d, heads, key_dim) — then ReLU, Dense, last position, head."""
    h, kd, d = model.heads, model.key_dim, model.d
    W = {n: p.detach().double().numpy() for n, p in model.named_parameters()}
    kq = W["q.weight"].T.reshape(d, h, kd)
    kk = W["k.weight"].T.reshape(d, h, kd)
    kv = W["v.weight"].T.reshape(d, h, kd)
    ko = W["o.weight"].T.reshape(h, kd, d)
    out = []
    for x in X:
        q = np.einsum("td,dhk->thk", x, kq) + W["q.bias"].reshape(h, kd)
        k = np.einsum("td,dhk->thk", x, kk) + W["k.bias"].reshape(h, kd)
        v = np.einsum("td,dhk->thk", x, kv) + W["v.bias"].reshape(h, kd)
        q = q / math.sqrt(kd)
        s = np.einsum("qhk,thk->hqt", q, k)
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        z = np.einsum("hqt,thk->qhk", a, v)
        mha = np.einsum("qhk,hkd->qd", z, ko) + W["o.bias"]
        dense = np.maximum(mha, 0) @ W["dense.weight"].T + W["dense.bias"]
        out.append(dense[-1] @ W["head.weight"].T + W["head.bias"])
    return np.array(out)


def test_model_equals_full_keras_attention_reference():
    torch.manual_seed(0)
    model = SparseMajorityTransformer().double()
    with torch.no_grad():  # non-zero biases so that every term is exercised
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    data = sm.make_data(T=11, n_train=4, n_test=2, seed=1)
    X = data.embed(slice(0, 6), dtype=torch.float64)
    ours = model(X).detach().numpy()
    ref = _keras_reference_forward(model, X.numpy())
    assert np.allclose(ours, ref, atol=1e-12)


def test_forward_from_ids_equals_forward_on_embeddings_values_and_gradients():
    torch.manual_seed(3)
    data = sm.make_data(T=17, n_train=7, n_test=3, seed=4)
    tokens = torch.as_tensor(data.tokens)
    pe = torch.as_tensor(data.pe)
    a = SparseMajorityTransformer().double()
    with torch.no_grad():
        for p in a.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    b = SparseMajorityTransformer().double()
    b.load_state_dict(a.state_dict())
    ids = data.ids(slice(0, 10))
    assert ids.shape == (10, 18) and bool((ids[:, -1] == 2).all())
    X = data.embed(slice(0, 10), dtype=torch.float64)
    assert np.allclose(X.numpy(), data.tokens[ids.numpy()] + data.pe[None])
    ya, yb = a(X), b.forward_ids(ids, tokens, pe)
    assert torch.allclose(ya, yb, atol=1e-12)
    w = torch.randn(10, 2, dtype=torch.float64)
    (ya * w).sum().backward()
    (yb * w).sum().backward()
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert torch.allclose(pa.grad, pb.grad, atol=1e-11), name
    # any ids, not only CLS-last strings: the last token's query is used, as forward does
    odd = torch.randint(0, 3, (4, 18))
    Xo = tokens[odd] + pe[None]
    assert torch.allclose(a(Xo), b.forward_ids(odd, tokens, pe), atol=1e-12)


def test_keras_init_uses_keras_fans():
    model = SparseMajorityTransformer()
    model.keras_init(torch.Generator().manual_seed(0))
    lim_qkv = math.sqrt(6 / (2 * 64 + 64 * 64))
    lim_o = math.sqrt(6 / (64 * 2 + 64 * 2))
    lim_dense = math.sqrt(6 / 128)
    for lin, lim in ((model.q, lim_qkv), (model.k, lim_qkv), (model.v, lim_qkv),
                     (model.o, lim_o), (model.dense, lim_dense)):
        w = lin.weight.detach().abs()
        assert float(w.max()) <= lim and float(w.max()) > 0.97 * lim
        assert float(lin.bias.detach().abs().max()) == 0.0
    assert float(model.head.weight.detach().std()) == pytest.approx(0.05, rel=0.25)


def test_keras_sgd_puts_the_learning_rate_inside_the_velocity():
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    opt = KerasSGD([p], lr=0.1, momentum=0.9)
    g1, g2 = np.array([0.5, 1.0]), np.array([-1.0, 2.0])
    p.grad = torch.tensor(g1)
    opt.step()
    opt.lr = 0.05                      # the schedule changes η between steps
    p.grad = torch.tensor(g2)
    opt.step()
    v1 = -0.1 * g1
    v2 = 0.9 * v1 - 0.05 * g2
    assert np.allclose(p.detach().numpy(), np.array([1.0, -2.0]) + v1 + v2, atol=1e-15)


def test_training_schedule_and_checkpoint_follow_the_official_loop():
    data = sm.make_data(T=9, n_train=30, n_test=20, seed=2)
    model = SparseMajorityTransformer()
    model.keras_init(torch.Generator().manual_seed(0))
    cfg = sm.TrainConfig(max_epochs=4, batch_size=16)
    out = sm.train(model, data, cfg, seed=0)
    lr, expected = 0.01, []
    for _ in range(out.epochs):
        lr = max(0.001, 0.999 * lr)
        expected.append(lr)
    assert out.history["lr"] == pytest.approx(expected, rel=1e-15)
    assert out.best_epoch == int(np.argmin(out.history["val_loss"])) + 1
    # the reloaded weights are the best-validation ones
    val, _ = sm._loss_acc(model, data, data.test_rows, 1000)
    assert val == pytest.approx(min(out.history["val_loss"]), rel=1e-5)


def test_recipes_official_and_fast():
    from boundcalc.errors import BoundcalcError

    off, fast = sm.recipe("official"), sm.recipe("fast")
    assert (off.optimizer, off.lr, off.momentum, off.lr_decay, off.lr_floor, off.batch_size,
            off.max_epochs) == ("keras_sgd", 0.01, 0.9, 0.999, 0.001, 128, 200_000)
    assert (fast.optimizer, fast.lr, fast.betas, fast.lr_decay, fast.batch_size,
            fast.max_epochs) == ("adam", 3e-3, (0.9, 0.9), 1.0, None, 20_000)
    assert sm.recipe("fast", max_epochs=7, batch_size=None).max_epochs == 7
    assert sm.RECIPES["fast"].max_epochs == 20_000          # overrides copy, never mutate
    with pytest.raises(BoundcalcError, match="unknown recipe 'adamw'"):
        sm.recipe("adamw")


def test_fast_recipe_is_full_batch_adam_with_constant_lr():
    """Twenty epochs of train() against a hand-written full-batch Adam loop on the reference
    (embedding) forward pass."""
    data = sm.make_data(T=9, n_train=24, n_test=10, seed=6)
    init = SparseMajorityTransformer()
    init.keras_init(torch.Generator().manual_seed(2))
    model = SparseMajorityTransformer()
    model.load_state_dict(init.state_dict())
    out = sm.train(model, data, sm.recipe("fast", max_epochs=20), seed=0)
    assert out.history["lr"] == [3e-3] * out.epochs
    ref = SparseMajorityTransformer()
    ref.load_state_dict(init.state_dict())
    opt = torch.optim.Adam(ref.parameters(), lr=3e-3, betas=(0.9, 0.9))
    X = data.embed(data.train_rows)
    y = torch.as_tensor(data.labels[:24])
    X_val = data.embed(data.test_rows).double()
    y_val = data.labels[24:]
    accs, val_losses = [], []
    for _ in range(out.epochs):
        logits = ref(X)
        accs.append(int((logits.argmax(1) == y).sum()) / 24)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            logits, torch.nn.functional.one_hot(y, 2).float())
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            z = ref.double()(X_val).numpy()
            ref.float()
        onehot = np.eye(2)[y_val]
        bce = np.maximum(z, 0) - z * onehot + np.log1p(np.exp(-np.abs(z)))
        val_losses.append(float(bce.mean()))
    assert out.history["train_acc"] == pytest.approx(accs, abs=1e-12)
    assert out.history["val_loss"] == pytest.approx(val_losses, rel=1e-5)
    assert max(val_losses) - min(val_losses) > 1e-3            # training moved the model
    assert not out.reached_full_train_accuracy
    for k, v in ref.state_dict().items():
        # k.bias has true gradient 0 (softmax ignores a shift common to all positions), so
        # Adam moves it by normalised rounding noise, different in the two computations
        if k != "k.bias":
            assert torch.allclose(out.final_state[k], v, atol=1e-4), k


# ---- norms and registry quantities -----------------------------------------------------------

def test_norms_and_registry_quantities_against_direct_formulas(registry):
    torch.manual_seed(1)
    model = SparseMajorityTransformer()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    norms = sm.weight_norms(model)
    all_l1 = sum(float(np.abs(p.detach().double().numpy()).sum()) for p in model.parameters())
    assert norms["l1_sum"] == pytest.approx(all_l1, rel=1e-12)
    assert len(norms["l1"]) == 12 and "attention_output/kernel" in norms["l1"]
    W = model.dense.weight.detach().double().numpy()
    assert norms["matrices"]["dense"]["spectral"] == pytest.approx(np.linalg.norm(W, 2), rel=1e-10)
    assert norms["matrices"]["dense"]["norm_21"] == pytest.approx(
        np.linalg.norm(W, axis=0).sum(), rel=1e-10)
    q = model.q.weight.detach().double().numpy()[:64]
    k = model.k.weight.detach().double().numpy()[:64]
    assert norms["heads"]["QK"][0]["spectral"] == pytest.approx(
        np.linalg.norm(q.T @ k / 8.0, 2), rel=1e-9)
    margins = np.array([-1.0, 0.5, 2.0, 3.0])
    m, T, b_x = 300, 20, 5.7
    reg = sm.registry_quantities(norms, T=T, m=m, b_x=b_x, train_margins=margins,
                                 registry=registry)
    tt = reg["trauger_tewari"]
    assert tt["kind"] == "proxy" and "not a bound" in tt["label"]
    assert tt["value"] == pytest.approx(norms["l1_sum"] - norms["l1_bias"], rel=1e-12)
    ed = reg["edelman"]
    assert ed["kind"] == "rate"
    mats, heads = norms["matrices"], norms["heads"]
    c = b_x * sum(h["spectral"] for h in heads["V"]) * mats["dense"]["spectral"] \
        * mats["head"]["spectral"]
    expected = 0.5 + c * math.log(m * (T + 1)) / (1.0 * math.sqrt(m)) \
        + math.sqrt(math.log(1 / 0.05) / m)
    assert ed["value"] == pytest.approx(expected, rel=1e-10)


# ---- the example end to end -----------------------------------------------------------------

@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("seqlen")
    rc, figures = run_capturing_figures("sparse_majority", out)
    return out, rc, {"figures": figures}


def test_example_writes_report_with_readable_plots(study):
    out, rc, captured = study
    assert rc == 0
    report = (out / "report.md").read_text()
    figures = captured["figures"]
    assert len(figures) >= 4
    for name in figures:
        assert f"]({name})" in report
        check_png(out / name)
    assert sorted(p.name for p in out.glob("*.png")) == sorted(figures)
    referenced = figure_refs(report)
    assert sorted(referenced) == sorted(figures)


def test_example_reduced_run_learns_every_T(study):
    """The reduced run (fast recipe) fits the training set at every T: the stop rule fires, and
    the weights it accepted classify every training string correctly when re-evaluated."""
    out, _, _ = study
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["recipe"] == "fast" and res["config"]["batch_size"] is None
    runs = res["results"]
    assert [r["T"] for r in runs] == [10, 20, 40]
    for r in runs:
        assert r["reached_full_train_accuracy"], (r["T"], r["epochs"])
        assert r["epochs"] < res["config"]["max_epochs"]
        assert r["at_stop"]["train_acc"] == 1.0, r["T"]
        assert 1 <= r["best_epoch"] <= r["epochs"]
        assert r["at_stop"]["test_acc"] > 0.6, r["T"]        # learned, not chance (≈ 0.5)
    assert runs[0]["at_stop"]["test_acc"] > 0.95              # T = 10 is learned almost exactly


def test_example_report_labels_and_results(study):
    out, _, _ = study
    report = (out / "report.md").read_text()
    res = json.loads((out / "results.json").read_text())
    runs = res["results"]
    for r in runs:
        for q in (r, r["at_stop"]):
            assert q["acc_gap"] == pytest.approx(q["train_acc"] - q["test_acc"])
            assert q["loss_gap"] == pytest.approx(q["test_loss"] - q["train_loss"])
            assert q["registry"]["trauger_tewari"]["value"] == pytest.approx(
                q["norms"]["l1_sum"] - q["norms"]["l1_bias"], rel=1e-10)
        assert f"| {r['T']} | 0 | trauger_tewari_l11_sum | proxy |" in report
        assert f"| {r['T']} | 0 | edelman_cor45_rate | rate |" in report
        s = r["at_stop"]
        assert f"| {r['T']} | 0 | {r['epochs']} | 1 | {s['test_acc']:.4g} |" in report
    assert "certified bound" not in report
    assert "Caution" not in report and "3 of 3 runs" in report
    assert "a deviation from the official code" in report and "Adam" in report
    assert "All runs reached training accuracy 1.0 under the fast recipe" in report


def test_example_official_recipe_short_run_carries_the_caution(tmp_path):
    mod = load_example("sparse_majority")
    out = tmp_path / "official"
    rc = mod.main(["--out", str(out), "--recipe", "official", "--T", "9", "11", "13",
                   "--max-epochs", "3", "--n-test", "40"])
    assert rc == 0
    report = (out / "report.md").read_text()
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["recipe"] == "official" and res["config"]["batch_size"] == 128
    assert all(not r["reached_full_train_accuracy"] and r["epochs"] == 3
               for r in res["results"])
    assert "Caution" in report and "say nothing" in report and "--recipe fast" in report
    assert "(the official one)" in report and "Training recipe `fast`" not in report


def test_help_teaches(capsys):
    mod = load_example("sparse_majority")
    with pytest.raises(SystemExit):
        mod.main(["--help"])
    text = capsys.readouterr().out
    for needle in ("sparse majority", "--full", "PROXY", "RATE", "--max-epochs", "--recipe",
                   "official", "DEVIATION", "full-batch Adam", "Neither is a bound"):
        assert needle in text


def test_bad_arguments_give_one_line_errors(tmp_path, capsys):
    mod = load_example("sparse_majority")
    assert mod.main(["--out", str(tmp_path), "--T", "5"]) == 2
    assert mod.main(["--out", str(tmp_path), "--runs", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: every T must be >= 9 (the number of relevant positions)",
                   "error: --runs must be >= 1, got 0"]
    assert not (tmp_path / "report.md").exists()
