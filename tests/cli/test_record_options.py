"""Typer options generated from a declared record (boundcalc/cli/record_options.py): a field's
flag, default and help come from its declaration; a gated record (``--compress``) is built only
when its gate is given; a sequence field with a separator (``--levels 1,16``) is one word whose
items are read as the field's kind, and a word that is not one reaches the record as typed, to
be refused there in its one wording."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from boundcalc.cli.record_options import _items, takes
from boundcalc.measure.compress.options import CompressOptions


def _app(seen: list) -> typer.Typer:
    app = typer.Typer()

    @app.command()
    @takes((CompressOptions, ("select", "levels_grid", "quantizer"), "select"))
    def run(name: str = typer.Argument("x"), values: dict = None) -> None:
        seen.append((name, values[CompressOptions]))

    return app


def test_a_gated_record_and_a_joined_sequence_by_hand():
    seen: list = []
    app = _app(seen)
    assert CliRunner().invoke(app, ["a"]).exit_code == 0  # no gate: no record
    assert CliRunner().invoke(app, ["b", "--compress", "delta", "--levels", "1, 16"]
                              ).exit_code == 0
    assert CliRunner().invoke(app, ["c", "--compress", "all", "--quantizer", "kmeans"]
                              ).exit_code == 0
    assert seen == [("a", None), ("b", {"select": "delta", "levels_grid": (1, 16),
                                        "quantizer": "uniform"}),
                    ("c", {"select": "all", "quantizer": "kmeans"})]
    built = CompressOptions(**seen[1][1])
    assert built.levels_grid == (1, 16) and built.select == "delta"


def test_the_items_of_one_word_keep_what_is_not_of_the_kind():
    assert _items("2,4,8", ",", int) == (2, 4, 8)
    assert _items("2,1.5,x,", ",", int) == (2, 1.5, "x")  # refused by the record, not here
    assert _items("", ",", int) == ()
