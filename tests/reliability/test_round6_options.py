"""Reliability, round six (issue 52), the options' classes: bound options without
``--posterior bound`` (1), ``--tune-rows 0`` and ``--bound-epochs 0`` with the bound posterior
(2), the examples' arguments (6), an empty string read as the default (7), a refusal naming the
wrong option (8), ``compare --set`` of an unknown symbol (9). Each refused with one line and the
exit code of its kind, before any work, by the rule declared once (the options records,
:class:`boundcalc.options.Needs`), in the same words through the CLI and the API."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from boundcalc import words
from boundcalc.certify.config import CertifyConfig
from boundcalc.cli.words import CLI_WORDS, flag
from boundcalc.errors import BoundcalcError
from boundcalc.options import Record, Spec, declared, spec
from tests._cli_helpers import invoke
from tests._measure_helpers import single_thread
from tests.reliability._rel_helpers import one_line_error

ROOT = Path(__file__).resolve().parents[2]
CERTIFY = ["certify", "base", "--data", "d.csv"]  # nothing need exist: the options come first

# the bound posterior's options, read from the record (a field added there is tried too)
BOUND = {f.name: f.default for f, s in declared(CertifyConfig) if f.name.startswith("bound_")}
# a value other than the default, typed as a command line gives it
OTHER = {"bound_epochs": "5", "bound_lr": "0.01", "bound_sigma": "groups",
         "bound_init": "model"}


def test_every_bound_option_is_declared_with_its_route():
    assert set(BOUND) == {"bound_epochs", "bound_lr", "bound_sigma", "bound_init"}
    assert set(OTHER) == set(BOUND)
    for f, s in declared(CertifyConfig):
        if f.name in BOUND:
            assert (s.needs.name, s.needs.values) == ("posterior", ("bound",)), f.name


@pytest.mark.parametrize("name", sorted(OTHER))
def test_a_bound_option_without_posterior_bound_is_refused_cli(name, tmp_path):
    res = invoke(*CERTIFY, "-o", tmp_path / "o", flag(name), OTHER[name])
    err = one_line_error(res, 2)
    assert err == (f"error: {flag(name)} does nothing with --posterior proximal; leave "
                   f"{flag(name)} out or give --posterior bound")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("name", sorted(OTHER))
def test_a_bound_option_given_at_its_default_is_refused_too(name, tmp_path):
    """Spelled on the command line it was meant to act: refused even at the default value."""
    res = invoke(*CERTIFY, "-o", tmp_path / "o", flag(name), str(BOUND[name]))
    assert flag(name) in one_line_error(res, 2)


@pytest.mark.parametrize("name", sorted(OTHER))
def test_a_bound_field_without_posterior_bound_is_refused_api(name):
    value = type(BOUND[name])(OTHER[name])
    with pytest.raises(BoundcalcError) as got:
        CertifyConfig(**{name: value})
    assert str(got.value) == (f"{name} does nothing with posterior=proximal; leave {name} out "
                              "or give posterior=bound")
    # the same words through the CLI's front end
    with words.use_words(CLI_WORDS), pytest.raises(BoundcalcError) as cli:
        CertifyConfig(**{name: value})
    assert str(cli.value).startswith(f"{flag(name)} does nothing with --posterior proximal")
    assert CertifyConfig(posterior="bound", **{name: value}).posterior == "bound"


def test_a_new_route_declares_its_options_and_the_rule_follows():
    from boundcalc.options import Needs

    @dataclass(frozen=True)
    class _Routes(Record):
        """A record with a route added later (the subspace posterior): its option names it."""

        posterior: str = spec("proximal", Spec(str, choices=("proximal", "bound", "subspace"),
                                               help="the route"))
        subspace_dim: int = spec(8, Spec(int, low=1, needs=Needs("posterior", ("subspace",)),
                                         help="dimension of the subspace"))

    assert _Routes(posterior="subspace", subspace_dim=4).subspace_dim == 4
    assert _Routes(posterior="bound").subspace_dim == 8  # at its default: nothing said
    with pytest.raises(BoundcalcError) as got:
        _Routes(posterior="bound", subspace_dim=4)
    assert str(got.value) == ("subspace_dim does nothing with posterior=bound; leave "
                              "subspace_dim out or give posterior=subspace")


def test_bound_posterior_with_tune_rows_zero_is_refused_first(tmp_path):
    res = invoke(*CERTIFY, "-o", tmp_path / "o", "--posterior", "bound", "--tune-rows", "0")
    err = one_line_error(res, 2)
    assert "--tune-rows 0" in err and "--posterior bound" in err and "--tune-rows > 0" in err
    assert not (tmp_path / "o").exists()
    with pytest.raises(BoundcalcError, match=r"tune_rows=0 leaves out; give tune_rows > 0"):
        CertifyConfig(posterior="bound", tune_rows=0)


def test_bound_epochs_zero_is_outside_the_one_declaration(tmp_path):
    """The declared range starts at 1, as the training's own check (one rule)."""
    from boundcalc.measure.data.bound_posterior import BoundTraining

    res = invoke(*CERTIFY, "-o", tmp_path / "o", "--posterior", "bound", "--bound-epochs", "0")
    assert one_line_error(res, 2) == \
        "error: --bound-epochs 0: expected a whole number in [1, 1000]"
    low = next(s.low for f, s in declared(CertifyConfig) if f.name == "bound_epochs")
    with pytest.raises(BoundcalcError, match="epochs"):
        BoundTraining(epochs=low - 1).check()
    BoundTraining(epochs=low).check()


def test_search_options_without_a_search_api_and_cli_agree(tmp_path):
    with pytest.raises(BoundcalcError) as api:
        CertifyConfig(tune_rows=0, group_draws=9)
    res = invoke(*CERTIFY, "-o", tmp_path / "o", "--tune-rows", "0", "--group-draws", "9")
    assert one_line_error(res, 2) == ("error: --group-draws does nothing with --tune-rows 0 "
                                      "(no σ search); leave --group-draws out or give "
                                      "--tune-rows > 0")
    assert str(api.value) == ("group_draws does nothing with tune_rows=0 (no σ search); leave "
                              "group_draws out or give tune_rows > 0")


# ---- 7. an empty string is a value given, refused ------------------------------------------

@pytest.mark.parametrize("args, named", [
    (["--time-budget", "", "measure", "m"], "time budget ''"),
    (["--memory-budget", "", "measure", "m"], "memory budget ''"),
    (["measure", "m", "--device", ""], "--device ''"),
    (["certify", "b", "--data", "d.csv", "--device", ""], "--device ''"),
    (["certify", "b", "--data", "d.csv", "--text-column", ""], "--text-column ''"),
    (["certify", "b", "--data", "d.csv", "--tokenizer", ""], "--tokenizer ''"),
])
def test_an_empty_string_is_refused_not_read_as_absent(args, named, tmp_path):
    res = invoke(*args, "-o" if "certify" in args else "--output", tmp_path / "o")
    err = one_line_error(res, 2)
    assert named in err, err
    assert not (tmp_path / "o").exists()


STR_FIELDS = [(r, f.name) for r in (CertifyConfig,) for f, s in declared(r)
              if s.kind is str and s.choices is None]


@pytest.mark.parametrize("record, name", STR_FIELDS, ids=[n for _, n in STR_FIELDS])
def test_every_text_option_refuses_empty_text_in_one_wording(record, name, tmp_path):
    with pytest.raises(BoundcalcError) as api:
        record(**{name: ""})
    assert str(api.value) == f"{name}='': expected non-empty text"
    res = invoke(*CERTIFY, "-o", tmp_path / "o", flag(name), "")
    assert one_line_error(res, 2) == f"error: {flag(name)} '': expected non-empty text"


# ---- 8. the refusal names the option that makes the work large -----------------------------

def test_gibbs_samples_is_named_when_it_makes_the_plan_too_long(tiny, tmp_path):
    out = tmp_path / "s.json"
    with single_thread():
        res = invoke("-q", "measure", tiny / "cls", "--data", tiny / "d.csv", "--text-column",
                     "sentence", "--sigma", "0.01", "--draws", "1", "--gibbs-samples",
                     str(10 ** 9), "--hessian-probes", "0", "-o", out)
    err = one_line_error(res, 8)
    assert err.startswith(f"error: --gibbs-samples {10 ** 9} × --draws 1"), err
    assert not out.exists()


# ---- 9. compare refuses an unknown symbol as optimize and evaluate do ----------------------

def test_compare_refuses_an_unknown_symbol(group_stats):
    path, _ = group_stats
    err = one_line_error(invoke("compare", "--stats", path, "--set", "nosuch=1"), 4)
    assert err.startswith("error: unknown symbol 'nosuch'"), err
    opt = one_line_error(invoke("optimize", "pac_bayes_kl_gaussian_mc", "--stats", path,
                                "--set", "nosuch=1"), 4)
    assert "unknown symbol 'nosuch'" in opt
    assert invoke("compare", "--stats", path, "--set", "delta=0.05", "--brief").exit_code == 0


# ---- 6. the examples' arguments ------------------------------------------------------------

def _example(name: str):
    spec_ = importlib.util.spec_from_file_location(f"_example_{name}",
                                                   ROOT / "examples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name, args, words_", [
    ("language_model", ["--train-steps", "0"], "--train-steps 0: expected a whole number >= 1"),
    ("language_model", ["--train-steps", "-1"], "--train-steps -1: expected a whole number >= 1"),
    ("language_model", ["--draws", "-1"], "--draws -1: expected a whole number >= 1"),
    ("language_model", ["--out", "FILE"], "is a file, not a folder"),
    ("language_model", ["--out", "FILE/inner"], "is a file, not a folder"),
    ("text_classifier", ["--out", "FILE"], "is a file, not a folder"),
])
def test_the_examples_refuse_bad_arguments_before_any_work(name, args, words_, tmp_path,
                                                           capsys, monkeypatch):
    mod = _example(name)
    study = sys.modules.get(f"studies.{name}") or __import__(f"studies.{name}",
                                                               fromlist=["run"])

    def never(*a, **k):
        raise AssertionError("the example started its run")

    monkeypatch.setattr(study, "run", never)
    (tmp_path / "FILE").write_text("mine")
    args = [a.replace("FILE", str(tmp_path / "FILE")) for a in args]
    if "--out" not in args:
        args += ["--out", str(tmp_path / "o")]
    assert mod.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err and words_ in err, err
    assert (tmp_path / "FILE").read_text() == "mine"
