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
    option = typer.Option(default, flag(f.name), help=s.help_text(flag) or None,
                          show_default=not s.many)
    return inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=option,
                             annotation=annotation)


def takes(*records: type | tuple[type, Sequence[str]]) -> Callable[[Callable], Callable]:
    """Decorator: the command also takes the declared fields of each record (a record, or
    ``(record, names)`` for some of its fields) as options, and receives them as ``values``:
    record → {field: value} (a sequence option not given is left out, so that the record's
    default holds)."""
    chosen: list[tuple[type, Any, Any]] = []
    for item in records:
        record, names = item if isinstance(item, tuple) else (item, None)
        chosen += [(record, f, s) for f, s in declared(record)
                   if names is None or f.name in names]
    owner = {f.name: record for record, f, _ in chosen}
    many = {f.name for _, f, s in chosen if s.many}

    def wrap(fn: Callable) -> Callable:
        sig = inspect.signature(fn, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != "values"]
        params = own + [_parameter(f, s) for _, f, s in chosen]

        @functools.wraps(fn)
        def command(**given: Any) -> Any:
            values: dict[type, dict[str, Any]] = {r: {} for r, _, _ in chosen}
            for name in [k for k in given if k in owner]:
                v = given.pop(name)
                if not (v is None and name in many):
                    values[owner[name]][name] = tuple(v) if isinstance(v, list) else v
            return fn(**given, values=values)

        del command.__wrapped__  # typer reads the signature below, not fn's
        command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return wrap
