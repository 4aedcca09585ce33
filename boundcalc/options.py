"""Options as declared records: every choice a command offers is a field of a frozen dataclass
whose constraint is data (:class:`Spec`: type, range, choices, unit, help), checked by one
validator in one wording.

A record declares each field with :func:`spec` (``draws: int = spec(20, Spec(int, low=0,
help=...))``) and derives from :class:`Record`; building it runs :func:`validate` over every
declared field, then the record's own :meth:`Record.check` for rules between fields. A bad value
is refused as ``<the option in the caller's words>: expected <the rule>`` — ``draws=-1:
expected a whole number >= 0`` for the API, ``--draws -1: expected a whole number >= 0`` in the
CLI (:func:`boundcalc.words.option` chooses the words; the library never spells a flag).

The same declarations serve the CLI (``cli/record_options.py`` makes one typer option per
field: name, help, default) and the tests (:meth:`Spec.invalid` yields values every field must
refuse), so a default or a bound is written once, here, beside its field.

Contract: an instance of a record exists only with values that pass its declarations and its
:meth:`Record.check`; every refusal is a :class:`~boundcalc.errors.BoundcalcError` (exit 2)
of one line naming the option.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Iterator

from .errors import BoundcalcError
from .words import option

_KIND_WORDS = {int: "a whole number", float: "a number", str: "non-empty text",
               bool: "true or false"}


@dataclass(frozen=True)
class Needs:
    """A rule between options, as data: the field that declares it acts only while the
    option ``name`` has one of ``values`` (or, with ``positive``, a value > 0, or None: left
    to a rule that gives one); given otherwise it would do nothing and is refused
    (:func:`refuse_unused`). ``why``: a few
    words on what is missing (`` (no σ search)``). A new route of a choice (a posterior, say)
    declares its own options with ``Needs("posterior", ("its name",))``: the rule follows."""

    name: str
    values: tuple[Any, ...] = ()
    positive: bool = False
    why: str = ""

    def holds(self, record: Any) -> bool:
        """Whether the field acts in ``record``."""
        value = getattr(record, self.name)
        if self.positive:  # None: left to a rule that gives a positive value
            return value is None or value > 0
        return value in self.values

    def wanted(self) -> str:
        """What would make the field act, in the caller's words."""
        if self.positive:
            return f"{option(self.name)} > 0"
        return " or ".join(option(self.name, v) for v in self.values)


@dataclass(frozen=True)
class Spec:
    """The constraint of one option, as data.

    ``kind``: int, float, str or bool (for a tuple field, the kind of each item with
    ``many=True``); ``low``/``high``: the range (``open_low``/``open_high``: the end itself
    excluded); ``but_not``: values of the range that are refused; ``choices``: the allowed
    values of a text option; ``none``: None is allowed (it means what ``help`` says);
    ``error``: the class of the refusal (its exit code; 2 unless said); ``unit``:
    what the number counts; ``help``: one sentence for the command's help and the docs, naming
    other options as ``{keyword}`` (:meth:`help_text` writes them in the front end's words);
    ``sep``: a ``many`` field a command line gives as one word, its items joined by ``sep``
    (``--levels 1,16``), instead of one repeated option per item; ``needs``: the rule
    (:class:`Needs`) under which the field acts at all. Text is never empty: ``''`` is a
    value given and refused, never read as the option left out."""

    kind: type
    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    but_not: tuple[Any, ...] = ()
    choices: tuple[Any, ...] | None = None
    none: bool = False
    many: bool = False
    unit: str = ""
    help: str = ""
    sep: str = ""
    error: type[BoundcalcError] = BoundcalcError  # a value outside a formula's domain: DomainError
    needs: Needs | None = None  # the field acts only under another option's values

    def rule(self) -> str:
        """The rule in words: ``a whole number >= 0``, ``a number in (0, 1)``, ``one of auto,
        sample, whole``."""
        if self.choices is not None:
            text = "one of " + ", ".join(map(str, self.choices))
        else:
            text = _KIND_WORDS[self.kind]
            lo, hi = self.low, self.high
            if lo is not None and hi is not None:
                text += (f" in {'(' if self.open_low else '['}{_num(lo)}, {_num(hi)}"
                         f"{')' if self.open_high else ']'}")
            elif lo == 0 and self.open_low:
                text = "a positive " + text[2:]
            elif lo is not None:
                text += f" {'>' if self.open_low else '>='} {_num(lo)}"
            elif hi is not None:
                text += f" {'<' if self.open_high else '<='} {_num(hi)}"
            if self.but_not:
                text += " other than " + ", ".join(_num(v) for v in self.but_not)
        if self.many:
            text = "one or more values, each " + text
        return text

    def help_text(self, name_of: Callable[[str], str] = option) -> str:
        """``help`` with each ``{keyword}`` written by ``name_of`` (the API's keyword, the
        CLI's flag)."""
        return self.help.format_map(_Names(name_of))

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` (one item, for a ``many`` spec) keeps the rule."""
        if self.choices is not None:
            return (isinstance(value, self.kind) and not isinstance(value, bool)
                    and value in self.choices)
        if self.kind is bool:
            return isinstance(value, bool)
        if isinstance(value, bool):
            return False
        if self.kind is str:
            return isinstance(value, str) and value.strip() != ""
        if self.kind is int and not isinstance(value, int):
            return False
        if self.kind is float:
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                return False
        if self.low is not None and (value < self.low or (self.open_low and value == self.low)):
            return False
        if self.high is not None and (value > self.high
                                      or (self.open_high and value == self.high)):
            return False
        return value not in self.but_not

    def invalid(self) -> list[Any]:
        """Values this spec refuses (the generated test of every field feeds them in)."""
        out: list[Any] = []
        if self.choices is not None:
            out.append("no-such-choice" if self.kind is str else max(self.choices) + 1)
        elif self.kind in (int, float):
            if self.low is not None:
                out.append(self.low if self.open_low else self.low - 1)
            if self.high is not None:
                out.append(self.high if self.open_high else self.high + 1)
            out += list(self.but_not)
            if self.kind is int:
                out.append(1.5)
            else:
                out += [math.nan, math.inf, -math.inf]
        elif self.kind is str:
            out += [7, ""]
        out = [v for v in out if not self.accepts(v)]
        return [(v,) for v in out] + [()] if self.many else out


class _Names(dict):
    """``{keyword}`` → the option's name in some words (for :meth:`Spec.help_text`)."""

    def __init__(self, name_of: Callable[[str], str]):
        super().__init__()
        self.name_of = name_of

    def __missing__(self, key: str) -> str:
        return self.name_of(key)


def _num(x: Any) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def spec(default: Any, constraint: Spec) -> Any:
    """A dataclass field with ``default`` and ``constraint`` as its metadata."""
    return field(default=default, metadata={"spec": constraint})


def like(record: type, name: str, default: Any = dataclasses.MISSING, **change: Any) -> Any:
    """The field ``name`` of ``record`` declared again for another record (composition by
    reference: the constraint and help are the ones ``record`` declares; ``change`` alters
    what differs, e.g. ``low=1``), with ``default`` (else ``record``'s)."""
    f = next(f for f in fields(record) if f.name == name)
    return spec(f.default if default is dataclasses.MISSING else default,
                replace(f.metadata["spec"], **change))


def declared(record: Any) -> Iterator[tuple[dataclasses.Field, Spec]]:
    """(field, spec) of every declared field of a record (class or instance)."""
    for f in fields(record):
        if "spec" in f.metadata:
            yield f, f.metadata["spec"]


def shown(value: Any) -> str:
    """A value as a message shows it: text quoted, numbers as Python writes them."""
    return repr(value) if isinstance(value, str) else str(value)


def refusal(name: str, value: Any, rule: str,
            error: type[BoundcalcError] = BoundcalcError) -> BoundcalcError:
    """The one wording of a refused option: ``<option value>: expected <rule>``."""
    return error(f"{option(name, shown(value))}: expected {rule}")


def refuse_unused(record: Any, given: Any = None) -> None:
    """Refuse a field whose :class:`Needs` does not hold although it was given: named in
    ``given`` (the options a command line spelled), or, without ``given`` (the API), set to
    other than its default. One wording for both front ends."""
    for f, s in declared(record):
        n = s.needs
        if n is None or n.holds(record):
            continue
        if (f.name in given) if given is not None else getattr(record, f.name) != f.default:
            raise BoundcalcError(
                f"{option(f.name)} does nothing with {option(n.name, getattr(record, n.name))}"
                f"{n.why}; leave {option(f.name)} out or give {n.wanted()}")


def validate(record: Any) -> None:
    """Check every declared field of ``record`` (a sequence field is made a tuple first);
    the first bad value raises :func:`refusal`."""
    for f, s in declared(record):
        value = getattr(record, f.name)
        if value is None and s.none:
            continue
        if s.many:
            if isinstance(value, (list, tuple)):
                value = tuple(value)
                object.__setattr__(record, f.name, value)
            if not isinstance(value, tuple) or not value:
                raise refusal(f.name, value, s.rule(), s.error)
            for item in value:
                if not s.accepts(item):
                    raise refusal(f.name, item, s.rule(), s.error)
        elif not s.accepts(value):
            raise refusal(f.name, value, s.rule(), s.error)


class Record:
    """Base of the declared records: built means checked (:func:`validate`, then
    :meth:`check`)."""

    def __post_init__(self) -> None:
        validate(self)
        refuse_unused(self)
        self.check()

    def check(self) -> None:
        """Rules between fields (none by default); raise a one-line error naming the option."""

    aliases: dict[str, str] = {}  # older keyword names of fields (a class attribute)

    @classmethod
    def of(cls, record: Any = None, **given: Any) -> Any:
        """``record`` with ``given`` (field names, or a name of :attr:`aliases`) in place of
        its values; a fresh one from the defaults when ``record`` is None. An unknown keyword
        is a ``TypeError``, as for any Python call."""
        names = {f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in given.items():
            name = cls.aliases.get(key, key)
            if name not in names:
                raise TypeError(f"unexpected keyword argument {key!r}")
            values[name] = value
        return replace(record, **values) if record is not None else cls(**values)
