"""`boundcalc optimize` and `boundcalc compare` end to end: JSON contract, labels, errors,
plots and reports, stats files (hand-built and measured)."""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from boundcalc.cli import app
from boundcalc.cli.sets import parse_sets
from boundcalc.errors import BoundcalcError
from boundcalc.stats import Quantity, Stats
from test_optimize_sensitivity import spectrum_stats

CONTRACT = {"id", "kind", "value", "parameters", "terms", "delta", "assumptions", "method",
            "certified_optimum", "sensitivity", "union_bound_cost"}
MC = ["--set", "emp_risk=0.05", "--set", "KL=5000", "--set", "n=60000"]


def run(*args):
    return CliRunner().invoke(app, list(args))


def one_line_error(res) -> str:
    assert res.exit_code != 0
    assert "Traceback" not in res.output
    err = res.stderr.strip()
    assert err and len(err.splitlines()) == 1, err
    return err


def test_optimize_json_contract():
    res = run("optimize", "mcallester", *MC, "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert CONTRACT <= set(out)
    assert out["id"] == "mcallester" and out["kind"] == "certified"
    ref = 0.05 + math.sqrt((5000 + math.log(2 * math.sqrt(60000) / 0.05)) / 120000)
    assert out["value"] == pytest.approx(ref, rel=1e-12)
    assert out["certified_optimum"] is True
    assert {s["symbol"] for s in out["sensitivity"]} == {"emp_risk", "KL", "n", "delta"}
    wit = out["what_it_takes"]
    assert wit["smallest_n"]["status"] == "found" and wit["target"] == 1.0


def test_optimize_table_shows_delta_and_union_cost(registry):
    if "alquier_subgaussian" not in registry:
        pytest.skip("alquier_subgaussian is not in the registry yet")
    res = run("optimize", "alquier_subgaussian", *MC, "--set", "s=0.5", "--no-what-if")
    assert res.exit_code == 0, res.output
    text = res.stdout
    assert "certified bound" in text and "union-bound cost" in text
    assert "lam" in text and "δ" in text and "grid search" in text


def test_errors_are_one_line():
    assert "no registry entry" in one_line_error(run("optimize", "no_such_bound", *MC))
    assert "NAME=VALUE" in one_line_error(run("optimize", "mcallester", "--set", "n"))
    assert "not a number" in one_line_error(run("optimize", "mcallester", "--set", "n=abc"))
    assert "delta" in one_line_error(run("optimize", "mcallester", *MC, "--set", "delta=1.5"))
    assert "target" in one_line_error(run("optimize", "mcallester", *MC, "--target", "-1"))
    assert "stats" in one_line_error(run("optimize", "mcallester", "--stats", "/no/such.json"))
    assert "KL" in one_line_error(run("optimize", "mcallester", "--set", "n=100"))


def test_parse_sets():
    assert parse_sets(["n=1000", "C=[1, 2.5]", "x=-3e-2"]) == {"n": 1000.0, "C": [1, 2.5],
                                                                "x": -0.03}
    for bad in (["n"], ["=3"], ["n=1", "n=2"], ["n=nan"], ["C=[1, \"a\"]"], ["C=[1,"]):
        with pytest.raises(BoundcalcError):
            parse_sets(bad)


def test_spectrum_stats_file_end_to_end(tmp_path):
    path = spectrum_stats(L=3, A=2, seed=4).save(tmp_path / "stats.json")
    res = run("optimize", "spectrum_adaptive_ours", "--stats", str(path), "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["kind"] == "proxy" and out["vacuous"] is None and not out["is_bound"]
    assert np.asarray(out["parameters"]["p_QK"]).shape == (3, 2)
    assert {s["parameter"] for s in out["selections"]} == {"p_QK", "p_V", "p_in", "p_out"}
    assert "smallest_n" not in out["what_it_takes"]
    res = run("optimize", "spectrum_adaptive_ours", "--stats", str(path))
    assert res.exit_code == 0, res.output
    text = res.stdout.lower()
    assert "proxy" in text and "certified bound" not in text and "vacuous" not in text
    assert "grid value chosen per matrix" in text and "p_qk" in text


def test_plots_and_markdown_report(tmp_path):
    stats = spectrum_stats(L=3, A=2, seed=4).save(tmp_path / "stats.json")
    plots, md = tmp_path / "plots", tmp_path / "report.md"
    res = run("optimize", "spectrum_adaptive_ours", "--stats", str(stats), "--plot", str(plots),
              "--report", str(md))
    assert res.exit_code == 0, res.output
    pngs = sorted(p.name for p in plots.glob("*.png"))
    assert pngs == ["spectrum_adaptive_ours_contributions.png",
                    "spectrum_adaptive_ours_selections.png",
                    "spectrum_adaptive_ours_sensitivity.png"]
    assert all((plots / p).read_bytes()[:4] == b"\x89PNG" for p in pngs)
    text = md.read_text()
    assert "**Proxy value:" in text and "plots/spectrum_adaptive_ours_selections.png" in text
    headline = text.split("\n")[2].lower()
    assert "certified" not in headline and "not a bound" in headline
    md2 = tmp_path / "mc.md"
    res = run("optimize", "mcallester", *MC, "--plot", str(tmp_path / "p2"), "--report", str(md2))
    assert res.exit_code == 0, res.output
    assert (tmp_path / "p2" / "mcallester_value_vs.png").exists()
    text = md2.read_text()
    assert "**Certified bound:" in text and "non-vacuous" in text and "smallest n" in text


def test_latex_export(tmp_path, monkeypatch):
    tex = tmp_path / "b.tex"
    try:
        import boundcalc.report.latex  # noqa: F401
    except ImportError:
        pytest.skip("boundcalc.report.latex is not there yet")
    res = run("optimize", "mcallester", *MC, "--no-what-if", "--latex", str(tex))
    assert res.exit_code == 0, res.output
    assert "\\documentclass" in tex.read_text()
    monkeypatch.setitem(sys.modules, "boundcalc.report.latex", None)  # as if not installed
    err = one_line_error(run("optimize", "mcallester", *MC, "--no-what-if", "--latex", str(tex)))
    assert "LaTeX" in err


def _group_stats() -> Stats:
    rng = np.random.default_rng(0)
    return Stats(model={"n_layers": 4}, scalars={
        "n": Quantity(20000.0), "loss_mean": Quantity(0.05),
        "subgaussian_sigma": Quantity(0.5)},
        groups={"names": [f"layer.{i}" for i in range(4)],
                "stats": {"hessian_trace": list(rng.gamma(1, 30, 4)),
                          "dist_init_sq": list(rng.gamma(2, 10, 4))}})


def test_compare_groups_by_kind(tmp_path):
    path = _group_stats().save(tmp_path / "g.json")
    res = run("compare", "--stats", str(path), "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    ids = {r["id"]: r for r in out["certified"]}
    assert {"pac_bayes_layerwise", "pac_bayes_single_sigma"} <= set(ids)
    for r in out["certified"]:
        assert r["vacuous"] in (True, False, None)
    lw, single = ids["pac_bayes_layerwise"], ids["pac_bayes_single_sigma"]
    assert "sigma" in lw["union_bound_cost"] and "sigma" in single["union_bound_cost"]
    assert all(r["kind"] == "proxy" for r in out["proxy"])
    res = run("compare", "--stats", str(path))
    assert res.exit_code == 0, res.output
    assert "certified entries" in res.stdout


def test_compare_proxies_never_called_bounds(tmp_path):
    path = spectrum_stats(L=2, A=2, seed=1).save(tmp_path / "s.json")
    res = run("compare", "--stats", str(path))
    assert res.exit_code == 0, res.output
    assert "proxies" in res.stdout and "spectrum_adaptive_ours" in res.stdout
    for line in res.stdout.splitlines():
        if "spectrum_adaptive" in line:
            assert "certified" not in line.lower() and "vacuous" not in line.lower()
    assert "no such stats" in one_line_error(run("compare", "--stats", str(tmp_path / "x.json")))


def test_measured_bert_weights_optimize(tmp_path):
    """boundcalc.measure on BERT-named random weights (2 layers, 4 heads), then optimize."""
    torch = pytest.importorskip("torch")
    measure = pytest.importorskip("boundcalc.measure").measure
    N, F = 32, 64
    g = torch.Generator().manual_seed(0)
    sd = {"embeddings.word_embeddings.weight": torch.randn(50, N, generator=g),
          "embeddings.position_embeddings.weight": torch.randn(16, N, generator=g)}
    for layer in range(2):
        pre = f"encoder.layer.{layer}."
        for name in ("query", "key", "value"):
            sd[pre + f"attention.self.{name}.weight"] = torch.randn(N, N, generator=g) / N ** 0.5
        sd[pre + "attention.output.dense.weight"] = torch.randn(N, N, generator=g) / N ** 0.5
        sd[pre + "intermediate.dense.weight"] = torch.randn(F, N, generator=g) / N ** 0.5
        sd[pre + "output.dense.weight"] = torch.randn(N, F, generator=g) / F ** 0.5
    stats = measure(sd, n_heads=4, progress=False, raw=False)
    path = stats.save(tmp_path / "bert.json")
    res = run("optimize", "spectrum_adaptive_ours", "--stats", str(path), "--json",
              "--no-what-if")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["value"] is not None and out["value"] > 0
    assert np.asarray(out["parameters"]["p_QK"]).shape == (2, 4)
    assert out["sensitivity"] and out["certified_optimum"] is True
    parts = {p["name"]: p for p in out["contributions"]["parts"]}
    assert sum(parts[k]["value"] for k in ("B_QK", "B_V", "B_in", "B_out", "depth_term")) \
        == pytest.approx(out["value"], rel=1e-12)
