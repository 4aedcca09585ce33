"""``boundcalc holdout MODEL --test-data HELDOUT`` for a causal language model (issue 54 item 2):
a byte-level GPT-2 trained here by a plain torch loop and saved as a user saves it, certified on
held-out text by the test-set bound on its smoothed log-loss. The mean loss is recomputed here
row by row from the float64 log-softmax of the model's own logits (no padding, no boundcalc
code); the value equals ``boundcalc optimize test_set_smoothed_kl --set test_loss=L …`` at the
loss the command reports, and lies at or just above log2(V/α)·kl⁻¹(L, ln(1/δ)/m) computed here
in 50-digit mpmath. A row with no text, and a row of one byte (nothing to predict), count at
the largest loss. Refused in one line: a model that is neither a classifier nor a causal LM
(a checkpoint's error, exit 6), a held-out file without the text column (exit 2)."""

from __future__ import annotations

import csv
import json
import math

import mpmath
import pytest
import torch
from typer.testing import CliRunner

from boundcalc.cli import app
from tests.certify.test_holdout import kl_inverse
from tests._certify_helpers import synthetic_rows

runner = CliRunner()
ALPHA, MAX_LENGTH, V = 0.05, 48, 257


def _write(path, texts, column="text"):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow([column])
        w.writerows([[t] for t in texts])
    return path


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    """A 1-layer width-32 GPT-2 on bytes (vocabulary 257: the bytes and a pad), 60 AdamW steps
    on 200 synthetic sentences by the user's own loop, saved with save_pretrained beside its
    byte tokenizer; 40 other sentences held out, one of them empty and one a single byte."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from studies.language_model import byte_tokenizer

    w = tmp_path_factory.mktemp("holdout_lm")
    tok = byte_tokenizer()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=V, n_positions=64, n_embd=32, n_layer=1,
                                       n_head=2, pad_token_id=256, bos_token_id=None,
                                       eos_token_id=None))
    train = [t for t, _ in synthetic_rows(200, 0)]
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for step in range(60):
        batch = [train[(step * 16 + j) % len(train)] for j in range(16)]
        enc = tok(batch, truncation=True, max_length=MAX_LENGTH, padding=True,
                  return_tensors="pt")
        opt.zero_grad()
        model(**enc, labels=enc["input_ids"].masked_fill(enc["attention_mask"] == 0,
                                                          -100)).loss.backward()
        opt.step()
    for saved in (model.eval(), tok):
        saved.save_pretrained(w / "mine")
    held = [t for t, _ in synthetic_rows(38, 7)] + ["", "x"]
    _write(w / "held.csv", held)
    return {"w": w, "model": w / "mine", "held": held, "tok": tok, "net": model}


def hand_loss(user) -> tuple[float, int, int]:
    """``(mean unit loss, unreadable rows, predicted bytes)``: each readable row alone through
    the model, its logits widened to float64, −ln((1−α)p_y + α/V)/ln(V/α) averaged over its
    predicted bytes; a row with no text or fewer than 2 bytes at loss 1."""
    losses, bad, tokens = [], 0, 0
    for text in user["held"]:
        ids = user["tok"](text, truncation=True, max_length=MAX_LENGTH,
                          return_tensors="pt")["input_ids"] if text else None
        if ids is None or ids.shape[1] < 2:
            losses.append(1.0)
            bad += 1
            continue
        with torch.no_grad():
            logits = user["net"](input_ids=ids).logits.double()[0, :-1]
        p = torch.softmax(logits, -1).gather(-1, ids[0, 1:, None]).squeeze(-1)
        ell = -torch.log((1 - ALPHA) * p + ALPHA / V) / math.log(V / ALPHA)
        losses.append(float(ell.mean()))
        tokens += ids.shape[1] - 1
    return sum(losses) / len(losses), bad, tokens


def _optimize_value(loss: float, m: int) -> float:
    res = runner.invoke(app, ["optimize", "test_set_smoothed_kl", "--set", f"test_loss={loss!r}",
                              "--set", f"m={m}", "--set", f"alpha={ALPHA}", "--set", f"V={V}",
                              "--json"])
    assert res.exit_code == 0, res.output[-500:]
    return json.loads(res.stdout)["value"]


def _holdout(user, *extra):
    return runner.invoke(app, ["holdout", str(user["model"]), "--test-data",
                               str(user["w"] / "held.csv"), "--max-length", str(MAX_LENGTH),
                               "--smoothing", str(ALPHA), "--device", "cpu", *extra])


def test_lm_holdout_equals_the_hand_loss_optimize_and_the_50_digit_bound(user, tmp_path):
    res = _holdout(user, "--json", "--latex", str(tmp_path / "b.tex"))
    assert res.exit_code == 0, res.output[-800:]
    rec = json.loads(res.stdout)
    loss, bad, tokens = hand_loss(user)
    m = len(user["held"])
    assert (rec["m"], rec["unreadable_rows"], rec["unreadable_first"]) == (m, 2, [38, 39])
    assert bad == 2 and rec["tokens_scored"] == tokens
    assert rec["held_out_loss"] == pytest.approx(loss, rel=1e-6)  # float32 forwards
    assert 0.05 < loss < 0.9  # the model learnt something; not a constant
    assert rec["id"] == "test_set_smoothed_kl" and rec["is_bound"] and rec["delta"] == 0.05
    assert rec["unit"] == "bits per predicted byte" and rec["vocab_size"] == V
    assert "one row of the held-out file" in rec["iid_unit"] and str(MAX_LENGTH) in \
        rec["iid_unit"]
    assert rec["value"] == _optimize_value(rec["held_out_loss"], m)
    mpmath.mp.dps = 50
    exact = mpmath.log(mpmath.mpf(V) / mpmath.mpf(ALPHA), 2) * kl_inverse(
        rec["held_out_loss"], mpmath.log(20) / m)
    assert 0 <= rec["value"] - exact < 1e-11, (rec["value"], exact)
    assert rec["held_out_bits"] == pytest.approx(loss * math.log2(V / ALPHA), rel=1e-6)
    assert rec["held_out_bits"] < rec["value"] < math.log2(V / ALPHA)
    tex = (tmp_path / "b.tex").read_text()
    assert tex == rec["latex"] + "\n" and r"\frac{1}{0.05}" in tex and "257" in tex


def test_lm_holdout_prints_the_bits_the_unit_and_the_unreadable_rows(user):
    res = _holdout(user)
    assert res.exit_code == 0, res.output[-800:]
    out = " ".join(res.stdout.split())
    from boundcalc.rounding import upper_text

    rec = json.loads(_holdout(user, "--json").stdout)
    assert f"test_set_smoothed_kl ≤ {upper_text(rec['value'], 4)} bits per byte" in out, out
    assert "unit (i.i.d.): one row of the held-out file" in out
    assert "2 unreadable row(s) counted at the largest loss, first: row 38" in out


def test_a_model_that_is_neither_a_classifier_nor_a_causal_lm_is_refused(tmp_path):
    from transformers import GPT2Config, GPT2Model

    GPT2Model(GPT2Config(vocab_size=20, n_positions=8, n_embd=8, n_layer=1,
                         n_head=2)).save_pretrained(tmp_path / "bare")
    _write(tmp_path / "h.csv", ["some text"])
    res = runner.invoke(app, ["holdout", str(tmp_path / "bare"), "--test-data",
                              str(tmp_path / "h.csv"), "--device", "cpu"])
    assert res.exit_code == 6 and "Traceback" not in res.output  # a checkpoint's error
    err = res.stderr.strip()
    assert "\n" not in err and "GPT2Model" in err, err
    assert "neither a ...ForSequenceClassification model nor a causal language model" in err


def test_a_held_out_file_without_the_text_column_is_refused_naming_the_option(user, tmp_path):
    _write(tmp_path / "h.csv", ["some text", "more text"], column="content")
    res = runner.invoke(app, ["holdout", str(user["model"]), "--test-data",
                              str(tmp_path / "h.csv"), "--device", "cpu"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    err = res.stderr.strip()
    assert "\n" not in err and "no text column 'text'" in err and "content" in err, err
    assert "--text-column" in err
