"""certify's duplicate-row policy (issue 54, item 1) on real text with natural repeats: the
standard library's own docstrings (``studies/stdlib_text.py``), whose openings repeat across
files (an overriding method's docstring copied from its base class), labelled by package, DATA
and the held-out set split by file, so that held-out rows repeat rows of DATA as they do in a
user's corpus. ``refuse`` (the default) stops, naming the option; ``drop`` keeps one copy of
each row (chosen by the seed), drops the held-out rows that are rows of DATA, and records the
policy and the counts in split.json and report.json. Every count is computed here by hand
from the tokenizer (same ids within max_length and the same label)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from boundcalc.cli import app
from boundcalc.measure.data.dataset_io import DataError
from tests._certify_helpers import bert_config_folder, write_csv

PACKAGES = ("asyncio", "logging", "importlib")
MAX_LENGTH = 16


def _config(**over):
    from boundcalc.certify import CertifyConfig

    tiny = dict(prior_epochs=1, post_epochs=1, batch_size=32, max_length=MAX_LENGTH,
                sigmas=(0.01,), draws=1, tune_rows=8, group_draws=1, device="cpu")
    return CertifyConfig(**{**tiny, **over})


def stdlib_rows() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(DATA, held-out): the first paragraph of each docstring of three standard-library
    packages, labelled by package; every fourth file of a package held out."""
    from studies.stdlib_text import docstrings, package_of, stdlib_files, stdlib_root

    root, train, held = stdlib_root(), [], []
    files = stdlib_files(root)
    for pkg in PACKAGES:
        for j, f in enumerate(x for x in files if package_of(x) == pkg):
            for d in docstrings(root / f):
                (held if j % 4 == 3 else train).append((" ".join(d.split("\n\n")[0].split()),
                                                        pkg))
    return train, held


@pytest.fixture(scope="module")
def w(tmp_path_factory):
    from transformers import AutoTokenizer

    w = tmp_path_factory.mktemp("dup")
    base = bert_config_folder(w / "base", hidden=32, layers=1, heads=2)
    train, held = stdlib_rows()
    write_csv(w / "train.csv", train)
    write_csv(w / "heldout.csv", held)
    tok = AutoTokenizer.from_pretrained(base)

    def key(row):  # as the model reads a row: ids within MAX_LENGTH, and the label
        return tuple(tok(row[0], truncation=True, max_length=MAX_LENGTH)["input_ids"]), row[1]

    keys = [key(r) for r in train]
    held_keys = [key(r) for r in held]
    first = {}
    for i, k in enumerate(keys):
        first.setdefault(k, i)
    hand = {"n": len(train), "distinct": len(first), "m": len(held),
            "shared": sum(k in first for k in held_keys)}
    # natural repeats on both sides, and a repeat that exact text equality would not find
    # (the same first MAX_LENGTH tokens): the policy is tested on what it is for
    assert hand["n"] - hand["distinct"] > len(train) - len(set(train)) > 0, hand
    assert hand["shared"] > 0, hand
    return {"w": w, "base": base, "keys": keys, "held_keys": held_keys, "hand": hand,
            "train": train, "held": held}


def test_refuse_is_the_default_and_names_the_option(w, tmp_path):
    from boundcalc.certify import certify

    h = w["hand"]
    with pytest.raises(DataError) as info:
        certify(w["base"], w["w"] / "train.csv", tmp_path / "o", w["w"] / "heldout.csv",
                _config())
    msg = str(info.value)
    assert f"{h['n'] - h['distinct']} of its {h['n']} rows repeat an earlier row" in msg, msg
    assert msg.endswith("or give duplicates=drop to drop them before the split (seeded, "
                        "counted in report.json)"), msg
    assert not (tmp_path / "o" / "prior").exists()
    # DATA deduplicated by hand: the held-out rows that are rows of DATA are refused next,
    # naming the same option
    seen, once = set(), []
    for k, r in zip(w["keys"], w["train"]):
        if k not in seen:
            seen.add(k)
            once.append(r)
    write_csv(tmp_path / "once.csv", once)
    with pytest.raises(DataError) as info:
        certify(w["base"], tmp_path / "once.csv", tmp_path / "o", w["w"] / "heldout.csv",
                _config())
    msg = str(info.value)
    assert f"{h['shared']} of its {h['m']} rows are rows of DATA" in msg, msg
    assert "duplicates=drop" in msg


def test_cli_refusal_names_the_flag(w, tmp_path):
    res = CliRunner().invoke(app, ["certify", str(w["base"]), "--data",
                                   str(w["w"] / "train.csv"), "-o", str(tmp_path / "o"),
                                   "--max-length", str(MAX_LENGTH), "--device", "cpu"])
    assert res.exit_code == 2, res.output[-600:]
    err = res.stderr.strip()
    assert err.startswith("error: --data") and "\n" not in err, err
    assert "or give --duplicates drop to drop them" in err, err


def test_drop_keeps_one_seeded_copy_of_each_row_and_records_the_counts(w, tmp_path):
    from boundcalc.certify import certify
    from boundcalc.certify.heldout import read_jsonl

    h, cfg = w["hand"], _config(duplicates="drop", seed=3)
    res = certify(w["base"], w["w"] / "train.csv", tmp_path / "run", w["w"] / "heldout.csv",
                  cfg)
    rep = json.loads((tmp_path / "run" / "report.json").read_text())
    dup = rep["duplicates"]
    assert dup["policy"] == "drop" == res.report["duplicates"]["policy"]
    assert dup["data"] == {"rows": h["n"], "kept": h["distinct"],
                           "dropped": h["n"] - h["distinct"]}
    assert dup["test"] == {"rows": h["m"], "kept": h["m"] - h["shared"],
                           "dropped": h["shared"]}
    assert "distribution of distinct rows" in dup["certifies"]
    assert "outside DATA's rows" in dup["certifies"]
    split = json.loads((tmp_path / "run" / "split.json").read_text())
    assert split["duplicates"] == dup and split["rows"] == h["distinct"]
    rows = sorted(split["prior"]["indices"] + split["S"]["indices"])
    # row numbers of DATA's file: one per distinct row, each copy chosen as a permutation
    # seeded by 3 orders them (computed here)
    chosen = {}
    for i in np.random.default_rng(3).permutation(h["n"]).tolist():
        chosen.setdefault(w["keys"][i], i)
    assert rows == sorted(chosen.values())
    assert rep["sizes"]["prior"] + rep["sizes"]["S"] == h["distinct"]
    texts, _ = read_jsonl(tmp_path / "run" / "test.jsonl")
    data_keys = set(w["keys"])
    assert texts == [r[0] for r, k in zip(w["held"], w["held_keys"]) if k not in data_keys]
    assert rep["n_test"] == h["m"] - h["shared"]
    assert rep["certified"], rep  # the run certified something on the distinct rows


def test_keep_distinct_and_keep_unseen_by_hand():
    from boundcalc.certify.duplicates import keep_distinct, keep_unseen, record

    keys = [b"a", b"b", b"a", b"c", b"b", b"a"]
    for seed in (0, 1, 2):
        perm = np.random.default_rng(seed).permutation(6).tolist()
        want = sorted(next(i for i in perm if keys[i] == k) for k in (b"a", b"b", b"c"))
        assert keep_distinct(keys, seed).tolist() == want
    assert keep_unseen([b"c", b"d", b"a", b"e"], keys).tolist() == [1, 3]
    r = record("refuse", 10, 10, 4, 4)
    assert r["data"]["dropped"] == 0 == r["test"]["dropped"] and "rule" not in r
    assert "no row was dropped" in r["certifies"]
