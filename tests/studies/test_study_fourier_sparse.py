"""Study 3 (Lintilhac & Shaikh, Fourier-sparse targets): targets, the hard-coded construction and
the sharpness measurements against independent computations, and the example end to end."""

from __future__ import annotations

import itertools
import json
import math
import re

import numpy as np
import pytest
import torch

from boundcalc.errors import DomainError
from studies import fourier_sparse as fs

from _study_helpers import (check_png, figure_refs, load_example,  # noqa: E402
                            run_capturing_figures)



def target_by_loops(sets, coeffs, x: tuple[int, ...]) -> float:
    """f(x) = Σ_t c_t · 1[Σ_{i∈S_t} x_i even], one input at a time."""
    return sum(c * (1.0 if sum(x[i] for i in S) % 2 == 0 else 0.0) for S, c in zip(sets, coeffs))


# ---- targets ----------------------------------------------------------------------------------

def test_random_target_properties_and_refusals():
    rng = np.random.default_rng(0)
    t = fs.random_target(9, 3, 7, rng)
    assert len(set(t.sets)) == 7 and all(len(S) == 3 and len(set(S)) == 3 for S in t.sets)
    assert np.all(t.coeffs > 0) and np.linalg.norm(t.coeffs) == pytest.approx(1.0)
    assert fs.random_target(4, 4, 1, rng).sets == [(0, 1, 2, 3)]      # full parity
    with pytest.raises(DomainError, match="ω=5 must lie"):
        fs.random_target(4, 1, 5, rng)
    with pytest.raises(DomainError, match="D_f=6"):
        fs.random_target(5, 6, 1, rng)
    with pytest.raises(DomainError, match="C\\(4,4\\) = 1"):
        fs.random_target(4, 4, 2, rng)


def test_target_spectrum_against_brute_force_fourier_sums():
    rng = np.random.default_rng(1)
    t = fs.random_target(5, 2, 3, rng)
    pts = list(itertools.product((0, 1), repeat=5))
    # brute force f̂(S) = 2⁻ⁿ Σ_x f(x) (−1)^{Σ_{i∈S} x_i}
    for r in range(6):
        for S in itertools.combinations(range(5), r):
            coef = sum(target_by_loops(t.sets, t.coeffs, x) * (-1) ** sum(x[i] for i in S)
                       for x in pts) / 32
            if r == 0:
                assert coef == pytest.approx(t.coeffs.sum() / 2, abs=1e-12)
            elif S in t.sets:
                assert coef == pytest.approx(t.coeffs[t.sets.index(S)] / 2, abs=1e-12)
            else:
                assert abs(coef) < 1e-12
    check = fs.verify_spectrum(t)
    assert check == {"degree": 2, "sparsity": 3, "max_abs_diff": check["max_abs_diff"],
                     "ok": True}
    assert check["max_abs_diff"] < 1e-12


# ---- the construction -------------------------------------------------------------------------

@pytest.mark.parametrize("T,D,omega", [(4, 1, 1), (6, 6, 1), (6, 1, 6), (7, 2, 5), (8, 5, 3),
                                       (9, 3, 9), (10, 4, 2)])
def test_construction_computes_the_target_on_all_inputs(T, D, omega):
    rng = np.random.default_rng(T * 100 + D * 10 + omega)
    t = fs.random_target(T, D, omega, rng)
    model = fs.Construction(t)
    X = fs.all_inputs(T)
    with torch.no_grad():
        out = model(torch.as_tensor(X, dtype=torch.long)).numpy()
    ref = np.array([target_by_loops(t.sets, t.coeffs, tuple(int(b) for b in x)) for x in X])
    assert np.max(np.abs(out - ref)) < 1e-9
    assert fs.check_construction(t)["ok"]


def test_construction_weights_follow_the_paper():
    t = fs.FourierTarget(6, [(1, 4), (0, 5)], np.array([0.6, 0.8]))
    c = fs.Construction(t)
    qk1 = c.qk1.detach().numpy()
    assert qk1[0, 1] == qk1[0, 4] == pytest.approx(2 * math.log(6))
    assert qk1[1, 0] == qk1[1, 5] == pytest.approx(2 * math.log(6))
    assert qk1[0, 0] == qk1[0, 6] == -40.0 and np.all(qk1[2:] == 0)
    qk2 = c.qk2.detach().numpy()
    assert qk2[6, 0] == pytest.approx(math.log(0.6) + 2 * math.log(6))
    assert qk2[6, 1] == pytest.approx(math.log(0.8) + 2 * math.log(6))
    assert np.all(qk2[6, 2:7] == -40.0)
    assert float(c.readout.detach()[c.out]) == pytest.approx(1.4)
    assert c.mask_entries == int(np.sum(qk1 == -40.0) + np.sum(qk2 == -40.0))


@pytest.mark.parametrize("D", [1, 2, 3, 5])
def test_trapezoid_mlp_is_flat_parity_on_the_grid(D):
    b, s, v0 = fs._trapezoid_units(D)
    h = lambda z: v0 + sum(w * max(z + bi, 0.0) for bi, w in zip(b, s))  # noqa: E731
    for k in range(D + 1):
        want = 1.0 if k % 2 == 0 else 0.0
        for dz in (-0.24 / D, -0.1 / D, 0.0, 0.1 / D, 0.24 / D):
            z = k / D + dz
            if 0 <= z <= 1 or k in (0, D):
                assert h(z) == pytest.approx(want, abs=1e-12)
    mids = [h((k + 0.5) / D) for k in range(D)]
    assert mids == pytest.approx([0.5] * D)          # linear ramps in between


def test_gauss_newton_trace_equals_the_full_hessian_trace_at_zero_loss():
    t = fs.FourierTarget(3, [(0, 2), (1, 2)], np.array([0.8, 0.6]))
    model = fs.Construction(t)
    X = torch.as_tensor(fs.all_inputs(3), dtype=torch.long)
    y = torch.as_tensor(t(fs.all_inputs(3)))
    names = [n for n, _ in model.named_parameters()]
    shapes = [p.shape for _, p in model.named_parameters()]
    flat0 = torch.cat([p.detach().reshape(-1) for _, p in model.named_parameters()])

    def loss(flat):
        params, i = {}, 0
        for n, shp in zip(names, shapes):
            k = int(np.prod(shp))
            params[n] = flat[i:i + k].reshape(shp)
            i += k
        out = torch.func.functional_call(model, params, (X,))
        return (out - y).square().mean()

    H = torch.autograd.functional.hessian(loss, flat0, vectorize=True)
    gn = fs.gauss_newton_trace(model, X)
    assert float(loss(flat0)) < 1e-25
    assert gn["total"] == pytest.approx(float(torch.trace(H)), rel=1e-8)
    assert gn["total"] == pytest.approx(sum(gn["by_parameter"].values()), rel=1e-12)


def test_perturbation_deltas_vanish_without_noise_and_hutchinson_matches_exact():
    from boundcalc.measure.data.curvature import hutchinson_trace

    t = fs.FourierTarget(5, [(0, 1), (2, 4), (3,)][:2], np.array([0.6, 0.8]))
    model = fs.Construction(t)
    X = torch.as_tensor(fs.all_inputs(5), dtype=torch.long)
    y = torch.as_tensor(t(fs.all_inputs(5)))
    loss = fs.mse_closure(model, X, y)
    assert fs.perturbation_deltas(model, loss, 0.0, draws=2, probes=4, seed=0) == [0.0, 0.0]
    est = hutchinson_trace(model, loss, n_probes=200, groups=None, seed=1).total
    exact = fs.gauss_newton_trace(model, X)["total"]
    lo, hi = est.ci
    width = hi - lo
    assert lo - width < exact < hi + width
    before = [p.detach().clone() for p in model.parameters()]
    fs.perturbed_loss(model, loss, 0.01, draws=3, seed=0)
    assert all(torch.equal(a, b.detach()) for a, b in zip(before, model.parameters()))


def test_parity_curves_against_the_transcribed_formula(registry):
    out = fs.parity_curves([6], [10_000], Sigma=0.01, registry=registry)
    T, m, S = 6, 10_000, 0.01
    G = 4 + 4 * (2 + 2 + 32 * 4 + 32 * 8)
    L = 11 + 16 * 3 * 4 + 8 * 3 + 4 * math.log(T) ** 2 * (2 * 1 + T - 1)
    sig = (S**2 * L / (m * G)) ** 0.25
    core = m * sig**2 / (4 * S**2) * 2 * G + L / (2 * sig**2)
    cot = (math.log(4 * T) - m / (8 * S**2) + core) / math.log(10)
    op = (math.log(4) - m / (8 * S**2) + T * core) / math.log(10)
    assert out["cot"][10_000][0] == pytest.approx(cot, rel=1e-9)
    assert out["one_pass"][10_000][0] == pytest.approx(op, rel=1e-9)
    assert out["kind"] == "proxy"


# ---- the example end to end -----------------------------------------------------------------

@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("fourier")
    rc, figures = run_capturing_figures("fourier_sparse", out)
    return out, rc, {"figures": figures}


def test_example_writes_report_with_readable_plots(study):
    out, rc, captured = study
    assert rc == 0
    report = (out / "report.md").read_text()
    figures = captured["figures"]
    assert len(figures) >= 5
    for name in figures:
        assert f"]({name})" in report
        check_png(out / name)
    assert sorted(p.name for p in out.glob("*.png")) == sorted(figures)
    assert sorted(figure_refs(report)) == sorted(figures)


def test_report_compares_construction_and_learned_models(study):
    out, _, _ = study
    report = (out / "report.md").read_text()
    res = json.loads((out / "results.json").read_text())
    cells = res["cells"]
    assert [(c["D_f"], c["omega"]) for c in cells] == [(1, 1), (1, 3), (2, 1), (2, 3)]
    for c in cells:
        label = f"D_f={c['D_f']}, ω={c['omega']}"
        f = c["functions"][0]
        # the sharpness-and-norm table has a construction row and a learned row per target
        row_c = re.search(rf"^\| {re.escape(label)} \| 0 \| construction \| (\d+) \| ([^|]+) \|",
                          report, re.M)
        row_l = re.search(rf"^\| {re.escape(label)} \| 0 \| learned \| (\d+) \| ([^|]+) \|",
                          report, re.M)
        assert row_c and row_l, label
        assert float(row_c.group(2)) == pytest.approx(f["construction_norm"], rel=1e-3)
        assert float(row_l.group(2)) == pytest.approx(f["learned_norm"], rel=1e-3)
        assert f"| {label} | — | theorem (Thm 10, 14) |" in report
        assert f["spectrum"]["ok"] and f["spectrum"]["degree"] == c["D_f"]
        # the domination verdicts are the comparisons they claim to be
        assert f["dominated_norm_construction"] == (f["learned_norm"] <= f["construction_norm"])
        assert f["dominated_perturbed"] == (f["perturbed_learned"]["mean"]
                                            <= f["perturbed_construction"]["mean"])
        assert f["construction_train_loss"] < 1e-20
    assert all(chk["ok"] and chk["n_inputs"] == 1024 for chk in res["construction_checks"])
    assert "## Domination" in report and "**Verdict:**" in report


def test_bound_values_against_the_formulas(study):
    """ls_truncated and ls_semi_analytic recomputed from sharper_picture.md §2–§3 by hand."""
    out, _, _ = study
    cells = json.loads((out / "results.json").read_text())["cells"]
    T, m, delta = 10, 256, 0.05
    for c in cells:
        D, w = c["D_f"], c["omega"]
        G = 4 + 4 * w * (2 + D + 32 * D**2 + 32 * D**3)
        L = 11 + 16 * (D + 1) * D**2 + 8 * (D + 1) + 4 * math.log(T) ** 2 * (D * w + T - w)
        assert c["two_G_u"] == pytest.approx(2 * G) and c["sqrt_L"] == pytest.approx(math.sqrt(L))
        sig, S = c["bounds"]["truncated"]["sigma"], c["sigma_hat"]
        assert any(math.isclose(sig, g, rel_tol=1e-12) for g in fs.SIGMA_MESH)
        d_eff = delta / 20
        norm = 2 * math.sqrt(S**2 / (2 * m) * (L / (2 * sig**2) + math.log(1 / d_eff)))
        assert c["bounds"]["truncated"]["value"] == pytest.approx(sig**2 * G + norm, rel=1e-9)
        assert c["bounds"]["truncated"]["label"].startswith("estimated")
        semi = sig**2 * (G + c["p_hat"]) + norm
        assert c["bounds"]["semi_analytic"]["value"] == pytest.approx(semi, rel=1e-9)
        assert c["p_hat"] == pytest.approx(np.percentile(c["p_hat_samples"], 90))


def test_help_teaches(capsys):
    mod = load_example("fourier_sparse")
    with pytest.raises(SystemExit):
        mod.main(["--help"])
    text = capsys.readouterr().out
    for needle in ("construction", "domination", "--full", "PROXIES", "estimated"):
        assert needle in text


def test_bad_arguments_give_one_line_errors(tmp_path, capsys):
    mod = load_example("fourier_sparse")
    assert mod.main(["--out", str(tmp_path), "--sparsities", "12"]) == 2
    assert mod.main(["--out", str(tmp_path), "--m", "0"]) == 2
    err = [l for l in capsys.readouterr().err.splitlines() if l.startswith("error")]
    assert err == ["error: target: sparsity ω=12 must lie in [1, T=10] (Theorem 2 needs ω ≤ T)",
                   "error: --m must be >= 1, got 0"]
    assert not (tmp_path / "report.md").exists()
