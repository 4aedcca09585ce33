"""Code length and quantized risk (boundcalc/measure/compress/, measure --compress).

Code lengths are recomputed here from the decoded tensors alone (distinct values and their
counts, np.unique), never from the module's codes; risks from a direct forward pass of a model
loaded with the decoded weights.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits
from typer.testing import CliRunner

import boundcalc as bc
from boundcalc.cli import app
from boundcalc.errors import BoundcalcError, StatsError
from boundcalc.codecheck import check_compression_scalars
from boundcalc.measure.compress.codelength import code_length
from boundcalc.measure.compress.compression import compress
from boundcalc.measure.compress.coded import coded_vector
from boundcalc.measure.compress.options import CompressOptions, parse_levels, require_data
from boundcalc.measure.compress.quantizer import quantize
from boundcalc.measure.compress.risk import ALPHA_GRID
from boundcalc.stats import Quantity, Stats

REG = bc.load_registry()


def make_mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 24), torch.nn.ReLU(),
                               torch.nn.Linear(24, 10))


@pytest.fixture(scope="module")
def digits_mlp():
    """A small MLP trained on 600 real digits for 150 full-batch Adam steps (about a second)."""
    X, y = load_digits(return_X_y=True)
    X = torch.tensor(X[:600] / 16.0, dtype=torch.float32).reshape(600, 8, 8)  # B x T x d
    y = torch.tensor(y[:600])
    torch.manual_seed(0)
    model = make_mlp()
    init = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    for _ in range(150):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(X), y).backward()
        opt.step()
    return model.eval(), init, {"inputs": X, "targets": y}


def independent_bits(decoded: np.ndarray, n_levels: int, grid_size: int, cb_bits: int = 16):
    """Entropy code length from the decoded values themselves."""
    _, counts = np.unique(decoded, return_counts=True)
    m = decoded.size
    H = float(-(counts * np.log2(counts / m)).sum())
    return math.ceil(H - 1e-9) + 1 + n_levels * cb_bits + n_levels * math.ceil(math.log2(m + 1)) \
        + math.log2(grid_size), H


def test_uniform_quantizer_levels_and_code_length():
    rng = np.random.default_rng(0)
    x = rng.normal(size=5000)
    codes, cb = quantize(x, 8, "uniform", 16)
    dec = cb[codes]
    assert cb.size == 8 and np.all(np.diff(cb) > 0)
    assert np.all(cb == cb.astype(np.float16).astype(np.float64))  # stored precision
    # nearest level: no value is closer to another level
    assert np.all(np.abs(dec - x) <= np.min(np.abs(x[:, None] - cb[None, :]), axis=1) + 1e-12)
    c = code_length(codes, cb.size, 16, n_choices=6)
    want, H = independent_bits(dec, 8, 6)
    assert c.total == pytest.approx(want, abs=1e-9)
    assert c.entropy_bits == pytest.approx(H, rel=1e-12)
    authors = code_length(codes, cb.size, 16, n_choices=6, prefix="authors")
    assert authors.total == pytest.approx(want + 2 * math.log2(want), abs=1e-9)


def test_kmeans_beats_uniform_in_squared_error():
    x = np.random.default_rng(1).standard_t(3, size=4000)
    cu, bu = quantize(x, 4, "uniform", 32)
    ck, bk = quantize(x, 4, "kmeans", 32)
    assert np.sum((bk[ck] - x) ** 2) < np.sum((bu[cu] - x) ** 2)


def test_quantizer_refuses_bad_input():
    with pytest.raises(BoundcalcError, match="NaN"):
        quantize(np.array([1.0, np.nan]), 2)
    with pytest.raises(BoundcalcError, match="quantizer must be"):
        quantize(np.ones(3), 2, "lattice")
    with pytest.raises(BoundcalcError) as err:
        parse_levels("2,x")
    assert str(err.value) == "levels: comma-separated integers expected, got '2,x'"


def test_compress_delta_matches_an_independent_recount(digits_mlp):
    model, init, data = digits_mlp
    res = compress(model, data, CompressOptions(select="delta", quantizer="uniform",
                                                levels_grid=(2, 4, 8, 16)), init=init)
    # rebuild the decoded delta by re-quantizing each concatenated delta independently
    names = sorted(init)
    delta = np.concatenate([(model.state_dict()[k].double() - init[k].double()).reshape(-1)
                            .numpy() for k in names])
    lo, hi = delta.min(), delta.max()
    levels = np.linspace(lo, hi, res.levels).astype(np.float16).astype(np.float64)
    dec = levels[np.argmin(np.abs(delta[:, None] - levels[None, :]), axis=1)]
    want, _ = independent_bits(dec, res.levels, 4)
    assert res.code.total == pytest.approx(want, abs=1e-6)
    assert res.code.symbols == delta.size
    # the quantized model's error, by a direct forward pass
    q = make_mlp()
    pos, state = 0, {}
    for k in names:
        size = init[k].numel()
        state[k] = (init[k].double() + torch.from_numpy(dec[pos:pos + size])
                    .reshape(init[k].shape)).float()
        pos += size
    q.load_state_dict(state)
    with torch.no_grad():
        logits = q(data["inputs"])
    err = float((logits.argmax(1) != data["targets"]).double().mean())
    assert res.error == pytest.approx(err, abs=1e-12)
    p = torch.softmax(logits.double(), 1)[torch.arange(600), data["targets"]]
    for a in (0.01, 0.5):
        want_nll = float((-torch.log2((1 - a) * p + a / 10)).mean())
        assert res.smoothed[a] == pytest.approx(want_nll, rel=1e-5)
    # the level count is the grid point with the smallest Occam-kl bound
    best = min(res.per_level, key=lambda r: r["occam_kl"])
    assert best["levels"] == res.levels
    sc = res.scalars()
    check_compression_scalars(sc)
    assert sc["code_bits"].note == sc["quantized_error"].note


def test_compressed_stats_bind_to_the_occam_entry(digits_mlp, tmp_path):
    model, init, data = digits_mlp
    res = compress(model, data, CompressOptions(select="delta", levels_grid=(4, 8)), init=init)
    stats = Stats(scalars=res.scalars(), curves=res.curves())
    path = stats.save(tmp_path / "s.json")
    r = bc.compute("occam_kl", stats=str(path))
    B = (res.code.total * math.log(2) + math.log(20)) / 600
    assert r.terms["emp_risk"] == res.error
    assert r.value >= res.error and r.value == pytest.approx(
        bc.evaluate(REG.get("occam_kl"), {"code_bits": res.code.total, "emp_risk": res.error,
                                          "n": 600}).value)
    assert r.terms["kl_budget"] == pytest.approx(B)
    # hand-setting the risk next to a measured code length is refused
    with pytest.raises(BoundcalcError, match="set by hand"):
        bc.compute("occam_kl", stats=str(path), values={"emp_risk": 0.0})
    # smoothed-loss entries: α chosen among the α where the loss was measured, each point with
    # its own loss, ln 8 paid; the values equal the Hoeffding form computed here
    assert "quantized_smoothed_nll" not in res.scalars()  # no loss at one stored α
    budget = math.sqrt((res.code.total * math.log(2) + math.log(8 / 0.05)) / (2 * 600))
    hand = {a: res.smoothed[a] + math.log2(1 + (1 - a) * 10 / a) * budget for a in res.smoothed}
    r2 = bc.compute("occam_smoothed_nll", stats=str(path))
    assert r2.value == pytest.approx(min(hand.values()), rel=1e-12)
    a = r2.parameters["alpha"]
    assert hand[a] == min(hand.values()) and r2.terms["smoothed_nll"] == res.smoothed[a]
    assert r2.union_bound_cost["alpha"] == pytest.approx(math.log(8)) and r2.is_bound
    r3 = bc.compute("occam_smoothed_nll", stats=str(path), params={"alpha": 0.25})
    assert r3.terms["smoothed_nll"] == res.smoothed[0.25]
    assert r3.value == pytest.approx(hand[0.25], rel=1e-12)


def test_code_length_without_matching_risk_is_refused(digits_mlp):
    model, init, data = digits_mlp
    sc = compress(model, data, CompressOptions(select="delta", levels_grid=(4,)),
                  init=init).scalars()
    missing = {k: v for k, v in sc.items() if k != "quantized_error"}
    with pytest.raises(StatsError, match="without 'quantized_error'"):
        check_compression_scalars(missing)
    other = dict(sc)
    other["quantized_error"] = Quantity(0.0, note="quantized model sha256:0000")
    with pytest.raises(StatsError, match="different quantized models"):
        check_compression_scalars(other)
    edited = dict(sc)
    edited["quantized_error"] = Quantity(sc["float_error"].value + sc["quantized_changed"].value
                                         + 0.05, note=sc["code_bits"].note)
    with pytest.raises(StatsError, match="changed predictions"):
        check_compression_scalars(edited)
    with pytest.raises(StatsError):
        bc.compute("occam_kl", stats=Stats(scalars=missing))


def test_quantizer_changing_too_many_predictions_is_refused(digits_mlp):
    model, init, data = digits_mlp
    with pytest.raises(BoundcalcError, match="predictions change"):
        compress(model, data, CompressOptions(select="all", levels_grid=(2,), max_changed=0.0))


def test_given_tensors_with_rebuild(digits_mlp):
    """A subspace vector w (θ = θ₀ + P w, P seeded): only w is coded."""
    model, init, data = digits_mlp
    names = sorted(init)
    sizes = [init[k].numel() for k in names]
    P = torch.randn(sum(sizes), 20, generator=torch.Generator().manual_seed(3),
                    dtype=torch.float64) / math.sqrt(20)
    w = torch.linspace(-1, 1, 20, dtype=torch.float64)

    def rebuild(t):
        flat = P @ t["w"].double()
        q = make_mlp()
        state, pos = {}, 0
        for k, s in zip(names, sizes):
            state[k] = (init[k].double() + flat[pos:pos + s].reshape(init[k].shape)).float()
            pos += s
        q.load_state_dict(state)
        return q.eval()

    res = compress(model, data, CompressOptions(levels_grid=(4, 8)), coded={"w": w},
                   rebuild=rebuild)
    assert res.code.symbols == 20 and res.select == "given"
    assert "given tensors" in res.method


runner = CliRunner()


def test_cli_measure_compress_on_a_tiny_hf_classifier(tmp_path):
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=16, num_labels=3)
    BertForSequenceClassification(cfg).save_pretrained(tmp_path / "m")
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 40, (30, 8), generator=g)
    torch.save({"inputs": ids, "targets": torch.randint(0, 3, (30,), generator=g)},
               tmp_path / "d.pt")
    out = tmp_path / "stats.json"
    res = runner.invoke(app, ["measure", str(tmp_path / "m"), "--data", str(tmp_path / "d.pt"),
                              "--compress", "all", "--levels", "4,16", "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    sc = data["scalars"]
    n_params = sum(p.numel() for p in BertForSequenceClassification(cfg).state_dict().values()
                   if p.is_floating_point())
    assert sc["coded_params"]["value"] == n_params
    assert sc["quant_levels"]["value"] in (4, 16)
    assert sc["n"]["value"] == 30 and sc["vocab_size"]["value"] == 3
    assert "compression" in data["provenance"]
    # the smoothed loss over the α grid, tied to the same quantized model as code_bits
    curve = data["curves"]["quantized_smoothed_nll"]
    assert curve["param"] == "alpha" and curve["at"] == sorted(ALPHA_GRID)
    assert curve["note"] == sc["code_bits"]["note"]
    assert "quantized_smoothed_nll" not in sc and "smoothing_alpha" not in sc
    # evaluate at a given α: the loss measured at that α, and no other
    res = runner.invoke(app, ["evaluate", "occam_smoothed_nll", "--stats", str(out),
                              "--set", "alpha=0.05", "--json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    nll = curve["value"][curve["at"].index(0.05)]
    want = nll + math.log2(1 + 0.95 * 3 / 0.05) * math.sqrt(
        (sc["code_bits"]["value"] * math.log(2) + math.log(8 / 0.05)) / 60)
    assert got["value"] == pytest.approx(want, rel=1e-12)
    assert got["parameters"]["alpha"] == 0.05
    curve["at"] = [0.01, 0.1]  # a file measured at two α only: α = 0.05 is refused
    del data["curves_sha256"]  # written by hand: no hash (a kept hash would refuse the edit)
    curve["value"] = curve["value"][3:4] + curve["value"][5:6]
    out.write_text(json.dumps(data))
    res = runner.invoke(app, ["evaluate", "occam_smoothed_nll_kl", "--stats", str(out),
                              "--set", "alpha=0.05"])
    assert res.exit_code != 0 and "not a point where" in res.output
    assert len(res.output.strip().splitlines()) == 1
    # without --data: one line, non-zero exit
    res = runner.invoke(app, ["measure", str(tmp_path / "m"), "--compress", "all",
                              "-o", str(tmp_path / "x.json")])
    assert res.exit_code != 0 and "--compress needs --data" in res.output
    assert len(res.output.strip().splitlines()) == 1


@pytest.mark.parametrize("opts,msg", [
    (["--compress", "some"], "--compress 'some': expected one of all, delta, auto"),
    (["--compress", "all", "--quantizer", "lattice"],
     "--quantizer 'lattice': expected one of uniform, kmeans"),
    (["--compress", "all", "--codebook-bits", "8"], "--codebook-bits"),
    (["--compress", "all", "--levels", "1000000"], "--levels"),
    (["--compress", "all", "--max-changed", "2"], "--max-changed"),
])
def test_cli_bad_compress_options_are_one_line(tmp_path, opts, msg):
    torch.save({"inputs": torch.zeros(2, 3, 4), "targets": torch.zeros(2)}, tmp_path / "d.pt")
    res = runner.invoke(app, ["measure", str(tmp_path / "nothing"), "--data",
                              str(tmp_path / "d.pt"), *opts, "-o", str(tmp_path / "o.json")])
    assert res.exit_code != 0
    assert len(res.output.strip().splitlines()) == 1, res.output
    assert msg in res.output


@pytest.mark.parametrize("given,msg", [
    ({"select": "some"}, "select='some': expected one of all, delta, auto"),
    ({"quantizer": "lattice"}, "quantizer='lattice': expected one of uniform, kmeans"),
    ({"codebook_bits": 8}, "codebook_bits=8: expected one of 16, 32"),
    ({"prefix": "mine"}, "prefix='mine': expected one of none, authors"),
    ({"levels_grid": (1000000,)}, "levels_grid=1000000: expected one or more values, each a "
                                  "whole number in [1, 65536]"),
    ({"max_changed": 2.0}, "max_changed=2.0: expected a number in [0, 1]"),
    ({"data": None}, "select needs data: a code length is only usable with the quantized"),
])
def test_library_bad_compress_options_name_the_keywords(given, msg):
    """The same checks called from Python name the API's keywords, not the CLI's flags."""
    opts = {"select": "all", "data": "d.pt"} | given
    data = opts.pop("data")
    with pytest.raises(BoundcalcError) as err:
        require_data(data)  # as measure checks them: data first, then the record
        CompressOptions(**opts)
    assert str(err.value).startswith(msg) and "--" not in str(err.value)


def test_library_compress_errors_name_the_keywords(digits_mlp):
    model, _, data = digits_mlp
    with pytest.raises(BoundcalcError) as err:
        compress(model, data, CompressOptions(levels_grid=(0, 2)))
    assert str(err.value) == ("levels_grid=0: expected one or more values, each a whole number "
                              "in [1, 65536]")
    with pytest.raises(BoundcalcError) as err:
        coded_vector(model, None, "delta")
    assert str(err.value) == "select=delta needs init (the weights the delta is from)"
    with pytest.raises(BoundcalcError) as err:
        coded_vector(model, None, "auto")
    assert str(err.value) == "select must be one of all, delta, got 'auto'"
    with pytest.raises(BoundcalcError) as err:  # was a ValueError from torch.cat
        compress(model, data, coded={}, rebuild=lambda tensors: model)
    assert str(err.value) == "coded: no tensors to code"


# ---- the data side of `measure --data`: text tables, tokenized by the checkpoint's tokenizer --

def _decoded_state(model: torch.nn.Module, levels: int) -> dict[str, torch.Tensor]:
    """All float tensors, uniform levels between min and max, float16 codebook, nearest level:
    written here from the description, not with the module's quantizer."""
    sd = {k: v for k, v in model.state_dict().items() if v.is_floating_point()}
    names = sorted(sd)
    vec = torch.cat([sd[k].double().reshape(-1) for k in names])
    cb = torch.linspace(float(vec.min()), float(vec.max()), levels).half().double()
    dec = cb[torch.bucketize(vec, (cb[1:] + cb[:-1]) / 2)]
    out, pos = {}, 0
    for k in names:
        out[k] = dec[pos:pos + sd[k].numel()].reshape(sd[k].shape).to(sd[k].dtype)
        pos += sd[k].numel()
    return out


@pytest.fixture(scope="module")
def text_data(tmp_path_factory):
    import pandas as pd

    from tests._measure_helpers import TEXT_LABELS, TEXTS, tiny_text_checkpoints

    out = tmp_path_factory.mktemp("ctext")
    tiny_text_checkpoints(out)
    pd.DataFrame({"sentence": TEXTS, "label": TEXT_LABELS}).to_csv(out / "d.csv", index=False)
    return out, TEXTS, TEXT_LABELS


def _measure_compress(model, data, out):
    res = runner.invoke(app, ["measure", str(model), "--data", str(data), "--text-column",
                              "sentence", "--compress", "all", "--levels", "16", "--draws", "0",
                              "--hessian-probes", "0", "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output[-1500:]
    return json.loads(out.read_text())


def test_compress_on_a_csv_classifier_matches_a_direct_pass(text_data, tmp_path):
    from transformers import AutoTokenizer, BertForSequenceClassification

    out, texts, labels = text_data
    data = _measure_compress(out / "cls", out / "d.csv", tmp_path / "s.json")
    sc, curve = data["scalars"], data["curves"]["quantized_smoothed_nll"]
    m = BertForSequenceClassification.from_pretrained(out / "cls").eval()
    m.load_state_dict({**m.state_dict(), **_decoded_state(m, 16)})
    tok = AutoTokenizer.from_pretrained(out / "cls")
    with torch.no_grad():
        logits = m(**tok(texts, padding=True, return_tensors="pt")).logits.double()
    y = torch.tensor(labels)
    assert sc["quantized_error"]["value"] == pytest.approx(
        float((logits.argmax(1) != y).double().mean()), abs=1e-12)
    p = torch.softmax(logits, 1)[torch.arange(6), y]
    for a, v in zip(curve["at"], curve["value"]):
        assert v == pytest.approx(float((-torch.log2((1 - a) * p + a / 3)).mean()), rel=1e-6)
    assert sc["n"]["value"] == 6 and curve["note"] == sc["code_bits"]["note"]
    r = bc.compute("occam_smoothed_nll_kl", stats=str(tmp_path / "s.json"))
    assert r.is_bound and r.parameters["alpha"] in ALPHA_GRID


def test_compress_on_csv_text_for_a_causal_lm_averages_each_document(text_data, tmp_path):
    from transformers import AutoTokenizer, GPT2LMHeadModel

    out, texts, _ = text_data
    data = _measure_compress(out / "lm", out / "d.csv", tmp_path / "s.json")
    curve = data["curves"]["quantized_smoothed_nll"]
    m = GPT2LMHeadModel.from_pretrained(out / "lm").eval()
    m.load_state_dict({**m.state_dict(), **_decoded_state(m, 16)})
    tok = AutoTokenizer.from_pretrained(out / "lm")
    V = m.config.vocab_size
    per_doc = {a: [] for a in curve["at"]}
    for t in texts:  # one document at a time, no padding
        ids = tok(t, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            p = torch.softmax(m(input_ids=ids).logits[0, :-1].double(), -1)
        p = p.gather(1, ids[0, 1:, None]).squeeze(1)
        for a in per_doc:
            per_doc[a].append(float((-torch.log2((1 - a) * p + a / V)).mean()))
    for a, v in zip(curve["at"], curve["value"]):
        assert v == pytest.approx(np.mean(per_doc[a]), rel=1e-6)
    assert data["scalars"]["vocab_size"]["value"] == V
