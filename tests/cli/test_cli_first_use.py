"""What a new user meets first (issue 30): --version, the error for a mistyped model path or a
wrong column, --device cuda refused before the measurement starts, grid notes only for a
--sigma the user gave (one 80-column line each), and --compress auto's default level counts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from boundcalc import __version__
from boundcalc.cli import app
from tests._measure_helpers import TEXT_LABELS, TEXTS, tiny_text_checkpoints

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("first_use")
    tiny_text_checkpoints(out)
    pd.DataFrame({"text": TEXTS, "label": TEXT_LABELS}).to_csv(out / "d.csv", index=False)
    pd.DataFrame({"sentence": TEXTS, "sentiment": TEXT_LABELS}).to_csv(out / "other.csv",
                                                                       index=False)
    return out


@pytest.mark.parametrize("args", [["--version"], ["-V"], ["version"]])
def test_version(args):
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == f"boundcalc {__version__}"


def test_mistyped_model_path(tiny):
    res = runner.invoke(app, ["measure", "mymodle", "--data", str(tiny / "d.csv")])
    assert res.exit_code != 0
    assert res.stderr.strip() == "error: no such file or folder: mymodle"
    res = runner.invoke(app, ["measure", str(tiny / "nope"), "--data", str(tiny / "d.csv")])
    assert res.stderr.strip() == f"error: no such file or folder: {tiny / 'nope'}"


def test_wrong_columns_name_their_flags(tiny):
    res = runner.invoke(app, ["measure", str(tiny / "cls"), "--data", str(tiny / "other.csv"),
                              "-o", str(tiny / "never.json")])
    err = res.stderr.strip()
    assert res.exit_code != 0 and "\n" not in err
    assert "no text column 'text' (columns: sentence, sentiment)" in err
    assert err.endswith("choose the text column with --text-column")
    res = runner.invoke(app, ["measure", str(tiny / "cls"), "--data", str(tiny / "other.csv"),
                              "--text-column", "sentence", "-o", str(tiny / "never.json")])
    err = res.stderr.strip()
    assert "no label column 'label'" in err
    assert err.endswith("choose the label column with --label-column")


def test_device_cuda_refused_before_the_measurement_starts(tiny):
    """Without CUDA, the refusal comes before transformers or the data side is imported (a
    fresh interpreter, so nothing earlier imported them)."""
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom boundcalc.cli import app\n"
            f"r = CliRunner().invoke(app, ['measure', {str(tiny / 'cls')!r}, '--data', "
            f"{str(tiny / 'd.csv')!r}, '--device', 'cuda'])\n"
            "print(r.exit_code, r.stderr.strip())\n"
            "print(sorted(m for m in ('transformers', 'boundcalc.measure.data.task_measure') "
            "if m in sys.modules))\n")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, env={"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1",
                                        "PATH": "/usr/bin:/bin"})
    first, second = res.stdout.strip().splitlines()[-2:]
    assert first.startswith("2 error: device 'cuda': CUDA is not available"), res.stdout
    assert second == "[]"


def test_grid_notes_only_for_a_given_sigma(tiny):
    args = ["measure", str(tiny / "cls"), "--data", str(tiny / "d.csv"), "--draws", "1",
            "--hessian-probes", "0", "-o", str(tiny / "s.json")]
    res = runner.invoke(app, args)  # the seven default σ: no note
    assert res.exit_code == 0, res.output
    assert "grid point" not in res.stdout and "Dziugaite" not in res.stdout
    res = runner.invoke(app, [*args, "--sigma", "0.000123456", "--sigma", "0.000123457"])
    assert res.exit_code == 0, res.output
    notes = [ln for ln in res.stdout.splitlines() if "note: --sigma" in ln]
    assert len(notes) == 2 and all(len(ln) <= 80 for ln in notes), notes
    snaps = json.loads((tiny / "s.json").read_text())["provenance"]["sigma_snapped"]
    assert f"(j = {snaps[0]['j']})" in notes[0] and f"j = {snaps[0]['j']} with" in notes[1]


def test_compress_auto_with_init_defaults_to_levels_a_delta_can_use(tiny):
    from boundcalc.measure.compress.options import default_levels

    assert default_levels("auto", "prior/") == (1, 16) == default_levels("delta", None)
    assert default_levels("auto", None) == (2, 4, 8, 16, 32, 64) == default_levels("all", "x")
    res = runner.invoke(app, ["measure", str(tiny / "cls"), "--data", str(tiny / "d.csv"),
                              "--init", str(tiny / "cls"), "--draws", "0",
                              "--hessian-probes", "0", "--compress", "auto",
                              "-o", str(tiny / "c.json")])
    assert res.exit_code == 0, res.output
    comp = json.loads((tiny / "c.json").read_text())["provenance"]["compression"]
    assert [r["levels"] for r in comp["per_level"]] == [1, 16]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sigma_search_progress_total_bounds_its_evaluations(seed):
    """The σ search reports progress against a total that its evaluations never exceed
    (else a long search on the tune data sat at '0/1 steps' for minutes)."""
    import math

    import numpy as np

    from boundcalc.measure.data.tune import (choose_shape, dr_sigma, scale_evaluations,
                                             search_evaluations)

    rng = np.random.default_rng(seed)
    names = [f"g{i}" for i in range(6)]
    groups = {f"p{i}": g for i, g in enumerate(names)}
    tol = {g: float(rng.uniform(1e-3, 5e-2)) for g in names}
    calls = []

    def risk(sig):
        calls.append(1)
        # each group's noise beyond its tolerance adds risk
        return sum(max(0.0, math.log(sig[p] / tol[g])) for p, g in groups.items()) * 0.1

    choose_shape(risk, groups, {g: 100 * (i + 1) for i, g in enumerate(names)}, 0.0, 0.05)
    assert 0 < len(calls) <= search_evaluations(len(names)) - scale_evaluations()
    assert dr_sigma(1) > dr_sigma(1400)


def test_floor_line_of_a_compare_row():
    from boundcalc.report.summary import floor_line

    row = {"floor": {"own": 0.0940, "emp_risk": 0.091, "mc_upper": 0.0991,
                     "budget_nats": {"KL_gauss": 23.3, "grid cost": 2.83, "confidence": 9.8},
                     "effects": {"KL_gauss": 0.059, "grid cost": 0.004, "Monte Carlo": 0.011}},
           "vacuous": False, "vacuous_against": "no (< 0.9, the error of guessing)"}
    assert floor_line(row) == ("floor 0.094; vacuous no (< 0.9, the error of guessing); "
                               "dominated by KL_gauss 23.3 nats (+0.059)")
    # the floor is rounded down: 0.094 · 10 is the double 0.93999999999999994671…
    assert floor_line(row, scale=10) == (
        "floor 0.9399; vacuous no (< 0.9, the error of guessing) on the entry's own scale (the "
        "value ÷ 10); dominated by KL_gauss 23.3 nats (+0.059)")  # a level of 0.9, not 9
    assert floor_line({"floor": None, "vacuous": None}) == (
        "floor — (not a kl inverse); vacuous — (not a [0, 1] risk bound); dominated by —")


@pytest.mark.parametrize("name", ["digits_vit", "text_classifier", "language_model"])
def test_examples_help_reads_whole_and_prints_the_floor(name):
    """--help's description is the docstring's whole first paragraph (language_model.py's was
    cut at 'with'); each example prints floor_line beside its certified rows and keeps the
    floor in report.json's rows."""
    path = ROOT / "examples" / f"{name}.py"
    res = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    desc = " ".join(res.stdout.split("\n\n")[1].split())
    first = " ".join(path.read_text().split('"""')[1].split("\n\n")[0].split())
    assert desc == first and desc.endswith(".")
    src = path.read_text()
    assert "floor_line(r" in src
    if name != "digits_vit":
        lib = (ROOT / "studies" / f"{name}.py").read_text()
        assert '"floor", "vacuous", "vacuous_against"' in lib


def test_readme_install_lines_hold_against_the_public_index():
    """Every `pip install torch…` line of README.md and the guide names PyTorch's CPU index
    (a plain one pulls the CUDA build from PyPI); the docs extra keeps an editable install;
    the first section is `boundcalc certify`."""
    import re

    for doc in ("README.md", "docs/guide.md"):
        text = (ROOT / doc).read_text(encoding="utf-8")
        lines = [ln for ln in text.splitlines() if re.match(r"\s*pip install .*torch", ln)]
        assert lines, doc
        assert all("--index-url https://download.pytorch.org/whl/cpu" in ln for ln in lines), lines
        docs_lines = [ln for ln in text.splitlines() if ".[docs]" in ln and "pip install" in ln]
        assert docs_lines and all('pip install -e ".[docs]"' in ln for ln in docs_lines), doc
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first = readme.split("\n## ")[1]
    assert first.startswith("Quick start: certify your own classifier")
    assert "boundcalc certify BASE --data" in first and "CERTIFY_NUMBERS" not in first


def test_per_group_gibbs_entry_is_judged_against_the_trivial_predictor(registry):
    """pac_bayes_kl_gaussian_groups_mc bounds the 0-1 Gibbs risk like its isotropic sibling,
    so its vacuity level is the trivial predictor's error (certify printed 'vacuity level 1'
    for it on a 3-class task whose majority class errs 0.653)."""
    from boundcalc.task_facts import bounds_zero_one

    assert bounds_zero_one(registry.get("pac_bayes_kl_gaussian_mc"))
    assert bounds_zero_one(registry.get("pac_bayes_kl_gaussian_groups_mc"))
