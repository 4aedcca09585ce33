"""``--precision fp32|tf32|bf16`` for measure's data side (issue 29 item 3): the default on a
CPU is fp32 and gives today's numbers bit for bit; the arithmetic is recorded in the stats
file's provenance and printed; bf16 runs under autocast (the Monte Carlo risk within Monte Carlo
error of fp32's on a model whose noise dominates); a bad name is one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from boundcalc.cli import app
from boundcalc.errors import BoundcalcError
from boundcalc.measure.data.options import MeasureOptions
from boundcalc.measure.device import default_precision, precision
from tests._measure_helpers import single_thread

runner = CliRunner()


@pytest.fixture(autouse=True)
def one_thread():
    with single_thread():
        yield


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    from transformers import ViTConfig, ViTForImageClassification

    out = tmp_path_factory.mktemp("prec")
    torch.manual_seed(0)
    cfg = ViTConfig(image_size=8, patch_size=4, num_channels=1, hidden_size=16,
                    num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                    num_labels=3)
    ViTForImageClassification(cfg).save_pretrained(out / "init")
    model = ViTForImageClassification(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    model.save_pretrained(out / "model")
    rng = np.random.default_rng(0)
    np.savez(out / "data.npz", pixel_values=rng.standard_normal((24, 1, 8, 8)).astype(np.float32),
             label=rng.integers(0, 3, 24))
    return out


def _measure(task, tmp_path, *flags):
    base = ["measure", str(task / "model"), "--init", str(task / "init"), "--data",
            str(task / "data.npz"), "--sigma", "0.1", "--draws", "3", "--hessian-probes", "2",
            "--hessian-samples", "8", "--device", "cpu"]
    res = runner.invoke(app, [*base, *flags, "-o", str(tmp_path / "s.json")])
    assert res.exit_code == 0, res.output[-1500:]
    return json.loads((tmp_path / "s.json").read_text()), res.output


def test_cpu_default_is_fp32_bit_for_bit_and_recorded(task, tmp_path):
    assert default_precision(torch.device("cpu")) == "fp32"
    assert default_precision(torch.device("cuda")) == "tf32"
    a, out = _measure(task, tmp_path)
    b, _ = _measure(task, tmp_path, "--precision", "fp32")
    assert a["provenance"]["precision"]["data_side"] == "fp32"
    assert a["curves"]["gibbs_risk_mean"]["value"] == b["curves"]["gibbs_risk_mean"]["value"]
    assert a["scalars"]["hessian_trace"] == b["scalars"]["hessian_trace"]
    assert "fp32 arithmetic" in " ".join(out.split())
    c, out = _measure(task, tmp_path, "--precision", "bf16")
    assert c["provenance"]["precision"]["data_side"] == "bf16"
    assert "bfloat16" in c["provenance"]["precision"]["arithmetic"]
    assert "bf16 arithmetic" in " ".join(out.split())
    # the Hessian ignores --precision: the same trace as fp32's
    assert c["scalars"]["hessian_trace"] == a["scalars"]["hessian_trace"]


def test_precision_context_runs_bf16_matmuls_and_restores_tf32_switches():
    lin = torch.nn.Linear(8, 8)
    before = torch.backends.cuda.matmul.allow_tf32
    with precision("bf16", torch.device("cpu")):
        assert lin(torch.randn(2, 8)).dtype == torch.bfloat16
        with precision("fp32", torch.device("cpu")):
            assert lin(torch.randn(2, 8)).dtype == torch.float32
    with precision("tf32", torch.device("cpu")):
        assert torch.backends.cuda.matmul.allow_tf32 is True
        assert lin(torch.randn(2, 8)).dtype == torch.float32
    assert torch.backends.cuda.matmul.allow_tf32 == before
    with pytest.raises(BoundcalcError, match="expected one of fp32, tf32, bf16"):
        MeasureOptions(precision="fp16")  # the options that choose it refuse it


def test_bad_precision_is_one_line(task, tmp_path):
    res = runner.invoke(app, ["measure", str(task / "model"), "--init", str(task / "init"),
                              "--data", str(task / "data.npz"), "--precision", "fp8",
                              "-o", str(tmp_path / "x.json")])
    assert res.exit_code != 0 and "fp8" in res.output and "fp32, tf32, bf16" in res.output
    assert len(res.output.strip().splitlines()) == 1
