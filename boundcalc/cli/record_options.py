"""Typer options generated from a declared record (:mod:`boundcalc.options`).

:func:`takes` gives a command one option per declared field of a record: the flag is the
field's name in the CLI's words (:func:`.words.flag`), the help and the default are the field's
declaration, the type its kind. No range is given to typer: the record checks every value when
the command builds it, in the one wording of :func:`boundcalc.options.validate`, so that the
CLI and the API refuse a bad value by the same rule and a bound is written once. A sequence
field (``many``) is a repeatable option whose absence means the record's default, or, where its
declaration names a separator (``sep``), one word of items (``--levels 1,16``). A record may be
optional as a whole: its *gate* field's option has no default, and without it the command gets
no record (``--compress``: absent, no compression).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Optional

import typer

from ..options import declared
from .words import flag


def _parameter(f: Any, s: Any, gate: bool = False) -> inspect.Parameter:
    """The typer parameter of one declared field (``gate``: absent means no record)."""
    kind = s.kind
    if s.many and s.sep:
        annotation, default = Optional[str], None  # one word; not given: the record's default
    elif gate:
        annotation, default = Optional[kind], None
    elif s.many:
        annotation: Any = Optional[list[kind]]
        default = None  # not given: the record's default
    elif s.none or f.default is None:
        annotation, default = Optional[kind], f.default
    else:
        annotation, default = kind, f.default
    option = typer.Option(default, flag(f.name), help=s.help_text(flag) or None,
                          show_default=not (s.many or gate))
    return inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=option,
                             annotation=annotation)


def _items(text: str, sep: str, kind: type) -> tuple[Any, ...]:
    """The items of one word (``"1,16"`` → (1, 16)), each of ``kind`` where it reads as one,
    else as typed (a number of another kind, or the text): the record refuses it then, in its
    one wording."""
    out: list[Any] = []
    for word in (w.strip() for w in text.split(sep) if w.strip()):
        for convert in (kind, float):
            try:
                out.append(convert(word))
                break
            except ValueError:
                continue
        else:
            out.append(word)
    return tuple(out)


def takes(*records: type | tuple) -> Callable[[Callable], Callable]:
    """Decorator: the command also takes the declared fields of each record (a record,
    ``(record, names)`` for some of its fields, or ``(record, names, gate)``: without the
    option of the field ``gate`` the record is not built) as options, and receives them as
    ``values``: record → {field: value}, or None for a gated record whose gate was not given
    (a sequence option not given is left out, so that the record's default holds)."""
    chosen: list[tuple[type, Any, Any]] = []
    gates: dict[type, str] = {}
    for item in records:
        record, names, *gate = item if isinstance(item, tuple) else (item, None)
        if gate:
            gates[record] = gate[0]
        chosen += [(record, f, s) for f, s in declared(record)
                   if names is None or f.name in names]
    owner = {f.name: record for record, f, _ in chosen}
    many = {f.name for _, f, s in chosen if s.many}
    joined = {f.name: s for _, f, s in chosen if s.many and s.sep}

    def wrap(fn: Callable) -> Callable:
        sig = inspect.signature(fn, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != "values"]
        params = own + [_parameter(f, s, gates.get(r) == f.name) for r, f, s in chosen]

        @functools.wraps(fn)
        def command(**given: Any) -> Any:
            values: dict[type, Any] = {r: {} for r, _, _ in chosen}
            for name in [k for k in given if k in owner]:
                v = given.pop(name)
                if isinstance(v, str) and name in joined:
                    v = _items(v, joined[name].sep, joined[name].kind)
                if not (v is None and name in many):
                    values[owner[name]][name] = tuple(v) if isinstance(v, list) else v
            for record, gate in gates.items():
                if values[record].get(gate) is None:
                    values[record] = None
            return fn(**given, values=values)

        del command.__wrapped__  # typer reads the signature below, not fn's
        command.records = {r: {f.name for rr, f, _ in chosen if rr is r} for r, _, _ in chosen}
        command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return wrap


def given_on_command_line(ctx: Any, names: Any) -> set[str]:
    """Those of ``names`` (parameters of the command of ``ctx``) the user spelled, on the
    command line or through the environment, as opposed to left at their defaults."""
    # by name: typer may vendor its own click, with its own enum
    return {n for n in names if getattr(ctx.get_parameter_source(n), "name", None)
            in ("COMMANDLINE", "ENVIRONMENT")}
