"""Every hint that tells a user how to get a missing value names a command and flags that
exist, and says "no boundcalc command measures it" only of values no measurement code writes
(issue 30: `pac_bayes_kl_gaussian_groups_mc` said so of gibbs_risk_groups, which
`measure --tune-data` writes)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest
import typer

import boundcalc
from boundcalc.binding import how_to_give
from boundcalc.cli import app
from boundcalc.cli.words import CLI_WORDS
from boundcalc.hints import NO_COMMAND, source_of
from boundcalc.optimize.compare import what_lacks
from boundcalc.words import use_words

ROOT = Path(boundcalc.__file__).resolve().parent


def _cli() -> dict[str, set[str]]:
    """Each command of the CLI and its option names, read from the typer app itself."""
    group = typer.main.get_command(app)
    return {name: {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
            for name, cmd in group.commands.items()}


def _written_keys() -> set[str]:
    """Every string constant in the measurement code and the measure command: the names a
    stats file's values are written under are among them."""
    out: set[str] = set()
    for path in [*(ROOT / "measure").rglob("*.py"), ROOT / "cli" / "measure_cmd.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                out.add(node.value)
    return out


def _check_named(hint: str, cli: dict[str, set[str]], where: str) -> None:
    """Each 'boundcalc CMD' / 'CMD --flag' / 'CMD MODEL' / leading 'CMD' names a command; each --flag after it is one of
    that command's options (a flag before any command: an option of compare and optimize)."""
    hint = hint.replace(NO_COMMAND, "")
    api = re.search(r"boundcalc\.measure\.measure\(([^)]*)\)", hint)
    if api:
        from boundcalc.measure import measure

        params = inspect.signature(measure).parameters
        for kw in re.findall(r"(\w+)=", api.group(1)):
            assert kw in params, (where, kw)
        hint = hint.replace(api.group(0), "")
    tokens = hint.replace("`", " ").replace("(", " ").replace(")", " ").replace(",", " ").split()
    command = None
    for i, tok in enumerate(tokens):
        following = tokens[i + 1] if i + 1 < len(tokens) else ""
        if tok == "boundcalc" or (tok in cli and (i == 0 or following.startswith("--")
                                                  or following == "MODEL")):
            name = tokens[i + 1] if tok == "boundcalc" else tok
            assert name in cli, (where, f"no command '{name}'", hint)
            command = name
        elif tok.startswith("--"):
            flag = tok.split("=")[0]
            owners = [command] if command else ["compare", "optimize"]
            for o in owners:
                assert flag in cli[o], (where, f"'{o}' has no option {flag}", hint)


def test_every_hint_names_a_command_and_flags_that_exist(registry):
    """The hints as the CLI prints them (its words: flags) are checked against the CLI."""
    cli = _cli()
    written = _written_keys()
    seen_no_command = seen_flags = 0
    for entry in registry:
        for name, spec in entry.symbols.items():
            where = f"{entry.id}.{name}"
            with use_words(CLI_WORDS):
                fix = what_lacks(entry, name, None)["fix"]
                give = how_to_give(spec)
            seen_flags += "--" in fix
            _check_named(fix, cli, where)
            _check_named(give, cli, where)
            stat = spec.stat or ""
            if NO_COMMAND in fix or NO_COMMAND in give:
                seen_no_command += 1
                key = stat.split(".", 1)[1]
                assert key not in written, (where, f"the measurement code writes '{key}'")
            elif stat and source_of(stat) and not stat.startswith(("matrix.", "model.")):
                # a command is named: the measurement code has a value of that name
                assert stat.split(".", 1)[1] in written, (where, stat)
    assert seen_no_command  # some values really have no command (KL, a Rademacher term)
    assert seen_flags  # the hints were read in the CLI's words


def test_the_per_group_gibbs_risk_points_to_tune_data(registry):
    """The wrong hint of issue 30, item 1."""
    entry = registry.get("pac_bayes_kl_gaussian_groups_mc")
    for sym in ("E_hat", "k"):
        with use_words(CLI_WORDS):
            fix = what_lacks(entry, sym, None)["fix"]
            assert "--tune-data" in fix and "--sigma-groups" in fix and NO_COMMAND not in fix
            assert "--tune-data" in how_to_give(entry.symbols[sym])
        # the Python API's words: the same hint by keyword
        fix = what_lacks(entry, sym, None)["fix"]
        assert fix == ("measure(MODEL, init=INIT, data=DATA, tune_data=TUNE) "
                       "(or sigma_groups)"), fix
    shape = registry.get("spectrum_adaptive_ours")
    assert what_lacks(shape, "L", None)["fix"] == "measure(MODEL)"  # the model section
    with use_words(CLI_WORDS):
        assert what_lacks(shape, "L", None)["fix"] == "boundcalc measure MODEL"


@pytest.mark.parametrize("hint", ["certify-me --data DATA", "boundcalc measure --no-such-flag"])
def test_the_checker_catches_a_made_up_command_or_flag(hint):
    with pytest.raises(AssertionError):
        _check_named(hint, _cli(), "made up")
