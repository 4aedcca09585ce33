"""Data files (issue 32, 7 cases; issue 31 item 2): disjointness by content, decoding errors,
duplicate headers, label ranges in the file's own values, regression heads.

``--tune-data`` rows are compared with DATA's by a hash of each row's inputs and label
(``dataset_io.row_digests``): a hard link, a byte copy or half the rows shared is the same data,
refused before any Monte Carlo, or charged as if the shape were chosen on S with
``--allow-overlap`` (the shared count recorded)."""

from __future__ import annotations

import json
import os
import shutil

import pandas as pd
import pytest

from tests._cli_helpers import invoke
from tests._measure_helpers import TEXT_LABELS, TEXTS, single_thread
from tests.reliability._rel_helpers import MEASURE, TUNE_LABELS, TUNE_TEXTS, one_line_error


def _measure_tune(tiny, tune, *extra, out=None):
    with single_thread():
        return invoke("-q", "measure", tiny / "cls", "--init", tiny / "prior", "--data",
                      tiny / "d.csv", "--tune-data", tune, *MEASURE, *extra,
                      "-o", out or (tune.parent / "never.json"))


def _not_disjoint(res, tune, shared, rows=6) -> None:
    err = one_line_error(res, 2)
    assert f"--tune-data {tune}: {shared} of its {rows} rows are rows of DATA" in err, err
    assert not (tune.parent / "never.json").exists()


def test_tune_data_as_a_hard_link_of_data(tiny, tmp_path):
    link = tmp_path / "tune.csv"
    os.link(tiny / "d.csv", link)
    _not_disjoint(_measure_tune(tiny, link), link, 6)


def test_tune_data_as_a_byte_copy_of_data(tiny, tmp_path):
    copy = tmp_path / "copy.csv"
    shutil.copyfile(tiny / "d.csv", copy)
    _not_disjoint(_measure_tune(tiny, copy), copy, 6)


def test_tune_data_sharing_half_its_rows(tiny, tmp_path):
    half = tmp_path / "half.csv"
    # three rows of DATA (reordered, in another file format's quoting) and three of its own
    pd.DataFrame({"sentence": [TEXTS[4], TUNE_TEXTS[0], TEXTS[0], TUNE_TEXTS[1], TEXTS[2],
                               TUNE_TEXTS[2]],
                  "label": [TEXT_LABELS[4], 1, TEXT_LABELS[0], 2, TEXT_LABELS[2], 0]}
                 ).to_csv(half, index=False, quoting=1)
    _not_disjoint(_measure_tune(tiny, half), half, 3)
    # the same texts with other labels are other samples: disjoint
    other = tmp_path / "relabelled.csv"
    pd.DataFrame({"sentence": TEXTS, "label": [(y + 1) % 3 for y in TEXT_LABELS]}
                 ).to_csv(other, index=False)
    from boundcalc.measure.data.dataset_io import read_batches, shared_rows
    from boundcalc.measure.data.hf import load_task_model

    tm = load_task_model(tiny / "cls")
    S = read_batches(tiny / "d.csv", tm, text_column="sentence", batch_size=4)
    assert shared_rows(S, read_batches(half, tm, text_column="sentence", batch_size=5)) == 3
    assert shared_rows(S, read_batches(other, tm, text_column="sentence")) == 0


def test_allow_overlap_charges_the_shape_and_counts_the_rows(tiny, tmp_path):
    half = tmp_path / "half.csv"
    pd.DataFrame({"sentence": TEXTS[:3] + TUNE_TEXTS[:3],
                  "label": TEXT_LABELS[:3] + TUNE_LABELS[:3]}).to_csv(half, index=False)
    out = tmp_path / "s.json"
    res = _measure_tune(tiny, half, "--allow-overlap", out=out)
    assert res.exit_code == 0, res.output[-1500:]
    rec = json.loads(out.read_text())["provenance"]["gibbs_groups"]
    assert rec["tune_shared_rows"] == 3 and rec["shape_disjoint_from_S"] is False
    assert "depend on S" in rec["shape_note"] and "3 of them rows of S" in rec["shape_chosen_on"]
    import boundcalc as bc

    r = bc.compute("pac_bayes_kl_gaussian_groups_mc", str(out))
    assert "rho" in r.union_bound_cost  # the Dziugaite–Roy weight of each ρ_g is paid


def test_init_data_sharing_rows_with_data_is_refused(tiny, tmp_path):
    res = invoke("measure", tiny / "cls", "--init", tiny / "prior", "--data", tiny / "d.csv",
                 "--init-data", tiny / "d.csv", "--text-column", "sentence", "--draws", "0",
                 "--hessian-probes", "0", "-o", tmp_path / "s.json")
    err = one_line_error(res, 2)
    assert "--init-data" in err and "6 of its 6 rows are rows of DATA" in err


def _measure_data(tiny, data, tmp_path, model=None):
    return invoke("measure", model or tiny / "cls", "--data", data, "--text-column", "sentence",
                  "--draws", "0", "--hessian-probes", "0", "-o", tmp_path / "s.json")


def test_jsonl_with_bytes_that_are_not_utf8(tiny, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"sentence": "fine", "label": 0}\n'
                    b'{"label": 1, "sentence": "caf\xe9 au lait"}\n')
    err = one_line_error(_measure_data(tiny, bad, tmp_path), 2)
    assert f"{bad}: row 2 (line 2), column 'sentence': byte 0xe9 is not UTF-8" in err


def test_csv_with_a_repeated_label_header(tiny, tmp_path):
    dup = tmp_path / "dup.csv"
    dup.write_text("sentence,label,label\nthe cat,0,1\na dog,1,0\n")
    err = one_line_error(_measure_data(tiny, dup, tmp_path), 2)
    assert f"{dup}: row 1 (the header), column 'label': the name appears 2 times" in err


def test_label_range_names_values_that_are_in_the_file(tiny, tmp_path):
    big = tmp_path / "big.csv"
    big.write_text(f"sentence,label\nthe cat,{2 ** 70}\na dog,1\n")
    err = one_line_error(_measure_data(tiny, big, tmp_path), 2)
    assert f"range over 1..{2 ** 70}" in err and "-9223372036854775808" not in err


def test_a_regression_head_is_named_before_any_work(tiny, tmp_path, monkeypatch):
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    cfg = BertConfig.from_pretrained(tiny / "cls")
    cfg.num_labels = 1
    cfg.id2label = {0: "score"}
    cfg.label2id = {"score": 0}
    BertForSequenceClassification(cfg).save_pretrained(tmp_path / "reg")
    AutoTokenizer.from_pretrained(tiny / "cls").save_pretrained(tmp_path / "reg")
    from boundcalc.measure.data import hf

    def never(*a, **k):
        raise AssertionError("the weights were read")

    monkeypatch.setattr(hf, "from_pretrained", never)
    err = one_line_error(_measure_data(tiny, tiny / "d.csv", tmp_path, tmp_path / "reg"), 6)
    assert "regression head (num_labels = 1)" in err and "not supported" in err
