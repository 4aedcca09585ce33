"""The error kinds and their exit codes (boundcalc/errors.py): the codes are the CLI's contract,
stated once per class as a class keyword."""

from __future__ import annotations

import pytest

from boundcalc import errors


@pytest.mark.parametrize("name, code", [
    ("BoundcalcError", 2), ("FormulaError", 3), ("DomainError", 4), ("MissingValueError", 4),
    ("StatsError", 5), ("CheckpointError", 6), ("OptimizationError", 7), ("ResourceError", 8),
    ("OutputError", 9)])
def test_each_kind_keeps_its_exit_code(name, code):
    kind = getattr(errors, name)
    assert kind.exit_code == code and kind("x").exit_code == code
    assert issubclass(kind, errors.BoundcalcError)


def test_a_new_kind_states_its_code_or_keeps_its_parents():
    class Strict(errors.StatsError, exit_code=11):
        pass

    class Loose(errors.StatsError):
        pass

    assert (Strict.exit_code, Loose.exit_code, errors.StatsError.exit_code) == (11, 5, 5)
