"""Reliability round five, certify's inputs (issue 42, items 1, 4, 5, 6): every hostile input
refused in one line with its exit code before anything slow runs (no ``prior/`` written, no
training), through :func:`boundcalc.certify.certify` itself and a few times through the CLI;
grouped by input class: special files, overlaps, the base, labels. The training callback of
the API (item 8): tests/certify/test_callback.py."""

from __future__ import annotations

import json
import math
import os
import shutil

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from boundcalc.cli import app
from boundcalc.errors import BoundcalcError, CheckpointError
from boundcalc.measure.data.dataset_io import DataError
from tests._certify_helpers import bert_config_folder, synthetic_rows, write_csv
from tests._measure_helpers import minilm_path
from tests.reliability.test_hostile_round3_files import within  # fail, never hang

runner = CliRunner()
# the tiny options of the issue (F), as the CLI spells them
F = ["--epochs", "2", "--post-epochs", "1", "--batch-size", "16", "--max-length", "16",
     "--draws", "1", "--tune-rows", "8", "--device", "cpu"]


def _config(**over):
    from boundcalc.certify import CertifyConfig

    tiny = dict(prior_epochs=2, post_epochs=1, batch_size=16, max_length=16, draws=1,
                tune_rows=8, device="cpu")
    return CertifyConfig(**{**tiny, **over})


def refused(base, data, out, test_data=None, error=BoundcalcError, **over) -> str:
    """certify's one-line refusal (of class ``error``), with nothing trained or written."""
    from boundcalc.certify import certify

    with within(60), pytest.raises(error) as info:
        certify(base, data, out, test_data, _config(**over))
    msg = str(info.value)
    assert "\n" not in msg and msg
    assert not (out / "prior").exists() and not (out / "S.jsonl").exists()
    return msg


def cli_error(args, code: int) -> str:
    with within(90):
        res = runner.invoke(app, ["certify", *map(str, args), *F])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == code, (res.exit_code, res.output[-800:])
    err = res.stderr.strip()
    assert err.startswith("error:") and "\n" not in err and "Traceback" not in res.output, err
    return err


@pytest.fixture(scope="module")
def w(tmp_path_factory):
    """A 1-layer width-32 BERT config folder with MiniLM's tokenizer, 64 labelled rows."""
    w = tmp_path_factory.mktemp("pre")
    bert_config_folder(w / "base", hidden=32, layers=1, heads=2)
    rows = synthetic_rows(64, 0)
    assert len(set(rows)) == 64  # every row once (checked here, not assumed)
    write_csv(w / "d.csv", rows)
    write_csv(w / "t.csv", synthetic_rows(24, 1))
    return w


def _edit_config(folder, **fields):
    p = folder / "config.json"
    p.write_text(json.dumps({**json.loads(p.read_text()), **fields}))
    return folder


def _copy_base(w, tmp_path, name="b"):
    return shutil.copytree(w / "base", tmp_path / name)


# ---- (1) special files: refused by their type, never hashed or read ------------------------

def test_device_fifo_and_link_as_data_or_test_data_are_refused_at_once(w, tmp_path):
    os.mkfifo(tmp_path / "fifo.csv")
    os.symlink("/dev/zero", tmp_path / "zero.csv")
    cases = [("/dev/zero", None, "device"), (tmp_path / "fifo.csv", None, "FIFO"),
             (tmp_path / "zero.csv", None, "device"), (w / "d.csv", tmp_path / "fifo.csv", "FIFO"),
             (w / "d.csv", "/dev/zero", "device")]
    for i, (data, test, kind) in enumerate(cases):
        msg = refused(w / "base", data, tmp_path / f"o{i}", test, DataError)
        assert f"{data if test is None else test}: " in msg and f"is a {kind}" in msg, msg
        assert "a regular file is required" in msg
    assert not (tmp_path / "o0").exists()  # refused before the output folder was made


def test_cli_dev_zero_and_a_fifo_return_at_once_exit_2(w, tmp_path):
    err = cli_error([w / "base", "--data", "/dev/zero", "-o", tmp_path / "o"], 2)
    assert err == ("error: /dev/zero: --data file is a device; a regular file is required")
    os.mkfifo(tmp_path / "t.csv")
    err = cli_error([w / "base", "--data", w / "d.csv", "--test-data", tmp_path / "t.csv",
                     "-o", tmp_path / "o"], 2)
    assert "--test-data file is a FIFO" in err


# ---- (4) overlaps, by content as the model reads a row --------------------------------------

def test_test_data_sharing_rows_with_data_is_refused(w, tmp_path):
    rows = synthetic_rows(64, 0)
    shutil.copy(w / "d.csv", tmp_path / "copy.csv")
    write_csv(tmp_path / "half.csv", rows[::2])  # rows 0, 2, 4, ... of DATA
    for test, n, first in ((w / "d.csv", 64, 0), (tmp_path / "copy.csv", 64, 0),
                           (tmp_path / "half.csv", 32, 0)):
        msg = refused(w / "base", w / "d.csv", tmp_path / "o", test, DataError)
        assert msg.startswith(f"test_data={test}: {n} of its {n} rows are rows of DATA"), msg
        assert f"its row {first} is DATA's row {first}" in msg
    # one shared row among held-out ones: found, named by its row numbers in both files
    write_csv(tmp_path / "one.csv", synthetic_rows(5, 1) + [rows[40]])
    msg = refused(w / "base", w / "d.csv", tmp_path / "o", tmp_path / "one.csv", DataError)
    assert "1 of its 6 rows are rows of DATA" in msg and "its row 5 is DATA's row 40" in msg


def test_repeated_rows_of_data_are_refused_in_certify_words(w, tmp_path):
    rows = synthetic_rows(40, 2)
    write_csv(tmp_path / "twice.csv", rows + rows)
    msg = refused(w / "base", tmp_path / "twice.csv", tmp_path / "o", None, DataError)
    assert "40 of its 80 rows repeat an earlier row" in msg and "row 40 repeats row 0" in msg
    assert "tune" not in msg and "overlap" not in msg  # measure's words, which certify lacks
    # as the model reads it: MiniLM's tokenizer is uncased, so a row in capitals is the same
    # row; the same text with another label is another row (not refused by this check)
    upper = [(t.upper(), y) for t, y in rows[:1]]
    write_csv(tmp_path / "case.csv", rows + upper)
    msg = refused(w / "base", tmp_path / "case.csv", tmp_path / "o", None, DataError)
    assert "1 of its 41 rows repeat" in msg and "row 40 repeats row 0" in msg
    from boundcalc.certify.preflight import check_rows
    from boundcalc.measure.data.hf import load_tokenizer

    tok = load_tokenizer(w / "base")
    texts = [t for t, _ in rows]
    check_rows(texts + texts[:1], [y for _, y in rows] + ["space"], "d", tok, 16, None)


def test_cli_repeated_rows_refused_before_training_naming_its_own_option(w, tmp_path):
    rows = synthetic_rows(40, 2)
    write_csv(tmp_path / "twice.csv", rows + rows)
    err = cli_error([w / "base", "--data", tmp_path / "twice.csv", "-o", tmp_path / "o"], 2)
    assert err.startswith(f"error: --data {tmp_path / 'twice.csv'}: 40 of its 80 rows repeat")
    assert "--max-length 16" in err
    assert "--tune-data" not in err and "--allow-overlap" not in err
    assert not (tmp_path / "o" / "prior").exists()


# ---- (5) the base, checked before training -------------------------------------------------

def test_base_configs_transformers_cannot_build_as_a_classifier(w, tmp_path):
    b = _edit_config(_copy_base(w, tmp_path, "unknown"), model_type="no_such_model")
    msg = refused(b, w / "d.csv", tmp_path / "o", None, CheckpointError)
    assert msg.startswith(f"{b / 'config.json'}: model_type 'no_such_model' is not a model "
                          "type transformers")
    from transformers import ViTConfig

    vit = tmp_path / "vit"
    ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2).save_pretrained(vit)
    for f in ("tokenizer.json", "tokenizer_config.json"):  # a tokenizer beside an image model
        shutil.copy(w / "base" / f, vit / f)
    msg = refused(vit, w / "d.csv", tmp_path / "o", None, CheckpointError)
    assert "model_type 'vit' has no sequence-classification model" in msg
    b = bert_config_folder(tmp_path / "h32", hidden=32, layers=1, heads=3)
    msg = refused(b, w / "d.csv", tmp_path / "o", None, CheckpointError)
    assert "the config does not build a bert model" in msg and "(3)" in msg
    assert CheckpointError.exit_code == 6


def test_tokenizer_ids_beyond_the_vocabulary(w, tmp_path):
    from transformers import AutoTokenizer

    top = max(AutoTokenizer.from_pretrained(minilm_path()).get_vocab().values())
    b = _edit_config(_copy_base(w, tmp_path), vocab_size=100)
    msg = refused(b, w / "d.csv", tmp_path / "o", None, CheckpointError)
    assert msg == (f"{b}: the base's tokenizer gives token ids up to {top}, beyond the base's "
                   "vocabulary of 100 ids (0..99): a text would reach an embedding row that "
                   "does not exist; give the tokenizer the base was made with")
    bare = tmp_path / "bare"  # a config alone, the tokenizer through the option
    bare.mkdir()
    shutil.copy(b / "config.json", bare / "config.json")
    msg = refused(bare, w / "d.csv", tmp_path / "o", None, CheckpointError,
                  tokenizer=minilm_path())
    assert f"the tokenizer of tokenizer={minilm_path()} gives token ids up to {top}" in msg
    # the vocabulary that holds every id passes
    from boundcalc.certify.preflight import preflight

    _edit_config(bare, vocab_size=top + 1)
    preflight(bare, w / "d.csv", None, _config(tokenizer=minilm_path()))


def test_fewer_positions_than_max_length(w, tmp_path):
    from boundcalc.certify.preflight import preflight

    b = _edit_config(_copy_base(w, tmp_path), max_position_embeddings=8)
    msg = refused(b, w / "d.csv", tmp_path / "o", None, CheckpointError)
    assert msg == (f"{b / 'config.json'}: the base takes at most 8 positions, fewer than "
                   "max_length=16: give max_length=8 or less")
    preflight(b, w / "d.csv", None, _config(max_length=8))  # 8 fit
    err = cli_error([b, "--data", w / "d.csv", "-o", tmp_path / "o"], 6)
    assert "fewer than --max-length 16: give --max-length 8 or less" in err


@pytest.fixture(scope="module")
def pretrained(w):
    """The base with weights (a BERT encoder saved by transformers)."""
    from transformers import BertConfig, BertModel

    b = shutil.copytree(w / "base", w / "pretrained")
    torch.manual_seed(0)
    BertModel(BertConfig.from_pretrained(b)).save_pretrained(b)
    return b


def test_unreadable_or_non_finite_weights_name_the_base(w, pretrained, tmp_path):
    from boundcalc.certify.preflight import preflight

    preflight(pretrained, w / "d.csv", None, _config())  # the intact base passes
    t = shutil.copytree(pretrained, tmp_path / "truncated")
    size = (t / "model.safetensors").stat().st_size
    with open(t / "model.safetensors", "r+b") as fh:
        fh.truncate(size // 2)
    msg = refused(t, w / "d.csv", tmp_path / "o", None, CheckpointError)
    assert msg.startswith(f"{t / 'model.safetensors'}: not a readable safetensors file")
    from safetensors.torch import load_file, save_file

    n = shutil.copytree(pretrained, tmp_path / "nan")
    sd = load_file(n / "model.safetensors")
    name = sorted(sd)[3]
    sd[name].view(-1)[0] = float("nan")
    save_file(sd, n / "model.safetensors", metadata={"format": "pt"})
    msg = refused(n, w / "d.csv", tmp_path / "o", None, CheckpointError)
    assert msg == f"{n / 'model.safetensors'}: tensor '{name}' holds NaN or infinite values"


class _Canary:
    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_a_pickle_that_runs_code_is_refused_cleanly_and_never_runs(w, pretrained, tmp_path):
    e = shutil.copytree(pretrained, tmp_path / "evil")
    (e / "model.safetensors").unlink()
    canary = tmp_path / "ran"
    torch.save({"embeddings.word_embeddings.weight": _Canary(canary)}, e / "pytorch_model.bin")
    msg = refused(e, w / "d.csv", tmp_path / "o", None, CheckpointError)
    assert msg.startswith(f"{e / 'pytorch_model.bin'}: refused to load: ") and not canary.exists()
    # beside a model.safetensors the pickle is never opened: safetensors first
    shutil.copy(pretrained / "model.safetensors", e / "model.safetensors")
    from boundcalc.certify.preflight import preflight

    preflight(e, w / "d.csv", None, _config())
    assert not canary.exists()


# ---- (6) labels: one scalar class each, by measure's rule -----------------------------------

def _jsonl(path, rows):
    path.write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in rows))
    return path


def test_labels_that_are_no_class_are_refused_naming_the_row(w, tmp_path):
    rows = synthetic_rows(30, 3)
    # a JSON column holds one kind of value (the reader refuses a number beside a list), so a
    # list, an object or a boolean fills the column; 1.5 stands among integers at row 7
    columns = (([["sport"]] * 30, 0, "a list (['sport'])"), ([{"c": 1}] * 30, 0,
                                                              "an object ({'c': 1})"),
               ([i % 2 for i in range(7)] + [1.5] + [1] * 22, 7, "a fractional number (1.5)"),
               ([i % 2 == 1 for i in range(30)], 0, "a boolean (False"))
    for labels, row, what in columns:
        data = _jsonl(tmp_path / "d.jsonl", [(t, y) for (t, _), y in zip(rows, labels)])
        msg = refused(w / "base", data, tmp_path / "o", None, DataError)
        assert msg.startswith(f"{data}: labels 'label' row {row} is {what}"), msg
        assert msg.endswith("a label is one class: an integer or a non-empty name (text)")
    # an empty CSV cell is no class "": refused (in DATA and in the held-out set)
    cells = [(t, "" if i == 11 else y) for i, (t, y) in enumerate(rows)]
    write_csv(tmp_path / "e.csv", cells)
    msg = refused(w / "base", tmp_path / "e.csv", tmp_path / "o", None, DataError)
    assert msg.startswith(f"{tmp_path / 'e.csv'}: labels 'label' row 11 is empty;")
    msg = refused(w / "base", w / "d.csv", tmp_path / "o", tmp_path / "e.csv", DataError)
    assert "e.csv: labels 'label' row 11 is empty" in msg


def test_the_label_rule_by_hand_and_in_measure():
    import numpy as np

    from boundcalc.measure.data.labels import check_class_labels, label_problem

    assert [label_problem(v) for v in (0, 7, 2.0, np.int64(3), np.float32(1.0), "a", "0")] \
        == [None] * 7
    assert label_problem(None) == label_problem(float("nan")) == label_problem("") == "empty"
    assert label_problem(float("inf")) == "not finite (inf)"
    assert label_problem(-0.5) == "a fractional number (-0.5)"
    assert label_problem([1]) == "a list ([1])" and label_problem({}) == "an object ({})"
    assert label_problem(False).startswith("a boolean (False")
    with pytest.raises(DataError, match=r"^s: labels 'y' row 2 is a list \(\[0, 1\]\); a label"):
        check_class_labels([0, 1, [0, 1], 1.5], "s", "y", DataError)
    # measure's reader applies the same rule to a column of mixed objects
    from boundcalc.measure.data.dataset_io import _labels

    with pytest.raises(DataError, match=r"d.jsonl: labels 'label' row 1 is an object"):
        _labels([0, {"a": 1}, 1], 3, None, "d.jsonl", "label")


# ---- (3) the size of S with duplicates drop; DATA read once ---------------------------------

def test_with_duplicates_drop_the_size_of_S_counts_the_rows_the_split_keeps(w, tmp_path):
    """The floor check reads the rows the split divides: with duplicates drop, DATA's distinct
    rows. 40 distinct rows written 3 times: at a prior fraction where S of all 120 rows would
    pass (floor by hand 1 − (δ/(2√n))^(1/n) < 1 − 1/K) and S of the 40 kept would not, the run
    is refused before anything trains, naming the 40 rows and the 80 repeats dropped; with the
    default policy the repeats themselves are refused (check_rows)."""
    from boundcalc.certify.preflight import check_bound_sample
    from boundcalc.certify.split import seeded_split

    rows = synthetic_rows(40, 2)
    labels = [y for _, y in rows]
    level = 1 - 1 / len(set(labels))

    def floor(n):
        return 1 - (0.05 / (2 * math.sqrt(n))) ** (1 / n)

    def s_size(n, f):
        return len(seeded_split(n, f, 0)[1])

    frac = next(f for f in np.arange(0.5, 0.99, 0.005)
                if floor(s_size(40, f)) >= level > floor(s_size(120, f)))
    n_kept = s_size(40, frac)
    cfg = _config(prior_fraction=float(frac), seed=0, duplicates="drop")
    check_bound_sample(labels * 3, cfg)  # every row counted: S would pass
    with pytest.raises(DataError, match=f"S {n_kept} of DATA's 40 rows \\(its 120 less 80 "):
        check_bound_sample(labels * 3, cfg, rows=40)
    write_csv(tmp_path / "thrice.csv", rows * 3)
    msg = refused(w / "base", tmp_path / "thrice.csv", tmp_path / "o", None, DataError,
                  prior_fraction=float(frac), seed=0, duplicates="drop")
    assert f"leaves the bound sample S {n_kept} of DATA's 40 rows (its 120 less 80 repeats" \
        in msg, msg


def test_rows_read_once_give_the_keys_and_lengths_of_each_check(w):
    """RowsRead: one tokenization gives row_keys' and text_keys' digests and each row's token
    count (truncated at max_length), and the distinct rows duplicates drop keeps."""
    from boundcalc.certify.preflight import RowsRead, row_keys, text_keys
    from boundcalc.measure.data.hf import load_tokenizer

    tok = load_tokenizer(w / "base")
    rows = synthetic_rows(12, 3)
    texts = [t for t, _ in rows] + [rows[0][0], rows[1][0].upper()]
    labels = [y for _, y in rows] + [rows[0][1], "other"]
    read = RowsRead.of(texts, labels, tok, 8)
    assert read.row_keys == row_keys(texts, labels, tok, 8)
    assert read.text_keys == text_keys(texts, tok, 8)
    assert read.lengths == [len(tok(t, truncation=True, max_length=8)["input_ids"])
                            for t in texts]
    assert read.distinct == 13  # row 12 repeats row 0; row 13 is row 1's text, another label
