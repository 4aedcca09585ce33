"""``certify``'s rows that certify model/ itself (certify/model_rows.py; issue #43 2b): with a
held-out set, the Gibbs row plus the disagreement of model/ with its posterior on the held-out
texts, recorded under ``model_rows``, recomputed here from ``stats_model.json`` and by hand,
unchanged when the held-out labels change, printed on its own line."""

from __future__ import annotations

import json
import math

import pytest

import boundcalc as bc
from boundcalc.certify.model_rows import CERTIFIES, MODEL_STATS, model_rows
from tests._certify_helpers import bert_config_folder, synthetic_rows, write_csv
from tests._reference import kl_inv_exact


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One small certify run (a 1-layer, width-32 BERT config; 160 rows, 90 held out), at the
    default batch size (None: 32 rows on a CPU; the compare step once failed on it)."""
    from boundcalc.certify import CertifyConfig, certify

    w = tmp_path_factory.mktemp("model_rows")
    base = bert_config_folder(w / "base", hidden=32, layers=1, heads=2)
    write_csv(w / "d.csv", synthetic_rows(160, 0))
    write_csv(w / "t.csv", synthetic_rows(90, 1))
    cfg = CertifyConfig(prior_epochs=4, prior_lr=3e-3, post_lr=1e-3, max_length=24,
                        sigmas=(0.01,), draws=1, tune_rows=40, tune_draws=1, group_draws=2)
    return w, cfg, certify(base, w / "d.csv", w / "out", w / "t.csv", cfg)


def _kl_inv(q: float, c: float) -> float:
    return float(kl_inv_exact(q, c, dps=30))


def test_the_row_certifies_model_itself_and_is_recomputed_by_hand(run):
    w, cfg, res = run
    out = w / "out"
    rows = res.report["model_rows"]  # model/'s test-set row first (tests/certify/test_honest)
    assert [r["id"] for r in rows] == ["test_set_kl", "disagreement_gibbs_groups_mc"]
    row = rows[1]
    assert row["certifies"] == CERTIFIES == "model/ itself (through the Gibbs posterior)"
    assert row["is_bound"] and row["label"] == "certified bound"
    assert row["delta"] == pytest.approx(0.07)
    assert row["delta_split"] == {"delta": 0.05, "delta_mc": 0.01, "delta_d": 0.01}
    assert row["rows"] == 90 and row["test_error"] == res.report["test_error"]
    # the Gibbs part is the Gibbs row of the same run; the disagreement part is kl⁻¹ by hand
    gibbs = next(c for c in res.report["certified"] if c["id"] == row["gibbs_row"])
    assert row["terms"]["gibbs_bound"] == pytest.approx(gibbs["value"], rel=1e-12)
    d = row["disagreements"] / 90
    assert row["terms"]["D_hat"] == d
    assert row["terms"]["disagreement_upper"] == pytest.approx(
        _kl_inv(d, math.log(100) / 90), rel=1e-9)
    assert row["value"] == pytest.approx(min(1.0, gibbs["value"] + _kl_inv(
        d, math.log(100) / 90)), rel=1e-9)
    assert row["value"] >= gibbs["value"]  # never tighter than the Gibbs row it starts from
    # the row is not among the Gibbs rows, and stats.json is the measure step's own
    assert row["id"] not in {c["id"] for c in res.report["certified"]}
    assert "disagreement_groups" not in json.loads((out / "stats.json").read_text())["curves"]
    st = bc.load_stats(out / MODEL_STATS)
    assert st.provenance["disagreement_groups"]["disagreements"] == row["disagreements"]
    assert bc.compute(row["id"], st).value == row["value"]
    assert json.loads((out / "report.json").read_text())["model_rows"] == rows


def test_the_held_out_labels_are_not_read(run, tmp_path):
    """The same texts with every label flipped: the same disagreement count."""
    import shutil

    w, cfg, res = run
    out = tmp_path / "out"
    shutil.copytree(w / "out", out)
    lines = [json.loads(x) for x in (out / "test.jsonl").read_text().splitlines()]
    (out / "test.jsonl").write_text("".join(json.dumps({**r, "label": 1 - r["label"]}) + "\n"
                                            for r in lines))
    again = model_rows(out, "cpu", max_length=cfg.max_length, batch_size=cfg.batch_size or 32,
                       seed=cfg.seed)
    assert again[0]["disagreements"] == res.report["model_rows"][1]["disagreements"]
    assert model_rows(tmp_path / "nothing", "cpu", max_length=24, batch_size=16, seed=0) == []


def test_the_pass_runs_with_the_data_sides_threads(run, tmp_path, monkeypatch):
    """The disagreement pass runs as every data-side pass does, with ``data_threads`` (one
    thread for this small model on a CPU): it ran with torch's default, and two threads on
    two busy cores made certify's slowest step 3× slower than with one."""
    import shutil

    import torch

    from boundcalc.measure.data import disagreement
    from boundcalc.measure.threads import data_threads

    w, cfg, res = run
    out = tmp_path / "out"
    shutil.copytree(w / "out", out)
    seen, real = [], disagreement.add_disagreement

    def spy(stats, tm, *a, **k):
        seen.append((torch.get_num_threads(), data_threads(tm.model, torch.device("cpu"))))
        return real(stats, tm, *a, **k)

    monkeypatch.setattr(disagreement, "add_disagreement", spy)
    torch.set_num_threads(2)
    try:
        model_rows(out, "cpu", max_length=cfg.max_length, batch_size=None, seed=cfg.seed)
    finally:
        torch.set_num_threads(2)
    assert len(seen) == 1 and seen[0][0] == seen[0][1] == 1


def test_printed_on_its_own_line_rounded_up(run):
    from boundcalc.cli.app import console
    from boundcalc.cli.certify_cmd import print_model_rows
    from boundcalc.rounding import upper_text

    row = run[2].report["model_rows"][1]
    with console.capture() as cap:
        print_model_rows([row])
    text = " ".join(cap.get().split())
    assert text.startswith(f"certifies {CERTIFIES}: disagreement_gibbs_groups_mc = "
                           f"{upper_text(row['value'], 4)} (certified bound, ")
    assert "δ = 0.07 = 0.05 + 0.01 + 0.01" in text
    assert f"({row['disagreements']} of 90 held-out rows, labels unused)" in text
