"""boundcalc sweep (local processes) and boundcalc correlate: manifests, results table, resume,
per-layer split, rank correlations against hand computations."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from _measure_helpers import invoke_cli, save_sharded, single_thread
from _measure_helpers import one_thread  # noqa: F401  (autouse fixture)
from _sweep_helpers import make_zoo, tiny_bert_w

from boundcalc.sweep import read_manifest, run_sweep
from boundcalc.sweep.correlate import correlate, granulated_tau, plot_correlation


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    return make_zoo(tmp_path_factory.mktemp("zoo"))


@pytest.fixture(scope="module")
def swept(zoo, tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    return run_sweep(zoo, out, workers=2), out


# ---- manifests: refused with one line before any work -------------------------------------

def _write(folder: Path, text: str) -> Path:
    p = folder / "m.csv"
    p.write_text(text)
    return p


@pytest.mark.parametrize("text,extra,needle", [
    ("path\nw32_s0\nnope\n", [], "row 2: path 'nope' does not exist"),
    ("path,hp:seed\nw32_s0,1\nw32_s0,1\n", [], "rows 1 and 2 are duplicates"),
    ("path,foo:bar\nw32_s0,1\n", [], "unknown column 'foo:bar'"),
    ("path,set:no_such_symbol\nw32_s0,1\n", [], "unknown column 'set:no_such_symbol'"),
    ("path,value\nw32_s0,1\n", [], "unknown column 'value'"),
    ("path,test_error\nw32_s0,0.1\nw32_s1,\n", ["--target", "test_error"],
     "row 2: target column 'test_error' is NaN"),
    ("path,gap\nw32_s0,0.1\n", ["--target", "test_error"], "target column 'test_error' is not"),
    ("path,set:n\nw32_s0,abc\n", [], "column 'set:n' must be a number"),
])
def test_bad_manifest_one_line_before_any_work(zoo, tmp_path, text, extra, needle):
    m = _write(zoo.parent, text)
    out = tmp_path / "never"
    code, output = invoke_cli(["sweep", str(m), "--out", str(out), *extra])
    assert code == 2, output
    lines = [l for l in output.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], output
    assert not out.exists()  # nothing was started


def test_out_that_is_a_file_is_an_output_error(zoo, tmp_path):
    """--out naming an existing file: one line, exit 9 (OutputError), the file untouched."""
    m = _write(zoo.parent, "path\nw32_s0\n")
    f = tmp_path / "a_file"
    f.write_text("keep")
    code, output = invoke_cli(["sweep", str(m), "--out", str(f)])
    assert code == 9, output
    lines = [l for l in output.splitlines() if l.strip()]
    assert len(lines) == 1 and "exists and is not a folder" in lines[0], output
    assert f.read_text() == "keep"


def test_glob_manifest(zoo):
    m = read_manifest(str(zoo.parent / "w48_s*"))
    assert [Path(r.path).name for r in m.rows] == [f"w48_s{s}" for s in range(6)]


# ---- the sweep -----------------------------------------------------------------------------

def test_table_matches_in_process_measure_and_compare(zoo, swept):
    from boundcalc.measure import measure
    from boundcalc.optimize.compare import compare_entries
    from boundcalc.registry import load_registry
    from boundcalc.stats import load_stats

    outcome, out = swept
    t = pd.read_parquet(out / "results.parquet")
    assert outcome.table.equals(t)
    assert t.equals(pd.read_csv(out / "results.csv").pipe(lambda d: d.astype(t.dtypes)))
    assert outcome.computed == 13 and outcome.cached == 0
    # every manifest column is carried; one row per checkpoint x entry
    for c in ("path", "id", "kind", "value", "delta", "parameters", "stats", "set:n",
              "hp:width", "hp:seed", "test_error"):
        assert c in t.columns
    assert sorted(t["row"].unique()) == list(range(1, 14))
    # the broken checkpoint: recorded as failed with one line, the sweep went on
    bad = t[t["row"] == 13]
    assert len(bad) == 1 and bad["status"].iloc[0] == "failed"
    assert "broken.safetensors" in bad["error"].iloc[0] and "\n" not in bad["error"].iloc[0]
    assert outcome.failed == [{"row": 13, "path": str(zoo.parent / "broken.safetensors"),
                               "error": bad["error"].iloc[0]}]
    # row 4 (w32_s3, n = 4000) against measure + compare in this process
    row = t[t["row"] == 4]
    path = str(zoo.parent / "w32_s3")
    with single_thread():
        st = measure(path, init=str(zoo.parent / "init_w32"), device="cpu", progress=False)
    assert json.loads((out / row["stats"].iloc[0]).read_text()) == json.loads(
        json.dumps(st.to_json()))
    got = compare_entries(load_stats(out / row["stats"].iloc[0]),
                          {"n": 4000.0, "emp_risk": 0.05, "sigma": 0.01},
                          load_registry())
    ok = row[row["status"] == "ok"]
    assert list(ok["id"]) == [r.id for r in got.results]
    assert list(ok["value"]) == [r.value for r in got.results]  # bit for bit
    assert {"certified", "proxy"} <= set(ok["kind"])
    assert set(row[row["status"] == "failed"]["id"]) == {f["id"] for f in got.failed}
    # a certified entry whose δ and n came through the manifest
    mc = ok[ok["id"] == "spectrum_adaptive_ours"]
    assert mc["set:n"].iloc[0] == 4000 and mc["hp:width"].iloc[0] == 32


def test_resume_recomputes_nothing_then_only_what_changed(zoo, swept, tmp_path):
    _, out = swept
    zoo2, out2 = tmp_path / "zoo", tmp_path / "out"
    shutil.copytree(zoo.parent, zoo2)
    shutil.copytree(out, out2)
    before = pd.read_parquet(out2 / "results.parquet")
    good = {Path(x).stem for x in before["stats"].dropna()}
    logs = {k: (out2 / "tasks" / f"{k}.log").read_text() for k in good}
    lines = (zoo2 / "manifest.csv").read_text().splitlines()
    (zoo2 / "manifest.csv").write_text("\n".join(lines[:-1]) + "\n")  # drop the broken row
    again = run_sweep(zoo2 / "manifest.csv", out2, workers=2)
    # same bytes in another folder: every row reused, no task started, the same numbers
    assert again.computed == 0 and again.cached == 12 and again.executor.startswith("none")
    assert {k: (out2 / "tasks" / f"{k}.log").read_text() for k in good} == logs
    cols = [c for c in before.columns if c not in ("path", "init")]  # the files moved
    assert again.table[cols].equals(before[before["row"] < 13][cols].reset_index(drop=True))
    # change one checkpoint's bytes: only that row is recomputed
    from _measure_helpers import save_safetensors

    save_safetensors(tiny_bert_w(32, 77), zoo2 / "w32_s2")
    fourth = run_sweep(zoo2 / "manifest.csv", out2, workers=1)
    assert fourth.computed == 1 and fourth.cached == 11
    assert fourth.table[fourth.table["row"] != 3][cols].reset_index(drop=True).equals(
        before[(before["row"] != 3) & (before["row"] < 13)][cols].reset_index(drop=True))
    changed = fourth.table[fourth.table["row"] == 3]
    assert not np.array_equal(changed["value"].to_numpy(),
                              before[before["row"] == 3]["value"].to_numpy())


def test_split_layers_sharded_checkpoint_equals_measure(tmp_path):
    from boundcalc.measure import measure

    model = tiny_bert_w(32, 5)
    folder = save_sharded(model, tmp_path / "sharded", n_shards=3)
    import torch

    torch.save({"inputs": torch.randint(0, 50, (6, 12), generator=torch.Generator()
                                        .manual_seed(0))}, tmp_path / "data.pt")
    (tmp_path / "m.csv").write_text("path,data\nsharded,data.pt\n")  # data passes through
    out = tmp_path / "out"
    outcome = run_sweep(tmp_path / "m.csv", out, workers=2, split_layers=True)
    assert outcome.failed == []
    stats_file = out / outcome.table["stats"].iloc[0]
    with single_thread():
        direct = measure(str(folder.resolve()), data=str((tmp_path / "data.pt").resolve()),
                         device="cpu", progress=False)
    assert "input_token_norm_max" in direct.scalars
    assert stats_file.read_text() == direct.save(tmp_path / "direct.json").read_text()
    # the work really was split: one task per layer, then the merge
    whats = [json.loads(l)["what"] for p in (out / "tasks").iterdir()
             for l in p.read_text().splitlines()]
    assert sorted(whats) == ["checkpoint", "layer 0", "layer 1"]


def test_cli_sweep_json_and_target(zoo, swept, tmp_path):
    _, out = swept
    out2 = tmp_path / "out"
    shutil.copytree(out, out2)
    code, output = invoke_cli(["sweep", str(zoo), "--out", str(out2), "--json", "--target",
                               "test_error", "--bootstrap", "50"])
    assert code == 0, output
    data = json.loads(output[output.index("{"):])
    assert data["rows"] == 13 and data["cached"] == 12 and len(data["failed"]) == 1
    assert data["computed"] == 1  # the failed row is tried again; failures are not stored
    ids = [r["id"] for r in data["correlation"]]
    assert "spectrum_adaptive_ours" in ids and (out2 / "correlation.png").stat().st_size > 10_000
    code, output = invoke_cli(["correlate", str(out2 / "results.csv"), "--target",
                               "test_error", "--bootstrap", "0"])
    assert code == 0 and "spectrum_adaptive_ours" in output and "proxy" in output, output


# ---- correlation against hand computations ------------------------------------------------

def _table(measure: list[float], target: list[float]) -> pd.DataFrame:
    a = [0, 0, 0, 1, 1, 1]
    b = [0, 1, 2, 0, 1, 2]
    return pd.DataFrame({"row": range(1, 7), "path": [f"m{i}" for i in range(6)],
                         "id": "e", "kind": "proxy", "status": "ok",
                         "log10_value": measure, "hp:a": a, "hp:b": b, "gap": target})


def test_kendall_spearman_granulated_by_hand(tmp_path):
    g = [1.0, 2, 3, 4, 5, 6]
    t = _table([1.0, 3, 2, 4, 6, 5], g)
    c = correlate(t, "gap", n_bootstrap=0).table.iloc[0]
    # 15 pairs, two discordant ((2,3) and (5,6)): τ = (13 − 2)/15
    assert c["kendall_tau"] == pytest.approx(11 / 15, abs=1e-12)
    # rank differences 0,1,−1,0,1,−1: ρ = 1 − 6·4/(6·35)
    assert c["spearman_rho"] == pytest.approx(31 / 35, abs=1e-12)
    # θ_a: 3 pairs (b fixed), all concordant → ψ_a = 1; θ_b: within a=0, μ (1,3,2) vs g (1,2,3):
    # two concordant, one discordant pair → 1/3, same for a=1 → ψ_b = 1/3; Ψ = 2/3
    assert c["psi[hp:a]"] == pytest.approx(1.0)
    assert c["psi[hp:b]"] == pytest.approx(1 / 3)
    assert c["granulated_tau"] == pytest.approx(2 / 3)
    # a measure that depends on a only: ψ_b = 0 (it does not move with b), τ-b with 6 x-ties:
    # 9 concordant pairs / sqrt((15 − 6)·15)
    c2 = correlate(_table([1.0, 1, 1, 2, 2, 2], g), "gap", n_bootstrap=0).table.iloc[0]
    assert c2["psi[hp:b]"] == 0.0 and c2["granulated_tau"] == pytest.approx(0.5)
    assert c2["kendall_tau"] == pytest.approx(9 / math.sqrt(135), abs=1e-12)
    # with a alone declared, one group of all six: 9 concordant of 15 pairs, 6 tied (sign 0)
    assert granulated_tau(_table([1.0, 1, 1, 2, 2, 2], g), "log10_value", "gap",
                          ["hp:a"]) == {"hp:a": pytest.approx(0.6), "Psi": pytest.approx(0.6)}


def test_bootstrap_interval_and_ranking_and_plot(tmp_path):
    g = [1.0, 2, 3, 4, 5, 6]
    t = pd.concat([_table(g, g), _table([6.0, 5, 4, 3, 2, 1], g).assign(id="anti",
                                                                          kind="certified")])
    corr = correlate(t, "gap", n_bootstrap=300, seed=1)
    top, bottom = corr.table.iloc[0], corr.table.iloc[1]
    assert (top["id"], top["rank"], top["kind"]) == ("e", 1, "proxy")
    assert (bottom["id"], bottom["kind"]) == ("anti", "certified")  # ranked together
    # a measure equal to the target: every resample with ≥ 2 distinct points has τ = 1
    assert top["tau_lo"] == pytest.approx(1.0) and top["tau_hi"] == pytest.approx(1.0)
    assert bottom["tau_hi"] == pytest.approx(-1.0) and bottom["kendall_tau"] == pytest.approx(-1)
    p = plot_correlation(corr, tmp_path / "c.png")
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_correlate_refuses_nan_target():
    t = _table([1.0, 2, 3, 4, 5, 6], [1.0, 2, float("nan"), 4, 5, 6])
    with pytest.raises(Exception, match="row 3 of the table is 'nan'"):
        correlate(t, "gap")
