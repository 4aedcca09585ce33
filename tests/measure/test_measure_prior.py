"""The prior centre of ``measure --init`` (boundcalc/measure/prior.py, issues #22 and #25).

Distances are recomputed here from the checkpoint files themselves (safetensors.torch.load_file,
float64 sums of squares written in the test); random centres from a fresh model drawn in the
test after ``torch.manual_seed``; code lengths and quantized risks from decoded weights loaded
into a model and a plain forward pass.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from boundcalc.cli import app
from boundcalc.cli.words import CLI_WORDS
from boundcalc.errors import CheckpointError
from boundcalc.measure import measure
from boundcalc.measure.compress.compression import add_compression, compress
from boundcalc.measure.compress.options import CompressOptions
from boundcalc.stats import Stats
from boundcalc.words import use_words
from tests._measure_helpers import minilm_path, one_thread  # noqa: F401  (autouse fixture)

runner = CliRunner()


def _sq(a: torch.Tensor, b: torch.Tensor | None = None) -> float:
    """‖a − b‖² in float64 (the difference taken in float64)."""
    d = a.double() - (0.0 if b is None else b.double())
    return float(d.square().sum())


def _floats(path) -> dict[str, torch.Tensor]:
    return {k: v for k, v in load_file(str(path)).items() if v.is_floating_point()}


def _tiny_cfg():
    from transformers import BertConfig

    return BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=16, num_labels=3)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny base BertModel (``base``) and a classifier fine-tuned from it (``cls``: keys gain
    ``bert.`` and a ``classifier.*`` head), 30 token sequences with 3-class labels (``d.pt``)."""
    from transformers import BertForSequenceClassification, BertModel

    out = tmp_path_factory.mktemp("prior")
    torch.manual_seed(0)
    BertModel(_tiny_cfg(), add_pooling_layer=True).save_pretrained(out / "base")
    torch.manual_seed(1)
    cls = BertForSequenceClassification.from_pretrained(out / "base", num_labels=3)
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 40, (30, 8), generator=g)
    y = torch.randint(0, 3, (30,), generator=g)
    opt = torch.optim.Adam(cls.parameters(), lr=1e-2)
    cls.train()
    for _ in range(5):  # a few real fine-tuning steps
        opt.zero_grad()
        cls(input_ids=ids, labels=y).loss.backward()
        opt.step()
    cls.eval().save_pretrained(out / "cls")
    torch.save({"inputs": ids, "targets": y}, out / "d.pt")
    return out


def _fresh_classifier(seed: int):
    from transformers import BertForSequenceClassification

    torch.manual_seed(seed)
    return BertForSequenceClassification(_tiny_cfg()).state_dict()


def test_classifier_with_its_base_as_init_matches_across_the_prefix(tiny):
    w = _floats(tiny / "cls" / "model.safetensors")
    w0 = _floats(tiny / "base" / "model.safetensors")
    head = sorted(k for k in w if not k.startswith("bert."))
    assert head == ["classifier.bias", "classifier.weight"]
    matched = sum(_sq(w[k], w0[k[len("bert."):]]) for k in w if k.startswith("bert."))
    s = measure(str(tiny / "cls"), init=str(tiny / "base"), progress=False)
    want = math.sqrt(matched + sum(_sq(w[k]) for k in head))
    assert s.scalars["dist_init_total"].value == pytest.approx(want, rel=1e-12)
    prior = s.provenance["prior"]
    assert prior["kind"] == "checkpoint" and prior["head_tensors"] == head
    assert (prior["prefix_model"], prior["prefix_init"]) == ("bert.", "")
    assert prior["head_init"] == "zero" and prior["head_params"] == 3 * 16 + 3
    # the head centred at the model's own initialisation, drawn with a seed
    fresh = _fresh_classifier(7)
    s7 = measure(str(tiny / "cls"), init=str(tiny / "base"), head_init="random:7", progress=False)
    want7 = math.sqrt(matched + sum(_sq(w[k], fresh[k]) for k in head))
    assert s7.scalars["dist_init_total"].value == pytest.approx(want7, rel=1e-12)
    assert s7.provenance["prior"]["head_init"] == "random:7"


def test_init_with_the_prefix_the_model_lacks(tiny):
    """The other direction: a base model measured against a task checkpoint's weights
    (``bert.``-prefixed, with extra head tensors that the base model does not have)."""
    base = _floats(tiny / "base" / "model.safetensors")
    task = load_file(str(tiny / "cls" / "model.safetensors"))
    s = measure(str(tiny / "base"), init=task, n_heads=2, progress=False)
    want = math.sqrt(sum(_sq(base[k], task["bert." + k]) for k in base))
    assert s.scalars["dist_init_total"].value == pytest.approx(want, rel=1e-12)
    prior = s.provenance["prior"]
    assert (prior["prefix_model"], prior["prefix_init"]) == ("", "bert.")
    assert prior["head_tensors"] == []
    assert prior["unused_init_tensors"] == ["classifier.bias", "classifier.weight"]


def test_zero_centre_is_the_norm(tiny):
    w = _floats(tiny / "cls" / "model.safetensors")
    s = measure(str(tiny / "cls"), init="zero", progress=False)
    assert s.scalars["dist_init_total"].value == pytest.approx(
        math.sqrt(sum(_sq(t) for t in w.values())), rel=1e-12)
    assert s.provenance["prior"]["kind"] == "zero" and s.provenance["init"] == "zero"


def test_random_centre_is_the_models_own_initialisation(tiny):
    w = _floats(tiny / "cls" / "model.safetensors")
    d = {}
    for seed in (3, 3, 4):
        d.setdefault(seed, []).append(measure(str(tiny / "cls"), init=f"random:{seed}",
                                              progress=False).scalars["dist_init_total"].value)
    assert d[3][0] == d[3][1] and d[3][0] != d[4][0]  # reproducible, differs between seeds
    for seed in (3, 4):
        fresh = _fresh_classifier(seed)
        want = math.sqrt(sum(_sq(w[k], fresh[k]) for k in w))
        assert d[seed][0] == pytest.approx(want, rel=1e-12)
    # a live module: the same draw, and the global random state is left alone
    from transformers import BertForSequenceClassification

    model = BertForSequenceClassification.from_pretrained(tiny / "cls").eval()
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    s = measure(model, init="random:3", progress=False)
    assert torch.rand(1) == before
    assert s.scalars["dist_init_total"].value == pytest.approx(d[3][0], rel=1e-12)
    assert s.provenance["prior"]["seed"] == 3
    # a module built from a config (no 'architectures' recorded): its own class is re-drawn
    from transformers import BertForSequenceClassification as Cls

    torch.manual_seed(99)
    built = Cls(_tiny_cfg()).eval()
    w2, fresh = built.state_dict(), _fresh_classifier(3)
    s = measure(built, init="random:3", progress=False)
    assert s.scalars["dist_init_total"].value == pytest.approx(
        math.sqrt(sum(_sq(w2[k], fresh[k]) for k in w2 if w2[k].is_floating_point())), rel=1e-12)


def test_bad_centres_are_one_line(tiny):
    sd = {k: v.clone() for k, v in load_file(str(tiny / "cls" / "model.safetensors")).items()}
    with pytest.raises(CheckpointError, match="carries no architecture"):
        measure(sd, init="random:1", n_heads=2, progress=False)
    bare = tiny / "bare"
    bare.mkdir(exist_ok=True)
    (bare / "model.safetensors").write_bytes((tiny / "cls" / "model.safetensors").read_bytes())
    with pytest.raises(CheckpointError, match="no config.json naming its architecture"):
        measure(str(bare / "model.safetensors"), init="random:1", n_heads=2, progress=False)
    with pytest.raises(CheckpointError, match="random:SEED"):
        measure(str(tiny / "cls"), init="random:-1", progress=False)
    with pytest.raises(CheckpointError, match="expected zero or random:SEED"):
        measure(str(tiny / "cls"), init="zero", head_init="ones", progress=False)
    with pytest.raises(CheckpointError, match="shares no tensor name"):
        measure(str(tiny / "cls"), init={"foo.weight": torch.zeros(2)}, progress=False)
    bad = dict(sd)
    bad["classifier.weight"] = torch.zeros(5, 16)  # a head for another label count
    with pytest.raises(CheckpointError) as e:
        measure(str(tiny / "cls"), init=bad, progress=False)
    assert "classifier.weight" in str(e.value) and "[5, 16]" in str(e.value)
    from boundcalc.errors import ResourceError
    from boundcalc.limits import set_memory_budget

    set_memory_budget(1000)  # a fresh draw of the whole model is checked against the budget
    try:
        with pytest.raises(ResourceError, match="random:1: a fresh draw of the whole model"):
            measure(str(tiny / "cls"), init="random:1", progress=False)
    finally:
        set_memory_budget(None)
    del bad["classifier.weight"]  # now only the weight is missing: centred, not refused
    s = measure(str(tiny / "cls"), init=bad, progress=False)
    assert s.provenance["prior"]["head_tensors"] == ["classifier.weight"]


def test_cli_without_init_says_which_centre_to_choose(tiny):
    out = tiny / "noinit.json"
    res = runner.invoke(app, ["measure", str(tiny / "cls"), "--data", str(tiny / "d.pt"),
                              "--draws", "0", "--hessian-probes", "0", "-o", str(out)])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "no --init" in text and "fine-tuned from" in text
    assert "--init random:SEED" in text and "--init zero" in text
    assert "dist_init_total" not in json.loads(out.read_text())["scalars"]
    res = runner.invoke(app, ["measure", str(tiny / "cls"), "--init", "random:x",
                              "-o", str(out)])
    assert res.exit_code != 0 and len(res.output.strip().splitlines()) == 1
    assert "'random:x'" in res.output


def _decode_uniform(vec: np.ndarray, levels: int) -> np.ndarray:
    cb = np.linspace(vec.min(), vec.max(), levels).astype(np.float16).astype(np.float64)
    return cb[np.argmin(np.abs(vec[:, None] - cb[None, :]), axis=1)]


def _add_compression(stats, model, data, init, **options):
    """add_compression on the model and batches measure --data loads (defaults: its columns,
    128 tokens, 32 rows per batch)."""
    from boundcalc.measure.data.dataset_io import read_batches
    from boundcalc.measure.data.hf import load_task_model

    tm = load_task_model(model)
    batched = read_batches(str(data), tm, text_column="text", label_column="label",
                           max_length=128, batch_size=32)
    return add_compression(stats, tm, batched, CompressOptions(**options), data=str(data),
                           init=None if init is None else str(init))


def test_compress_delta_from_the_base_checkpoint(tiny):
    """``auto`` codes w − w_prior with the base matched across the prefix and the head at 0;
    code length and quantized risk recomputed from the decoded weights."""
    from transformers import BertForSequenceClassification

    stats = Stats(model={}, matrices=[], scalars={}, groups={}, layer_map=[], excluded=[],
                  provenance={})
    res = _add_compression(stats, tiny / "cls", tiny / "d.pt", tiny / "base", levels_grid=(8,))
    assert res.select == "delta"
    model = BertForSequenceClassification.from_pretrained(tiny / "cls").eval()
    sd = {k: v for k, v in model.state_dict().items() if v.is_floating_point()}
    base = _floats(tiny / "base" / "model.safetensors")
    centre = {k: (base[k[5:]] if k.startswith("bert.") else torch.zeros_like(v))
              for k, v in sd.items()}
    names = sorted(sd)
    delta = np.concatenate([(sd[k].double() - centre[k].double()).reshape(-1).numpy()
                            for k in names])
    dec = _decode_uniform(delta, 8)
    _, counts = np.unique(dec, return_counts=True)
    m = dec.size
    H = float(-(counts * np.log2(counts / m)).sum())
    bits = math.ceil(H - 1e-9) + 1 + len(counts) * 16 + len(counts) * math.ceil(math.log2(m + 1))
    assert res.code.total == pytest.approx(bits, abs=1e-6)
    assert res.code.symbols == m
    q = BertForSequenceClassification.from_pretrained(tiny / "cls").eval()
    new, pos = {}, 0
    for k in names:
        n = sd[k].numel()
        new[k] = (centre[k].double() + torch.from_numpy(dec[pos:pos + n]).reshape(sd[k].shape)
                  ).float()
        pos += n
    q.load_state_dict({**q.state_dict(), **new})
    data = torch.load(tiny / "d.pt")
    with torch.no_grad():
        pq = q(input_ids=data["inputs"]).logits.argmax(1)
        pf = model(input_ids=data["inputs"]).logits.argmax(1)
    assert res.error == pytest.approx(float((pq != data["targets"]).double().mean()), abs=1e-12)
    assert res.agreement == pytest.approx(float((pq == pf).double().mean()), abs=1e-12)
    comp = stats.provenance["compression"]
    assert comp["select"] == "delta" and comp["agreement"] == res.agreement
    assert comp["prior"]["head_tensors"] == ["classifier.bias", "classifier.weight"]
    # without an init, auto codes every weight (prior 0)
    res_all = _add_compression(stats, tiny / "cls", tiny / "d.pt", None, levels_grid=(8,))
    assert res_all.select == "all"


def test_cli_compress_reports_agreement(tiny):
    out = tiny / "comp.json"
    res = runner.invoke(app, ["measure", str(tiny / "cls"), "--init", str(tiny / "base"),
                              "--data", str(tiny / "d.pt"), "--draws", "0", "--hessian-probes",
                              "0", "--compress", "auto", "--levels", "4,16", "-o", str(out)])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "compression (delta)" in text and "agrees with the trained model on" in text
    assert "classifier.bias, classifier.weight" in text  # the head, named in the prior line
    doc = json.loads(out.read_text())
    assert doc["provenance"]["compression"]["select"] == "delta"
    assert doc["provenance"]["prior"]["head_tensors"] == ["classifier.bias", "classifier.weight"]


def test_a_quantized_model_that_disagrees_is_flagged():
    """One level makes every weight equal: the MLP predicts one class on ten balanced digit
    classes, so it agrees with the trained model on about a tenth of the samples."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = torch.tensor(X[:400] / 16.0, dtype=torch.float32).reshape(400, 8, 8)  # B x T x d
    y = torch.tensor(y[:400])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 24), torch.nn.ReLU(),
                                torch.nn.Linear(24, 10))
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    for _ in range(100):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(X), y).backward()
        opt.step()
    model.eval()
    res = compress(model, {"inputs": X, "targets": y},
                   CompressOptions(select="all", levels_grid=(1,)))
    # the one level is the mean weight, stored as float16: rebuild that model here
    import copy

    c = float(np.float16(torch.cat([p.detach().double().reshape(-1)
                                    for p in model.state_dict().values()]).mean().item()))
    q = copy.deepcopy(model)
    with torch.no_grad():
        for p in q.parameters():
            p.fill_(c)
        trained, quant = model(X).argmax(1), q(X).argmax(1)
    constant = res.per_level[0]
    assert res.agreement == pytest.approx(float((trained == quant).double().mean()), abs=1e-12)
    assert constant["agreement"] == res.agreement and res.agreement < 0.5
    line = res.warning()
    # called from the library: the hint names the API's keywords; inside the CLI, its flags
    assert line is not None and f"{res.changed:.1%}" in line
    assert line.endswith("code the change from the prior checkpoint (select=delta init=CKPT)")
    assert len(line.splitlines()) == 1
    with use_words(CLI_WORDS):
        assert res.warning().endswith("(--compress delta --init CKPT)")
        assert res.warning(stored=True) == line  # the stats file's text: never the CLI's words
    good = compress(model, {"inputs": X, "targets": y},
                    CompressOptions(select="all", levels_grid=(64,)))
    assert good.agreement > 0.5 and good.warning() is None


def test_minilm_classifier_with_the_pretrained_minilm_as_init(tmp_path):
    """Issue #25: a BertForSequenceClassification fine-tuned from the bundled MiniLM, measured
    with --init at the pretrained MiniLM folder (exit 6 before: no 'bert.' prefix there)."""
    import pandas as pd
    from transformers import AutoTokenizer, BertForSequenceClassification

    texts = ["a fine film", "dull and long", "great acting", "a waste of time", "loved it",
             "not good"]
    labels = [1, 0, 1, 0, 1, 0]
    folder = minilm_path()
    tok = AutoTokenizer.from_pretrained(folder)
    torch.manual_seed(0)
    model = BertForSequenceClassification.from_pretrained(folder, num_labels=2)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    enc = tok(texts, padding=True, return_tensors="pt")
    model.train()
    for _ in range(2):  # real fine-tuning steps
        opt.zero_grad()
        model(**enc, labels=torch.tensor(labels)).loss.backward()
        opt.step()
    model.eval().save_pretrained(tmp_path / "cls")
    tok.save_pretrained(tmp_path / "cls")
    pd.DataFrame({"text": texts, "label": labels}).to_csv(tmp_path / "d.csv", index=False)
    out = tmp_path / "s.json"
    res = runner.invoke(app, ["measure", str(tmp_path / "cls"), "--init", folder, "--data",
                              str(tmp_path / "d.csv"), "--draws", "0", "--hessian-probes", "0",
                              "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "classifier.bias, classifier.weight" in " ".join(res.output.split())
    doc = json.loads(out.read_text())
    w = _floats(tmp_path / "cls" / "model.safetensors")
    w0 = _floats(f"{folder}/model.safetensors")
    want = sum(_sq(w[k], w0[k[5:]]) for k in w if k.startswith("bert.")) \
        + _sq(w["classifier.weight"]) + _sq(w["classifier.bias"])
    assert doc["scalars"]["dist_init_total"]["value"] == pytest.approx(math.sqrt(want),
                                                                     rel=1e-10)
    prior = doc["provenance"]["prior"]
    assert prior["head_tensors"] == ["classifier.bias", "classifier.weight"]
    assert prior["prefix_model"] == "bert." and prior["matched_tensors"] == len(w) - 2
    assert doc["provenance"]["prior_centre"] == folder


def test_vacuous_ties_go_to_the_model_that_agrees(tiny):
    """n = 30 cannot pay for thousands of bits: every level count is vacuous (Occam-kl 1), and
    the choice goes to the level count whose model agrees most with the trained one."""
    stats = Stats(model={}, matrices=[], scalars={}, groups={}, layer_map=[], excluded=[],
                  provenance={})
    res = _add_compression(stats, tiny / "cls", tiny / "d.pt", tiny / "base",
                           levels_grid=(2, 64))
    rows = res.per_level
    assert all(r["occam_kl"] == 1.0 for r in rows)
    top = max(r["agreement"] for r in rows)
    assert rows[0]["agreement"] < top  # the first level count (the old tie winner) agrees less
    assert res.agreement == top
    assert res.levels == min((r for r in rows if r["agreement"] == top),
                             key=lambda r: r["code_bits"])["levels"]
