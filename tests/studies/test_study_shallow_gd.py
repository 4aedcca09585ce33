"""End to end: examples/shallow_gd.py at reduced scale (the shallow Transformer of docs/sources/shallow_gd.md).

The model, the measured inputs of Theorem 5 and the bound are checked against independent
computations written here: a numpy loop over positions for the paper's f(X), numpy SVDs for α
and the spectral norms, and Theorem 5 typed in from the paper with math.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("sklearn", reason="the study's digits data ships with scikit-learn")

from studies import shallow_gd as sg  # noqa: E402
from _measure_helpers import single_thread  # noqa: E402
from _study_helpers import check_png, figure_refs, load_example  # noqa: E402

FIGURES = {"radii_vs_N.png", "rate_vs_N.png", "loss_curves.png"}



@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("study_gd")
    with single_thread():
        assert load_example("shallow_gd").main(["--out", str(out)]) == 0
    return out


def seed_f(X, WQ, WK, WV, wO):
    """The paper's f(X) = (1/d_s) w_Oᵀ Σ_i ReLU(W_V Xᵀ σ_s(X W_Kᵀ W_Q X_iᵀ / √d_m)), by loops."""
    d_s, d_m = X.shape[0], WQ.shape[0]
    acc = np.zeros(d_m)
    for i in range(d_s):
        scores = np.array([X[j] @ WK.T @ WQ @ X[i] for j in range(d_s)]) / math.sqrt(d_m)
        beta = np.exp(scores - scores.max())
        beta /= beta.sum()
        acc += np.maximum(WV @ X.T @ beta, 0.0)
    return wO @ acc / d_s, acc / d_s


def theorem5(v, rho_power):
    """Theorem 5 of the shallow-Transformer paper (natural logs), with the Dudley infimum of Lemma 2 over [0, A]."""
    N, ds, dm, RX = v["N"], v["d_s"], v["d_m"], v["R_X"]
    eQ, eK = v["WQ0_fro"] + v["R_Q"], v["WK0_fro"] + v["R_K"]
    eV, eO = v["WV0_fro"] + v["R_V"], v["wO0_norm"] + v["R_O"]
    rho = math.sqrt(N) * ds ** 1.5 * RX
    zh = eO ** 2 * (1 + 4 / dm * RX ** 4 * ds ** 2 * eV ** 2 * (eQ ** 2 + eK ** 2))
    c = 2 / math.sqrt(dm) * RX ** 2 * ds
    Mh = max(eV / v["R_O"], eO / v["R_V"], c * eK * eV * eO / v["R_Q"], c * eQ * eV * eO / v["R_K"])
    A = eO * eV * math.sqrt(ds) * RX
    P = (math.sqrt(ds) * RX) ** 2 * ((math.sqrt(dm) * eV) ** (2 / 3)
                                    + (math.sqrt(dm) * eK * eQ * eV) ** (2 / 3)) ** 3 \
        * math.log(N * ds)
    a = v["alpha"]
    emp = min(a ** 2 / (8 * rho * Mh * math.sqrt(N)),
              a ** 3 * eO / (32 * rho ** rho_power * zh * math.sqrt(N)))
    k = math.sqrt(P / N)
    rad = k * (1 + math.log(A / k)) if k <= A else A
    R = math.sqrt(v["R_Q"] ** 2 + v["R_K"] ** 2 + v["R_V"] ** 2 + v["R_O"] ** 2)
    conf = math.sqrt(math.log(R / 0.05) / N)
    return emp + rad + conf


def test_report_lists_valid_pngs(study):
    refs = set(figure_refs((study / "report.md").read_text()))
    assert refs == FIGURES == {p.name for p in study.glob("*.png")}
    for name in FIGURES:
        check_png(study / name, min_bytes=20_000, min_shape=(300, 500))


def test_bound_matches_theorem5_typed_in_here(study):
    df = pd.read_csv(study / "runs.csv")
    assert sorted(zip(df["N"], df["d_m"])) == [(n, d) for n in (20, 40, 80, 160) for d in (16, 64)]
    for _, r in df.iterrows():
        v = r.to_dict()
        assert r["rate_rho4"] == pytest.approx(theorem5(v, 4), rel=1e-9)
        assert r["rate_rho2"] == pytest.approx(theorem5(v, 2), rel=1e-9)
        # measured quantities are sane: radii positive, norms at init, inputs within R_X ≤ 1
        assert min(r["R_Q"], r["R_K"], r["R_V"], r["R_O"]) > 0
        assert 0 < r["R_X"] <= 1 and r["full_row_rank"]
        assert r["WQ0_spec"] <= r["WQ0_fro"] <= math.sqrt(r["d_m"]) * r["WQ0_spec"] + 1e-12
        assert 0 <= r["test_abs"] < 1.5


def test_report_states_rate_and_conditions(study):
    text = (study / "report.md").read_text()
    assert "rate (O(·) with hidden constant C_hidden=1)" in text
    assert "never a certified bound" in text
    table = text.split("*Which checkable conditions of Theorem 5 hold")[1].split("\n\n")[1]
    rows = [r.split("|")[1:-1] for r in table.splitlines()[2:]]
    assert len(rows) == 8
    for cells in rows:
        N, dm = int(cells[0]), int(cells[1])
        assert cells[2].strip() == ("holds" if dm >= N ** 3 else "fails")
        assert all(c.strip() in ("holds", "fails", "unknown") for c in cells[2:])


def test_model_is_the_seeds_formula():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(3, 5, 6)) / 3
    model = sg.ShallowTransformer(d=10, d_m=10, d_in=6, seed=3)
    WQ, WK, WV, wO = (model.full(k).numpy() for k in ("W_Q", "W_K", "W_V", "w_O"))
    import torch

    with torch.no_grad():
        f = model(torch.as_tensor(X)).numpy()
        F = model.features(torch.as_tensor(X)).numpy()
    Xpad = np.concatenate([X, np.zeros((3, 5, 4))], axis=2)   # d = d_m = 10
    for n in range(3):
        fn, Fn = seed_f(Xpad[n], WQ, WK, WV, wO)
        assert f[n] == pytest.approx(fn, rel=1e-12)
        np.testing.assert_allclose(F[n], Fn, rtol=1e-12)


def test_lecun_initialisation():
    model = sg.ShallowTransformer(d=256, d_m=256, d_in=16, seed=0)
    for k in ("W_Q", "W_K", "W_V"):
        W = model.full(k).numpy()
        assert W.shape == (256, 256) and W.var() == pytest.approx(1 / 256, rel=0.03)
    assert model.full("w_O").numpy().var() == pytest.approx(1 / 256, rel=0.2)


def test_train_run_measures_what_theorem5_needs():
    images, labels = sg.load_digits01()
    assert images.shape == (360, 8, 8) and set(labels) == {-1.0, 1.0}
    X = sg.tokenize(images, 32)
    norms = np.linalg.norm(X, axis=2)
    assert norms.max() <= 1 + 1e-12
    assert (np.linalg.matrix_rank(X) == 8).all()
    with single_thread():
        rec = sg.train_run(X[:30], labels[:30], X[300:], labels[300:], d_m=32, steps=40, lr=0.5)
    model = sg.ShallowTransformer(32, 32, d_in=16, seed=0)   # the same initialisation
    WQ, WK, WV, wO = (model.full(k).numpy() for k in ("W_Q", "W_K", "W_V", "w_O"))
    F0 = np.array([seed_f(np.pad(x, ((0, 0), (0, 16))), WQ, WK, WV, wO)[1] for x in X[:30]])
    assert rec.alpha == pytest.approx(np.linalg.svd(F0, compute_uv=False).min(), rel=1e-8)
    assert rec.Phi0 == pytest.approx(0.5 * np.sum((F0 @ wO - labels[:30]) ** 2), rel=1e-10)
    assert rec.WV0_spec == pytest.approx(np.linalg.norm(WV, 2), rel=1e-10)
    assert rec.WK0_fro == pytest.approx(np.linalg.norm(WK), rel=1e-12)
    assert rec.R_X == pytest.approx(np.linalg.norm(X[:30], axis=(1, 2)).max() / math.sqrt(8))
    for k in sg.RADII:   # the maximum over steps is at least the final distance
        assert getattr(rec, k) >= rec.final_dist[k] - 1e-15 and getattr(rec, k) > 0
    assert rec.curve_train[-1] < rec.curve_train[0]   # GD decreased the training loss


def test_tokenize_refuses_too_narrow_models():
    from boundcalc.errors import BoundcalcError

    with pytest.raises(BoundcalcError, match="d_m must be ≥ 16"):
        sg.tokenize(np.zeros((1, 8, 8)), 8)


def test_help_teaches(capsys):
    with pytest.raises(SystemExit) as exc:
        load_example("shallow_gd").main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for word in ("--full", "--hidden-constant", "RATE", "rate_vs_N.png", "scikit-learn"):
        assert word in out
