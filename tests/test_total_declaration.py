"""Total declaration (issue 53 item 2, scikit-learn's check of every parameter as the model):
every field of every options record is declared (:func:`boundcalc.options.spec`: type, range,
help) or named below with the reason it is not; every parameter of every command is a field of
a record the command is generated from (:func:`boundcalc.cli.record_options.takes`) or named
below with the reason it is written by hand. A parameter added without either fails here
(shown by a command added in the test). And the defaults that were written twice agree, through
the API and the CLI."""

from __future__ import annotations

from dataclasses import fields

import pytest
import typer
from typer.main import get_command

from boundcalc.certify.config import CertifyConfig
from boundcalc.cli import app
from boundcalc.measure.compress.options import CompressOptions
from boundcalc.measure.data.gibbs import MonteCarlo
from boundcalc.measure.data.options import BoundTraining, MeasureOptions
from boundcalc.optimize.core import Options
from boundcalc.options import declared

RECORDS = (MeasureOptions, CertifyConfig, CompressOptions, Options, MonteCarlo, BoundTraining)

# record field → why it has no declaration (checked elsewhere, by its own parser)
UNDECLARED_FIELDS = {
    "MeasureOptions.head_init": "'zero' or 'random:SEED', parsed and refused by "
                                "prior_spec.parse_head_init before any model is read",
}

# the reasons a command's parameter is written by hand (each parameter below names one)
PATH = "a path or model name: checked by require_paths/input_files (type, existence) before " \
       "anything slow, and by the reader that opens it"
SWITCH = "a switch (true/false): typer accepts no other value"
ENTRY = "an entry id or symbol: checked against the registry (unknown → one line)"
SETS = "NAME=VALUE items: parsed by cli/sets.parse_sets, each value by the entry's domain"
GLOBAL = "a global option read before any command (the budgets: parse_size/parse_duration, " \
         "'' refused; the formula folders: by the loader)"
NUMBER = "a number with a typer range (min/max): refused by typer in one line, exit 2"
CHECKED = "checked by hand in its command, in one line, before any work (a named function)"
HEAVY = "declared in optimize.core.Options (what_if, target, shrink: the record checks the " \
        "value); written again in the CLI only because importing optimize/ costs seconds at " \
        "startup: the defaults are compared below"

HAND_WRITTEN = {
    "(global)": {"version": SWITCH, "formulas": GLOBAL, "replace": SWITCH, "quiet": SWITCH,
                 "memory_budget": GLOBAL, "time_budget": GLOBAL},
    "version": {},
    "list": {"family": ENTRY, "kind": ENTRY, "requires": ENTRY, "wide": SWITCH,
             "json_out": SWITCH},
    "show": {"entry_id": ENTRY, "json_out": SWITCH},
    "evaluate": {"entry_id": ENTRY, "sets": SETS, "fixed": ENTRY, "stats": PATH,
                 "json_out": SWITCH},
    "latex": {"entry_id": ENTRY, "output": PATH, "sets": SETS, "stats": PATH,
              "json_out": SWITCH},
    "measure": {"model": PATH, "init": PATH, "head_init": CHECKED, "data": PATH,
                "prior_data_dependent": SWITCH, "n_heads": NUMBER, "output": PATH,
                "as_json": SWITCH, "show_map": SWITCH},
    "optimize": {"entry_id": ENTRY, "sets": SETS, "stats": PATH, "json_out": SWITCH,
                 "latex": PATH, "plot": PATH, "report": PATH, "target": HEAVY,
                 "shrink": HEAVY, "what_if": HEAVY, "test_error": CHECKED},
    "compare": {"stats": PATH, "model": PATH, "output": PATH, "sets": SETS,
                "test_error": CHECKED, "json_out": SWITCH, "brief": SWITCH},
    "sweep": {"manifest": PATH, "out": PATH, "ray": SWITCH, "ray_address": CHECKED,
              "workers": NUMBER, "split_layers": SWITCH, "target": CHECKED,
              "bootstrap": NUMBER, "quiet": SWITCH, "json_out": SWITCH},
    "correlate": {"table": PATH, "target": CHECKED, "hparams": CHECKED, "bootstrap": NUMBER,
                  "confidence": CHECKED, "seed": NUMBER, "out": PATH, "json_out": SWITCH},
    "certify": {"base": PATH, "data": PATH, "test_data": PATH, "out": PATH,
                "as_json": SWITCH},
    "holdout": {"model": PATH, "test_data": PATH, "as_json": SWITCH, "latex": PATH},
}


def undeclared_fields(records=RECORDS) -> list[str]:
    """``Record.field`` of every field without a declaration and without a listed reason."""
    out = []
    for record in records:
        have = {f.name for f, _ in declared(record)}
        out += [f"{record.__name__}.{f.name}" for f in fields(record)
                if f.name not in have and f"{record.__name__}.{f.name}" not in UNDECLARED_FIELDS]
    return out


def undeclared_parameters(typer_app: typer.Typer, listed=None) -> list[tuple[str, str]]:
    """(command, parameter) of every parameter neither generated from a record the command
    takes nor listed (with its reason) in ``listed``."""
    listed = HAND_WRITTEN if listed is None else listed
    group = get_command(typer_app)
    out = [("(global)", p.name) for p in group.params
           if p.name not in listed.get("(global)", {})]
    for name, cmd in group.commands.items():
        records = getattr(cmd.callback, "records", {})
        generated = set().union(*records.values()) if records else set()
        for r in records:  # a generated option is a declared field of its record
            assert records[r] <= {f.name for f, _ in declared(r)}, (name, r)
        out += [(name, p.name) for p in cmd.params
                if p.name not in generated and p.name not in listed.get(name, {})]
    return out


def test_every_field_of_every_record_is_declared():
    assert undeclared_fields() == []


def test_every_parameter_of_every_command_is_declared_or_listed():
    assert undeclared_parameters(app) == []


def test_the_list_holds_only_parameters_that_exist():
    group = get_command(app)
    have = {"(global)": {p.name for p in group.params}} | {
        n: {p.name for p in c.params} for n, c in group.commands.items()}
    stale = [(c, p) for c, ps in HAND_WRITTEN.items() for p in ps if p not in have.get(c, ())]
    assert stale == []


def test_a_parameter_added_without_a_declaration_fails():
    """The check fails on a command with a parameter nobody declared, and on a record field
    without a declaration (both added here, as a careless change would add them)."""
    from dataclasses import dataclass, field

    from boundcalc.options import Record

    extra = typer.Typer(add_completion=False)

    @extra.command("certify")
    def certify_cmd(base: str, mystery: int = typer.Option(3, "--mystery")) -> None:
        """A command as a change would add it."""

    @extra.command("show")
    def show_cmd(entry_id: str, json_out: bool = False) -> None:
        """Listed parameters only."""

    listed = {"certify": {"base": PATH}, "show": {"entry_id": ENTRY, "json_out": SWITCH}}
    assert undeclared_parameters(extra, listed) == [("certify", "mystery")]

    @dataclass(frozen=True)
    class Careless(Record):
        knob: int = field(default=3)

    assert undeclared_fields((Careless,)) == ["Careless.knob"]


# ---- the defaults that were written twice agree (issue 53) ---------------------------------

def _cli_default(command: str, name: str):
    cmd = get_command(app).commands[command]
    return next(p.default for p in cmd.params if p.name == name)


def test_what_if_agrees_between_the_record_and_the_command():
    assert Options().what_if is True
    assert _cli_default("optimize", "what_if") is Options().what_if
    assert _cli_default("optimize", "target") is None is Options().target
    assert _cli_default("optimize", "shrink") is None is Options().shrink


def test_the_bound_training_defaults_agree_with_certify():
    from boundcalc.measure.data.bound_posterior import BoundTraining

    cfg, bt = CertifyConfig(), BoundTraining()
    assert (cfg.bound_sigma, cfg.bound_init, cfg.bound_epochs, cfg.bound_lr) == \
        (bt.sigma, bt.init, bt.epochs, bt.lr_mu)
    for name, default in (("bound_sigma", bt.sigma), ("bound_init", bt.init)):
        assert _cli_default("certify", name) == default


@pytest.mark.parametrize("value, words", [(0, "whole number in [1, 1000]")])
def test_bound_epochs_has_one_range(value, words):
    from boundcalc.errors import BoundcalcError
    from boundcalc.measure.data.bound_posterior import BoundTraining

    with pytest.raises(BoundcalcError, match=r"\[1, 1000\]"):
        CertifyConfig(posterior="bound", bound_epochs=value)
    with pytest.raises(BoundcalcError):
        BoundTraining(epochs=value).check()
