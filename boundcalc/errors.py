"""Error types. Every error boundcalc raises on bad input is a :class:`BoundcalcError`.

The CLI prints ``str(error)`` as one line on stderr and exits with ``error.exit_code``;
no traceback is shown. Messages name the culprit (file, entry, symbol, field) and say
what was expected.
"""

from __future__ import annotations


class BoundcalcError(Exception):
    """Base class: a problem with the user's input, reported without a traceback."""

    exit_code = 2


class FormulaError(BoundcalcError):
    """A formula file is malformed, unsafe, or inconsistent."""

    exit_code = 3


class DomainError(BoundcalcError):
    """A value lies outside its declared domain (negative norm, delta outside (0,1), NaN, ...)."""

    exit_code = 4


class MissingValueError(BoundcalcError):
    """A symbol needed for evaluation has no value."""

    exit_code = 4


class StatsError(BoundcalcError):
    """A statistics file is unreadable or does not follow the schema."""

    exit_code = 5


class CheckpointError(BoundcalcError):
    """A model checkpoint cannot be read, or its architecture is not understood."""

    exit_code = 6


class OptimizationError(BoundcalcError):
    """An optimizer failed to converge; no point is returned."""

    exit_code = 7


class ResourceError(BoundcalcError):
    """An input would exceed the memory budget, a size or a time limit; refused up front."""

    exit_code = 8


class OutputError(BoundcalcError):
    """An output file cannot be written (full disk, not a regular file, bad name, ...)."""

    exit_code = 9


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
