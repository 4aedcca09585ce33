"""Running the CLI in-process at a given terminal width, and reading its tables as words."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from boundcalc.cli import app

runner = CliRunner()
BOX = re.compile(r"[│┃╭╮╰╯─━┏┓┗┛┡┩┣┫╇╈┼├┤┬┴└┘┌┐═║]")


def invoke(*args, columns: int = 80):
    """``boundcalc ARGS`` in-process, as a terminal of ``columns`` columns would show it."""
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": str(columns)})


def words(text: str) -> set[str]:
    """The words of a rich table's text, box-drawing characters removed."""
    return set(BOX.sub(" ", text).split())
