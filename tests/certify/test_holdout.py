"""``boundcalc holdout MODEL --test-data HELDOUT`` (issue 54, item 2): a classifier certify
did not train — fine-tuned here by a plain torch loop and saved as a user saves it
(``save_pretrained``) — certified by the test-set bound on held-out rows. Its value is the
value of ``boundcalc optimize test_set_kl --set test_errors=k --set m=m`` at the error count k
computed here from the model's own predictions, and lies at or just above the kl-inverse
computed here in 50-digit mpmath; an unreadable row counts as an error; a label that is none
of the model's classes is refused in one line naming the row and the option."""

from __future__ import annotations

import json

import mpmath
import pytest
import torch
from typer.testing import CliRunner

from boundcalc.cli import app
from tests._certify_helpers import synthetic_rows, write_csv

runner = CliRunner()
CLASSES = ("food", "sport")
MAX_LENGTH = 24


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    """A 1-layer width-32 BERT classifier with MiniLM's tokenizer, trained for a few steps on
    120 rows by the user's own loop and saved with save_pretrained; 150 held-out rows, a fifth
    of their labels redrawn at random (so the model errs)."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from tests._measure_helpers import minilm_path

    w = tmp_path_factory.mktemp("holdout")
    tok = AutoTokenizer.from_pretrained(minilm_path())
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(
        vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, num_labels=2,
        id2label=dict(enumerate(CLASSES)), label2id={c: i for i, c in enumerate(CLASSES)}))
    rows = synthetic_rows(120, 0, CLASSES)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(8):
        for lo in range(0, len(rows), 16):
            batch = rows[lo:lo + 16]
            enc = tok([t for t, _ in batch], truncation=True, max_length=MAX_LENGTH,
                      padding=True, return_tensors="pt")
            y = torch.tensor([CLASSES.index(c) for _, c in batch])
            loss = model(**enc, labels=y).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.save_pretrained(w / "mine")
    tok.save_pretrained(w / "mine")
    held = synthetic_rows(150, 7, CLASSES, noise=0.2)  # some labels redrawn: errors
    model.eval()
    with torch.no_grad():
        enc = tok([t for t, _ in held], truncation=True, max_length=MAX_LENGTH, padding=True,
                  return_tensors="pt")
        pred = model(**enc).logits.argmax(-1).tolist()
    k = sum(CLASSES[p] != c for p, (_, c) in zip(pred, held))
    write_csv(w / "held.csv", held)
    return {"w": w, "model": w / "mine", "held": held, "k": k}


def kl_inverse(p: float, budget: float) -> mpmath.mpf:
    """sup{q ∈ [p, 1] : kl(p‖q) ≤ budget} by bisection, in 50 digits."""
    mpmath.mp.dps = 50
    p, budget = mpmath.mpf(p), mpmath.mpf(budget)

    def kl(q):
        a = p * mpmath.log(p / q) if p > 0 else mpmath.mpf(0)
        return a + (1 - p) * mpmath.log((1 - p) / (1 - q))

    lo, hi = p, mpmath.mpf(1)
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if kl(mid) <= budget else (lo, mid)
    return lo


def _optimize_value(k: int, m: int) -> float:
    res = runner.invoke(app, ["optimize", "test_set_kl", "--set", f"test_errors={k}",
                              "--set", f"m={m}", "--json"])
    assert res.exit_code == 0, res.output[-500:]
    return json.loads(res.stdout)["value"]


def test_holdout_equals_optimize_and_the_50_digit_kl_inverse(user, tmp_path):
    res = runner.invoke(app, ["holdout", str(user["model"]), "--test-data",
                              str(user["w"] / "held.csv"), "--max-length", str(MAX_LENGTH),
                              "--device", "cpu", "--json", "--latex", str(tmp_path / "b.tex")])
    assert res.exit_code == 0, res.output[-800:]
    rec = json.loads(res.stdout)
    k, m = user["k"], len(user["held"])
    assert 0 < k < m // 2, k  # a real count: the model learnt something and is not perfect
    assert (rec["errors"], rec["m"], rec["unreadable_rows"]) == (k, m, 0)
    assert rec["held_out_error"] == k / m and rec["delta"] == 0.05 and rec["is_bound"]
    assert rec["value"] == _optimize_value(k, m)
    exact = kl_inverse(k / m, mpmath.log(20) / m)
    assert 0 <= rec["value"] - exact < 1e-12, (rec["value"], exact)
    tex = (tmp_path / "b.tex").read_text()
    assert tex == rec["latex"] + "\n"
    assert r"\frac{%d}{%d}" % (k, m) in tex and r"\frac{1}{0.05}" in tex
    assert "disagreement" in rec["note"]


def test_holdout_prints_the_bound_and_counts_an_unreadable_row_as_an_error(user, tmp_path):
    held = user["held"] + [("a row whose label cell is empty", "")]
    write_csv(tmp_path / "h.csv", held)
    res = runner.invoke(app, ["holdout", str(user["model"]), "--test-data",
                              str(tmp_path / "h.csv"), "--max-length", str(MAX_LENGTH),
                              "--device", "cpu"])
    assert res.exit_code == 0, res.output[-800:]
    k, m = user["k"] + 1, len(held)
    from boundcalc.rounding import upper_text

    out = " ".join(res.stdout.split())
    assert f"{k} of {m} rows" in out and "1 unreadable row(s) counted as errors" in out
    assert f"test_set_kl ≤ {upper_text(_optimize_value(k, m), 4)}" in out, out


def test_a_label_outside_the_models_classes_is_refused_naming_the_row(user, tmp_path):
    write_csv(tmp_path / "bad.csv", user["held"][:5] + [("rocket launch today", "space")])
    res = runner.invoke(app, ["holdout", str(user["model"]), "--test-data",
                              str(tmp_path / "bad.csv"), "--device", "cpu"])
    assert res.exit_code == 2
    err = res.stderr.strip()
    assert "\n" not in err and "Traceback" not in res.output
    assert "row 5 is 'space', none of the model's 2 classes (food, sport" in err, err
    assert "--label-column" in err


def test_smoothing_is_refused_for_a_classifier(user):
    """--smoothing is a language model's α (boundcalc holdout on a causal LM): set for a
    classifier it is refused in one line naming the option, before the model is evaluated."""
    res = runner.invoke(app, ["holdout", str(user["model"]), "--test-data",
                              str(user["w"] / "held.csv"), "--smoothing", "0.1",
                              "--device", "cpu"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    err = res.stderr.strip()
    assert "\n" not in err and "--smoothing 0.1: applies to a causal language model" in err
