"""Hostile inputs, round two (issue 13): one test group per class of problem.

(a) honest numbers: total δ, certified values finite and in range, hand-set grid parameters,
    one rule for hand-chosen σ, best admissible grid point, strict stats files;
(b) formula bombs and hostile checkpoints end in one line, never a traceback or a hang;
(c) the memory budget, checked before allocating, also under ``prlimit --as``;
(d) output files (devices, full disks, symlinks, bad names) and terminal escapes.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import boundcalc as bc
from boundcalc.cli import app
from boundcalc.errors import (BoundcalcError, CheckpointError, DomainError, FormulaError, OutputError,
                              ResourceError, StatsError)
from boundcalc.evaluation import Prepared
from boundcalc.limits import check_allocation, set_memory_budget
from boundcalc.files import loads_json, read_limited
from boundcalc.measure.io import open_source
from boundcalc.registry.loader import load_file
from boundcalc.files.atomic_write import write_text_atomic
from boundcalc.stats import load_stats

REG = bc.load_registry()
ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "MPLBACKEND": "Agg"}
FAST = dict(deadline=None, derandomize=True, database=None, max_examples=60,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
runner = CliRunner()


def cli(*args: str):
    return runner.invoke(app, list(args))


def one_line_error(res, code: int | None = None) -> str:
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert res.exit_code != 0, res.output
    if code is not None:
        assert res.exit_code == code, res.output
    err = res.stderr.strip()
    assert err.startswith("error:") and "\n" not in err, err
    assert "Traceback" not in res.output
    return err


def formula_dir(tmp_path: Path, expr: str, extra: str = "", params: str = "") -> str:
    d = tmp_path / "f"
    d.mkdir(exist_ok=True)
    (d / "t.toml").write_text(f'''family = "t"
[[entry]]
id = "t"
title = "t"
source = "s"
provenance = "p"
kind = "certified"
expression = "{expr}"
[entry.symbols]
x = {{ meaning = "x", role = "measured", domain = "[0, inf)", default = 1 }}
delta = {{ meaning = "d", role = "confidence", domain = "(0, 1)", default = 0.05 }}
{extra}
{params}
''')
    return str(d)


# ==== (a) honesty of the numbers ================================================================

CERTIFIED = [e for e in REG if e.kind == "certified"]


@settings(**FAST)
@given(data=st.data())
def test_total_delta_at_least_one_is_never_certified(data):
    """Property over every certified entry with confidence symbols: whatever δs are spent, the
    label says certified only when their sum is < 1."""
    entry = data.draw(st.sampled_from([e for e in CERTIFIED
                                       if any(s.role == "confidence"
                                              for s in e.symbols.values())]))
    conf = [s.name for s in entry.symbols.values() if s.role == "confidence"]
    deltas = {c: data.draw(st.floats(0.01, 0.99)) for c in conf}
    from boundcalc.result import Result

    r = Result(id=entry.id, title="", family="", kind="certified", variant=None, value=0.5,
               log10_value=math.log10(0.5), estimated=False, estimated_inputs=[], parameters={},
               parameter_choice={}, terms={}, delta=sum(deltas.values()),
               delta_effective=None, union_bound_cost={}, assumptions=[], hidden_constants={},
               inputs={})
    total = sum(deltas.values())
    assert r.is_bound == (total < 1)
    assert ("certified" in r.label) == (total < 1)
    assert r.to_json()["is_bound"] == (total < 1)


def test_monte_carlo_entry_with_delta_sum_above_one_is_not_a_bound():
    for eid in ("pac_bayes_kl_mc",):
        res = cli("evaluate", eid, "--set", "delta=0.9", "--set", "delta_mc=0.9", "--set",
                  "KL=10", "--set", "n=1000", "--set", "E_hat=0.1", "--set", "k=1000", "--json")
        doc = json.loads(res.stdout)
        assert doc["delta"] == pytest.approx(1.8)
        assert doc["is_bound"] is False and "not a bound" in doc["label"]
        res = cli("evaluate", eid, "--set", "delta=0.04", "--set", "delta_mc=0.01", "--set",
                  "KL=10", "--set", "n=1000", "--set", "E_hat=0.1", "--set", "k=1000", "--json")
        doc = json.loads(res.stdout)
        assert doc["delta"] == pytest.approx(0.05) and doc["is_bound"] is True


@pytest.mark.parametrize("expr,why", [("-x - 1", "outside its output range"),
                                      ("log(x - 1)", "not a finite number")])
def test_certified_value_outside_range_or_not_finite_is_an_error(tmp_path, expr, why):
    res = cli("--formulas", formula_dir(tmp_path, expr), "evaluate", "t")
    assert why in one_line_error(res, DomainError.exit_code)


@pytest.mark.parametrize("expr", ["floor(exp(10**7))", "ceiling(exp(exp(100)))",
                                  "floor(exp(10**4))"])
def test_floor_ceiling_bombs_are_refused_when_the_file_is_read(tmp_path, expr):
    # round 3: refused at parse (their digits would hang `show`), no longer at evaluation
    res = cli("--formulas", formula_dir(tmp_path, expr), "evaluate", "t")
    assert "2**53" in one_line_error(res, FormulaError.exit_code)


def test_huge_but_finite_certified_value_is_kept(tmp_path):
    res = cli("--formulas", formula_dir(tmp_path, "exp(1000*x)"), "evaluate", "t", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["log10_value"] == pytest.approx(1000 / math.log(10))


def test_hand_set_grid_parameter_is_used_exactly_or_refused():
    base = ["evaluate", "catoni", "--set", "emp_risk=0.1", "--set", "KL=10", "--set", "n=1000"]
    assert "not on its declared grid" in one_line_error(cli(*base, "--set", "C=0.123456"))
    grid = Prepared(REG.get("catoni"), {"emp_risk": 0.1, "KL": 10, "n": 1000}).grids["C"]
    g = float(grid[7])
    doc = json.loads(cli(*base, "--set", f"C={g!r}", "--json").stdout)
    assert doc["parameters"]["C"] == pytest.approx(g, rel=1e-12)
    assert doc["union_bound_cost"]["C"] == pytest.approx(math.log(len(grid)))
    # hand computation of Catoni's bound at that C, δ·e^{-ln|grid|}
    d = 0.05 / len(grid)
    expect = (1 - math.exp(-g * 0.1 - (10 + math.log(1 / d)) / 1000)) / (1 - math.exp(-g))
    assert doc["value"] == pytest.approx(expect, rel=1e-9)
    fixed = json.loads(cli(*base, "--set", "C=0.123456", "--fixed", "C", "--json").stdout)
    assert fixed["parameters"]["C"] == 0.123456 and fixed["union_bound_cost"]["C"] == 0.0


def test_one_rule_for_hand_chosen_sigma_single_and_per_group():
    """Hand-set σ on the Dziugaite–Roy grid costs 2 ln j + ln(π²/6) in both entries (per group
    in the layerwise one); off the grid it is refused unless declared fixed, then free."""
    one = dict(train_loss=0.1, n=10000.0, s=0.5, hess_trace=[150.0], dist_sq=[15.0])
    two = dict(one, hess_trace=[100.0, 50.0], dist_sq=[10.0, 5.0])
    c, b, j = 0.1, 100.0, 250
    sig = math.sqrt(c * math.exp(-j / b))
    cost = 2 * math.log(j) + math.log(math.pi ** 2 / 6)
    single = bc.api.compute("pac_bayes_single_sigma", None, one, {"sigma": sig})
    per = bc.api.compute("pac_bayes_layerwise", None, {**one, "sigma": [sig]})
    assert single.union_bound_cost["sigma"] == pytest.approx(cost)
    assert per.union_bound_cost["sigma"] == pytest.approx(cost)   # one group: the same charge
    assert per.value == pytest.approx(single.value, rel=1e-9)
    both = bc.api.compute("pac_bayes_layerwise", None, {**two, "sigma": [sig, sig]})
    assert both.union_bound_cost["sigma"] == pytest.approx(2 * cost)
    with pytest.raises(DomainError, match="fixed"):
        bc.api.compute("pac_bayes_single_sigma", None, two, {"sigma": 0.01})
    with pytest.raises(DomainError, match="fixed"):
        bc.api.compute("pac_bayes_layerwise", None, {**two, "sigma": [0.01, 0.02]})
    r1 = bc.api.compute("pac_bayes_single_sigma", None, two, {"sigma": 0.01}, fixed=["sigma"])
    r2 = bc.api.compute("pac_bayes_layerwise", None, {**two, "sigma": [0.01, 0.01]},
                        fixed=["sigma"])
    for r in (r1, r2):
        assert r.union_bound_cost.get("sigma", 0.0) == 0.0
    assert r1.value == pytest.approx(r2.value, rel=1e-9)


@settings(**{**FAST, "max_examples": 2})
@given(d1=st.floats(0.01, 0.98), d2=st.floats(0.01, 0.98))
def test_evaluate_is_monotone_in_delta(d1, d2):
    lo, hi = sorted((d1, d2))
    vals = dict(train_loss=0.1, n=10000.0, s=0.5, hess_trace=[100.0, 50.0],
                dist_sq=[10.0, 5.0])
    e = REG.get("pac_bayes_single_sigma")
    assert bc.evaluate(e, {**vals, "delta": hi}).value <= \
        bc.evaluate(e, {**vals, "delta": lo}).value * (1 + 1e-12)


def _stats_doc(**matrix):
    return {"schema": "boundcalc.stats", "version": 1, "model": {}, "scalars": {"n": 10},
            "matrices": [{"type": "QK", "layer": 0, "head": 0, "shape": [4, 4], **matrix}]}


def test_stats_duplicate_keys_and_inconsistent_norms_are_errors(tmp_path):
    p = tmp_path / "s.json"
    p.write_text('{"schema": "boundcalc.stats", "version": 1, "scalars": {"n": 1, "n": 2}}')
    with pytest.raises(StatsError, match="appears twice"):
        load_stats(p)
    p.write_text('{"schema": "boundcalc.stats", "scalars": {}, "scalars": {"n": 2}}')
    with pytest.raises(StatsError, match="appears twice"):
        load_stats(p)
    bad = [dict(stats={"spectral": 1.0}, singular_values=[2.0, 1.0]),
           dict(stats={"spectral": 3.0, "frobenius": 2.0}),
           dict(stats={"frobenius": 1.0}, singular_values=[1.0, 1.0]),
           dict(stats={"rank": 9.0})]
    for m in bad:
        p.write_text(json.dumps(_stats_doc(**m)))
        with pytest.raises(StatsError, match="inconsistent"):
            load_stats(p)
    p.write_text(json.dumps(_stats_doc(stats={"spectral": 2.0, "frobenius": math.sqrt(5)},
                                       singular_values=[2.0, 1.0])))
    assert load_stats(p).matrices[0].stats["spectral"] == 2.0


@settings(**FAST)
@given(keys=st.lists(st.text(min_size=1, max_size=5), min_size=2, max_size=6))
def test_json_objects_with_repeated_keys_are_refused(keys):
    text = "{" + ", ".join(f"{json.dumps(k)}: {i}" for i, k in enumerate(keys)) + "}"
    if len(set(keys)) < len(keys):
        with pytest.raises(StatsError, match="appears twice"):
            loads_json(text, "s.json", StatsError)
    else:
        assert loads_json(text, "s.json", StatsError) == {k: i for i, k in enumerate(keys)}


# ==== (b) never a traceback, never a hang ======================================================

GRID = '[entry.parameters]\n{n} = {{ choice = "grid", domain = "(0, inf)", grid = {g} }}\n'


@pytest.mark.parametrize("expr,params,extra,code", [
    ("x*p", GRID.format(n="p", g="{ range = [1, 1e300, 1] }"), "", 4),
    ("x*p", GRID.format(n="p", g="{ range = [1, 1e300, 1e-300] }"), "", 4),
    ("GridMin(GridMin(x*p*q, p), q)",
     GRID.format(n="p", g="{ geomspace = [1, 2, 20000] }")
     + 'q = { choice = "grid", domain = "(0, inf)", grid = { geomspace = [1, 2, 20000] } }', "",
     8),
    ("Sum(C[l], (l, 0, L - 1))", "[entry.indices]\nl = \"L\"",
     'L = { meaning = "L", role = "size", domain = "[1, inf)", integer = true }\n'
     'C = { meaning = "C", role = "measured", domain = "[0, inf)", indices = ["l"] }', None),
])
def test_formula_bombs_are_refused_with_one_line(tmp_path, expr, params, extra, code):
    res = cli("--formulas", formula_dir(tmp_path, expr, extra, params), "evaluate", "t")
    one_line_error(res, code)


def test_formula_files_that_are_fifos_devices_or_dotted_key_bombs(tmp_path):
    d = tmp_path / "g"
    d.mkdir()
    os.mkfifo(d / "fifo.toml")
    with pytest.raises(BoundcalcError, match="FIFO"):
        load_file(d / "fifo.toml")
    os.symlink("/dev/zero", d / "zero.toml")
    with pytest.raises(BoundcalcError, match="device"):
        load_file(d / "zero.toml")
    (d / "dots.toml").write_text("[x]\n" + ".".join(["a"] * 20000) + " = 1\n")
    with pytest.raises(BoundcalcError, match="dotted"):
        load_file(d / "dots.toml")
    one_line_error(cli("--formulas", str(d), "list"))


def _bert(n: int = 8) -> dict[str, torch.Tensor]:
    sd = {}
    for layer in range(2):
        for k in ("query", "key", "value"):
            sd[f"encoder.layer.{layer}.attention.self.{k}.weight"] = torch.randn(n, n)
        sd[f"encoder.layer.{layer}.attention.output.dense.weight"] = torch.randn(n, n)
        sd[f"encoder.layer.{layer}.intermediate.dense.weight"] = torch.randn(2 * n, n)
        sd[f"encoder.layer.{layer}.output.dense.weight"] = torch.randn(n, 2 * n)
    return sd


Q0 = "encoder.layer.0.attention.self.query.weight"


def _hostile_checkpoints() -> dict[str, tuple[dict, str]]:
    torch.manual_seed(0)
    out = {}
    sd = _bert()
    sd[Q0] = torch.randn(8, 8).to_sparse()
    out["sparse"] = (sd, "sparse")
    sd = {k: v.double() for k, v in _bert().items()}
    sd[Q0] = torch.full((8, 8), 1e100, dtype=torch.float64)
    out["1e100"] = (sd, "magnitude")
    sd = _bert()
    sd[Q0] = torch.full((8, 8), float("inf"))
    out["inf"] = (sd, "NaN or infinite")
    sd = _bert()
    sd["encoder.layer.0.intermediate.dense.weight"] = torch.randn(1).expand(16, 8)
    out["stride0"] = (sd, "stride-0")
    sd = _bert()
    sd[Q0] = torch.zeros(0, 8)
    out["zero_rows"] = (sd, f"'{Q0}': role q of layer 0 has shape [0, 8] (out, in): an empty")
    sd = _bert()
    sd["encoder.layer." + "9" * 5000 + ".attention.self.query.weight"] = torch.randn(8, 8)
    out["digits"] = (sd, "layer index")
    return out


@pytest.mark.parametrize("case", list(_hostile_checkpoints()))
def test_hostile_checkpoints_end_in_one_line(tmp_path, case):
    sd, needle = _hostile_checkpoints()[case]
    path = tmp_path / f"{case}.pt"
    torch.save(sd, path)
    res = cli("measure", str(path), "--n-heads", "2", "-o", str(tmp_path / "o.json"))
    assert needle in one_line_error(res)


@pytest.mark.parametrize("fill", [0.0, 1e-40])
def test_float8_zero_and_subnormal_weights_measure_or_refuse_cleanly(tmp_path, fill):
    sd = {k: torch.full_like(v, fill) for k, v in _bert().items()}
    sd[Q0] = torch.randn(8, 8).to(torch.float8_e4m3fn)
    torch.save(sd, tmp_path / "m.pt")
    res = cli("measure", str(tmp_path / "m.pt"), "--n-heads", "2", "-o",
              str(tmp_path / "o.json"))
    if res.exit_code:
        one_line_error(res)
    else:
        assert load_stats(tmp_path / "o.json").model


def test_hostile_model_folders(tmp_path):
    from safetensors.torch import save_file

    for name, make in (("deep", lambda p: p.write_text("[" * 100000 + "]" * 100000)),
                       ("loop", lambda p: os.symlink(p.name, p)),
                       ("huge", lambda p: p.open("wb").truncate(3 << 30)),
                       ("dup", lambda p: p.write_text('{"a": 1, "a": 2}'))):
        d = tmp_path / name
        d.mkdir()
        save_file({k: v.contiguous() for k, v in _bert().items()}, str(d / "model.safetensors"))
        make(d / "config.json")
        with pytest.raises(CheckpointError):
            open_source(str(d))
    d = tmp_path / "index"
    d.mkdir()
    (d / "model.safetensors.index.json").write_text('{"weight_map": {"w": "loop.safetensors"}}')
    os.symlink("loop.safetensors", d / "loop.safetensors")
    with pytest.raises(CheckpointError):
        open_source(str(d))


def test_zip_bombs_are_refused_before_inflating(tmp_path):
    set_memory_budget(32 << 20)  # a small budget keeps the bomb small and the test fast
    for name in ("bomb.pt", "bomb.npz"):
        p = tmp_path / name
        with zipfile.ZipFile(p, "w", compression=zipfile.ZIP_DEFLATED) as z:
            with z.open("archive/data/0", "w", force_zip64=True) as f:
                chunk = b"\0" * (1 << 24)
                for _ in range(4):  # 64 MiB declared, 64 KiB on disk
                    f.write(chunk)
        if name.endswith(".pt"):
            with pytest.raises(BoundcalcError, match="memory budget|zip bomb"):
                open_source(str(p))
        else:
            from boundcalc.measure.samples import load_data

            with pytest.raises(BoundcalcError, match="memory budget|zip bomb"):
                load_data(str(p))
    set_memory_budget(None)


def test_python_api_huge_integer_input_is_a_boundcalc_error():
    with pytest.raises(BoundcalcError):
        bc.evaluate(REG.get("mcallester"), {"emp_risk": 0.1, "KL": 10 ** 400, "n": 1000})


@pytest.mark.parametrize("G", ["3e8", "1e12", "-5"])
def test_optimize_layerwise_absurd_group_count(G):
    res = cli("optimize", "pac_bayes_layerwise", "--set", f"G={G}", "--set", "train_loss=0.1",
              "--set", "n=1000", "--set", "s=0.5", "--no-what-if")
    one_line_error(res)


# ==== (c) memory budget under prlimit ==========================================================

WORST = [
    ["evaluate", "t"],                                   # two 2·10⁴ GridMin axes
    ["optimize", "pac_bayes_layerwise", "--set", "G=3e8", "--set", "train_loss=0.1",
     "--set", "n=1000", "--set", "s=0.5", "--no-what-if"],
]


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="prlimit not installed")
def test_worst_cases_stay_within_an_address_space_limit(tmp_path):
    """Each worst case runs in a fresh process limited to 3 GB of address space (torch and
    SymPy take ~1.5 GB of it just to import): it must end in one line, not a MemoryError."""
    fdir = formula_dir(tmp_path, "GridMin(GridMin(x*p*q, p), q)", "",
                       GRID.format(n="p", g="{ geomspace = [1, 2, 20000] }")
                       + 'q = { choice = "grid", domain = "(0, inf)", '
                         'grid = { geomspace = [1, 2, 20000] } }')
    big = tmp_path / "big.json"
    big.write_bytes(b'{"schema": "boundcalc.stats", "scalars": {"x": [' + b"0," * (40 << 20)
                    + b"0]}}")
    cases = [["--formulas", fdir, *WORST[0]], ["evaluate", "mcallester", "--stats", str(big)]]
    for args in cases:
        proc = subprocess.run(["prlimit", "--as=3000000000", sys.executable, "-m", "boundcalc",
                               *args], capture_output=True, text=True, env=ENV, timeout=120)
        err = proc.stderr.strip()
        assert proc.returncode != 0 and err.startswith("error:") and "\n" not in err, err
        assert "memory budget" in err or "more than" in err, err


def test_budget_option_and_environment(monkeypatch):
    set_memory_budget(None)
    monkeypatch.setenv("BOUNDCALC_MEMORY_BUDGET", "1K")
    with pytest.raises(ResourceError, match="memory budget of"):
        check_allocation(2048, "x")
    monkeypatch.delenv("BOUNDCALC_MEMORY_BUDGET")
    check_allocation(2048, "x")
    res = cli("--memory-budget", "1K", "evaluate", "spectrum_adaptive_ours", "--set", "L=2000",
              "--set", "A=2000")
    one_line_error(res)
    set_memory_budget(None)


# ==== (d) files and terminals ==================================================================

MC = ["mcallester", "--set", "emp_risk=0.05", "--set", "KL=5000", "--set", "n=60000"]


def test_output_to_bad_places_is_one_line_and_keeps_existing_files(tmp_path):
    (tmp_path / "afile").write_text("keep")
    for target in (str(tmp_path / "afile" / "x.tex"), str(tmp_path / ("a" * 300 + ".tex")),
                   "", str(tmp_path), "/dev/full"):
        one_line_error(cli("latex", *MC, "-o", target))
    assert (tmp_path / "afile").read_text() == "keep"
    one_line_error(cli("optimize", *MC, "--plot", str(tmp_path / "afile"), "--no-what-if"))
    assert (tmp_path / "afile").read_text() == "keep"


def test_devices_and_symlinks_are_written_in_place(tmp_path):
    null = tmp_path / "null"
    try:
        os.mknod(null, 0o666 | __import__("stat").S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod needs root")
    res = cli("latex", *MC, "-o", str(null))
    assert res.exit_code == 0, res.output
    assert __import__("stat").S_ISCHR(os.stat(null).st_mode)  # still the device
    real = tmp_path / "real.tex"
    real.write_text("old")
    link = tmp_path / "link.tex"
    os.symlink(real.name, link)
    assert cli("latex", *MC, "-o", str(link)).exit_code == 0
    assert link.is_symlink() and "documentclass" in real.read_text()
    full = tmp_path / "full"
    os.mknod(full, 0o666 | __import__("stat").S_IFCHR, os.makedev(1, 7))
    with pytest.raises(OutputError, match="no space left"):
        write_text_atomic(full, "x")


def test_read_limited_never_reads_past_its_limit(tmp_path):
    p = tmp_path / "big"
    p.write_bytes(b"x" * 1000)
    with pytest.raises(StatsError, match="limit"):
        read_limited(p, 999, StatsError)
    assert read_limited(p, 1000, StatsError) == b"x" * 1000


@settings(**{**FAST, "max_examples": 40})
@given(text=st.lists(st.sampled_from(["\x1b[2J", "\x1b]0;t\x07", "\x9b", "[bold]", "[/]",
                                      "[link=x]", "a", "\r", "\x08"]),
                     min_size=1, max_size=8).map("".join))
def test_terminal_escapes_from_data_never_reach_the_terminal(text):
    res = cli("evaluate", text)
    err = one_line_error(res)
    assert not any(c in err for c in "\x1b\x07\x9b\r\x08"), repr(err)
