"""The library names options in its caller's words (boundcalc/words.py, boundcalc/cli/words.py),
and no string outside cli/ spells a --flag."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from boundcalc import words
from boundcalc.cli.words import CLI_WORDS, flag

PACKAGE = Path(__file__).resolve().parents[2] / "boundcalc"
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")


def _docstring_ids(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings or bare string statements."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str):
            out.add(id(node.value))
    return out


def flag_strings(root: Path, skip: tuple[str, ...] = ("cli",)) -> list[str]:
    """Every ``--flag`` in a string constant (f-strings' literal parts included, docstrings and
    bare string statements left out) of the modules under ``root``, outside ``skip``, as
    ``path:line: --flag``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] in skip:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstring_ids(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and id(node) not in docs:
                for m in FLAG.finditer(node.value):
                    found.append(f"{rel}:{node.lineno}: {m.group()}")
    return sorted(found, key=lambda s: (s.split(':')[0], int(s.split(':')[1])))


def test_the_api_names_options_by_keyword():
    assert words.option("tune_data") == "tune_data"
    assert words.option("sigma", 0.5) == "sigma=0.5"
    assert words.command("measure MODEL data=DATA draws=K") == "measure(MODEL, data=DATA, draws=K)"
    assert words.command("compare stats=STATS brief=") == "compare(stats=STATS, brief=True)"
    assert words.set_value("n") == "values={'n': VALUE}"
    assert words.set_value("sigma", "[…]") == "values={'sigma': […]}"


def test_the_cli_names_options_by_flag_inside_its_scope_only():
    with words.use_words(CLI_WORDS):
        assert words.option("tune_data") == "--tune-data"
        assert words.option("delta_mc", "2e-3") == "--delta-mc 2e-3"
        assert words.option("output") == "-o"
        assert words.option("n_bootstrap", 10) == "--bootstrap 10"
        assert words.set_value("n") == "--set n=VALUE"
        assert words.keyword("tune_data", 3) == "tune_data=3"  # stored text: never a flag
        assert (words.command("measure MODEL data=DATA init=INIT brief=")
                == "boundcalc measure MODEL --data DATA --init INIT --brief")
    assert words.option("tune_data") == "tune_data"
    assert flag("hessian_probes") == "--hessian-probes"


def _named_options(root: Path) -> set[str]:
    """The keyword names the library passes to words.option/keyword (literal first arguments)."""
    names = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and node.args \
                    and getattr(node.func, "attr", getattr(node.func, "id", None)) in (
                        "option", "keyword") \
                    and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                names.add(node.args[0].value)
    return names


def test_every_option_the_library_names_is_a_flag_of_the_cli():
    """option(name) in the CLI's words is a flag some command has: the words the library
    prints in a terminal are words a user can type (a command's flag, or one of the options
    every command takes: --memory-budget, --replace, ...)."""
    import typer.main

    from boundcalc.cli import app as cli_app

    group = typer.main.get_command(cli_app)
    flags = {o for cmd in group.commands.values() for p in cmd.params for o in p.opts}
    flags |= {o for p in group.params for o in p.opts}
    missing = sorted(n for n in _named_options(PACKAGE) | {"values"} if flag(n) not in flags)
    assert not missing, missing


def test_the_scanner_sees_a_flag_in_a_message_but_not_in_a_docstring(tmp_path):
    (tmp_path / "m.py").write_text('"""Module: see --init."""\n'
                                   'def f(x):\n    """Uses --draws."""\n'
                                   '    raise ValueError(f"--sigma {x}: bad")\n'
                                   'HINT = "give --init-data or -o"\n')
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "c.py").write_text('X = "--draws"\n')
    assert flag_strings(tmp_path) == ["m.py:4: --sigma", "m.py:5: --init-data"]


def test_no_string_outside_cli_spells_a_flag():
    found = flag_strings(PACKAGE)
    assert not found, f"{len(found)} --flag strings outside cli/:\n" + "\n".join(found[:60])


def test_library_messages_name_options_in_the_words_of_the_caller():
    """The same message, built by an API call and inside the CLI's scope; stored text never
    spells a flag."""
    from boundcalc.errors import CheckpointError
    from boundcalc.plan import bootstrap_plan
    from boundcalc.prior_spec import hint, parse_centre

    with pytest.raises(CheckpointError, match=r"^init 'random:x' is not a centre"):
        parse_centre("random:x")
    assert bootstrap_plan(10, 3, 1.0)[0].option == "n_bootstrap=10 (× 3 entries)"
    assert "init=random:SEED" in hint() and "--" not in hint()
    with words.use_words(CLI_WORDS):
        with pytest.raises(CheckpointError, match=r"^--init 'random:x' is not a centre"):
            parse_centre("random:x")
        assert bootstrap_plan(10, 3, 1.0)[0].option == "--bootstrap 10 (× 3 entries)"
        assert "--init random:SEED" in hint() and "--init zero" in hint()
        stored = hint(stored=True)  # the note a stats file keeps
    assert stored == hint() and "--" not in stored
