"""`boundcalc measure MODEL --data DATA` on real task-head checkpoints, and the end-to-end
digits example: train a small ViT on scikit-learn's digits, measure, compare, and check every
certified number against the held-out test error."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from boundcalc.cli import app
from studies.digits_vit import DigitsConfig, build, error
from tests._measure_helpers import (TEXT_LABELS, TEXTS, single_thread,
                                    tiny_text_checkpoints)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
runner = CliRunner()


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    out = tmp_path_factory.mktemp("digits")
    with single_thread():
        info = build(out, DigitsConfig(hidden=16, prior_epochs=6, post_epochs=1))
        stats = out / "stats.json"
        res = runner.invoke(app, ["measure", str(out / "model"), "--init", str(out / "prior"),
                                  "--data", str(out / "bound.npz"), "--tune-data",
                                  str(out / "prior.npz"), "--tune-draws", "2", "--sigma", "0.005",
                                  "--sigma", "0.01", "--draws", "4", "--hessian-probes", "2",
                                  "--hessian-samples", "32", "--batch-size", "256",
                                  "-o", str(stats), "--json"])
    assert res.exit_code == 0, res.output[-2000:]
    return out, info, json.loads(stats.read_text())


def test_empirical_risk_and_losses_match_a_direct_computation(digits):
    from transformers import ViTForImageClassification

    out, info, doc = digits
    z = np.load(out / "bound.npz")
    model = ViTForImageClassification.from_pretrained(out / "model").eval()
    with torch.no_grad():
        logits = model(pixel_values=torch.from_numpy(z["pixel_values"])).logits.double()
    y = torch.from_numpy(z["labels"])
    sc = doc["scalars"]
    assert sc["n"]["value"] == len(y) == 700
    assert sc["emp_risk"]["value"] == pytest.approx(float((logits.argmax(1) != y).double().mean()),
                                                    abs=1e-12)
    assert sc["emp_risk"]["value"] == pytest.approx(error(model, z["pixel_values"], z["labels"]))
    ce = torch.nn.functional.cross_entropy(logits, y).item()
    assert sc["loss_mean"]["value"] == pytest.approx(ce, rel=1e-6)
    fy = logits.gather(1, y[:, None]).squeeze(1)
    other = logits.scatter(1, y[:, None], -math.inf).max(1).values
    margins = (fy - other).numpy()
    assert sc["margin_q05"]["value"] == pytest.approx(np.percentile(margins, 5), rel=1e-6)
    ramp = doc["curves"]["ramp_risk"]
    g = ramp["at"].index(1.0)
    assert ramp["value"][g] == pytest.approx(np.mean(np.clip(1 - margins, 0, 1)), rel=1e-6)
    assert sc["seq_len"]["value"] == 17  # 4x4 patches + [CLS]
    # B_X is the largest token norm after the embedding (patches + position + CLS)
    with torch.no_grad():
        h = model(pixel_values=torch.from_numpy(z["pixel_values"]),
                  output_hidden_states=True).hidden_states[0].double()
    assert sc["input_token_norm_max"]["value"] == pytest.approx(
        float(h.norm(dim=-1).max()), rel=1e-6)
    assert doc["provenance"]["prior_centre"] == str(out / "prior")


def test_trivial_predictor_of_the_bound_sample(digits):
    """The majority-class error of S and K, which a 0-1 bound must beat to say anything."""
    out, _, doc = digits
    labels = np.load(out / "bound.npz")["labels"]
    counts = np.bincount(labels, minlength=10)
    assert doc["provenance"]["n_classes"] == 10
    assert doc["scalars"]["majority_error"]["value"] == pytest.approx(
        1 - counts.max() / len(labels), abs=1e-15)


def test_gibbs_curve_on_the_dziugaite_roy_grid_with_its_kl_term(digits):
    from boundcalc.engine.functions import kl_inv_upper

    _, _, doc = digits
    c = doc["curves"]["gibbs_risk_mean"]
    # a fresh posterior draw for each of the 700 digits in each of the 4 passes (the ViT's
    # embeddings are replayed row by row): N = 4·700 losses behind each point
    N = 4 * 700
    assert doc["provenance"]["gibbs_mode"] == "sample"
    assert doc["scalars"]["gibbs_draws"]["value"] == N
    assert c["param"] == "sigma" and c["n_samples"] == N and c["estimated"]
    for s, v, (lo, hi) in zip(c["at"], c["value"], c["ci"]):
        j = -100 * math.log(s * s / 0.1)
        assert j == pytest.approx(round(j), abs=1e-6)  # a grid point σ_j² = 0.1·e^{−j/100}
        assert lo == v and hi == pytest.approx(kl_inv_upper(v, math.log(2 * 2 / 0.01) / N))


def test_compare_certified_numbers_never_below_the_held_out_error(digits, tmp_path):
    out, info, doc = digits
    res = runner.invoke(app, ["compare", "--stats", str(out / "stats.json"), "--json"])
    assert res.exit_code == 0, res.output[-2000:]
    rows = json.loads(res.stdout)
    certified = {r["id"]: r for r in rows["certified"] if r["label"] == "certified bound"}
    assert "pac_bayes_kl_gaussian_mc" in certified
    floor = info["test_error"] - 2 * info["test_error_stderr"]
    for r in rows["certified"]:
        if r["is_bound"]:
            assert r["value"] >= floor, (r["id"], r["value"], info["test_error"])
    mc = certified["pac_bayes_kl_gaussian_mc"]
    # chosen among the two measured σ only, both δ (prior weight) and δ′ (split) accounted
    assert any(math.isclose(mc["parameters"]["sigma"], s, rel_tol=1e-9)
               for s in doc["curves"]["gibbs_risk_mean"]["at"])
    assert mc["delta"] == pytest.approx(0.05 + 0.01)
    # per-group σ: the shape chosen on the prior split (free), the scale charged ln 17
    groups = certified["pac_bayes_kl_gaussian_groups_mc"]
    assert groups["delta"] == pytest.approx(0.06)
    assert groups["union_bound_cost"] == {"scale": pytest.approx(math.log(17))}
    assert doc["provenance"]["gibbs_groups"]["tune_data"] == str(out / "prior.npz")
    # the Gibbs risk on S at the chosen vector: a fresh draw per digit per pass, N = 4·700
    assert doc["provenance"]["gibbs_groups"]["mc"]["mode"] == "sample"
    assert doc["scalars"]["gibbs_groups_units"]["value"] == 4 * 700
    assert doc["curves"]["gibbs_risk_groups"]["n_samples"] == 4 * 700


def test_hand_set_gibbs_risk_needs_its_sigma_and_is_estimated(digits):
    out, _, _ = digits
    res = runner.invoke(app, ["optimize", "pac_bayes_kl_gaussian_mc", "--set", "E_hat=0.1",
                              "--set", "k=100", "--set", "n=700", "--set", "dist_init=0.2"])
    assert res.exit_code != 0 and "sigma" in res.output and len(res.output.strip().splitlines()) == 1


def test_prior_data_dependent_is_refused(digits, tmp_path):
    out, _, _ = digits
    res = runner.invoke(app, ["measure", str(out / "model"), "--init", str(out / "prior"),
                              "--data", str(out / "bound.npz"), "--prior-data-dependent",
                              "-o", str(tmp_path / "s.json")])
    assert res.exit_code != 0 and "prior" in res.output
    assert not (tmp_path / "s.json").exists()


# ---- text models, formats and bad input ---------------------------------------------------

@pytest.fixture(scope="module")
def text_models(tmp_path_factory):
    from transformers import BertForSequenceClassification, BertModel

    out = tmp_path_factory.mktemp("text")
    _, cfg = tiny_text_checkpoints(out)
    BertForSequenceClassification(cfg).save_pretrained(out / "cls_notok")
    BertModel(cfg).save_pretrained(out / "bare")
    texts, labels = TEXTS, TEXT_LABELS
    import pandas as pd

    df = pd.DataFrame({"sentence": texts, "label": labels})
    df.to_csv(out / "d.csv", index=False)
    df.to_json(out / "d.jsonl", orient="records", lines=True)
    df.to_parquet(out / "d.parquet")
    from datasets import Dataset

    Dataset.from_pandas(df).save_to_disk(str(out / "d_ds"))
    pd.DataFrame({"sentence": texts, "label": [0, 1, 2, 3, 0, 1]}).to_csv(out / "bad_label.csv",
                                                                          index=False)
    pd.DataFrame({"sentence": texts, "label": [0.5] * 6}).to_csv(out / "float_label.csv",
                                                                  index=False)
    (out / "empty.csv").write_text("")
    return out, texts, labels


def _measure(args):
    with single_thread():
        return runner.invoke(app, ["measure", *args, "--draws", "0", "--hessian-probes", "0",
                                   "--json"])


@pytest.mark.parametrize("fmt", ["d.csv", "d.jsonl", "d.parquet", "d_ds"])
def test_text_formats_give_the_same_risk(text_models, tmp_path, fmt):
    from transformers import AutoTokenizer, BertForSequenceClassification

    out, texts, labels = text_models
    res = _measure([str(out / "cls"), "--data", str(out / fmt), "--text-column", "sentence",
                    "-o", str(tmp_path / "s.json")])
    assert res.exit_code == 0, res.output[-1500:]
    sc = json.loads((tmp_path / "s.json").read_text())["scalars"]
    tok = AutoTokenizer.from_pretrained(out / "cls")
    m = BertForSequenceClassification.from_pretrained(out / "cls").eval()
    with torch.no_grad():
        logits = m(**tok(texts, padding=True, return_tensors="pt")).logits.double()
    y = torch.tensor(labels)
    assert sc["emp_risk"]["value"] == pytest.approx(float((logits.argmax(1) != y).double().mean()))
    assert sc["loss_mean"]["value"] == pytest.approx(
        torch.nn.functional.cross_entropy(logits, y).item(), rel=1e-5)


def test_causal_lm_per_token_nll_and_smoothed_bounded_loss(text_models, tmp_path):
    from transformers import AutoTokenizer, GPT2LMHeadModel

    out, texts, _ = text_models
    res = _measure([str(out / "lm"), "--data", str(out / "d.csv"), "--text-column", "sentence",
                    "--smoothing", "0.1", "-o", str(tmp_path / "s.json")])
    assert res.exit_code == 0, res.output[-1500:]
    doc = json.loads((tmp_path / "s.json").read_text())
    sc = doc["scalars"]
    from boundcalc.measure.threads import available_cores

    if available_cores() > 1:  # a narrow language model: its threads timed on its rows
        pv = doc["provenance"]["threads"]
        assert pv["rule"].startswith("timed on the first rows of DATA") and "1 thread " in pv[
            "rule"] and pv["data_side"] in (1, available_cores())
    tok = AutoTokenizer.from_pretrained(out / "lm")
    m = GPT2LMHeadModel.from_pretrained(out / "lm").eval()
    nll, smooth = [], []
    V = m.config.vocab_size
    for t in texts:
        ids = tok(t, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            lp = torch.log_softmax(m(input_ids=ids).logits[0, :-1].double(), -1)
        tgt = lp.gather(1, ids[0, 1:, None]).squeeze(1)
        nll.append(float(-tgt.mean()))
        smooth.append(float((-torch.log(0.9 * tgt.exp() + 0.1 / V)).mean() / math.log(V / 0.1)))
    assert sc["loss_mean"]["value"] == pytest.approx(np.mean(nll), rel=1e-6)
    assert sc["bounded_loss_mean"]["value"] == pytest.approx(np.mean(smooth), rel=1e-6)
    assert 0 <= sc["bounded_loss_mean"]["value"] <= 1


@pytest.mark.parametrize("model,data,extra,needle", [
    ("cls", "d.csv", [], "text column 'text'"),
    ("cls", "d.csv", ["--text-column", "sentence", "--label-column", "y"], "label column 'y'"),
    ("cls", "bad_label.csv", ["--text-column", "sentence"], "3 classes"),
    ("cls", "float_label.csv", ["--text-column", "sentence"], "integers"),
    ("cls", "empty.csv", ["--text-column", "sentence"], "empty"),
    ("bare", "d.csv", ["--text-column", "sentence"], "ForSequenceClassification"),
    ("cls_notok", "d.csv", ["--text-column", "sentence"], "tokenizer"),
])
def test_bad_input_gets_one_line_and_writes_nothing(text_models, tmp_path, model, data, extra,
                                                    needle):
    out, _, _ = text_models
    target = tmp_path / "s.json"
    res = _measure([str(out / model), "--data", str(out / data), *extra, "-o", str(target)])
    assert res.exit_code != 0
    lines = [l for l in res.output.strip().splitlines() if l.strip()]
    assert len(lines) == 1 and needle in lines[0], res.output
    assert not target.exists()


def test_image_data_of_the_wrong_shape(digits, tmp_path):
    out, _, _ = digits
    np.savez(tmp_path / "bad.npz", pixel_values=np.zeros((4, 1, 6, 6), np.float32),
             labels=np.zeros(4, np.int64))
    res = _measure([str(out / "model"), "--data", str(tmp_path / "bad.npz"),
                    "-o", str(tmp_path / "s.json")])
    assert res.exit_code != 0 and "[1, 8, 8]" in res.output
    assert not (tmp_path / "s.json").exists()


def test_perturbation_term_on_the_ls_mesh_binds_ls_semi_analytic(digits, tmp_path):
    import boundcalc as bc
    from boundcalc.stats import load_stats

    out, _, _ = digits
    target = tmp_path / "p.json"
    with single_thread():
        res = runner.invoke(app, ["measure", str(out / "model"), "--data", str(out / "bound.npz"),
                                  "--draws", "0", "--hessian-probes", "2", "--hessian-samples",
                                  "8", "--perturbation-draws", "1", "-o", str(target), "--json"])
    assert res.exit_code == 0, res.output[-1500:]
    st = load_stats(target)
    c = st.curves["perturbation_term"]
    mesh = np.linspace(0.01, 0.00001, 20)
    assert np.allclose(c.at, mesh, rtol=1e-12) and c.estimated and np.all(c.value >= 0)
    loop = "double backward through each term's retained graph, one probe at a time"  # a CPU
    assert st.provenance["hessian_hvp"] == st.provenance["perturbation_term_hvp"] == loop
    vals = {"omega": 3, "D_f": 1, "T": 17, "Sigma": 0.5}
    r = bc.compute("ls_semi_analytic", st, values=vals)
    j = int(np.argmin(np.abs(mesh - r.parameters["sigma"])))
    G = 4 + 4 * 3 * (2 + 1 + 32 + 32)
    L = 11 + 16 * 2 * 1 + 8 * 2 + 4 * math.log(17) ** 2 * (3 + 17 - 3)
    s = mesh[j]
    hand = s**2 * (G + c.value[j]) + 2 * math.sqrt(0.25 / (2 * 700) * (L / (2 * s**2)
                                                                      + math.log(20 / 0.05)))
    assert r.value == pytest.approx(hand, rel=1e-9)
    assert r.union_bound_cost["sigma"] == pytest.approx(math.log(20)) and r.estimated


def test_every_data_stage_reports_progress_lines_when_not_a_terminal(digits, tmp_path):
    """Non-terminal stderr: stage lines for the weights side, the data pass, each Gibbs σ, the
    Hessian probes and P̂ (each stage gets its own quarter marks); --quiet silences them."""
    import subprocess
    import sys
    from pathlib import Path

    out, _, _ = digits
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root), BOUNDCALC_PROGRESS_AFTER="0",
               OMP_NUM_THREADS="1")
    args = [sys.executable, "-m", "boundcalc", "measure", str(out / "model"), "--data",
            str(out / "bound.npz"), "--sigma", "0.01", "--draws", "2", "--hessian-probes", "2",
            "--hessian-samples", "16", "--batch-size", "128", "--perturbation-draws", "1",
            "-o", str(tmp_path / "s.json"), "--json"]
    res = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("boundcalc measure: ")]
    text = "\n".join(lines)
    for stage in ("(layer 0)", "(data pass)", "(Gibbs risk σ=", "(Hessian trace: 2 probes",
                  "(P̂ σ=", "done in"):
        assert stage in text, (stage, text)
    assert len(lines) < 80, text  # quarters, not a line per step
    quiet = subprocess.run(args[:3] + ["--quiet"] + args[3:], capture_output=True, text=True,
                           env=env, timeout=300)
    assert quiet.returncode == 0 and "boundcalc measure:" not in quiet.stderr
