"""Typer options generated from a declared record (:mod:`boundcalc.options`).

:func:`takes` gives a command one option per declared field of a record: the flag is the
field's name in the CLI's words (:func:`.words.flag`), the help and the default are the field's
declaration, the type its kind. No range is given to typer: the record checks every value when
the command builds it, in the one wording of :func:`boundcalc.options.validate`, so that the
CLI and the API refuse a bad value by the same rule and a bound is written once. A sequence
field (``many``) is a repeatable option whose absence means the record's default.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Optional, Sequence

import typer

from ..options import declared
from .words import flag


def _parameter(f: Any, s: Any) -> inspect.Parameter:
    """The typer parameter of one declared field."""
    kind = s.kind
    if s.many:
        annotation: Any = Optional[list[kind]]
        default = None  # not given: the record's default
    elif s.none or f.default is None:
        annotation, default = Optional[kind], f.default
    else:
        annotation, default = kind, f.default
    option = typer.Option(default, flag(f.name), help=s.help_text(flag) or None, show_default=not s.many)
    return inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=option,
                             annotation=annotation)


def takes(record: type, names: Sequence[str] | None = None) -> Callable[[Callable], Callable]:
    """Decorator: the command also takes the declared fields ``names`` of ``record`` (all of
    them when None) as options, and receives them as one dict ``values`` (field → value; a
    sequence option not given is left out, so that the record's default holds)."""
    chosen = [(f, s) for f, s in declared(record) if names is None or f.name in names]

    def wrap(fn: Callable) -> Callable:
        sig = inspect.signature(fn, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != "values"]
        extra = [_parameter(f, s) for f, s in chosen]
        fields = {f.name for f, _ in chosen}

        @functools.wraps(fn)
        def command(**given: Any) -> Any:
            values = {k: given.pop(k) for k in list(given) if k in fields}
            values = {k: (tuple(v) if isinstance(v, list) else v) for k, v in values.items()
                      if not (v is None and any(f.name == k and s.many for f, s in chosen))}
            return fn(**given, values=values)

        params = own + extra
        del command.__wrapped__  # typer reads the signature below, not fn's
        command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return wrap
