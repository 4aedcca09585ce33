"""Reliability, round six (issue 52), the run's classes, on one real ``certify --posterior
bound`` run of a config-only BERT (a minute on 2 CPU cores): the learned-σ entry optimized and
explained on its stats file (3); hand edits of that file (n, μ's distances, σ_Q, NaN) and of
its report refused or recomputed, never certified (4); one text under two labels (5); a
re-run with ``--posterior proximal`` over a bound run's folder, and a user's file inside
``posterior_bound/`` (10); a split whose S cannot give a non-vacuous number (11)."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from tests._certify_helpers import bert_config_folder, synthetic_rows, write_csv
from tests._cli_helpers import invoke
from tests.reliability._rel_helpers import one_line_error

ROW = "pac_bayes_kl_gaussian_learned_mc"
SMALL = ["--epochs", "2", "--lr", "3e-3", "--post-lr", "1e-3", "--batch-size",
         "16", "--max-length", "16", "--sigma", "0.01", "--draws", "1", "--tune-rows", "16",
         "--tune-draws", "1", "--group-draws", "1"]


@pytest.fixture(scope="module")
def bound_run(tmp_path_factory):
    """``certify BASE --data d.csv --posterior bound`` on 80 separable rows (S = 40)."""
    w = tmp_path_factory.mktemp("round6")
    base = bert_config_folder(w / "base", hidden=16, layers=1, heads=2)
    write_csv(w / "d.csv", synthetic_rows(80, 0))
    res = invoke("-q", "certify", base, "--data", w / "d.csv", "-o", w / "out", *SMALL,
                 "--posterior", "bound", "--json")
    assert res.exit_code == 0, res.output[-2000:]
    return {"w": w, "base": base, "out": w / "out", "report": json.loads(res.stdout)}


def _row(report: dict, rid: str) -> dict:
    return next(r for r in report["certified"] if r["id"] == rid)


# ---- 3. the entry the bound route certifies optimizes and explains -------------------------

def test_the_learned_entry_optimizes_on_a_real_bound_stats_file(bound_run):
    stats = bound_run["out"] / "stats.json"
    res = invoke("optimize", ROW, "--stats", stats, "--json")
    assert res.exit_code == 0, res.output[-1500:]
    got = json.loads(res.stdout)
    # the same number certify reported for the row (at the same δ: nothing else is chosen)
    want = _row(bound_run["report"], ROW)
    assert math.isclose(got["value"], want["value"], rel_tol=1e-12), (got["value"], want)
    # explained: the bound's derivative along σ_Q (σ_Q → t·σ_Q at t = 1), through
    # var_ratio_div's derivative; σ_Q = σ_P here (scale learned), where it is 0 by hand
    sens = {s["symbol"]: s for s in got["sensitivity"]}
    d = sens["sigma_post"]["scale_derivative"]
    # by hand: ∂/∂a [(a/b)² − 1 − ln (a/b)²] = 2a/b² − 2/a = 0 at a = b
    assert d is not None and abs(d) <= 1e-12, sens["sigma_post"]
    assert sens["E_hat"]["derivative"] > 0 and sens["n"]["derivative"] < 0
    tex = bound_run["w"] / "row.tex"
    assert invoke("latex", ROW, "--stats", stats, "-o", tex).exit_code == 0
    assert "sigma" in tex.read_text()


def test_var_ratio_div_derivative_against_a_hand_difference():
    import sympy as sp

    from boundcalc.engine.functions import var_ratio_div

    a, b = sp.symbols("a b", positive=True)
    f = lambda x, y: (x / y) ** 2 - 1 - math.log((x / y) ** 2)  # noqa: E731
    for (x, y) in ((0.3, 0.2), (1.0, 1.0 + 1e-3), (2.0, 0.5)):
        h = 1e-6
        da = (f(x + h, y) - f(x - h, y)) / (2 * h)
        db = (f(x, y + h) - f(x, y - h)) / (2 * h)
        got_a = float(sp.diff(var_ratio_div(a, b), a).subs({a: x, b: y}))
        got_b = float(sp.diff(var_ratio_div(a, b), b).subs({a: x, b: y}))
        assert math.isclose(got_a, da, rel_tol=1e-5, abs_tol=1e-8), (x, y, got_a, da)
        assert math.isclose(got_b, db, rel_tol=1e-5, abs_tol=1e-8), (x, y, got_b, db)


# ---- 4. a hand-edited bound run's stats or report: refused or recomputed -------------------

def _edit(d: dict, what: str) -> None:
    rec = d["provenance"]["gibbs_learned"]
    if what == "n x100":
        d["scalars"]["n"]["value"] *= 100
    elif what == "n and data_rows x100":
        d["scalars"]["n"]["value"] *= 100
        d["provenance"]["data_rows"] *= 100
    elif what == "dist_sq halved":  # a distance, hence the KL, that μ does not have
        rec["dist_sq"] = [x / 2 for x in rec["dist_sq"]]
    elif what == "sigma_post one short":
        rec["sigma_post"] = rec["sigma_post"][:-1]
    elif what == "sigma_post x2":
        rec["sigma_post"] = [2 * x for x in rec["sigma_post"]]
    elif what == "mc units":
        rec["mc"]["samples_per_pass"] *= 100
        rec["mc"]["units"] *= 100


EDITS = ["n x100", "n and data_rows x100", "dist_sq halved", "sigma_post one short",
         "sigma_post x2", "mc units"]


@pytest.mark.parametrize("what", EDITS)
@pytest.mark.parametrize("command", ["compare", "latex", "optimize"])
def test_a_hand_edited_bound_stats_file_is_refused(bound_run, tmp_path, what, command):
    d = json.loads((bound_run["out"] / "stats.json").read_text())
    assert "learned_sha256" in d
    _edit(d, what)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(d))
    args = {"compare": ["compare", "--stats", path],
            "latex": ["latex", ROW, "--stats", path, "-o", tmp_path / "r.tex"],
            "optimize": ["optimize", ROW, "--stats", path]}[command]
    err = one_line_error(invoke(*args), 5)
    assert str(path) in err, err
    assert not (tmp_path / "r.tex").exists()


def test_n_against_the_rows_read_without_the_hash(bound_run, tmp_path):
    """A file without ``learned_sha256`` (hand-made, or older): n still has to be the number
    of rows the data side read."""
    d = json.loads((bound_run["out"] / "stats.json").read_text())
    del d["learned_sha256"]
    d["scalars"]["n"]["value"] *= 100
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(d))
    err = one_line_error(invoke("compare", "--stats", path), 5)
    assert "scalars.n = 4000 but provenance.data_rows = 40" in err, err


def test_a_hand_edited_report_is_recomputed_not_reused(bound_run, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(bound_run["out"], out)
    rep = json.loads((out / "report.json").read_text())
    rep["minimum"]["value"] = 0.01
    (out / "report.json").write_text(json.dumps(rep))
    w = bound_run["w"]
    res = invoke("certify", bound_run["base"], "--data", w / "d.csv", "-o", out, *SMALL,
                 "--posterior", "bound", "--json")
    assert res.exit_code == 0, res.output[-1500:]
    got = json.loads(res.stdout)
    assert got["steps"]["compare"] == "ran" and got["steps"]["measure"] == "reused"
    assert got["minimum"]["value"] == bound_run["report"]["minimum"]["value"] != 0.01


# ---- 10. a proximal re-run over a bound run's folder; a user's file inside it --------------

def test_a_users_file_in_posterior_bound_is_never_deleted(bound_run, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(bound_run["out"], out)
    mine = out / "posterior_bound" / "notes.txt"
    mine.write_text("mine")
    w = bound_run["w"]
    res = invoke("certify", bound_run["base"], "--data", w / "d.csv", "-o", out, *SMALL)
    err = one_line_error(res, 9)
    assert "posterior_bound" in err and "notes.txt" in err, err
    assert mine.read_text() == "mine"
    mine.unlink()
    res = invoke("certify", bound_run["base"], "--data", w / "d.csv", "-o", out, *SMALL,
                 "--json")
    assert res.exit_code == 0, res.output[-1500:]
    assert not (out / "posterior_bound").exists()
    assert "removed" in res.stderr and "posterior_bound" in res.stderr
    got = json.loads(res.stdout)
    assert got["steps"]["prior"] == "reused" and got["steps"]["measure"] == "ran"
    assert ROW not in {r["id"] for r in got["certified"]}


# ---- 5. one text under two labels -----------------------------------------------------------

def _refused(bound_run, tmp_path, rows, test_rows=None, code=2):
    write_csv(tmp_path / "d.csv", rows)
    extra = []
    if test_rows is not None:
        write_csv(tmp_path / "t.csv", test_rows)
        extra = ["--test-data", tmp_path / "t.csv"]
    res = invoke("certify", bound_run["base"], "--data", tmp_path / "d.csv", *extra, "-o",
                 tmp_path / "o", *SMALL)
    err = one_line_error(res, code)
    assert not (tmp_path / "o").exists()
    return err


def test_a_text_under_two_labels_in_data_is_refused(bound_run, tmp_path):
    rows = synthetic_rows(60, 3)
    text, label = rows[5]
    other = "food" if label == "sport" else "sport"
    err = _refused(bound_run, tmp_path, rows + [(text, other)])
    assert "row 60 is row 5's text" in err and "under another label" in err, err
    assert "keep one row per text" in err


def test_a_held_out_text_of_data_under_another_label_is_refused(bound_run, tmp_path):
    rows = synthetic_rows(60, 3)
    text, label = rows[7]
    other = "food" if label == "sport" else "sport"
    test = synthetic_rows(10, 4) + [(text, other)]
    err = _refused(bound_run, tmp_path, rows, test)
    assert "--test-data" in err and "DATA's row 7" in err and "another label" in err, err


# ---- 11. an S too small for any non-vacuous number ------------------------------------------

def test_a_split_whose_S_cannot_be_non_vacuous_is_refused(bound_run, tmp_path):
    """60 rows at --prior-fraction 0.99: S has 1 row; at zero error and zero KL the floor
    kl⁻¹(0, ln(2√1/0.05)/1) = 1 − 1/40 = 0.975 (by hand: kl⁻¹(0, c) = 1 − e^{−c}) is above
    the 0.5 of guessing between 2 classes."""
    rows = synthetic_rows(60, 3)
    write_csv(tmp_path / "d.csv", rows)
    res = invoke("certify", bound_run["base"], "--data", tmp_path / "d.csv", "-o",
                 tmp_path / "o", *SMALL, "--prior-fraction", "0.99")
    err = one_line_error(res, 2)
    assert "--prior-fraction 0.99" in err and "S 1 of DATA's 60 rows" in err, err
    floor = 1 - math.exp(-math.log(2 * math.sqrt(1) / 0.05))
    assert f"= {floor:.3g} at δ = 0.05" in err and "0.5" in err, err
    assert not (tmp_path / "o").exists()


def test_the_floor_of_S_by_hand_at_the_edge():
    """Two classes (level 0.5): the least S whose floor, by hand 1 − (δ/(2√n))^(1/n) =
    1 − e^{−ln(2√n/δ)/n} at δ = 0.05, is below 0.5 passes; one row fewer is refused."""
    from types import SimpleNamespace

    from boundcalc.certify.preflight import check_bound_sample
    from boundcalc.errors import BoundcalcError

    def floor(n):
        return 1 - (0.05 / (2 * math.sqrt(n))) ** (1 / n)

    edge = next(n for n in range(1, 100) if floor(n) < 0.5)  # the least S that can pass
    labels = ["a", "b"] * 50
    for n, ok in ((edge - 1, False), (edge, True)):
        cfg = SimpleNamespace(prior_fraction=(100 - n) / 100, seed=0)
        if ok:
            check_bound_sample(labels, cfg)
        else:
            with pytest.raises(BoundcalcError, match=f"S {n} of DATA's 100 rows"):
                check_bound_sample(labels, cfg)
