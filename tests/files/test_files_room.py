"""The shared helpers of the redesign: one number check, one table reader, one prior cost,
one SymPy-style printer (docs/architecture.md). Each is checked against a hand computation."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from boundcalc.cli.sets import parse_sets
from boundcalc.engine.tree import Node, sympy_text
from boundcalc.errors import BoundcalcError
from boundcalc.files import finite_number, stream_rows
from boundcalc.registry.schema import PriorSpec
from boundcalc.stats import Stats, StatsError, stats_from_json


def test_one_number_check_for_the_command_line_and_the_stats_file():
    """1e400 parses to inf: refused in a --set array (it used to pass through as inf) and in a
    stats file, with one line naming where it came from."""
    with pytest.raises(BoundcalcError, match=r"--set C: expected a finite number, got inf"):
        parse_sets(["C=[1e400, 2]"])
    with pytest.raises(BoundcalcError, match=r"--set C: expected a number, got bool True"):
        parse_sets(["C=[1, true]"])
    assert parse_sets(["C=[1, 2.5]", "n=60000"]) == {"C": [1, 2.5], "n": 60000.0}
    with pytest.raises(StatsError, match=r"scalars.n.*finite"):
        stats_from_json({**Stats().to_json(), "scalars": {"n": {"value": 1e400}}})
    assert finite_number(3, "x", BoundcalcError) == 3.0
    with pytest.raises(BoundcalcError, match="x: expected a non-negative number, got -1.0"):
        finite_number(-1, "x", BoundcalcError, nonneg=True)


def test_streamed_rows_of_csv_tsv_and_parquet(tmp_path):
    tsv = tmp_path / "t.tsv"
    tsv.write_text("a\tb\n1\tx\n\n2\n")
    columns, rows = stream_rows(tsv, BoundcalcError, "table", bytes_per_byte=1, bytes_per_row=1)
    assert columns == ["a", "b"] and list(rows) == [{"a": "1", "b": "x"}, {"a": "2", "b": ""}]
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2,3\n")
    _, rows = stream_rows(bad, BoundcalcError, "table", bytes_per_byte=1, bytes_per_row=1)
    with pytest.raises(BoundcalcError, match="line 2 has 3 fields, the header 2"):
        list(rows)
    pq = tmp_path / "t.parquet"
    pd.DataFrame({"a": [1.5, None], "b": ["x", "y"]}).to_parquet(pq)
    columns, rows = stream_rows(pq, BoundcalcError, "table", bytes_per_byte=1, bytes_per_row=1,
                                batch=1)
    got = list(rows)
    assert columns == ["a", "b"] and got[0] == {"a": 1.5, "b": "x"} and math.isnan(got[1]["a"])
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(BoundcalcError, match="the table is empty"):
        stream_rows(tmp_path / "empty.csv", BoundcalcError, "table", bytes_per_byte=1,
                    bytes_per_row=1)


def test_the_dziugaite_roy_cost_for_one_j_and_for_many():
    hand = [math.log(math.pi ** 2 / 6), 2 * math.log(2) + math.log(math.pi ** 2 / 6),
            2 * math.log(40) + math.log(math.pi ** 2 / 6)]
    assert [PriorSpec.cost(j) for j in (1, 2, 40)] == pytest.approx(hand, rel=1e-15)
    assert PriorSpec.cost(np.array([1, 2, 40])) == pytest.approx(hand, rel=1e-15)
    assert PriorSpec.cost(np.int64(2)) == pytest.approx(hand[1], rel=1e-15)


def test_the_sympy_style_printer_of_plain_trees():
    n, delta = Node("Symbol", value="n"), Node("Symbol", value="delta")
    sqrt_n = Node("Pow", (n, Node("Rational", value=(1, 2))))
    inv_delta = Node("Pow", (delta, Node("Integer", value=-1)))
    term = Node("log", (Node("Mul", (Node("Integer", value=2), sqrt_n, inv_delta)),))
    assert sympy_text(term) == "log(2*sqrt(n)/delta)"
