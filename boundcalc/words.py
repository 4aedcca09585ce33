"""How the library names its caller's options and commands in what it says.

The library never spells a command-line flag. A message, a hint or a note that names an option
calls :func:`option` with the option's keyword name (the name of the Python API's argument,
``"tune_data"``); a suggested command is written in a neutral notation and passed through
:func:`command`. The front end in use decides the words:

- the Python API (the default): ``option("tune_data", 5)`` → ``tune_data=5``;
  ``command("measure MODEL data=DATA draws=K")`` → ``measure(MODEL, data=DATA, draws=K)``;
  ``set_value("n")`` (a value set by hand) → ``values={'n': VALUE}``;
- the CLI installs its own :class:`Words` for the length of one command (``cli/words.py``, with
  :func:`use_words`): ``--tune-data 5``, ``boundcalc measure MODEL --data DATA --draws K`` and
  ``--set n=VALUE``.

Contract: words are chosen when the text is built, so a message built inside the CLI's scope
reads in flags and the same message built by an API call reads in keywords. Text that is
*stored* (provenance in a stats file, a report) must not depend on the front end: it names
options with :func:`keyword`, which ignores the scope. ``tests/cli/test_words.py`` checks
that no string outside ``cli/`` spells a ``--flag``.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator

NO_VALUE: Any = object()  # an option named without a value


class Words:
    """The Python API's words; the CLI subclasses it (``cli/words.py``)."""

    def option(self, name: str, value: Any = NO_VALUE) -> str:
        """``name`` or ``name=value``."""
        return name if value is NO_VALUE else f"{name}={value}"

    def command(self, name: str, positional: list[str], options: list[tuple[str, str | None]]
                ) -> str:
        """``name(POSITIONAL, key=VALUE, key=True)``."""
        parts = list(positional) + [f"{k}={'True' if v is None else v}" for k, v in options]
        return f"{name}({', '.join(parts)})"

    def set_value(self, name: str, value: str) -> str:
        """``values={'name': VALUE}``: the symbol ``name`` set by hand (the API's ``values``)."""
        return f"{self.option('values')}={{'{name}': {value}}}"


_API = Words()
_CURRENT: ContextVar[Words] = ContextVar("boundcalc_words", default=_API)


@contextmanager
def use_words(words: Words) -> Iterator[Words]:
    """Within the block, :func:`option` and :func:`command` speak ``words``."""
    token = _CURRENT.set(words)
    try:
        yield words
    finally:
        _CURRENT.reset(token)


def option(name: str, value: Any = NO_VALUE) -> str:
    """The option ``name`` (a keyword name such as ``"delta_mc"``) in the current front end's
    words, with ``value`` when given."""
    return _CURRENT.get().option(name, value)


def keyword(name: str, value: Any = NO_VALUE) -> str:
    """The option in the Python API's words whatever the scope: for text that is stored."""
    return _API.option(name, value)


def set_value(name: str, value: str = "VALUE") -> str:
    """How a caller sets the symbol ``name`` by hand (``value``: a placeholder such as
    ``"VALUE"`` or ``"[…]"``), in the current front end's words."""
    return _CURRENT.get().set_value(name, value)


def command(text: str) -> str:
    """A suggested command in the current front end's words.

    ``text`` is neutral: the command's name, then positional placeholders, then options as
    ``key=VALUE`` (a switch as bare ``key=``), e.g. ``"measure MODEL data=DATA init=INIT"``.
    """
    name, *rest = text.split()
    positional = [r for r in rest if "=" not in r]
    options: list[tuple[str, str | None]] = []
    for r in rest:
        if "=" in r:
            key, _, value = r.partition("=")
            options.append((key, value or None))
    return _CURRENT.get().command(name, positional, options)
