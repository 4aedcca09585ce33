"""The data side's options (measure/data/options.py): one typed, frozen object, checked once,
naming each option in the caller's words; measure_task takes it whole or as keywords, and what
it stores in the stats file never depends on the front end."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import torch
from typer.testing import CliRunner

from boundcalc import words
from boundcalc.cli import app
from boundcalc.cli.words import CLI_WORDS
from boundcalc.errors import BoundcalcError, DomainError
from boundcalc.measure.data.options import MeasureOptions
from boundcalc.measure.data.row_noise import refused
from boundcalc.measure.data.task_measure import measure_task
from tests._measure_helpers import single_thread

# (the bad value, the message in the API's words, the message in the CLI's words)
BAD = [
    (dict(draws=-1), "draws=-1: expected a whole number >= 0",
     "--draws -1: expected a whole number >= 0"),
    (dict(hessian_probes=1), "hessian_probes=1: expected a whole number >= 0 other than 1",
     "--hessian-probes 1: expected a whole number >= 0 other than 1"),
    (dict(gibbs_mode="fast"), "gibbs_mode='fast': expected one of auto, sample, whole",
     "--gibbs-mode 'fast': expected one of auto, sample, whole"),
    (dict(gibbs_samples=0), "gibbs_samples=0: expected a whole number >= 1",
     "--gibbs-samples 0: expected a whole number >= 1"),
    (dict(delta_mc=1.0), "delta_mc=1.0: expected a number in (0, 1)",
     "--delta-mc 1.0: expected a number in (0, 1)"),
    (dict(delta_mc=1e-300), "delta_mc=1e-300: too small", "--delta-mc 1e-300: too small"),
    (dict(smoothing=0.0), "smoothing=0.0: expected a number in (0, 1)",
     "--smoothing 0.0: expected a number in (0, 1)"),
    (dict(sigmas=(0.01, 0.5)), "sigma=0.5: no point of the Dziugaite–Roy grid",
     "--sigma 0.5: no point of the Dziugaite–Roy grid"),
    (dict(sigmas=(-1.0,)), "sigmas=-1.0: expected one or more values, each a positive number",
     "--sigma -1.0: expected one or more values, each a positive number"),
    (dict(tune_draws=0), "tune_draws=0: expected a whole number >= 1",
     "--tune-draws 0: expected a whole number >= 1"),
    (dict(tune_slack=1.0), "tune_slack=1.0: expected a number in [0, 1)",
     "--tune-slack 1.0: expected a number in [0, 1)"),
    (dict(seed=-1), "seed=-1: expected a whole number in [0, 4294967294]",
     "--seed -1: expected a whole number in [0, 4294967294]"),
    (dict(precision="fp8"), "precision='fp8': expected one of fp32, tf32, bf16",
     "--precision 'fp8': expected one of fp32, tf32, bf16"),
    (dict(sigma_groups=True, draws=0),
     "tune_data / sigma_groups need group_draws (default draws) >= 1",
     "--tune-data / --sigma-groups need --group-draws (default --draws) >= 1"),
    (dict(tune_data="t.csv", group_draws=0),
     "tune_data / sigma_groups need group_draws (default draws) >= 1",
     "--tune-data / --sigma-groups need --group-draws (default --draws) >= 1"),
]


@pytest.mark.parametrize("bad, api, cli", BAD)
def test_a_bad_option_is_refused_in_the_callers_words(bad, api, cli):
    with pytest.raises(BoundcalcError) as got:
        MeasureOptions(**bad)
    assert api in str(got.value) and "--" not in str(got.value)
    with words.use_words(CLI_WORDS), pytest.raises(BoundcalcError) as got:
        MeasureOptions(**bad)
    assert cli in str(got.value)


def test_sigma_off_the_grid_is_a_domain_error():
    with pytest.raises(DomainError):
        MeasureOptions(sigmas=(1.0,))


def test_options_are_frozen_and_normalised():
    opts = MeasureOptions(sigmas=[0.01, 0.02], sigma_groups=True, draws=0, group_draws=3)
    assert opts.sigmas == (0.01, 0.02) and opts.groups and opts.group_passes == 3
    assert MeasureOptions(draws=7).group_passes == 7 and not MeasureOptions().groups
    assert MeasureOptions(tune_data="t.csv").groups
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.draws = 3


def test_of_takes_keywords_and_the_old_alpha_name():
    base = MeasureOptions(draws=3, sigmas=(0.05,))
    got = MeasureOptions.of(base, alpha=0.2, hessian_probes=0)
    assert (got.smoothing, got.hessian_probes, got.draws, got.sigmas) == (0.2, 0, 3, (0.05,))
    assert base.smoothing == 0.01  # the given object is not changed
    assert MeasureOptions.of(None, draws=4) == MeasureOptions(draws=4)
    with pytest.raises(TypeError, match="'sigma'"):
        MeasureOptions.of(sigma=0.01)
    with pytest.raises(BoundcalcError, match=r"delta_mc=2.0: expected a number in \(0, 1\)"):
        MeasureOptions.of(base, delta_mc=2.0)


def test_a_refused_row_wise_draw_names_the_way_out_in_the_callers_words():
    assert str(refused("x")) == "per-sample Gibbs draws: x; use gibbs_mode=whole"
    with words.use_words(CLI_WORDS):
        assert str(refused("x")) == "per-sample Gibbs draws: x; use --gibbs-mode whole"


@pytest.fixture(scope="module")
def tiny_cls(tmp_path_factory):
    """A 3-class BERT classifier (a HF folder) and 30 rows of token ids."""
    from transformers import BertConfig, BertForSequenceClassification

    out = tmp_path_factory.mktemp("opts")
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=16, num_labels=3)
    BertForSequenceClassification(cfg).save_pretrained(out / "m")
    g = torch.Generator().manual_seed(1)
    torch.save({"inputs": torch.randint(0, 40, (30, 8), generator=g),
                "targets": torch.randint(0, 3, (30,), generator=g)}, out / "d.pt")
    return out


def test_measure_task_takes_the_options_whole_or_as_keywords(tiny_cls):
    m, d = str(tiny_cls / "m"), str(tiny_cls / "d.pt")
    given = dict(device="cpu", sigmas=(0.05,), draws=2, hessian_probes=0, batch_size=16,
                 threads=1)
    with single_thread():
        whole = measure_task(m, d, None, MeasureOptions(**given))
        loose = measure_task(m, d, **given)
        more = measure_task(m, d, None, MeasureOptions(**given), draws=3)
    for st in (whole, loose):
        assert st.scalars["gibbs_passes"].value == 2
        assert st.scalars["gibbs_draws"].value == 2 * 30  # sample mode: a draw per row
    assert list(whole.curves["gibbs_risk_mean"].value) == list(loose.curves["gibbs_risk_mean"].value)
    assert whole.scalars["emp_risk"].value == loose.scalars["emp_risk"].value
    assert more.scalars["gibbs_passes"].value == 3  # a keyword overrides the object's value


def test_a_bad_option_is_refused_before_any_file_is_read(tmp_path):
    with pytest.raises(BoundcalcError, match=r"^delta_mc=2.0: expected a number in \(0, 1\)"):
        measure_task(str(tmp_path / "absent"), str(tmp_path / "absent.csv"), delta_mc=2.0)


FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def test_what_the_cli_stores_names_options_by_keyword(tiny_cls, tmp_path):
    """Text written into the stats file (provenance, methods) does not depend on the front
    end: measured through the CLI, it names options as the API does."""
    out = tmp_path / "s.json"
    with single_thread():
        res = CliRunner().invoke(app, ["measure", str(tiny_cls / "m"), "--data",
                                       str(tiny_cls / "d.pt"), "--sigma", "0.05", "--draws", "2",
                                       "--hessian-probes", "0", "--threads", "1", "-o", str(out)])
    assert res.exit_code == 0, res.output
    pv = json.loads(out.read_text())["provenance"]
    assert pv["threads"]["rule"] == "requested (threads)"
    assert pv["precision"]["hessian"] == "fp32 (the Hessian trace and P̂ ignore precision)"
    stored = json.dumps(pv, ensure_ascii=False)
    assert not FLAG.findall(stored), FLAG.findall(stored)
