"""Error types. Every error boundcalc raises on bad input is a :class:`BoundcalcError`.

The CLI prints ``str(error)`` as one line on stderr and exits with ``error.exit_code``;
no traceback is shown. Messages name the culprit (file, entry, symbol, field) and say
what was expected.
"""

from __future__ import annotations


class BoundcalcError(Exception):
    """Base class: a problem with the user's input, reported without a traceback.

    Each kind of error states the CLI's exit code for it as a class keyword,
    ``class StatsError(BoundcalcError, exit_code=5)``; a subclass that states none keeps its
    parent's. The codes are part of the CLI's contract (scripts test them): 2 any bad input,
    3 formula files, 4 values, 5 stats files, 6 checkpoints, 7 optimisation, 8 resources,
    9 output files.
    """

    exit_code = 2

    def __init_subclass__(cls, exit_code: int | None = None, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if exit_code is not None:
            cls.exit_code = exit_code


class FormulaError(BoundcalcError, exit_code=3):
    """A formula file is malformed, unsafe, or inconsistent."""


class DomainError(BoundcalcError, exit_code=4):
    """A value lies outside its declared domain (negative norm, delta outside (0,1), NaN, ...)."""


class MissingValueError(BoundcalcError, exit_code=4):
    """A symbol needed for evaluation has no value."""


class StatsError(BoundcalcError, exit_code=5):
    """A statistics file is unreadable or does not follow the schema."""


class CheckpointError(BoundcalcError, exit_code=6):
    """A model checkpoint cannot be read, or its architecture is not understood."""


class OptimizationError(BoundcalcError, exit_code=7):
    """An optimizer failed to converge; no point is returned."""


class ResourceError(BoundcalcError, exit_code=8):
    """An input would exceed the memory budget, a size or a time limit; refused up front."""


class OutputError(BoundcalcError, exit_code=9):
    """An output file cannot be written (full disk, not a regular file, bad name, ...)."""


def where(file: str | None = None, entry: str | None = None, symbol: str | None = None) -> str:
    """Format a location prefix such as ``pac_bayes.toml: entry 'mcallester': symbol 'n': ``."""
    parts = []
    if file:
        parts.append(str(file))
    if entry:
        parts.append(f"entry '{entry}'")
    if symbol:
        parts.append(f"symbol '{symbol}'")
    return (": ".join(parts) + ": ") if parts else ""


def one_line(text: str, limit: int = 1000) -> str:
    """``text`` made safe to print as one line: control characters (newlines, terminal escape
    sequences) are written as escapes, and very long text is shortened."""
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))
    return out if len(out) <= limit else out[: limit - 1] + "…"


def shown(path: object) -> str:
    """A path or name as it goes into a message: as is when every character is printable,
    else quoted with ``repr`` (a newline or escape sequence in a file name is shown, never
    acted on or cut)."""
    text = str(path)
    return text if text.isprintable() else repr(text)


def printable(text: str) -> str:
    """``text`` with every control character except newline written as an escape, so that
    data can never move the cursor, clear the screen or retitle a terminal."""
    return "".join(c if c == "\n" or c.isprintable() or c == " " else repr(c)[1:-1]
                   for c in str(text))
