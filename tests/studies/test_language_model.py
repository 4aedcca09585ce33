"""The language-model example at reduced size: a byte-level GPT-2 on standard-library source,
measured and compared through the CLI; bits per byte checked against a direct computation."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from studies.language_model import (PAD, VOCAB, LMConfig, byte_tokenizer, collect,
                                    cut, encode, minimum_by_sum, run)
from studies.stdlib_text import SPLITS
from tests._measure_helpers import single_thread
from tests._reference import kl_inv_exact
from tests._rounding_helpers import up_text

pytestmark = pytest.mark.slow

CFG = LMConfig(max_files=60, n_embd=32, n_layer=1, n_head=2, train_steps=30, n_bound=60,
               n_test=60, draws=1, levels="1,4")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("lm")
    with single_thread():
        rep = run(out, CFG)
    return out, rep


def _units(out):
    return [json.loads(line)["text"].encode("utf-8")
            for line in (out / "S.jsonl").read_text().splitlines()]


def test_splits_are_disjoint_by_file_and_s_is_drawn_from_the_pool(built):
    out, _ = built
    sp = json.loads((out / "splits.json").read_text())
    files = {s: set(sp["files"][s]) for s in SPLITS}
    assert all(files[s] for s in SPLITS)
    for a in SPLITS:
        for b in SPLITS:
            if a < b:
                assert not files[a] & files[b], (a, b)
    data = collect(CFG)
    assert {s: set(v) for s, v in data["files"].items()} == files
    pool = data["pool"]
    S = _units(out)
    assert S == [pool[i] for i in sp["S"]["draws"]] and len(S) == CFG.n_bound
    assert all(0 < len(u) <= CFG.chunk for u in S)


def test_chunks_never_split_a_character_and_tokens_are_bytes():
    text = ("x" * 63 + "é" + "y" * 70).encode("utf-8")
    pieces = cut(text, 64)
    assert pieces[0] == b"x" * 63 and b"".join(pieces) == text[:len(b"".join(pieces))]
    assert all(p.decode("utf-8") for p in pieces)
    tok = byte_tokenizer()
    s = "def f(é):\n\treturn 1"
    assert tok(s)["input_ids"] == list(s.encode("utf-8"))
    assert tok.pad_token_id == PAD and len(tok) == VOCAB


def _direct(model, units, alpha):
    """Per unit: mean NLL (nats) and mean smoothed −log2((1−α)p + α/V) for each α; a plain
    torch loop over groups of units of equal length (no padding involved)."""
    nll, sm = np.zeros(len(units)), [None] * len(units)
    by_len = {}
    for i, u in enumerate(units):
        by_len.setdefault(len(u), []).append(i)
    with torch.no_grad():
        for idx in by_len.values():
            ids = torch.tensor([list(units[i]) for i in idx])
            lp = torch.log_softmax(model(input_ids=ids).logits[:, :-1].double(), -1)
            tgt = lp.gather(-1, ids[:, 1:, None]).squeeze(-1)
            for row, i in enumerate(idx):
                t = tgt[row]
                nll[i] = float(-t.mean())
                sm[i] = {a: float((-torch.log2((1 - a) * t.exp() + a / VOCAB)).mean())
                         for a in alpha}
    return nll, sm


def _decoded_1_level(out):
    from transformers import GPT2LMHeadModel

    model = GPT2LMHeadModel.from_pretrained(out / "model").eval()
    prior = GPT2LMHeadModel.from_pretrained(out / "prior").eval()
    W, W0 = model.state_dict(), prior.state_dict()
    keys = [k for k, v in W.items() if v.is_floating_point()]
    mean = sum(float((W[k].double() - W0[k].double()).sum()) for k in keys) / \
        sum(W[k].numel() for k in keys)
    m16 = float(np.float16(mean))
    prior.load_state_dict({k: (W0[k].double() + m16).float() if k in keys else W0[k]
                           for k in W0})
    return model, prior


def test_measured_bits_match_a_direct_computation(built):
    out, rep = built
    st = json.loads((out / "stats.json").read_text())
    sc = st["scalars"]
    S = _units(out)
    model, quant = _decoded_1_level(out)
    nll, _ = _direct(model, S, [])
    assert sc["n"]["value"] == len(S)
    assert sc["loss_mean"]["value"] == pytest.approx(nll.mean(), rel=1e-6)
    assert rep["bound_bits"] == pytest.approx(nll.mean() / math.log(2), rel=1e-6)
    a = CFG.smoothing
    _, sm = _direct(model, S, [a])
    # measure's bounded loss: −ln((1−α)p + α/V)/ln(V/α) = (bits)·ln 2/ln(V/α)
    assert sc["bounded_loss_mean"]["value"] == pytest.approx(
        np.mean([d[a] for d in sm]) * math.log(2) / math.log(VOCAB / a), rel=1e-6)
    # the quantized model's smoothed loss at every α of the grid, in bits
    assert sc["quant_levels"]["value"] == 1 and sc["vocab_size"]["value"] == VOCAB
    c = st["curves"]["quantized_smoothed_nll"]
    _, qs = _direct(quant, S, c["at"])
    for al, v in zip(c["at"], c["value"]):
        assert v == pytest.approx(np.mean([d[al] for d in qs]), rel=1e-6), al


def test_report_in_bits_per_byte_above_the_exact_pool_value(built):
    out, rep = built
    doc = json.loads((out / "report.json").read_text())
    # bits per PREDICTED byte: the first byte of a chunk has no context and is not scored
    assert doc["unit"] == "predicted byte" and f"{CFG.chunk - 1} of {CFG.chunk}" in \
        doc["unit_note"]
    assert doc["random_guess_bits"] == pytest.approx(math.log2(257))
    assert {"heldout_bits", "certified"} <= set(doc) and doc["heldout_bits"] > 0
    rows = doc["certified"] + doc["certified_other_model"]
    ids = [r["id"] for r in rows]
    assert "occam_smoothed_nll_kl" in ids
    assert all(r["id"] != "lotfi_token_level" for r in rows)  # conditional
    r = next(r for r in rows if r["id"] == "occam_smoothed_nll_kl")
    # which model it certifies, as measure recorded it; listed apart unless the fine-tuned one
    dec = json.loads((out / "stats.json").read_text())["provenance"]["compression"]["decoded"]
    assert r["about"] == dec["about"] and "certifies" in r["certifies"]
    assert (r in doc["certified_other_model"]) is (dec["about"] != "measured")
    # the least certified value, with the sum of the δ's of the rows it ranges over
    bounds = [x for x in doc["certified"] if x["is_bound"] and x["value"] is not None]
    if bounds:
        m = doc["minimum"]
        assert m["value"] == min(x["value"] for x in bounds) and m["k"] == len(bounds)
        assert m["delta_total"] == pytest.approx(sum(x["delta"] for x in bounds))
        assert "sum of their δ's" in m["text"]
    al = r["parameters"]["alpha"]
    # by hand: l_min + Δ·kl⁻¹((R̂ − l_min)/Δ, (C ln 2 + ln(8/δ))/n), mpmath reference
    st = json.loads((out / "stats.json").read_text())
    c = st["curves"]["quantized_smoothed_nll"]
    R = c["value"][c["at"].index(al)]
    lmin = -math.log2((1 - al) + al / VOCAB)
    D = math.log2(1 + (1 - al) * VOCAB / al)
    C = st["scalars"]["code_bits"]["value"]
    hand = lmin + D * float(kl_inv_exact((R - lmin) / D, (C * math.log(2) + math.log(8 / 0.05))
                                         / CFG.n_bound))
    assert r["value"] == pytest.approx(hand, rel=1e-9)
    # the quantity bounded: the quantized model's smoothed loss on the whole pool, exactly
    _, quant = _decoded_1_level(out)
    pool = collect(CFG)["pool"]
    x, m = encode(pool)
    with torch.no_grad():
        p = torch.softmax(quant(input_ids=x, attention_mask=m).logits[:, :-1].double(), -1)
    p = p.gather(-1, x[:, 1:, None]).squeeze(-1)
    w = m[:, 1:].double()
    per = ((-torch.log2((1 - al) * p + al / VOCAB)) * w).sum(1) / w.sum(1)
    assert r["value"] >= float(per.mean())


def test_minimum_by_sum_rounds_the_value_up_and_the_probability_down():
    """The least certified row in bits per predicted byte, quoted with the sum of the δ's: the
    value rounded up to 4 digits, 1 − Σδ down (0.05 + 0.01 is the double
    0.06000000000000000472…, so 1 − Σδ is just below 0.94)."""
    rows = [{"id": "a", "is_bound": True, "value": 3.54128, "delta": 0.05},
            {"id": "b", "is_bound": True, "value": 14.6502, "delta": 0.01},
            {"id": "c", "is_bound": False, "value": 1.0, "delta": 0.05}]
    m = minimum_by_sum(rows)
    assert m["id"] == "a" and m["k"] == 2 and m["delta_total"] == 0.05 + 0.01
    assert up_text(3.54128, 4) == "3.542"
    assert m["text"] == ("minimum over 2 certified rows with the sum of their δ's: 3.542 bits "
                         "per predicted byte (a) holds with probability ≥ 1 − Σδ = 0.9399 "
                         "(union bound over the 2 rows)")


def test_bound_trained_row_recomputed_to_50_digits_in_bits(built):
    """The bound-trained Gibbs posterior's row (pac_bayes_kl_gaussian_learned_mc) from
    stats.json by hand at 50 digits, times log2(V/α): bits per predicted byte; it certifies
    the bound-trained posterior, whose held-out Gibbs bits stand beside it; μ saved."""
    import mpmath as mp
    from transformers import GPT2LMHeadModel

    out, rep = built
    st = json.loads((out / "stats.json").read_text())
    rec, curve = st["provenance"]["gibbs_learned"], st["curves"]["gibbs_risk_learned"]
    assert rec["shape_disjoint_from_S"] is True  # ρ searched on prior-split chunks: free
    assert rec["training"]["sigma"] == "scale" and rec["training"]["init"] == CFG.bound_init
    assert "ln(V/α)" in rec["training"]["loss"]
    E, N = curve["value"][0], curve["n_samples"]
    assert N == rec["mc"]["units"] and rec["mc"]["mode"] in ("chunk", "whole", "sample")
    with mp.workdps(50):
        # per group: d·(σ_Q²/σ_P² − 1 − ln(σ_Q²/σ_P²))/2 + ‖μ − μ₀‖²/(2σ_P²), σ_P = scale·ρ
        sp = [mp.mpf(rec["scale"]) * mp.mpf(r) for r in rec["shape"]]
        ratio = [(mp.mpf(a) / b) ** 2 for a, b in zip(rec["sigma_post"], sp)]
        KL = mp.fsum(mp.mpf(d) * (v - 1 - mp.log(v)) / 2 for d, v in zip(rec["n_params"], ratio))
        KL += mp.fsum(mp.mpf(q) / (2 * b ** 2) for q, b in zip(rec["dist_sq"], sp))
        upper = kl_inv_exact(E, mp.log(2 / mp.mpf("0.01")) / N, dps=50)
        n = CFG.n_bound
        exact = kl_inv_exact(upper, (KL + mp.log(2 * mp.sqrt(n) / (mp.mpf("0.05") / 17))) / n,
                             dps=50) * mp.log(VOCAB / mp.mpf(CFG.smoothing)) / mp.log(2)
    row = next(r for r in rep["certified"] if r["id"] == "pac_bayes_kl_gaussian_learned_mc")
    assert mp.mpf(row["value"]) >= exact and float(mp.mpf(row["value"]) - exact) <= 1e-9 * exact
    assert row["about"] == "bound_posterior" and "bound-trained" in row["certifies"]
    held = rec["held_out"]
    assert row["heldout_bits"] == held["gibbs_bits"] and 0 < held["gibbs_bits"] < 25
    assert held["chunks"] == rep["n_test"]
    mean = GPT2LMHeadModel.from_pretrained(out / "posterior_bound").eval()
    prior = GPT2LMHeadModel.from_pretrained(out / "prior").eval()
    with torch.no_grad():
        dist = sum(float((a - b).double().square().sum())
                   for a, b in zip(mean.parameters(), prior.parameters()))
    assert sum(rec["dist_sq"]) == pytest.approx(dist, rel=1e-9)


def test_baseline_and_subspace_row_recomputed_by_hand_in_bits(built):
    """The baseline (the prior's test-set bound on S, ``test_set_kl_bounded``) from the prior's
    smoothed loss on S computed directly here (plain torch), and the subspace Gibbs posterior's
    row (pac_bayes_kl_gaussian_subspace_mc) from stats.json at 50 digits, both times
    log2(V/α): bits per predicted byte; the row certifies the subspace posterior, whose
    held-out Gibbs bits stand beside it."""
    import mpmath as mp
    from transformers import GPT2LMHeadModel

    out, rep = built
    to_bits = math.log2(VOCAB / CFG.smoothing)
    prior = GPT2LMHeadModel.from_pretrained(out / "prior").eval()
    _, sm = _direct(prior, _units(out), [CFG.smoothing])
    mean = float(np.mean([s[CFG.smoothing] for s in sm])) / to_bits  # in [0, 1] per chunk
    b = rep["baseline"]
    with mp.workdps(50):
        exact = kl_inv_exact(mean, mp.log(1 / mp.mpf("0.05")) / CFG.n_bound, dps=50) * to_bits
    assert b["id"] == "test_set_kl_bounded" and b["n"] == CFG.n_bound
    assert mp.mpf(b["value"]) >= exact - 1e-9 and abs(float(mp.mpf(b["value"]) - exact)) \
        <= 1e-6 * float(exact)
    st = json.loads((out / "stats.json").read_text())
    sc, rec = st["scalars"], st["provenance"]["gibbs_subspace"]
    E, N = sc["gibbs_subspace_mean"]["value"], int(sc["gibbs_subspace_units"]["value"])
    d, J = int(sc["subspace_dim"]["value"]), int(sc["subspace_prior_grid"]["value"])
    assert J == 1 and N == rec["mc"]["units"] == rec["mc"]["passes"] * CFG.n_bound
    # d by hand: one block's c_attn (32 → 96), attn.c_proj (32 → 32), c_fc (32 → 128),
    # mlp.c_proj (128 → 32), rank 4 × d_in each; the tied head stays out
    assert d == 4 * (32 + 32 + 32 + 128)
    assert rec["training"]["cross_entropy_fit"]["epochs"] >= 1
    with mp.workdps(50):
        sq, sp = mp.mpf(sc["subspace_sigma_post"]["value"]), \
            mp.mpf(sc["subspace_sigma_prior"]["value"])
        KL = mp.mpf(sc["subspace_dist_sq"]["value"]) / (2 * sp ** 2) + \
            d * ((sq / sp) ** 2 - 1 - mp.log((sq / sp) ** 2)) / 2
        upper = kl_inv_exact(E, mp.log(2 / mp.mpf("0.01")) / N, dps=50)
        exact = kl_inv_exact(upper, (KL + mp.log(2 * mp.sqrt(CFG.n_bound) / mp.mpf("0.05")))
                             / CFG.n_bound, dps=50) * to_bits
    row = next(r for r in rep["certified"] if r["id"] == "pac_bayes_kl_gaussian_subspace_mc")
    assert mp.mpf(row["value"]) >= exact and float(mp.mpf(row["value"]) - exact) <= 1e-9 * exact
    assert row["about"] == "subspace_posterior" and "subspace Gibbs posterior" in row["certifies"]
    assert row["heldout_bits"] == rec["held_out"]["gibbs_bits"] and 0 < row["heldout_bits"] < 25
