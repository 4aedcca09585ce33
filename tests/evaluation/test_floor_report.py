"""The floor beside every certified number (issue 22.4) and what a new user reads (issue 25):
zero-complexity floors and the breakdown checked against mpmath, vacuity against the trivial
predictor, --test-error, the 'lacks' column in the user's terms, help at 80 columns, the
promises of optimize and compare, and the source notes `show` points to."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from rich.cells import cell_len
from typer.testing import CliRunner

import boundcalc as bc
from boundcalc.cli import app
from boundcalc.registry.schema import PriorSpec
from boundcalc.stats import Curve, Quantity, Stats
from tests._reference import kl_inv_exact
from tests._rounding_helpers import down_text

from tests._cli_helpers import BOX, invoke, runner, words  # noqa: F401


def _kl_inv(q: float, c: float) -> float:
    return float(kl_inv_exact(q, c))


# ---- the floor and the breakdown, by hand --------------------------------------------------

def test_pac_bayes_kl_floor_and_breakdown_match_mpmath():
    e, kl, n, d = 0.05, 5000.0, 60000.0, 0.05
    r = bc.compute("pac_bayes_kl", values={"emp_risk": e, "KL": kl, "n": n})
    f = r.floor
    assert f["risk_symbol"] == "emp_risk" and f["emp_risk"] == e and f["delta"] == d
    assert f["plain"] == pytest.approx(_kl_inv(e, math.log(1 / d) / n), rel=1e-9)
    maurer = math.log(2 * math.sqrt(n) / d)
    assert f["own"] == pytest.approx(_kl_inv(e, maurer / n), rel=1e-9)
    assert f["plain"] < f["own"] < r.value
    assert f["budget_nats"]["KL"] == kl and f["budget_nats"]["confidence"] == pytest.approx(maurer)
    # the effect of a piece: the value minus the value without it
    assert f["effects"]["KL"] == pytest.approx(r.value - _kl_inv(e, maurer / n), rel=1e-6)
    assert f["dominant"] == "KL"


def test_occam_floor_uses_its_own_ln_one_over_delta():
    r = bc.compute("occam_kl", values={"emp_risk": 0.1, "code_bits": 800, "n": 5000})
    f = r.floor
    assert f["own"] == f["plain"] == pytest.approx(_kl_inv(0.1, math.log(20) / 5000), rel=1e-9)
    assert f["budget_nats"]["divergence"] == pytest.approx(800 * math.log(2))


def test_entries_that_are_not_a_kl_inverse_have_no_floor():
    r = bc.compute("mcallester", values={"emp_risk": 0.05, "KL": 5000, "n": 60000})
    assert r.floor is None and r.to_json()["floor"] is None


def test_monte_carlo_entry_floor_uses_the_measured_mean_and_the_breakdown_adds_up():
    reg = bc.load_registry()
    entry = reg.get("pac_bayes_kl_gaussian_mc")
    j = 552
    sigma = float(entry.parameters["sigma"].prior.value(j))
    E, k, dmc, dist, n, d = 0.125, 100.0, 0.01, 0.249, 700.0, 0.05
    r = bc.evaluate(entry, {"E_hat": E, "k": k, "delta_mc": dmc, "dist_init": dist, "n": n},
                    params={"sigma": sigma})
    f = r.floor
    cost = PriorSpec.cost(j)
    upper = _kl_inv(E, math.log(2 / dmc) / k)
    kl = dist ** 2 / (2 * sigma ** 2)
    conf = math.log(2 * math.sqrt(n) / d)
    assert f["emp_risk"] == E and f["mc_upper"] == pytest.approx(upper, rel=1e-9)
    assert f["plain"] == pytest.approx(_kl_inv(E, math.log(1 / d) / n), rel=1e-9)
    assert f["own"] == pytest.approx(_kl_inv(E, conf / n), rel=1e-9)
    assert f["budget_nats"]["KL_gauss"] == pytest.approx(kl, rel=1e-9)
    assert f["budget_nats"]["grid cost"] == pytest.approx(cost, rel=1e-9)
    assert r.value == pytest.approx(_kl_inv(upper, (kl + conf + cost) / n), rel=1e-7)
    assert f["effects"]["Monte Carlo"] == pytest.approx(
        r.value - _kl_inv(E, (kl + conf + cost) / n), rel=1e-5)
    assert f["effects"]["grid cost"] == pytest.approx(
        r.value - _kl_inv(upper, (kl + conf) / n), rel=1e-5)
    assert f["dominant"] == max(f["effects"], key=f["effects"].get)


def test_subspace_breakdown_names_the_whole_kl_and_the_grid_apart():
    """The subspace row's budget has three complexity addends: the two of KL_subspace (the
    variance and the mean parts) and ln J. The breakdown sums the first two under KL_subspace
    and keeps ln J apart (before, all three shared one name and only ln J was shown)."""
    entry = bc.load_registry().get("pac_bayes_kl_gaussian_subspace_mc")
    E, k, n, dim, dist, sq, sp, J = 0.03, 6000.0, 1000.0, 100, 0.01, 0.04, 0.05, 6
    r = bc.evaluate(entry, {"E_hat": E, "k": k, "n": n, "dim": dim, "dist_sq": dist,
                            "sigma_post": sq, "sigma_prior": sp, "prior_grid": J})
    f = r.floor
    rho2 = (sq / sp) ** 2
    kl = dist / (2 * sp ** 2) + dim * (rho2 - 1 - math.log(rho2)) / 2  # by hand: 6.3144 nats
    assert f["budget_nats"]["KL_subspace"] == pytest.approx(kl, rel=1e-9)
    assert f["budget_nats"]["log(prior_grid)"] == pytest.approx(math.log(J), rel=1e-12)
    conf = math.log(2 * math.sqrt(n) / 0.05)
    upper = _kl_inv(E, math.log(2 / 0.01) / k)
    assert r.value == pytest.approx(_kl_inv(upper, (kl + math.log(J) + conf) / n), rel=1e-7)
    assert f["effects"]["KL_subspace"] == pytest.approx(
        r.value - _kl_inv(upper, (math.log(J) + conf) / n), rel=1e-5)


# ---- vacuity against the trivial predictor, --test-error ------------------------------------

def _two_class_stats(tmp_path: Path, emp_risk: float) -> Path:
    st = Stats(model={"n_layers": 1, "n_heads": 1, "hidden": 4},
               scalars={"n": Quantity(1000.0), "emp_risk": Quantity(emp_risk),
                        "majority_error": Quantity(0.45)},
               provenance={"n_classes": 2})
    return st.save(tmp_path / f"two_class_{emp_risk}.json")


def test_a_bound_above_the_trivial_predictor_is_vacuous(tmp_path):
    """Issue 25.2: 'vacuous: no' for a 0-1 bound of 0.51 on a two-class task whose majority
    class errs 0.45 (guessing: 0.5)."""
    path = _two_class_stats(tmp_path, 0.4)
    res = invoke("compare", "--stats", path, "--set", "KL=20", "--json")
    assert res.exit_code == 0, res.output
    row = next(r for r in json.loads(res.stdout)["certified"] if r["id"] == "pac_bayes_kl")
    assert 0.45 < row["value"] < 1 and row["is_bound"]
    assert row["vacuous"] is True
    assert "0.45" in row["vacuous_against"] and "majority" in row["vacuous_against"]
    assert row["trivial"]["guess"] == 0.5 and row["trivial"]["n_classes"] == 2
    text = invoke("compare", "--stats", path, "--set", "KL=20")
    flat = " ".join(text.stdout.split())
    assert "always the majority class of S errs 0.45" in flat and "K = 2 errs 0.5" in flat
    panel = invoke("optimize", "pac_bayes_kl", "--stats", path, "--set", "KL=20", "--no-what-if")
    assert ("yes (≥ 0.45, the error of always answering the majority class of S)"
            in " ".join(BOX.sub(" ", panel.stdout).split()))

    low = _two_class_stats(tmp_path, 0.02)
    row = next(r for r in json.loads(invoke("compare", "--stats", low, "--set", "KL=20",
                                            "--json").stdout)["certified"]
               if r["id"] == "pac_bayes_kl")
    assert row["value"] < 0.45 and row["vacuous"] is False


def test_test_error_gives_the_gap_everywhere(tmp_path):
    path = _two_class_stats(tmp_path, 0.02)
    res = invoke("compare", "--stats", path, "--set", "KL=20", "--test-error", "0.03", "--json")
    row = next(r for r in json.loads(res.stdout)["certified"] if r["id"] == "pac_bayes_kl")
    assert row["test_error"] == 0.03 and row["gap"] == pytest.approx(row["value"] - 0.03)
    text = invoke("compare", "--stats", path, "--set", "KL=20", "--test-error", "0.03")
    assert "gap" in text.stdout and f"{row['gap']:.3g}" in text.stdout
    assert max(cell_len(ln) for ln in text.stdout.splitlines()) <= 80
    opt = json.loads(invoke("optimize", "pac_bayes_kl", "--stats", path, "--set", "KL=20",
                            "--test-error", "0.03", "--no-what-if", "--json").stdout)
    assert opt["gap"] == pytest.approx(opt["value"] - 0.03)
    bad = invoke("compare", "--stats", path, "--test-error", "1.5")
    assert bad.exit_code == 2 and bad.stdout == ""
    assert len(bad.stderr.strip().splitlines()) == 1 and "--test-error" in bad.stderr


def test_floor_in_markdown_and_latex(tmp_path):
    sets = ["--set", "emp_risk=0.05", "--set", "KL=5000", "--set", "n=60000"]
    md, tex = tmp_path / "r.md", tmp_path / "r.tex"
    res = invoke("optimize", "pac_bayes_kl", *sets, "--test-error", "0.06", "--report", md,
                 "--latex", tex)
    assert res.exit_code == 0, res.output
    own = _kl_inv(0.05, math.log(2 * math.sqrt(60000) / 0.05) / 60000)
    text = md.read_text()
    # the floor, the least the value could reach, is rounded down
    assert "## Floor and what dominates" in text and down_text(own, 4) in text
    assert "| KL | 5000 |" in text and "value − test error" in text
    latex = tex.read_text()
    assert "Floor and what dominates" in latex and down_text(own, 4) in latex and latex.isascii()
    assert "floor" in res.stdout and "what dominates" in res.stdout


# ---- compare at 80 columns, and what a skipped entry lacks ----------------------------------

def _data_stats(tmp_path: Path) -> Path:
    """A data-side stats file as `measure --data` writes it (no --compress)."""
    from boundcalc.measure.data.task_measure import dr_point

    sig = [dr_point(0.01)[1], dr_point(0.02)[1]]
    st = Stats(model={"n_layers": 2, "n_heads": 2, "hidden": 16, "n_params": 5018},
               scalars={"n": Quantity(700.0), "emp_risk": Quantity(0.04),
                        "gibbs_draws": Quantity(100.0), "dist_init_total": Quantity(0.249),
                        "n_params": Quantity(5018.0), "majority_error": Quantity(0.889)},
               curves={"gibbs_risk_mean": Curve(
                   "sigma", np.array(sig), np.array([0.06, 0.12]),
                   ci=np.array([[0.06, 0.1], [0.12, 0.18]]), confidence=0.99, estimated=True,
                   n_samples=100, method="Monte Carlo")},
               provenance={"n_classes": 10})
    return st.save(tmp_path / "data.json")


def test_compare_keeps_every_id_whole_at_80_columns_with_the_floor(tmp_path, registry):
    """Issue 25.4: 'mcallester_gaussian_is'/'otropic' in the certified table."""
    res = invoke("compare", "--stats", _data_stats(tmp_path))
    assert res.exit_code == 0, res.output
    assert max(cell_len(ln) for ln in res.stdout.splitlines()) <= 80
    shown = words(res.stdout)
    doc = json.loads(invoke("compare", "--stats", _data_stats(tmp_path), "--json").stdout)
    ids = [r["id"] for k in ("certified", "conditional", "rate", "proxy", "failed", "skipped")
           for r in doc[k]]
    assert "mcallester_gaussian_isotropic" in ids and "pac_bayes_kl_gaussian_mc" in ids
    assert set(ids) <= shown, set(ids) - shown
    assert "zero-complexity floor and what dominates" in res.stdout
    mc = next(r for r in doc["certified"] if r["id"] == "pac_bayes_kl_gaussian_mc")
    assert down_text(mc['floor']['own'], 3) in res.stdout


def test_lacks_says_what_is_really_missing(tmp_path):
    """Issue 25.5: 'occam_kl │ code_bits, emp_risk' although emp_risk is in the file, and so on."""
    doc = json.loads(invoke("compare", "--stats", _data_stats(tmp_path), "--json").stdout)
    lacks = {r["id"]: r["lacks"] for r in doc["skipped"]}
    assert "quantized_error" in lacks["occam_kl"] and "--compress" in lacks["occam_kl"]
    assert "not read from the file's n_params" in lacks["bartlett_code_proxy"]
    assert "curve gibbs_risk_mean" in lacks["monte_carlo_gibbs_risk"]
    assert "no boundcalc command measures it" in lacks["pac_bayes_layerwise"]
    text = invoke("compare", "--stats", _data_stats(tmp_path))
    assert "boundcalc measure MODEL --data DATA --compress" in " ".join(BOX.sub(" ", text.stdout).split())


# ---- help at 80 columns ---------------------------------------------------------------------

def _commands() -> list[str]:
    return [c.name or c.callback.__name__ for c in app.registered_commands]


def test_no_type_placeholders_or_braces_in_any_help():
    """Issue 25.6: '--help <bool>', '--quiet -q <bool>', 'Usage: ... {model}'."""
    for name in [None, *_commands()]:
        res = invoke(*([name] if name else []), "--help")
        assert res.exit_code == 0, (name, res.output)
        assert "<bool>" not in res.stdout and not re.search(r"<[a-z][a-z \[\]]*>", res.stdout), name
        usage = next(ln for ln in res.stdout.splitlines() if "Usage:" in ln)
        assert "{" not in usage, usage
        assert max(cell_len(ln) for ln in res.stdout.splitlines()) <= 80
    assert "Usage: boundcalc measure [OPTIONS] MODEL" in invoke("measure", "--help").stdout


def test_measure_help_has_a_readable_description_column_and_its_defaults():
    from boundcalc.measure.data.task_measure import DEFAULT_SIGMAS

    out = invoke("measure", "--help").stdout
    starts = []
    for ln in out.splitlines():
        m = re.match(r"│ (--[a-z-]+)\s+(-\w)?\s*([A-Z]+)?\s+(\S)", ln)
        if m:
            starts.append(ln.index(m.group(4), m.end(3) if m.group(3) else m.end(1)))
    assert starts and max(starts) <= 45, starts  # description column ≥ 33 of 80 columns
    flat = " ".join(BOX.sub(" ", out).split())
    # issue 44 item 4: the defaults scale with n (measure/data/sizing.py)
    assert ("default: with --tune-data one σ chosen there (free), else up to seven σ, "
            f"{DEFAULT_SIGMAS[0]:g} … {DEFAULT_SIGMAS[-1]:g}, as many as fit the time target "
            "here") in flat and len(DEFAULT_SIGMAS) == 7
    assert "default: up to 20, as many as fit the time target here" in flat
    assert "the plan is printed before the first pass" in flat


# ---- promises kept ---------------------------------------------------------------------------

def test_optimize_promises_only_the_tables_it_prints(tmp_path):
    """Issue 25.7: a proxy 'only the tables of its value against n and δ are given', none shown."""
    from test_optimize_sensitivity import spectrum_stats

    path = spectrum_stats(L=2, A=2, seed=1).save(tmp_path / "s.json")
    out = json.loads(invoke("optimize", "spectrum_adaptive_ours", "--stats", path,
                            "--json").stdout)
    wit = out["what_it_takes"]
    assert wit["table"] == {} and "tables" not in wit["note"]
    assert "no sample size and no δ" in wit["note"]
    sets = ["--set", "emp_risk=0.05", "--set", "KL=5000", "--set", "n=60000"]
    text = invoke("optimize", "pac_bayes_kl", *sets).stdout
    assert "value against n" in text and "value against delta" in text


def test_compare_without_data_says_why_there_are_no_rates(tmp_path):
    from test_optimize_sensitivity import spectrum_stats

    path = spectrum_stats(L=2, A=2, seed=1).save(tmp_path / "s.json")
    out = invoke("compare", "--stats", path).stdout
    assert "no certified bound and no rate: they need data statistics" in " ".join(out.split())


def test_show_points_to_a_source_note_that_exists():
    doc = json.loads(invoke("show", "mcallester", "--json").stdout)
    path = Path(doc["source_notes"]["pac_bayes.md"])
    assert path.is_file() and "McAllester" in path.read_text(encoding="utf-8")
    assert "source note" in invoke("show", "mcallester").stdout


def test_correlate_table_keeps_ids_whole_at_80_columns(monkeypatch):
    import pandas as pd
    from types import SimpleNamespace

    from boundcalc.cli import sweep_cmds

    monkeypatch.setenv("COLUMNS", "80")
    ids = ["rademacher_generalization_union", "mcallester_gaussian_isotropic", "occam_kl"]
    table = pd.DataFrame({"id": ids, "kind": ["conditional", "certified", "certified"],
                          "kendall_tau": [0.5, -0.2, 0.1], "tau_lo": [-0.5, -0.9, 0.0],
                          "tau_hi": [0.9, 0.3, 0.2], "spearman_rho": [0.3, 0.1, 0.2],
                          "granulated_tau": [0.1, 0.2, None], "n": [24, 24, 24]})
    corr = SimpleNamespace(table=table, target="test_error", confidence=0.95, n_bootstrap=100,
                           hyperparameters=["width"])
    with sweep_cmds.console.capture() as cap:
        sweep_cmds._print_correlation(corr)
    out = cap.get()
    assert max(cell_len(ln) for ln in out.splitlines()) <= 80
    assert set(ids) <= words(out) and "…" not in out
    assert "[-0.50,+0.90]" in out and "conditional" in out


def test_result_panel_keeps_id_and_long_title_whole_at_80_columns(registry):
    """The panel border cut `ID: long title` at 80 columns; the title now wraps inside."""
    from rich.console import Console

    from boundcalc.report.tables import result_panel

    entry = max(registry, key=lambda e: len(e.id) + len(e.title))
    r = bc.compute("mcallester", values={"emp_risk": 0.05, "KL": 5000, "n": 60000})
    r.id, r.title = entry.id, entry.title
    console = Console(width=80)
    with console.capture() as cap:
        console.print(result_panel(r))
    out = cap.get()
    assert max(cell_len(ln) for ln in out.splitlines()) <= 80
    assert entry.id in words(out) and set(entry.title.split()) <= words(out)
