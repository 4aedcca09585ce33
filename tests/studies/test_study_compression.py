"""End to end: examples/compression_study.py at reduced scale (digits, one-block Transformer).

The bounds in the study's results are recomputed here from its own reported inputs (code bits,
quantized training error, n) with an independent kl inverse (60-digit mpmath), and the subspace
model's code length is recomputed from a fresh coding of the same kind of vector.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

pytest.importorskip("sklearn", reason="the study's digits data ships with scikit-learn")

from _reference import kl_inv_exact  # noqa: E402
from _study_helpers import load_example  # noqa: E402
from tests._rounding_helpers import up_text  # noqa: E402

ARGS = ["--n-train", "200", "--d-int", "30", "--steps", "60", "--qat-steps", "20",
        "--levels", "2", "4", "8", "--mc-draws", "5"]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("study_comp")
    assert load_example("compression_study").main(ARGS + ["--out", str(out)]) == 0
    return out, json.loads((out / "results.json").read_text())


def test_report_states_bits_delta_test_error_and_vacuity(study):
    out, res = study
    text = (out / "report.md").read_text()
    for name in ("full", "subspace"):
        r = res[name]
        assert f"code {r['code_bits']:.0f} bits" in text
        # certified values are shown rounded up (3 digits), never to nearest
        assert f"compression bound {up_text(r['occam_kl']['value'], 3)} on the 0-1 error" in text
        assert f"| {up_text(r['occam_catoni']['value'], 3)} |" in text
        assert ("vacuous (≥ 1)" in text) or ("non-vacuous" in text)
        assert 0 <= r["test_error_quantized"] <= 1
    assert "δ_eff = 0.05" in text and res["n_train"] == 200 and res["n_test"] == 1597


def test_occam_bounds_equal_an_independent_kl_inverse(study):
    _, res = study
    for name in ("full", "subspace"):
        r = res[name]
        B = (r["code_bits"] * math.log(2) + math.log(1 / 0.05)) / 200
        want = float(kl_inv_exact(r["quantized_train_error"], B))
        assert r["occam_kl"]["value"] == pytest.approx(want, abs=1e-9)
        assert r["occam_kl"]["value"] >= want - 1e-12
        assert r["occam_catoni"]["value"] >= r["occam_kl"]["value"] - 1e-9
        assert r["levels"] in (2, 4, 8)
        # the code includes log2(3) bits for the level grid and 1 bit for the parameterisation
        assert r["code_bits"] > math.log2(3) + 1


def test_subspace_code_is_small_and_full_code_is_large(study):
    _, res = study
    # 30 coded numbers vs ~2.7k: the subspace code is far shorter
    assert res["subspace"]["code_bits"] < res["full"]["code_bits"] / 3
    assert res["n_params"] == 2666


def test_pac_bayes_and_edelman_are_reported_honestly(study):
    _, res = study
    for name in ("full", "subspace"):
        pb = res[name]["pac_bayes"]
        for row in pb["rows"]:
            assert row["value"] >= row["gibbs_error_mc"] - 1e-12
            assert row["kind"] == "certified"
        ed = res[name]["edelman"]
        assert ed["kind"] == "rate" and not ed["is_bound"] and ed["vacuous"] is None


def test_bad_option_is_one_line(capsys, tmp_path):
    rc = load_example("compression_study").main(["--n-train", "5", "--out", str(tmp_path)])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--n-train" in err[0]
