"""One label policy (issue 44 item 2): class names through the model's id2label, or class
indices; the same CSV read by ``measure`` and by ``certify`` gives the same classes."""

from __future__ import annotations

import types

import numpy as np
import pandas as pd
import pytest

from boundcalc.measure.data.labels import encode_labels, model_class_names
from tests._measure_helpers import TEXTS, tiny_text_checkpoints


class Bad(Exception):
    pass


def cfg(names):
    return types.SimpleNamespace(id2label=dict(enumerate(names)))


def enc(values, names, k=None):
    k = k if k is not None else len(names)
    y, rule = encode_labels(np.asarray(values), k, cfg(names), "Head", "d.csv", "label", Bad)
    return y.tolist(), rule["rule"]


def test_names_are_read_through_id2label():
    assert enc(["sports", "arts", "world", "arts"], ["arts", "sports", "world"]) == \
        ([1, 0, 2, 0], "class names (the model's id2label)")
    # object arrays of text (Parquet, pandas) the same
    arr = np.array(["world", "arts"], dtype=object)
    y, _ = encode_labels(arr, 3, cfg(["arts", "sports", "world"]), "H", "d", "label", Bad)
    assert y.tolist() == [2, 0]


def test_integers_are_indices_and_names_only_where_indices_cannot_be():
    assert enc([0, 2, 1], ["a", "b", "c"]) == ([0, 2, 1], "class indices")
    assert enc([1.0, 0.0], ["a", "b"]) == ([1, 0], "class indices")
    # a model certify trained on labels 2, 5, 7 (id2label {0: '2', 1: '5', 2: '7'}) reading the
    # raw file: 5 and 7 cannot be indices of 3 classes, every value is a class name
    assert enc([7, 2, 5, 5], ["2", "5", "7"]) == ([2, 0, 1, 1], "class names (the model's id2label)")
    # and the file certify wrote for S (indices 0..2, '0' is no name): indices
    assert enc([0, 1, 2], ["2", "5", "7"]) == ([0, 1, 2], "class indices")
    # both readings apply and differ: refused, never a silently wrong class
    with pytest.raises(Bad, match=r"read both as class indices and as the class names"):
        enc([1, 2], ["1", "2", "5"])
    # both readings apply and agree (certify on labels 0 and 1): fine
    assert enc([1, 0], ["0", "1"]) == ([1, 0], "class indices")


def test_refusals_name_the_culprit():
    with pytest.raises(Bad, match=r"d.csv: labels 'label' include 'poetry', which the head of "
                                  r"Head does not name \(its classes: arts, sports\)"):
        enc(["arts", "poetry"], ["arts", "sports"])
    with pytest.raises(Bad, match=r"does not name its classes"):
        enc(["arts", "sports"], ["LABEL_0", "LABEL_1"])
    with pytest.raises(Bad, match=r"row 1 is empty"):
        enc(["arts", "", "sports"], ["arts", "sports"])
    with pytest.raises(Bad, match=r"range over 0..3, but the head of Head has 3 classes"):
        enc([0, 3], ["a", "b", "c"])
    with pytest.raises(Bad, match=r"fractional or non-finite"):
        enc([0.0, 1.5], ["a", "b"])
    with pytest.raises(Bad, match=r"mixed values"):
        encode_labels(np.array(["a", 1], dtype=object), 2, cfg(["a", "b"]), "H", "d", "label", Bad)


def test_model_class_names():
    assert model_class_names(cfg(["x", "y"]), 2) == {"x": 0, "y": 1}
    assert model_class_names(cfg(["LABEL_0", "LABEL_1"]), 2) is None  # transformers' defaults
    assert model_class_names(cfg(["x", "x"]), 2) is None  # one name twice names nothing
    assert model_class_names(cfg(["x", "y"]), 3) is None  # not one name per class
    assert model_class_names(types.SimpleNamespace(), 2) is None


def test_measure_reads_a_string_label_csv_as_certify_names_its_classes(tmp_path):
    """certify's split names the classes in sorted order and writes them as the head's
    id2label; measure reads the user's string CSV through that id2label: same classes."""
    from boundcalc.certify.split import class_names, encode
    from boundcalc.measure.data.dataset_io import read_batches
    from boundcalc.measure.data.hf import load_task_model

    tok, bert_cfg = tiny_text_checkpoints(tmp_path)
    words = ["world", "arts", "sports", "arts", "world", "sports"]
    classes = class_names(words)
    assert classes == ["arts", "sports", "world"]
    from transformers import BertForSequenceClassification
    bert_cfg.id2label = {i: c for i, c in enumerate(classes)}
    bert_cfg.label2id = {c: i for i, c in enumerate(classes)}
    BertForSequenceClassification(bert_cfg).save_pretrained(tmp_path / "named")
    tok.save_pretrained(tmp_path / "named")
    pd.DataFrame({"text": TEXTS, "label": words}).to_csv(tmp_path / "d.csv", index=False)
    tm = load_task_model(tmp_path / "named")
    b = read_batches(tmp_path / "d.csv", tm, batch_size=4)
    got = np.concatenate([y.numpy() for _, y in b.batches])
    assert got.tolist() == encode(words, classes, "d.csv").tolist() == [2, 0, 1, 0, 2, 1]
    assert b.labels["rule"] == "class names (the model's id2label)"
    assert b.labels["classes"] == {"arts": 0, "sports": 1, "world": 2}
