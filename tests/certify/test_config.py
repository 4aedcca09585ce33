"""certify's settings (certify/config.py), the option cases of issue 42 item 7: each bad value
refused by the record's own validator in one wording, named in the caller's words (the flag on
the CLI, the keyword through the API), with exit 2 and before anything is read, trained or
written (the base and DATA named here do not even exist)."""

from __future__ import annotations

import math
from dataclasses import FrozenInstanceError, asdict

import pytest
from typer.testing import CliRunner

from boundcalc.certify.config import MAX_EPOCHS, CertifyConfig
from boundcalc.cli import app
from boundcalc.errors import BoundcalcError

BIG = str(10 ** 18)

# (flags, the error line) — on main: --epochs 10^18 hung, --seed -1 gave exit 70, --lr 0
# named no flag, --post-lr nan was refused only after the prior trained, inf trained to NaN
CLI = [
    (["--epochs", BIG], f"--epochs {BIG}: expected a whole number in [0, {MAX_EPOCHS}]"),
    (["--post-epochs", BIG], f"--post-epochs {BIG}: expected a whole number in [0, 1000]"),
    (["--seed", "-1"], "--seed -1: expected a whole number in [0, 4294967294]"),
    *[([f, v], f"{f} {float(v)}: expected a number in (0, 1]")
      for f in ("--lr", "--post-lr") for v in ("0", "-1", "nan", "inf")],
    (["--proximal", "inf"], "--proximal inf: expected a number in [0, 1000000]"),
    (["--proximal", "nan"], "--proximal nan: expected a number in [0, 1000000]"),
    (["--draws", "0"], "--draws 0: expected a whole number >= 1"),
    (["--prior-fraction", "1"], "--prior-fraction 1.0: expected a number in (0, 1)"),
    *[(["--tune-rows", "0", f, "5"], f"{f} does nothing with --tune-rows 0 (no σ search); "
       f"leave {f} out or give --tune-rows > 0") for f in ("--tune-draws", "--group-draws")],
]


@pytest.mark.parametrize("flags, line", CLI, ids=[" ".join(f) for f, _ in CLI])
def test_cli_refuses_a_bad_option_before_anything_runs(flags, line, tmp_path):
    out = tmp_path / "o"
    res = CliRunner().invoke(app, ["certify", str(tmp_path / "no-base"), "--data",
                                   str(tmp_path / "no.csv"), "-o", str(out), *flags])
    assert res.exit_code == 2, res.output[-800:]
    assert res.stderr.strip() == f"error: {line}"
    assert not out.exists()


API = [
    (dict(draws=0), "draws=0: expected a whole number >= 1"),
    (dict(proximal=math.nan), "proximal=nan: expected a number in [0, 1000000]"),
    (dict(tune_rows=-1), "tune_rows=-1: expected a whole number >= 0"),
    (dict(seed=-1), "seed=-1: expected a whole number in [0, 4294967294]"),
    (dict(post_lr=0.0), "post_lr=0.0: expected a number in (0, 1]"),
    (dict(prior_epochs=10 ** 18), f"prior_epochs={10 ** 18}: expected a whole number in "
                                  "[0, 1000]"),
    (dict(posterior="nope"), "posterior='nope': expected one of proximal, bound, subspace"),
]


@pytest.mark.parametrize("given, line", API, ids=[str(g) for g, _ in API])
def test_api_refuses_a_bad_setting_by_its_keyword(given, line):
    with pytest.raises(BoundcalcError) as got:
        CertifyConfig(**given)
    assert str(got.value) == line and got.value.exit_code == 2


def test_the_settings_are_frozen_and_keep_their_recorded_form():
    cfg = CertifyConfig(sigmas=[0.01], prior_epochs=3)
    assert cfg.sigmas == (0.01,)
    with pytest.raises(FrozenInstanceError):
        cfg.draws = 5
    # report.json's "settings": the same keys, in the same order, as before the records
    assert list(asdict(CertifyConfig())) == [
        "prior_fraction", "seed", "prior_epochs", "prior_lr", "post_epochs", "post_lr",
        "proximal", "batch_size", "max_length", "text_column", "label_column", "device",
        "sigmas", "draws", "tune_rows", "tune_draws", "group_draws", "tune_shape", "compress",
        "levels",
        "tokenizer", "posterior", "bound_epochs", "bound_lr", "bound_sigma", "bound_init",
        "duplicates", "heldout_draws", "subspace_rank", "subspace_layers", "subspace_sigma",
        "subspace_epochs", "subspace_lr", "subspace_sigma_grid", "subspace_fit_epochs",
        "subspace_fit_lr"]


@pytest.mark.parametrize("name", ["draws", "tune_draws"])
def test_certify_leaves_no_measure_count_to_sizing(name):
    """MeasureOptions leaves σ, draws and tune draws to the data side when None (issue 44);
    certify's settings declare the same fields by reference but always fix them before S is
    read, so None is refused there (it was accepted once the measure fields allowed None).
    ``sigmas``, ``group_draws`` and ``tune_rows`` None are left to certify's plan rule
    (test_plan_rule.py), which fills them before measure is asked."""
    with pytest.raises(BoundcalcError, match=f"^{name}=None: expected"):
        CertifyConfig(**{name: None})


def test_certify_measures_with_nothing_sized_by_the_machine():
    """certify fixes every count of its measure step, the rows the σ searches read included
    (its tune rows, all of them): nothing depends on this machine's calibrated speed, so the
    same inputs certify the same value on a fast and a loaded machine."""
    from boundcalc.measure.data import sizing

    from boundcalc.certify.plan_rule import Facts

    short = Facts(weights=70_000, groups=8, rows=2000, tokens_per_row=12)  # any: the rule
    for cfg in (CertifyConfig(), CertifyConfig(tune_rows=0)):               # reads no speed
        cfg, _ = cfg.resolve(short)
        opts = cfg.measure_options("tune.jsonl" if cfg.tune_rows else None)
        assert not any(sizing.auto(opts).values()), sizing.auto(opts)
    assert CertifyConfig(tune_rows=50).resolve(short)[0].measure_options(
        "t.jsonl").search_rows == 50


def test_the_subspace_settings_reach_the_subspace_spec():
    """certify's subspace_* settings are the SubspaceSpec the step trains (every field mapped,
    the grid as a tuple; no grid: s_P fixed, J = 1)."""
    from boundcalc.certify.subspace_posterior import spec_of

    cfg = CertifyConfig(posterior="subspace", subspace_rank=3, subspace_layers="attention",
                        subspace_sigma=0.1, subspace_epochs=5, subspace_lr=0.02,
                        subspace_sigma_grid=[0.05, 0.1, 0.2], subspace_fit_epochs=4,
                        subspace_fit_lr=0.003, seed=7)
    s = spec_of(cfg)
    assert (s.rank, s.layers, s.sigma_prior, s.epochs, s.lr, s.seed) == \
        (3, "attention", 0.1, 5, 0.02, 7)
    assert s.sigma_grid == (0.05, 0.1, 0.2) and s.prior_grid == 3
    assert (s.fit_epochs, s.fit_lr) == (4, 0.003)
    assert spec_of(CertifyConfig(posterior="subspace")).prior_grid == 1
    with pytest.raises(BoundcalcError, match="subspace_fit_epochs"):
        CertifyConfig(subspace_fit_epochs=2)  # needs --posterior subspace
