"""Issue 23, reliability round three: options, counts, manifests, correlate, Ray and formulas.

One group per class of the issue (3, 7, 8, 9, 11, 12), each with checks that would have caught
it, and a fuzz test over the new surfaces (options, manifests, data files). CLI runs that could
hang run in a subprocess under a timeout, so a hang fails the test instead of stalling it.
"""

from __future__ import annotations

import csv
import json
import math
import os
import socket
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from boundcalc import plan
from boundcalc.measure.data.stages import measure_plan
from boundcalc.cli import app
from boundcalc.errors import DomainError, FormulaError, OutputError, ResourceError
from boundcalc.limits import parse_duration, set_time_budget
from boundcalc.sweep.manifest import ManifestError, read_manifest
from tests._measure_helpers import TEXT_LABELS, TEXTS, one_thread, tiny_text_checkpoints  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "TRANSFORMERS_VERBOSITY": "error", "MPLBACKEND": "Agg"}
runner = CliRunner()
FUZZ = dict(deadline=None, derandomize=True, database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``boundcalc ARGS`` in a fresh process; a hang fails the test after ``timeout`` s."""
    return subprocess.run([sys.executable, "-m", "boundcalc", *args], env=ENV, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def one_error_line(stderr: str) -> str:
    """The whole of stderr must be one ``error:`` line (no warning, no source line)."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), stderr
    assert "Traceback" not in stderr and "Warning" not in stderr
    return lines[0]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 3-class BERT (16 hidden, 1 layer) with the MiniLM tokenizer, and a 6-row CSV."""
    out = tmp_path_factory.mktemp("tiny")
    tiny_text_checkpoints(out)
    pd.DataFrame({"text": TEXTS, "label": TEXT_LABELS}).to_csv(out / "d.csv", index=False)
    return out


def measure_args(tiny: Path, *extra: str, out: Path | None = None) -> list[str]:
    return ["measure", str(tiny / "cls"), "--data", str(tiny / "d.csv"),
            "-o", str(out or tiny / "never.json"), *extra]


# ---- class 3: counts planned before the work -----------------------------------------------

def test_plan_by_hand():
    """The plan's numbers are the documented formulas, computed here by hand."""
    items = measure_plan(
        plan.Counts(sigmas=7, draws=10, hessian_probes=4, hessian_samples=3,
                    perturbation_draws=2, batch_size=2),
        plan.Sizes(rows=5, positions=11, n_params=1000, device="cpu"))
    by = {it.option.split()[0].split("=")[0]: it for it in items}  # API words: draws=10 (…)
    f = 2 * 1000 * 11  # FLOPs of one sample's forward pass
    assert by["DATA"].seconds == pytest.approx(5 * f / 1e12 + 3 * 1e-5)
    assert by["draws"].nbytes == 8 * 70 + 12 * 1000
    assert by["draws"].seconds == pytest.approx(70 * 5 * f / 1e12 + 70 * 3 * 1e-5)
    assert by["hessian_probes"].nbytes == 8 * 4 + 16 * 1000
    # one count per stage (measure.data.stages), the one the calibrated estimate reads too:
    # 4 Hessian-vector products of 4 forwards on 3 samples, in 2 calls each
    assert by["hessian_probes"].seconds == pytest.approx(4 * 4 * 3 * f / 1e12 + 4 * 2 * 1e-5)
    hvps = 20 * 2 * 4  # P̂: 20 σ × 2 draws × 4 probes
    assert by["perturbation_draws"].seconds == pytest.approx(
        hvps * 4 * 3 * f / 1e12 + hvps * 2 * 1e-5)
    [boot] = plan.bootstrap_plan(1000, 3, 2e-4)
    assert boot.nbytes == 16 * 1000 and boot.seconds == pytest.approx(0.6)


def test_plan_accepts_measure_defaults_on_minilm_within_the_default_budget():
    """MiniLM-L6 with a head (22.7 M parameters), 96 rows of 128 tokens, the defaults (7 σ ×
    20 draws, 20 Hessian probes on 256 samples): its Hessian item is one probe's working set
    (16 bytes per parameter, 0.36 GB), under the default 1 GiB budget; 20 stored probes
    (8 bytes × 16 × parameters = 2.9 GB) were once counted and refused it."""
    items = measure_plan(
        plan.Counts(sigmas=7, draws=20, hessian_probes=20, hessian_samples=256,
                    perturbation_draws=0, batch_size=32),
        plan.Sizes(rows=96, positions=128, n_params=22_714_370, groups=8, device="cpu"))
    hess = next(it for it in items if it.option.startswith("hessian_probes=20 "))
    assert hess.nbytes == 8 * 8 * 20 + 16 * 22_714_370
    plan.check(items)  # no ResourceError


@pytest.mark.parametrize("option,value", [("draws", 10**9), ("hessian_probes", 10**9),
                                          ("perturbation_draws", 10**9)])
def test_plan_refuses_huge_counts_naming_the_option(option, value):
    counts = dict(sigmas=7, draws=0, hessian_probes=0, hessian_samples=256, perturbation_draws=0)
    counts[option] = value
    with pytest.raises(ResourceError) as err:
        plan.check(measure_plan(plan.Counts(**counts)))
    assert f"{option}={value} " in str(err.value)  # the API's words (the CLI's: below)
    assert "memory_budget" in str(err.value)


def test_time_budget_option_and_its_refusal():
    assert parse_duration("90") == 90 and parse_duration("2h") == 7200
    assert parse_duration("1.5m") == 90
    for bad in ("", "-1", "1y", "0", "nan"):
        with pytest.raises(Exception, match="time budget"):
            parse_duration(bad)
    items = measure_plan(
        plan.Counts(sigmas=7, draws=1000, hessian_probes=0, hessian_samples=1,
                    perturbation_draws=0),
        plan.Sizes(rows=10_000, positions=128, n_params=20_000_000, device="cpu"))
    set_time_budget(3600.0)
    try:
        with pytest.raises(ResourceError,
                           match=r"^draws=1000 .* time budget of 60 min .* with time_budget "):
            plan.check(items)
        set_time_budget(10 * 86400.0)
        plan.check(items)  # 7000 passes of 10k rows of a 20M model: about 5 days at 10^12/s
    finally:
        set_time_budget(None)


@pytest.mark.parametrize("flag", ["--draws", "--hessian-probes", "--perturbation-draws"])
def test_cli_refuses_huge_counts_in_one_line_before_the_work(tiny, flag):
    start = time.monotonic()
    res = run_cli(*measure_args(tiny, flag, str(10**9)))
    assert res.returncode == ResourceError.exit_code, res.stderr
    line = one_error_line(res.stderr)
    assert f"{flag} 1000000000" in line and "memory budget" in line
    assert time.monotonic() - start < 90  # refused up front, not after an out-of-memory crash
    assert not (tiny / "never.json").exists()


def test_plan_estimate_is_a_lower_bound_of_the_real_run(tiny, tmp_path):
    """The plan is optimistic: what it accepts takes at least as long as it says."""
    from boundcalc.measure.data.task_measure import measure_task

    start = time.perf_counter()
    stats = measure_task(str(tiny / "cls"), str(tiny / "d.csv"), sigmas=(0.01,), draws=3,
                         hessian_probes=2, hessian_samples=4, batch_size=2)
    took = time.perf_counter() - start
    from transformers import AutoModelForSequenceClassification

    n_params = AutoModelForSequenceClassification.from_pretrained(
        tiny / "cls").num_parameters()
    est = measure_plan(
        plan.Counts(sigmas=1, draws=3, hessian_probes=2, hessian_samples=4,
                    perturbation_draws=0, batch_size=2),
        plan.Sizes(rows=6, positions=int(stats.scalars["seq_len"].value), n_params=n_params))
    assert 0 < sum(it.seconds for it in est) <= took


def test_correlate_bootstrap_refused_and_pilot_leaves_results_unchanged(tmp_path):
    from scipy.stats import kendalltau

    from boundcalc.sweep.correlate import correlate

    rng = np.random.default_rng(3)
    rows = [dict(row=i + 1, id=f"e{e}", kind="proxy", log10_value=float(rng.normal()),
                 status="ok", path=f"p{i}", test_error=0.01 * i) for e in range(3)
            for i in range(10)]
    table = tmp_path / "results.csv"
    pd.DataFrame(rows).to_csv(table, index=False)
    res = run_cli("--time-budget", "10s", "correlate", str(table), "--target", "test_error",
                  "--bootstrap", str(10**7), timeout=120)
    assert res.returncode == ResourceError.exit_code  # 3·10⁷ resamples take minutes
    assert "--bootstrap 10000000 (× 3 entries) would take at least" in one_error_line(res.stderr)
    res = runner.invoke(app, ["correlate", str(table), "--target", "test_error", "--bootstrap",
                              str(10**9)])
    assert res.exit_code == ResourceError.exit_code and "memory budget" in res.stderr
    # the pilot has its own random stream: the intervals are those of seed 0, by hand
    corr = correlate(table, "test_error", n_bootstrap=40, seed=0)
    gen = np.random.default_rng(0)
    for eid in ("e0", "e1", "e2"):  # entries in sorted order share one stream
        g = pd.DataFrame(rows).query("id == @eid")
        x, y = g["log10_value"].to_numpy(), g["test_error"].to_numpy()
        taus = []
        for _ in range(40):
            idx = gen.integers(0, len(x), len(x))
            xs, ys = x[idx], y[idx]
            taus.append(0.0 if np.ptp(xs) == 0 or np.ptp(ys) == 0
                        else kendalltau(xs, ys).statistic)
        row = corr.table.set_index("id").loc[eid]
        assert row["tau_lo"] == pytest.approx(np.percentile(taus, 2.5))
        assert row["tau_hi"] == pytest.approx(np.percentile(taus, 97.5))


@pytest.mark.parametrize("m", [3, 7, 25])
def test_vectorised_bootstrap_statistics_equal_scipy_per_resample(m):
    """The chunked τ-b and ρ (what made 10⁵ resamples take seconds) against scipy, resample by
    resample, with ties and constant rows."""
    from scipy.stats import kendalltau, spearmanr

    from boundcalc.sweep.correlate import _kendall_rows, _spearman_rows

    rng = np.random.default_rng(m)
    xs = rng.integers(0, 4, (200, m)).astype(float)
    ys = np.round(rng.normal(size=(200, m)), 1)
    ys[:20] = 1.0
    xs[20:30] = 2.0
    taus, rhos = _kendall_rows(xs, ys), _spearman_rows(xs, ys)
    for a, b, t, r in zip(xs, ys, taus, rhos):
        if np.ptp(a) == 0 or np.ptp(b) == 0:
            assert t == 0.0 and r == 0.0
        else:
            assert t == kendalltau(a, b).statistic  # same integers, same two divisions
            assert r == pytest.approx(spearmanr(a, b).statistic, abs=1e-13)


def test_manifest_bad_last_row_streamed_in_little_memory(tmp_path):
    rows = 15_000
    ckpt = tmp_path / "ckpt.safetensors"
    ckpt.write_bytes(b"x")
    path = tmp_path / "zoo.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["path", "set:n", "hp:seed", "test_error"])
        w.writerows(["ckpt.safetensors", i + 1, i % 7, 0.1] for i in range(rows - 1))
        w.writerow(["ckpt.safetensors", "abc", 1, 0.1])
    tracemalloc.start()
    try:
        with pytest.raises(ManifestError, match=f"row {rows}: column 'set:n' must be a number"):
            read_manifest(path, target="test_error", known_symbols={"n"})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # 16-byte digests, not the rows: the old reader held every row as dicts (about 1 kB each)
    assert peak < 8e6, peak  # measured: 2 MB now, 21 MB with the reader before round 3


def test_streamed_parquet_and_tsv_manifests_read_like_tables(tmp_path):
    (tmp_path / "a").write_bytes(b"x")
    (tmp_path / "b").write_bytes(b"x")
    pd.DataFrame({"path": ["a", "b"], "set:n": [10, 20], "hp:w": [1, 2],
                  "test_error": [0.1, float("nan")]}).to_parquet(tmp_path / "m.parquet")
    m = read_manifest(tmp_path / "m.parquet", known_symbols={"n"})
    assert [r.values for r in m.rows] == [{"n": 10.0}, {"n": 20.0}]
    assert m.rows[0].columns["hp:w"] == 1 and math.isnan(m.rows[1].columns["test_error"])
    with pytest.raises(ManifestError, match="row 2: target column 'test_error' is NaN"):
        read_manifest(tmp_path / "m.parquet", target="test_error", known_symbols={"n"})
    (tmp_path / "m.tsv").write_text("path\tset:n\tnote\tw\na\t5\thello\t1\nb\t6\t\t\n")
    m = read_manifest(tmp_path / "m.tsv", known_symbols={"n"})
    assert [r.columns["set:n"] for r in m.rows] == [5, 6]  # whole numbers stay ints
    assert m.rows[0].columns["note"] == "hello" and math.isnan(m.rows[1].columns["note"])
    assert m.rows[0].columns["w"] == 1.0 and math.isnan(m.rows[1].columns["w"])


def test_manifest_bigger_than_the_memory_budget_is_refused_before_reading(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("path\n" + "a\n" * 100_000)
    res = runner.invoke(app, ["--memory-budget", "1M", "sweep", str(path), "--out",
                              str(tmp_path / "o")])
    assert res.exit_code == ResourceError.exit_code and "manifest" in res.stderr
    assert not (tmp_path / "o").exists()


# ---- class 7: correlate --out follows the writers' rules ------------------------------------

@pytest.fixture(scope="module")
def results_table(tmp_path_factory):
    d = tmp_path_factory.mktemp("corr")
    rng = np.random.default_rng(0)
    pd.DataFrame([dict(row=i + 1, id=f"e{e}", kind="rate", log10_value=float(rng.normal()),
                       status="ok", path=f"p{i}", test_error=0.01 * i)
                  for e in range(2) for i in range(6)]).to_csv(d / "results.csv", index=False)
    (d / "a_file").write_text("keep me")
    return d


@pytest.mark.parametrize("where,needle", [("a_file", "is not a folder"),
                                          ("/dev/null", "is not a folder"),
                                          ("a_file/sub", "cannot create the folder"),
                                          ("/sys/kernel/boundcalc_out", "cannot create")])
def test_correlate_out_one_line_and_files_left_intact(results_table, where, needle):
    if where.startswith("/sys") and not Path("/sys/kernel").is_dir():
        pytest.skip("no /sys: no folder that even root cannot write into")
    out = where if where.startswith("/") else str(results_table / where)
    res = runner.invoke(app, ["correlate", str(results_table / "results.csv"), "--target",
                              "test_error", "--bootstrap", "5", "--out", out])
    assert res.exit_code == OutputError.exit_code, res.output
    err = res.stderr.strip()
    assert err.startswith("error:") and "\n" not in err and needle in err
    assert (results_table / "a_file").read_text() == "keep me"


def test_correlate_out_writes_both_files(results_table, tmp_path):
    res = runner.invoke(app, ["correlate", str(results_table / "results.csv"), "--target",
                              "test_error", "--bootstrap", "5", "--out", str(tmp_path / "c")])
    assert res.exit_code == 0, res.output
    table = pd.read_csv(tmp_path / "c" / "correlation.csv")
    assert sorted(table["id"]) == ["e0", "e1"]
    assert (tmp_path / "c" / "correlation.png").read_bytes()[:4] == b"\x89PNG"
    assert not list((tmp_path / "c").glob(".*tmp"))


# ---- class 8: one line, nothing ahead of it, never cut -------------------------------------

@pytest.mark.slow
def test_huge_label_gives_one_line_without_a_warning(tiny, tmp_path):
    data = tmp_path / "big.csv"
    pd.DataFrame({"text": TEXTS, "label": [0, 1, 2, 2**70, 0, 1]}).to_csv(data, index=False)
    res = run_cli("measure", str(tiny / "cls"), "--data", str(data), "--draws", "0",
                  "--hessian-probes", "0", "-o", str(tmp_path / "s.json"))
    assert res.returncode != 0
    assert "label" in one_error_line(res.stderr)  # no RuntimeWarning, no source line before it


def test_warnings_of_a_successful_command_are_one_line_each():
    import warnings

    from boundcalc.cli.app import show_warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("first\nsecond", RuntimeWarning)
        warnings.warn("first\nsecond", RuntimeWarning)
    import io

    from rich.console import Console

    buf = io.StringIO()
    show_warnings(caught, Console(file=buf, width=200))
    assert buf.getvalue().splitlines() == ["warning: first\\nsecond"]


def test_path_with_a_newline_is_quoted_not_cut(tmp_path):
    folder = tmp_path / "a\nb"
    folder.mkdir()
    res = runner.invoke(app, ["sweep", str(folder / "zoo.csv"), "--out", str(tmp_path / "o")])
    err = res.stderr.strip()
    assert res.exit_code == 2 and "\n" not in err
    assert repr(str(folder / "zoo.csv")) in err and "no such manifest file" in err


# ---- class 9: values snapped to a grid say so; far-off values are refused -----------------

@pytest.mark.parametrize("sigma,why", [("1e300", "Dziugaite"), ("0.5", "Dziugaite"),
                                       ("1e-330", "positive"), ("-0.01", "positive"),
                                       ("nan", "positive")])
def test_sigma_far_from_the_grid_is_refused(tiny, sigma, why):
    res = runner.invoke(app, measure_args(tiny, "--sigma", sigma))
    assert res.exit_code == DomainError.exit_code, res.output
    err = res.stderr.strip()
    assert "\n" not in err and "--sigma" in err and why in err, err


def test_snapped_sigma_is_reported_and_stored(tiny, tmp_path):
    out = tmp_path / "s.json"
    res = runner.invoke(app, measure_args(tiny, "--sigma", "0.0123", "--sigma", "0.01231",
                                          "--draws", "1", "--hessian-probes", "0", out=out))
    assert res.exit_code == 0, res.output
    j = round(-100 * (2 * math.log(0.0123) - math.log(0.1)))  # the grid σ_j² = 0.1·e^{−j/100}
    used = math.sqrt(0.1) * math.exp(-j / 200)
    text = " ".join(res.stdout.split())
    assert f"--sigma 0.0123 measured at grid point σ = {used:.6g} (j = {j})" in text
    assert f"--sigma 0.01231 shares grid point j = {j} with 0.0123" in text
    snaps = json.loads(out.read_text())["provenance"]["sigma_snapped"]
    assert [s["j"] for s in snaps] == [j, j]
    assert snaps[0]["used"] == pytest.approx(used, rel=1e-15) and snaps[0]["moved"] is True
    assert len(json.loads(out.read_text())["curves"]["gibbs_risk_mean"]["at"]) == 1


# ---- class 11: a Ray address where nothing listens fails in seconds ------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ray_address_with_nothing_listening_fails_fast(tmp_path):
    (tmp_path / "ck.safetensors").write_bytes(b"x")
    (tmp_path / "m.csv").write_text("path\nck.safetensors\n")
    port = free_port()
    start = time.monotonic()
    res = run_cli("sweep", str(tmp_path / "m.csv"), "--out", str(tmp_path / "o"),
                  "--ray-address", f"127.0.0.1:{port}", timeout=60)
    assert time.monotonic() - start < 45
    line = one_error_line(res.stderr)
    assert res.returncode == 2 and f"cannot reach Ray at 127.0.0.1:{port}" in line
    assert "refused" in line.lower()


# ---- class 12: sizes are counts; floor/ceiling bombs -------------------------------------

SIZE_FORMULA = """
family = "r3"
title = "round three"
description = "a size symbol used as a number"
[symbols]
G = { meaning = "number of groups", role = "size", domain = "[0, inf)" }
a = { meaning = "a value per group", role = "constant", domain = "[0, inf)", indices = ["g"] }
[[entry]]
id = "r3_count"
title = "count"
source = "test"
provenance = "[D] test"
kind = "proxy"
expression = "G + Sum(a[g], (g, 0, G - 1))"
[entry.indices]
g = "G"
"""


@pytest.fixture()
def size_formula(tmp_path):
    (tmp_path / "r3.toml").write_text(SIZE_FORMULA)
    return str(tmp_path)


@pytest.mark.parametrize("value,shown", [("2.7", "2.7"), ("-5", "-5"), ("nan", "NaN")])
def test_size_symbol_must_be_a_count_and_is_named(size_formula, value, shown):
    import boundcalc as bc
    from boundcalc.registry.registry import default_formula_dirs

    reg = bc.load_registry(default_formula_dirs([size_formula]))
    entry = reg.get("r3_count")
    assert entry.symbols["G"].domain.integer  # role = size implies whole numbers
    with pytest.raises(DomainError) as err:
        bc.evaluate(entry, {"G": float(value), "a": np.zeros(2)})
    assert "'G'" in str(err.value) and shown in str(err.value)
    assert bc.evaluate(entry, {"G": 2.0, "a": np.array([0.5, 0.25])}).value == 2.75


def test_negative_group_count_names_the_symbol_set():
    from boundcalc.optimize import optimize

    with pytest.raises(DomainError) as err:
        optimize("pac_bayes_layerwise", values={
            "G": -5, "train_loss": 0.1, "n": 100, "s": 0.5, "hess_trace": np.ones(2),
            "dist_sq": np.ones(2)})
    assert "size 'G'" in str(err.value) and "-5" in str(err.value)
    assert "index 'g'" not in str(err.value)


FLOOR_FORMULA = """
family = "r3f"
title = "rounding"
description = "floor and ceiling of constants"
[symbols]
x = { meaning = "x", role = "constant", domain = "[0, inf)" }
[[entry]]
id = "r3_floor"
title = "floor"
source = "test"
provenance = "[D] test"
kind = "proxy"
expression = "EXPR + x"
"""


@pytest.mark.parametrize("expr", ["floor(exp(10**7))", "ceiling(exp(exp(1000)))",
                                  "floor(2**60 + 0.5)"])
@pytest.mark.parametrize("command", ["show", "list"])
def test_floor_ceiling_of_huge_constants_refused_not_hung(tmp_path, expr, command):
    (tmp_path / "f.toml").write_text(FLOOR_FORMULA.replace("EXPR", expr))
    res = run_cli("--formulas", str(tmp_path), command, *(["r3_floor"] if command == "show"
                                                          else []), timeout=60)
    assert res.returncode == FormulaError.exit_code
    assert "2**53" in one_error_line(res.stderr)


def test_floor_of_a_moderate_constant_still_works(tmp_path):
    (tmp_path / "f.toml").write_text(FLOOR_FORMULA.replace("EXPR", "floor(exp(36))"))
    res = run_cli("--formulas", str(tmp_path), "evaluate", "r3_floor", "--set", "x=0",
                  "--json", timeout=60)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["value"] == float(math.floor(math.exp(36)))
    assert run_cli("--formulas", str(tmp_path), "show", "r3_floor", timeout=60).returncode == 0


# ---- fuzz over the new surfaces: options, manifests, data files -----------------------------

COUNT = st.one_of(st.integers(0, 50), st.integers(0, 10**12), st.just(10**18))


@settings(max_examples=200, **FUZZ)
@given(sigmas=st.integers(0, 30), draws=COUNT, probes=COUNT, samples=COUNT, pdraws=COUNT,
       rows=COUNT, params=COUNT, boot=COUNT)
def test_fuzz_plan_refuses_with_the_option_or_accepts(sigmas, draws, probes, samples, pdraws,
                                                      rows, params, boot):
    items = measure_plan(
        plan.Counts(sigmas=sigmas, draws=draws, hessian_probes=probes,
                    hessian_samples=samples, perturbation_draws=pdraws),
        plan.Sizes(rows=rows, n_params=params, positions=16)) + plan.bootstrap_plan(boot, 5, 1e-4)
    assert all(it.nbytes >= 0 and it.seconds >= 0 for it in items)
    try:
        plan.check(items)
    except ResourceError as exc:
        msg = str(exc)
        assert "\n" not in msg
        assert any(o in msg for o in ("draws=", "hessian_probes=", "perturbation_draws=",
                                      "n_bootstrap=", "DATA", "whole plan")), msg
    else:  # accepted: nothing over the budgets
        assert all(it.nbytes <= 2**30 + 2**40 and it.seconds <= 3600 for it in items)


CELL = st.one_of(st.text(max_size=12), st.sampled_from(["", "nan", "inf", "-1", "1e999", "2.5",
                                                        "NA", "ck.bin", "ck.bin\n", "\x1b[2J"]),
                 st.integers(-10**30, 10**30).map(str))


@settings(max_examples=150, **FUZZ)
@given(header=st.lists(st.sampled_from(["path", "init", "data", "n_heads", "set:n", "hp:w",
                                        "test_error", "set:", "x y", "value"]), min_size=1,
                       max_size=5),
       rows=st.lists(st.lists(CELL, max_size=6), max_size=6), target=st.booleans())
def test_fuzz_manifests_are_read_or_refused_in_one_line(tmp_path_factory, header, rows, target):
    d = tmp_path_factory.mktemp("fz")
    (d / "ck.bin").write_bytes(b"x")
    with open(d / "m.csv", "w", newline="", encoding="utf-8", errors="surrogatepass") as fh:
        csv.writer(fh).writerows([header, *rows])
    try:
        m = read_manifest(d / "m.csv", target="test_error" if target else None,
                          known_symbols={"n"})
    except ManifestError as exc:
        assert "\n" not in str(exc) and str(exc).isprintable(), str(exc)
    else:
        assert m.rows and all(Path(r.path).exists() for r in m.rows)
        for r in m.rows:
            assert all(math.isfinite(v) for v in r.values.values())


@pytest.mark.slow
@settings(max_examples=40, **FUZZ)
@given(labels=st.lists(st.one_of(st.integers(-2**80, 2**80), st.sampled_from(
    ["", "nan", "1.5", "x", "2", "1e308"])), min_size=6, max_size=6),
       texts=st.lists(st.text(max_size=20), min_size=6, max_size=6))
def test_fuzz_data_files_succeed_or_fail_in_one_clean_line(tiny, tmp_path_factory, labels,
                                                          texts):
    d = tmp_path_factory.mktemp("fd")
    with open(d / "d.csv", "w", newline="", encoding="utf-8", errors="surrogatepass") as fh:
        csv.writer(fh).writerows([["text", "label"], *zip(texts, labels)])
    res = runner.invoke(app, ["measure", str(tiny / "cls"), "--data", str(d / "d.csv"),
                              "--draws", "0", "--hessian-probes", "0", "-o", str(d / "s.json")])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    if res.exit_code != 0:
        err = res.stderr.strip()
        assert err.startswith("error:") and "\n" not in err and "Warning" not in err, err
        assert not (d / "s.json").exists()
