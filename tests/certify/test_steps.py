"""certify as steps (boundcalc/certify/steps.py, config.py's sub-records, pipeline.py's
CHAIN): each step reads a typed sub-record of CertifyConfig and nothing else of it, its key is
the SHA-256 of its name, that sub-record, the key before it and its inputs (computed here by
hand), the chain reuses a step only as the run folder allows, and certify's own files are read
back through boundcalc/files (a text with U+2028 survives the split files; a saved classifier
loads to the same logits). Issue 41, item 4."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from boundcalc.certify.config import (CertifyConfig, CompareSettings, MeasureSettings,
                                      PosteriorSettings, PriorSettings, SplitSettings)
from boundcalc.certify.run_folder import RunFolder
from boundcalc.certify.steps import Chain, Context, Step

SUBRECORDS = (SplitSettings, PriorSettings, PosteriorSettings, MeasureSettings, CompareSettings)


def _cfg(**kw):
    return CertifyConfig(**kw)


def test_each_sub_record_is_typed_as_the_config_declares_it():
    declared = {f.name: f.type for f in dataclasses.fields(CertifyConfig)}
    for sub in SUBRECORDS:
        assert dataclasses.is_dataclass(sub) and sub.__dataclass_params__.frozen
        for f in dataclasses.fields(sub):
            assert f.name in declared, (sub.__name__, f.name)
            assert f.type == declared[f.name], (sub.__name__, f.name, f.type)
    read = {f.name for sub in SUBRECORDS for f in dataclasses.fields(sub)}
    # the device changes where a step runs, not what it is asked; the tokenizer folder enters
    # the prior's key as its files' fingerprint (PriorStep.inputs)
    assert set(declared) - read == {"device", "tokenizer"}


def test_the_pipeline_runs_the_five_steps_in_order_each_with_its_sub_record():
    from boundcalc.certify import pipeline

    assert pipeline.STEPS == ("split", "prior", "posterior", "measure", "compare")
    assert [s.settings for s in pipeline.CHAIN.steps] == list(SUBRECORDS)
    cfg = _cfg(seed=3, draws=5, sigmas=(0.02,))
    m = MeasureSettings.of(cfg)
    assert (m.seed, m.draws, m.sigmas, m.max_length) == (3, 5, (0.02,), 64)
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.draws = 1


def _ctx(tmp_path, cfg):
    return Context("base", tmp_path / "d.csv", None, tmp_path / "run", cfg, "cpu",
                   lambda m: None)


def test_a_key_is_the_hash_of_the_name_the_sub_record_the_key_before_and_the_inputs(tmp_path):
    from boundcalc.certify.pipeline import CompareStep, PosteriorStep

    cfg = _cfg(post_epochs=3, proximal=0.5, batch_size=8, max_length=32, seed=7)
    blob = json.dumps(["posterior", {"post_epochs": 3, "post_lr": None, "proximal": 0.5,
                                     "batch_size": 8, "max_length": 32, "seed": 7},
                       "abc", None], sort_keys=True)
    hand = hashlib.sha256(blob.encode()).hexdigest()[:16]
    assert PosteriorStep().key(_ctx(tmp_path, cfg), "abc") == hand
    # a setting the step does not read leaves its key; one it reads changes it
    assert PosteriorStep().key(_ctx(tmp_path, dataclasses.replace(cfg, draws=9)), "abc") == hand
    assert PosteriorStep().key(_ctx(tmp_path, dataclasses.replace(cfg, proximal=2.0)),
                               "abc") != hand
    # the report's form (issue 53: every row a claim naming its predictor), by hand
    form = ("minimum at delta/k; test-set rows; baseline; Gibbs held-out error; every row a "
            "claim naming its predictor")
    blob = json.dumps(["compare", {"heldout_draws": 1}, "xyz", form], sort_keys=True)
    assert CompareStep().key(_ctx(tmp_path, cfg), "xyz") == \
        hashlib.sha256(blob.encode()).hexdigest()[:16]


class _Write(Step):
    """A toy step: writes ``NAME.txt`` holding the seed and the text before it."""

    settings = SplitSettings

    def __init__(self, name):
        self.name, self.calls = name, 0

    def outputs(self, ctx):
        return (f"{self.name}.txt",)

    def run(self, ctx):
        self.calls += 1
        text = f"{ctx.found.get('text', '')}{self.name}{ctx.settings(SplitSettings).seed};"
        (ctx.out / f"{self.name}.txt").write_text(text)
        return {"text": text}

    def reuse(self, ctx):
        return {"text": (ctx.out / f"{self.name}.txt").read_text()}


def test_the_chain_runs_then_reuses_and_reruns_from_a_changed_file(tmp_path):
    a, b = _Write("a"), _Write("b")
    chain = Chain((a, b))

    def go(cfg):
        ctx = _ctx(tmp_path, cfg)
        folder = RunFolder(ctx.out, chain.names, {}, lambda m: None)
        chain.run(ctx, folder)
        return ctx, folder

    ctx, folder = go(_cfg(seed=1))
    assert ctx.found["text"] == "a1;b1;" and folder.status == {"a": "ran", "b": "ran"}
    ctx, folder = go(_cfg(seed=1, draws=7))  # a setting neither reads: both reused
    assert folder.status == {"a": "reused", "b": "reused"} and (a.calls, b.calls) == (1, 1)
    assert ctx.found["text"] == "a1;b1;"
    (tmp_path / "run" / "a.txt").write_text("edited")  # not what a wrote: a and b run again
    ctx, folder = go(_cfg(seed=1))
    assert folder.status == {"a": "ran", "b": "ran"} and ctx.found["text"] == "a1;b1;"
    ctx, folder = go(_cfg(seed=2))
    assert ctx.found["text"] == "a2;b2;" and ctx.keys["a"] != ctx.keys["b"]


def test_split_rows_are_read_back_through_files_one_line_each(tmp_path):
    from boundcalc.certify.heldout import read_jsonl
    from boundcalc.certify.split import write_jsonl

    texts = ["one\u2028two", "form\x0cfeed", "plain"]
    write_jsonl(tmp_path / "s.jsonl", texts, [2, 0, 1])
    assert read_jsonl(tmp_path / "s.jsonl") == (texts, [2, 0, 1])


def test_a_saved_classifier_loads_to_the_same_logits(tmp_path):
    import torch

    from boundcalc.certify.train import build_classifier, load_trained, save_folder
    from boundcalc.measure.data.hf import load_tokenizer
    from tests._certify_helpers import bert_config_folder

    base = bert_config_folder(tmp_path / "base", hidden=16, layers=1, heads=2)
    tok = load_tokenizer(base)
    model = build_classifier(base, ["a", "b", "c"], 0, tok).eval()
    enc = tok(["a short text", "another one"], return_tensors="pt", padding=True)
    with torch.no_grad():
        want = model(**enc).logits
    save_folder(model, tok, tmp_path / "saved", {"step": "test"})
    again, tok2 = load_trained(tmp_path / "saved")
    with torch.no_grad():
        got = again.eval()(**tok2(["a short text", "another one"], return_tensors="pt",
                                  padding=True)).logits
    assert torch.equal(got, want) and got.dtype == torch.float32
    # the mark lists every file certify wrote there (a user's file beside them is refused)
    mark = json.loads((tmp_path / "saved" / "certify_step.json").read_text())
    assert mark == {"step": "test", "files": sorted(
        p.name for p in (tmp_path / "saved").iterdir() if p.name != "certify_step.json")}
