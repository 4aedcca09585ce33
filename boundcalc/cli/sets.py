"""Parsing of ``--set NAME=VALUE`` options (VALUE: a number or a JSON array)."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import typer

from ..errors import BoundcalcError
from ..files import finite_number

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")

SET_HELP = ("Set a symbol or free parameter: NAME=VALUE, VALUE a number or a JSON array for "
            "per-layer/per-head symbols. Repeatable; overrides --stats. A free parameter set "
            "here is used exactly: it must be a point of its grid, whose union-bound cost is "
            "charged, unless `evaluate --fixed NAME` declares it chosen before seeing the data.")
FIXED_HELP = ("NAME of a parameter set with --set that was chosen before seeing the data: used "
              "as given, on or off its grid, and not charged to δ (repeatable).")
TEST_ERROR_HELP = ("Held-out test error of the model (a number in [0, 1]): each certified row "
                   "also shows the bound minus it.")
STATS_HELP = "A stats file written by `boundcalc measure` (symbols bind through their stat paths)."

# The parameters several commands share, declared once (typer only reads these defaults):
# ``entry_id: str = ENTRY_ID``, ``sets: Optional[list[str]] = SETS``, ...
ENTRY_ID = typer.Argument(..., metavar="ID", help="Registry id (see `boundcalc list`).")
SETS = typer.Option(None, "--set", "-s", help=SET_HELP)
STATS = typer.Option(None, "--stats", help=STATS_HELP)
JSON = typer.Option(False, "--json", help="Print JSON for scripts.")


def check_test_error(value: float | None) -> None:
    """``--test-error`` must be an error rate in [0, 1]; one line naming the flag otherwise."""
    if value is not None and not (math.isfinite(value) and 0.0 <= value <= 1.0):
        from .app import fail

        fail(f"--test-error must be a number in [0, 1], got {value}")


def parse_sets(items: list[str] | None) -> dict[str, Any]:
    """``["n=1000", "C=[1, 2]"]`` → ``{"n": 1000.0, "C": [1, 2]}``; errors name the item."""
    out: dict[str, Any] = {}
    for item in items or []:
        name, sep, text = item.partition("=")
        name, text = name.strip(), text.strip()
        if not sep or not _NAME.match(name):
            raise BoundcalcError(f"--set {item!r}: expected NAME=VALUE")
        if name in out:
            raise BoundcalcError(f"--set {name} given twice")
        out[name] = _value(name, text)
    return out


def _value(name: str, text: str) -> Any:
    if text.startswith("["):
        try:
            value = json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        except (ValueError, RecursionError):
            raise BoundcalcError(f"--set {name}: {text[:40]!r} is not a JSON array of numbers") \
                from None
        _check_numbers(name, value)
        return value
    try:
        x = float(text)
    except ValueError:
        raise BoundcalcError(f"--set {name}: {text[:40]!r} is not a number") from None
    return finite_number(x, f"--set {name}", BoundcalcError)


def _check_numbers(name: str, value: Any) -> None:
    """Every leaf of a JSON array is a finite number (a bool, a string or 1e400 is refused)."""
    if isinstance(value, list):
        for v in value:
            _check_numbers(name, v)
    else:
        finite_number(value, f"--set {name}", BoundcalcError)
