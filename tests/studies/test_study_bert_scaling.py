"""End to end: examples/bert_scaling.py at reduced scale on the real MiniLM-L6.

The proxies and every matrix's selected Schatten index are checked against a direct numpy
implementation of the authors' code (spectrum_adaptive.md §4), written here from the packaged
safetensors weights: dense float64 SVDs, loops over layers and heads.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from _measure_helpers import single_thread  # noqa: E402
from _study_helpers import check_png, figure_refs, load_example  # noqa: E402

L, A, N, DH = 6, 12, 384, 32
L_PHI = 1.13
FIGURES = {"selected_p.png", "p_contribution.png", "spectral_decay.png", "scaling_width.png",
           "scaling_depth.png"}



@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("study_sa")
    with single_thread():
        rc = load_example("bert_scaling").main(["--out", str(out)])
    assert rc == 0
    return out


@pytest.fixture(scope="module")
def reference():
    """Both proxies and the per-matrix arg-min p of MiniLM-L6, straight from its weights."""
    from safetensors.numpy import load_file

    from studies.bert_scaling import minilm_path

    w = {k: v.astype(np.float64) for k, v in
         load_file(f"{minilm_path()}/model.safetensors").items()}

    def W(l, s):
        return w[f"encoder.layer.{l}.{s}"]
    mats = {}
    for l in range(L):
        q, k = W(l, "attention.self.query.weight"), W(l, "attention.self.key.weight")
        v, o = W(l, "attention.self.value.weight"), W(l, "attention.output.dense.weight")
        for h in range(A):
            hs = slice(h * DH, (h + 1) * DH)
            mats[("QK", l, h)] = q[hs].T @ k[hs]
            mats[("V", l, h)] = v[hs].T @ o.T[hs]
        mats[("M_in", l, None)] = W(l, "intermediate.dense.weight").T
        mats[("M_out", l, None)] = W(l, "output.dense.weight").T
    with single_thread():  # many threads on a busy 2-core machine make LAPACK 10x slower
        sv = {key: np.linalg.svd(M, compute_uv=False) for key, M in mats.items()}
    spec = {key: s[0] for key, s in sv.items()}
    n21 = {key: np.linalg.norm(M, axis=0).sum() for key, M in mats.items()}
    tol = {key: 1e-10 * min(mats[key].shape) * max(s[0], 1.0) for key, s in sv.items()}
    rank = {key: int((s > tol[key]).sum()) for key, s in sv.items()}

    def layer_factor(kk):
        return L_PHI * spec[("M_in", kk, None)] * spec[("M_out", kk, None)] * sum(
            spec[("V", kk, h)] * (1 + 4 * spec[("QK", kk, h)]) for h in range(A))
    alpha = [math.prod(layer_factor(kk) for kk in range(l + 1, L)) for l in range(L)]
    m = math.ceil(L + math.log(N))
    grid = [j / m for j in range(2 * m + 1)]
    best, total = {}, math.sqrt(L)
    for (t, l, h), s in sv.items():
        c_in, c_out = spec[("M_in", l, None)], spec[("M_out", l, None)]
        if t == "QK":
            gamma = 2 * spec[("V", l, h)] * c_out * c_in
        else:
            gamma = {"V": c_out * c_in, "M_in": c_out, "M_out": 1.0}[t]
        scale = gamma * alpha[l] * L
        vals = []
        for p in grid:
            S = rank[(t, l, h)] if p == 0 else float(np.sum(s[s > tol[(t, l, h)]] ** p))
            vals.append(S ** (1 / (p + 2)) * scale ** (p / (p + 2)) * N ** ((p + 1) / (p + 2)))
        j = int(np.argmin(vals))
        best[(t, l, h)] = (grid[j], vals[j], vals[0])
        total += vals[j]
    xi = [sum((spec[("M_out", l, None)] * spec[("M_in", l, None)] * spec[("V", l, h)]
               * n21[("QK", l, h)]) ** (2 / 3)
              + (spec[("M_out", l, None)] * spec[("M_in", l, None)] * n21[("V", l, h)]) ** (2 / 3)
              for h in range(A))
          + (spec[("M_out", l, None)] * n21[("M_in", l, None)]) ** (2 / 3)
          + n21[("M_out", l, None)] ** (2 / 3) for l in range(L)]
    edelman = (1 + sum(alpha[l] ** (2 / 3) * xi[l] for l in range(L))) ** 1.5
    return {"ours": total, "edelman": edelman, "best": best}


def test_report_lists_valid_pngs(study):
    refs = set(figure_refs((study / "report.md").read_text()))
    assert refs == FIGURES
    assert {p.name for p in study.glob("*.png")} == FIGURES
    for name in FIGURES:
        check_png(study / name, min_bytes=20_000, min_shape=(300, 500))


def test_all_156_matrices_reported_with_their_selected_p(study, reference):
    text = (study / "report.md").read_text()
    table = text.split("*Per-matrix selection, 156 matrices.*")[1].split("\n\n")[1]
    rows = [r for r in table.splitlines()[2:] if r.startswith("|")]
    assert len(rows) == L * (2 * A + 2) == 156
    kinds = [r.split("|")[1].strip() for r in rows]
    assert kinds.count("QK") == kinds.count("Ṽ") == L * A and kinds.count("M_in") == L
    assert kinds.count("M_out") == L
    df = pd.read_csv(study / "schatten_opt.csv")
    assert len(df) == 156
    for _, r in df.iterrows():
        head = None if pd.isna(r["head"]) else int(r["head"])
        p, t_min, t0 = reference["best"][(r["type"], int(r["layer"]), head)]
        assert r["p_opt"] == pytest.approx(p, abs=1e-12)
        assert r["min_contribution"] == pytest.approx(t_min, rel=1e-6)
        assert r["contribution_p0"] == pytest.approx(t0, rel=1e-9)


def test_both_proxies_match_numpy(study, reference):
    df = pd.read_csv(study / "proxies.csv").set_index("proxy")
    assert df.loc["spectrum_adaptive_ours", "value"] == pytest.approx(reference["ours"], rel=1e-6)
    assert df.loc["spectrum_adaptive_edelman", "log10_value"] == pytest.approx(
        math.log10(reference["edelman"]), rel=1e-9)
    text = (study / "report.md").read_text()
    assert "B_ours (`spectrum_adaptive_ours`)" in text
    assert "B_Edelman (`spectrum_adaptive_edelman`)" in text
    assert "not a bound" in text


def test_scaling_grid_is_labelled_as_locally_trained(study):
    df = pd.read_csv(study / "observed_bounds.csv")
    assert sorted(zip(df["L"], df["N"])) == [(l, n) for l in (2, 4, 6) for n in (32, 64, 128)]
    assert (df["A"] == df["N"] // 16).all()
    assert (df["ours"] > 0).all() and np.isfinite(df["log10_edelman"]).all()
    text = (study / "report.md").read_text()
    assert "These are not the paper's checkpoints" in text
    assert "google/bert_uncased_L-${L}_H-${H}_A-$((H/64))" in text


def test_help_teaches(capsys):
    mod = load_example("bert_scaling")
    with pytest.raises(SystemExit) as exc:
        mod.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for word in ("--checkpoints", "--full", "PROXIES", "bert_uncased_L-", "scaling_width.png"):
        assert word in out


def test_unknown_model_is_one_line_error(tmp_path, capsys):
    mod = load_example("bert_scaling")
    rc = mod.main(["--out", str(tmp_path), "--model", str(tmp_path / "nope"),
                   "--depths", "2", "--widths", "32"])
    err = capsys.readouterr().err.strip()
    assert rc == 6 and err.startswith("error: ") and "nope" in err and "\n" not in err
    assert not (tmp_path / "report.md").exists()


def test_checkpoint_list_replaces_the_local_grid(tmp_path):
    """--model and --checkpoints with local Hugging Face folders (what a user with the
    miniatures downloaded would pass); shapes are read from the weights."""
    import torch
    from transformers import BertConfig, BertModel

    paths = {}
    for layers in (1, 2):
        for hidden in (32, 64):
            torch.manual_seed(layers * 100 + hidden)
            cfg = BertConfig(vocab_size=50, hidden_size=hidden, num_hidden_layers=layers,
                             num_attention_heads=hidden // 16, intermediate_size=4 * hidden,
                             max_position_embeddings=16)
            path = tmp_path / f"bert_L{layers}_H{hidden}"
            BertModel(cfg).save_pretrained(path)
            paths[(layers, hidden)] = str(path)
    out = tmp_path / "out"
    with single_thread():
        rc = load_example("bert_scaling").main(
            ["--out", str(out), "--model", paths[(2, 64)], "--checkpoints", *paths.values()])
    assert rc == 0
    df = pd.read_csv(out / "observed_bounds.csv")
    assert sorted(zip(df["L"], df["N"], df["A"])) == [(1, 32, 2), (1, 64, 4), (2, 32, 2),
                                                      (2, 64, 4)]
    assert (df["source"] == "checkpoint").all()
    text = (out / "report.md").read_text()
    assert "not the paper's checkpoints" not in text and "Checkpoints:" in text
    assert len(pd.read_csv(out / "schatten_opt.csv")) == 2 * (2 * 4 + 2)
    assert {p.name for p in out.glob("*.png")} == FIGURES
