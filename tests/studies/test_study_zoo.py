"""examples/zoo.py at a tiny grid: trains real models on digits, sweeps, ranks, reports."""

from __future__ import annotations

import csv

import pandas as pd
import pytest
import torch

from _study_helpers import check_png, figure_refs, load_example


@pytest.mark.slow
def test_study_zoo_small_grid(tmp_path):
    out = tmp_path / "zoo"
    rc = load_example("zoo").main([
        "--out", str(out), "--widths", "16", "--depths", "1", "--sizes", "100", "300",
        "--seeds", "0", "1", "--epochs", "3", "--bootstrap", "50", "--workers", "2"])
    assert rc == 0
    rows = list(csv.DictReader(open(out / "zoo" / "manifest.csv")))
    assert len(rows) == 4
    assert {"hp:width", "hp:depth", "hp:n_train", "hp:seed", "test_error", "set:n"} <= set(rows[0])
    # the recorded test error is the saved model's error on the fixed test split
    from safetensors.torch import load_file

    from studies.zoo import DigitsTransformer, load_digits_split

    r = rows[3]
    model = DigitsTransformer(16, 1, 2)
    model.load_state_dict(load_file(str(out / "zoo" / r["path"])))
    model.eval()
    _, _, xt, yt = load_digits_split(597)
    with torch.no_grad():
        err = float((model(xt).argmax(dim=1) != yt).float().mean())
    assert abs(err - float(r["test_error"])) < 1e-6
    table = pd.read_parquet(out / "sweep" / "results.parquet")
    assert sorted(table["row"].unique()) == [1, 2, 3, 4] and set(table["status"]) == {"ok"}
    assert {"spectrum_adaptive_ours", "gaussian_kl_isotropic"} <= set(table["id"])
    corr = pd.read_csv(out / "correlation_test_error.csv")
    assert set(corr["id"]) == set(table["id"])
    report = (out / "report.md").read_text()
    assert f"best-ranked entry is `{corr['id'].iloc[0]}`" in report
    refs = figure_refs(report)
    assert refs == ["correlation_test_error.png", "correlation_gap.png"]
    for f in refs:
        check_png(out / f, min_bytes=5_000)
