"""Load formula files (TOML) into :class:`~boundcalc.registry.schema.Entry` objects.

TOML is parsed by the standard library (data only, no code), and every expression by
:mod:`boundcalc.registry.parser` (an AST whitelist, no ``eval``). Errors name file, entry
and symbol. See ``formulas/README.md`` for the file format.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from pathlib import Path
from typing import Any

import sympy as sp

from ..errors import FormulaError, one_line
from ..limits import time_limit
from ..files import MAX_FORMULA_FILE_BYTES, finite_number, read_limited
from .parser import Namespace, parse_expression
from .schema import (CHOICES, KINDS, OUTPUTS, ROLES, Assumption, Definition, Domain, Entry, GridSpec,
                     ParameterSpec, PriorSpec, SymbolSpec, Written)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MAX_FILE_BYTES = MAX_FORMULA_FILE_BYTES
MAX_KEY_PARTS = 64
PARSE_SECONDS = 30.0  # one file, wall clock: the bundled files take well under a second
_ID = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,47}$")
_RESERVED = {"Sum", "Product", "GridMin", "Piecewise", "Min", "Max", "sqrt", "log", "exp",
             "Abs", "ceiling", "floor", "kl_inv", "kl", "var_ratio_div", "pi", "E", "oo",
             "lambda", "True", "False", "None"}
_ENTRY_KEYS = {"id", "title", "source", "provenance", "kind", "assumptions", "expression",
               "terms", "definitions", "symbols", "parameters", "indices", "variant",
               "description", "notes", "estimated_inputs_ok", "output", "conditions",
               "output_range"}
_SYMBOL_KEYS = {"meaning", "role", "domain", "integer", "indices", "stat", "default", "latex"}
_PARAM_KEYS = {"choice", "domain", "integer", "indices", "grid", "prior", "closed_form",
               "bounds", "log_scale", "default", "note", "meaning", "latex", "optimize",
               "measured"}


def load_file(path: str | Path) -> list[Entry]:
    """Parse one formula file into its entries. Raises :class:`FormulaError` on any problem."""
    try:
        return _load_file(Path(path))
    except FormulaError as exc:  # messages quote file contents: keep them on one line
        raise FormulaError(one_line(str(exc))) from None


def _load_file(path: Path) -> list[Entry]:
    fname = path.name
    raw = read_limited(path, MAX_FILE_BYTES, FormulaError, "formula file")
    try:
        text = raw.decode("utf-8")
        _check_key_depth(text, fname)
        with time_limit(PARSE_SECONDS, f"{fname}: reading the TOML", FormulaError):
            doc = tomllib.loads(text)
    except UnicodeDecodeError:
        raise FormulaError(f"{fname}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise FormulaError(f"{fname}: not valid TOML ({str(exc).splitlines()[0][:200]})") from None
    except RecursionError:
        raise FormulaError(f"{fname}: not valid TOML (nested too deeply)") from None
    except ValueError as exc:  # tomllib's int() of a literal beyond Python's 4300-digit limit
        raise FormulaError(f"{fname}: not readable TOML ({str(exc).split(';')[0][:200]})") from None
    with time_limit(PARSE_SECONDS, f"{fname}: building its entries", FormulaError):
        return entries_from_document(doc, fname)


def _check_key_depth(text: str, fname: str) -> None:
    """Refuse keys with absurdly many dotted parts before TOML builds them (a key of n parts
    costs the parser O(n²) memory)."""
    for number, line in enumerate(text.splitlines(), 1):
        key = line if line.lstrip().startswith("[") else line.partition("=")[0]
        if key.count(".") > MAX_KEY_PARTS:
            raise FormulaError(f"{fname}: line {number}: a key with more than {MAX_KEY_PARTS} "
                               f"dotted parts")


def entries_from_document(doc: dict[str, Any], fname: str) -> list[Entry]:
    """Build entries from a parsed TOML document (``fname`` is used in messages)."""
    try:
        return _entries_from_document(doc, fname)
    except FormulaError as exc:
        raise FormulaError(one_line(str(exc))) from None


def _entries_from_document(doc: dict[str, Any], fname: str) -> list[Entry]:
    if not isinstance(doc, dict):
        raise FormulaError(f"{fname}: expected a table at the top level")
    family = doc.get("family")
    if not isinstance(family, str) or not _ID.match(family):
        raise FormulaError(f"{fname}: top-level 'family' must be a lower-case identifier")
    unknown = set(doc) - {"family", "title", "description", "symbols", "entry"}
    if unknown:
        raise FormulaError(f"{fname}: unknown top-level key(s) {sorted(unknown)}")
    shared = doc.get("symbols", {})
    if not isinstance(shared, dict):
        raise FormulaError(f"{fname}: [symbols] must be a table")
    raw_entries = doc.get("entry")
    if not isinstance(raw_entries, list) or not raw_entries:
        raise FormulaError(f"{fname}: no [[entry]] tables")
    entries = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_entries):
        if not isinstance(raw, dict):
            raise FormulaError(f"{fname}: entry #{i + 1} is not a table")
        entry = _EntryBuilder(fname, family, shared, raw, i).build()
        if entry.id in seen:
            raise FormulaError(f"{fname}: entry id '{entry.id}' appears twice")
        seen.add(entry.id)
        entries.append(entry)
    return entries


class _EntryBuilder:
    def __init__(self, fname: str, family: str, shared: dict, raw: dict, position: int):
        self.fname = fname
        self.family = family
        self.shared = shared
        self.raw = raw
        ident = raw.get("id")
        self.id = ident if isinstance(ident, str) else f"#{position + 1}"

    def fail(self, msg: str, symbol: str | None = None) -> FormulaError:
        return FormulaError(self._loc(symbol) + msg)

    def _loc(self, symbol: str | None = None) -> str:
        return f"{self.fname}: entry '{self.id}': " + (f"symbol '{symbol}': " if symbol else "")

    def number(self, value: Any, what: str, symbol: str | None = None, *,
               infinite_ok: bool = False) -> float:
        """A number the file gives, through the one check of numbers read from files
        (:func:`boundcalc.files.finite_number`: an int or a float, never a bool or a string,
        within double precision (TOML integers are unbounded: 10**400 is refused, not read as
        inf), finite); ±inf also passes with ``infinite_ok`` (a search bound)."""
        if infinite_ok and isinstance(value, float) and math.isinf(value):
            return value
        return finite_number(value, self._loc(symbol) + what, FormulaError)

    def text(self, key: str, required: bool = True, default: str = "") -> str:
        value = self.raw.get(key, None)
        if value is None:
            if required:
                raise self.fail(f"missing required field '{key}'")
            return default
        if not isinstance(value, str):
            raise self.fail(f"field '{key}' must be a string")
        return value

    def build(self) -> Entry:
        raw = self.raw
        if not isinstance(raw.get("id"), str) or not _ID.match(raw["id"]):
            raise self.fail("field 'id' must be a lower-case identifier ([a-z][a-z0-9_]*)")
        unknown = set(raw) - _ENTRY_KEYS
        if unknown:
            raise self.fail(f"unknown field(s) {sorted(unknown)}")
        kind = self.text("kind")
        if kind not in KINDS:
            raise self.fail(f"kind must be one of {', '.join(KINDS)}; got '{kind}'")

        output = self.text("output", required=False, default="risk")
        if output not in OUTPUTS:
            raise self.fail(f"output must be one of {', '.join(OUTPUTS)}; got '{output}'")
        output_range = self._domain({"domain": self.raw.get("output_range", "[0, inf)")},
                                    "output_range: ")
        symbols = self._symbols()
        indices, index_symbols = self._indices(symbols)
        params = self._parameters(symbols, index_symbols)
        curve_syms = [s for s in symbols.values() if s.stat and s.stat.startswith("curves.")]
        if curve_syms:
            measured = [p for p in params.values() if p.measured]
            if len(measured) != 1:
                raise self.fail(f"symbol '{curve_syms[0].name}' is bound to a curve "
                                f"('{curve_syms[0].stat}'): the entry needs exactly one "
                                "parameter with measured = true")
            if any(s.indexed for s in curve_syms):
                raise self.fail(f"symbol '{next(s for s in curve_syms if s.indexed).name}': a "
                                "curve-bound symbol cannot be indexed")
        ns = Namespace(
            scalars={n: s.symbol for n, s in symbols.items() if not s.indexed},
            indexed={n: (s.symbol, len(s.indices)) for n, s in symbols.items() if s.indexed},
            indices=index_symbols,
            grid_params={n: p.symbol for n, p in params.items() if p.choice == "grid"},
        )
        ns.scalars = dict(ns.scalars)
        ns.scalars.update({n: p.symbol for n, p in params.items()
                           if not p.indices and p.choice != "grid"})
        ns.grid_params = dict(ns.grid_params)
        definitions = self._definitions(ns, index_symbols)
        expression = parse_expression(self.text("expression"), ns, self._where("expression"))
        if not isinstance(expression, sp.Expr):
            raise self.fail("expression must be a number-valued expression")
        free = sorted(s.name for s in expression.free_symbols if s.name in index_symbols)
        if free:
            raise self.fail(f"expression: index '{free[0]}' is free; wrap it in Sum(...) or "
                            f"Product(...) so that the expression is one number")
        self._finish_parameters(params, ns)
        terms = raw.get("terms", [])
        if not isinstance(terms, list) or not all(isinstance(t, str) for t in terms):
            raise self.fail("'terms' must be a list of names")
        for t in terms:
            if t not in definitions and t not in symbols:
                raise self.fail(f"term '{t}' is neither a definition nor a symbol")
            if (t in definitions and definitions[t].indices) or (t in symbols
                                                                 and symbols[t].indexed):
                raise self.fail(f"term '{t}' is indexed; terms must be single numbers")
        symbols = self._prune_shared(symbols, expression, params, definitions, terms)
        self._check_kind(kind, symbols)
        notes = raw.get("notes", [])
        if isinstance(notes, str):
            notes = [notes]
        if not isinstance(notes, list) or not all(isinstance(t, str) for t in notes):
            raise self.fail("'notes' must be a string or a list of strings")
        conditions = self._conditions(kind)
        ok_est = raw.get("estimated_inputs_ok", [])
        if not isinstance(ok_est, list) or not all(isinstance(t, str) for t in ok_est):
            raise self.fail("'estimated_inputs_ok' must be a list of symbol names")
        return Entry(
            id=raw["id"], title=self.text("title"), family=self.family, kind=kind,
            source=self.text("source"), provenance=self.text("provenance"),
            expression_text=self.text("expression"), expression=expression,
            symbols=symbols, parameters=params, indices=indices, index_symbols=index_symbols,
            definitions=definitions, terms=list(terms), assumptions=self._assumptions(ns),
            file=self.fname, variant=self.text("variant", required=False) or None,
            description=self.text("description", required=False), notes=list(notes),
            estimated_inputs_ok=tuple(ok_est), output=output, conditions=conditions,
            output_range=output_range,
        )

    def _conditions(self, kind: str) -> list[str]:
        """The named conditions of a 'conditional' entry (required there, refused elsewhere)."""
        conds = self.raw.get("conditions", [])
        if isinstance(conds, str):
            conds = [conds]
        if not isinstance(conds, list) or not all(isinstance(c, str) and c.strip()
                                                  for c in conds):
            raise self.fail("'conditions' must be a list of non-empty strings")
        if kind == "conditional" and not conds:
            raise self.fail("a 'conditional' entry must name its condition(s): "
                            "conditions = [\"...\"]")
        if kind != "conditional" and conds:
            raise self.fail(f"only a 'conditional' entry names conditions (this one is '{kind}'; "
                            f"a condition that is part of the theorem is an assumption)")
        return [c.strip() for c in conds]

    def _where(self, what: str) -> str:
        return f"{self.fname}: entry '{self.id}': {what}: "

    # ---- symbols ---------------------------------------------------------------------------
    def _symbols(self) -> dict[str, SymbolSpec]:
        own = self.raw.get("symbols", {})
        if not isinstance(own, dict):
            raise self.fail("[entry.symbols] must be a table")
        merged = dict(self.shared)
        merged.update(own)
        out = {}
        for name, spec in merged.items():
            out[name] = self._symbol(name, spec)
        return out

    def _symbol(self, name: str, spec: Any) -> SymbolSpec:
        if not _NAME.match(name) or name in _RESERVED:
            raise self.fail("invalid or reserved symbol name", name)
        if not isinstance(spec, dict):
            raise self.fail("declaration must be a table {meaning, role, domain, ...}", name)
        unknown = set(spec) - _SYMBOL_KEYS
        if unknown:
            raise self.fail(f"unknown field(s) {sorted(unknown)}", name)
        meaning = spec.get("meaning")
        if not isinstance(meaning, str) or not meaning:
            raise self.fail("missing 'meaning'", name)
        role = spec.get("role")
        if role not in ROLES:
            raise self.fail(f"role must be one of {', '.join(ROLES)}; got {role!r}", name)
        if role == "free":
            raise self.fail("free parameters are declared under [entry.parameters]", name)
        domain = self._domain(spec, f"symbol '{name}': ")
        if role == "size" and not domain.integer:  # a size counts something: whole numbers only
            domain = dataclasses.replace(domain, integer=True)
        indices = spec.get("indices", [])
        if not isinstance(indices, list) or not all(isinstance(i, str) for i in indices):
            raise self.fail("'indices' must be a list of index names", name)
        if len(set(indices)) != len(indices):
            raise self.fail("'indices' lists the same index twice", name)
        latex = spec.get("latex")
        if latex is not None and not isinstance(latex, str):
            raise self.fail("'latex' must be a string", name)
        default = spec.get("default")
        if default is not None:
            default = self.number(default, "'default'", name)
            if not bool(domain.contains(default)):
                raise self.fail(f"default {default} lies outside the domain {domain.text()}", name)
        if role == "hidden_constant" and default is None:
            raise self.fail("a hidden constant needs a default (usually 1)", name)
        stat = spec.get("stat")
        if stat is not None and (not isinstance(stat, str) or not stat):
            raise self.fail("'stat' must be a stats path such as 'scalars.n'", name)
        symbol = sp.IndexedBase(name, real=True) if indices else sp.Symbol(name, real=True)
        return SymbolSpec(name=name, meaning=meaning, role=role, domain=domain,
                          indices=tuple(indices), stat=stat,
                          default=None if default is None else float(default),
                          latex=latex, symbol=symbol)

    def _domain(self, spec: dict, where: str) -> Domain:
        text = spec.get("domain", "")
        if not isinstance(text, str) or len(text) > 100:
            raise self.fail(where + "'domain' must be an interval such as \"(0, 1)\" or "
                            "\"[0, inf)\"")
        try:
            domain = Domain.parse(text, bool(spec.get("integer", False)))
        except ValueError as exc:
            raise self.fail(where + str(exc)) from None
        if math.isnan(domain.lo) or math.isnan(domain.hi):
            raise self.fail(where + f"domain {text!r} has a NaN end point")
        return domain

    def _indices(self, symbols: dict[str, SymbolSpec]) -> tuple[dict[str, str], dict[str, sp.Symbol]]:
        raw = self.raw.get("indices", {})
        if not isinstance(raw, dict):
            raise self.fail("[entry.indices] must be a table: index = \"SizeSymbol\"")
        out, syms = {}, {}
        for name, size in raw.items():
            if not _NAME.match(name) or name in _RESERVED or name in symbols:
                raise self.fail(f"index '{name}' has an invalid name or clashes with a symbol")
            if not isinstance(size, str) or size not in symbols or symbols[size].role != "size":
                raise self.fail(f"index '{name}' must name a declared symbol with role 'size' "
                                f"as its range, got {size!r}")
            out[name] = size
            syms[name] = sp.Symbol(name, integer=True)
        for s in symbols.values():
            for i in s.indices:
                if i not in out:
                    raise self.fail(f"uses index '{i}', which is not declared under "
                                    f"[entry.indices]", s.name)
        return out, syms

    # ---- parameters ------------------------------------------------------------------------
    def _parameters(self, symbols: dict[str, SymbolSpec],
                    index_symbols: dict[str, sp.Symbol]) -> dict[str, ParameterSpec]:
        raw = self.raw.get("parameters", {})
        if not isinstance(raw, dict):
            raise self.fail("[entry.parameters] must be a table")
        out = {}
        for name, spec in raw.items():
            where = f"parameter '{name}': "
            if not _NAME.match(name) or name in _RESERVED or name in symbols:
                raise self.fail(where + "invalid name, or also declared as a symbol")
            if not isinstance(spec, dict):
                raise self.fail(where + "declaration must be a table")
            unknown = set(spec) - _PARAM_KEYS
            if unknown:
                raise self.fail(where + f"unknown field(s) {sorted(unknown)}")
            choice = spec.get("choice")
            if choice not in CHOICES:
                raise self.fail(where + f"choice must be one of {', '.join(CHOICES)}; "
                                f"got {choice!r}")
            domain = self._domain(spec, where)
            indices = spec.get("indices", [])
            if not isinstance(indices, list) or not all(isinstance(i, str) for i in indices):
                raise self.fail(where + "'indices' must be a list of index names")
            indices = tuple(indices)
            for i in indices:
                if i not in index_symbols:
                    raise self.fail(where + f"index '{i}' is not declared")
            if indices and choice != "grid":
                raise self.fail(where + "only grid parameters (used through GridMin) may be "
                                "indexed")
            grid = prior = None
            if choice == "grid":
                grid = self._grid_raw(name, spec.get("grid"))
            elif spec.get("grid") is not None:
                raise self.fail(where + "'grid' is only allowed with choice = \"grid\"")
            if choice == "prior":
                prior = self._prior(name, spec.get("prior"))
            bounds = spec.get("bounds")
            if bounds is not None:
                if not isinstance(bounds, list) or len(bounds) != 2:
                    raise self.fail(where + "'bounds' must be [low, high] with low < high")
                bounds = tuple(self.number(b, where + f"'bounds'[{k}]", infinite_ok=True)
                               for k, b in enumerate(bounds))
                if not bounds[0] < bounds[1]:
                    raise self.fail(where + "'bounds' must be [low, high] with low < high")
            default = spec.get("default")
            if default is not None:
                default = self.number(default, where + "'default'")
            out[name] = ParameterSpec(
                name=name, choice=choice, domain=domain, indices=indices, grid=grid,
                prior=prior, bounds=bounds,
                log_scale=bool(spec.get("log_scale", False)),
                optimize=bool(spec.get("optimize", True)),
                measured=self._measured(name, choice, spec.get("measured", False), symbols),
                default=None if default is None else float(default),
                note=str(spec.get("note", "") or spec.get("meaning", "")),
                symbol=sp.Symbol(name, real=True),
            )
        return out

    def _measured(self, name: str, choice: str, flag: Any,
                  symbols: dict[str, SymbolSpec]) -> bool:
        """``measured = true``: the parameter is chosen only among the points at which the
        entry's ``curves.*`` symbols were measured (see :mod:`boundcalc.measured`)."""
        where = f"parameter '{name}': "
        if not isinstance(flag, bool):
            raise self.fail(where + "'measured' must be true or false")
        curves = [s for s in symbols.values() if s.stat and s.stat.startswith("curves.")]
        if flag:
            if choice not in ("grid", "prior"):
                raise self.fail(where + "measured = true needs choice = \"grid\" or \"prior\"")
            if not curves:
                raise self.fail(where + "measured = true needs a symbol bound to a "
                                "'curves.NAME' stats path")
        return flag

    def _grid_raw(self, name: str, grid: Any) -> GridSpec:
        where = f"parameter '{name}': grid: "
        if not isinstance(grid, dict) or len(grid) != 1:
            raise self.fail(where + "must be one of {values=[...]}, {range=[start, stop, step]}, "
                            "{linspace=[start, stop, num]}, {geomspace=[start, stop, num]}")
        (kind, args), = grid.items()
        if kind not in ("values", "range", "linspace", "geomspace"):
            raise self.fail(where + f"unknown grid kind '{kind}'")
        if not isinstance(args, list) or not args or (kind != "values" and len(args) != 3):
            raise self.fail(where + f"'{kind}' needs a list"
                            + ("" if kind == "values" else " of 3 items"))
        if len(args) > 10_000:
            raise self.fail(where + "at most 10000 explicit values")
        if kind in ("linspace", "geomspace"):
            num = args[2]
            if isinstance(num, bool) or (isinstance(num, (int, float))
                                         and not (1 <= num <= 100_000 and num == int(num))):
                raise self.fail(where + f"'{kind}' needs a whole number of points between 1 "
                                "and 100000")
        return GridSpec(kind=kind, args=tuple(args))  # parsed in _finish_parameters

    def _prior(self, name: str, prior: Any) -> PriorSpec:
        where = f"parameter '{name}': prior: "
        if not isinstance(prior, dict) or prior.get("kind") != "dziugaite_roy":
            raise self.fail(where + "must be {kind = \"dziugaite_roy\", c = ..., b = ..., "
                            "squared = true}")
        if "c" not in prior or "b" not in prior:
            raise self.fail(where + "needs numbers c and b")
        c, b = (self.number(prior[k], where + k) for k in ("c", "b"))
        if not (c > 0 and b > 0):
            raise self.fail(where + "c and b must be positive")
        return PriorSpec(c=c, b=b, squared=bool(prior.get("squared", True)))

    def _finish_parameters(self, params: dict[str, ParameterSpec], ns: Namespace) -> None:
        for name, p in params.items():
            if p.grid is not None:
                args = []
                for j, a in enumerate(p.grid.args):
                    if isinstance(a, bool) or not isinstance(a, (int, float, str)):
                        raise self.fail(f"parameter '{name}': grid item {j} must be a number "
                                        f"or an expression string")
                    text = a if isinstance(a, str) else repr(a)
                    args.append(parse_expression(text, ns, self._where(f"parameter '{name}' grid")))
                p.grid = GridSpec(kind=p.grid.kind, args=tuple(args))
            text = self.raw["parameters"][name].get("closed_form")
            if text is not None:
                p.optimum = Written(text, parse_expression(
                    text, ns, self._where(f"parameter '{name}' closed_form")))

    # ---- definitions and assumptions --------------------------------------------------------
    def _definitions(self, ns: Namespace, index_symbols: dict[str, sp.Symbol]) -> dict[str, Definition]:
        raw = self.raw.get("definitions", {})
        if not isinstance(raw, dict):
            raise self.fail("[entry.definitions] must be a table")
        out: dict[str, Definition] = {}
        defs = dict(ns.definitions)
        idefs = dict(ns.indexed_definitions)
        for name, spec in raw.items():
            if not _NAME.match(name) or name in _RESERVED or name in ns.scalars \
                    or name in ns.indexed or name in ns.indices:
                raise self.fail(f"definition '{name}' has an invalid name or clashes with a symbol")
            if isinstance(spec, str):
                text, indices = spec, []
            elif isinstance(spec, dict) and isinstance(spec.get("expr"), str):
                text, indices = spec["expr"], spec.get("indices", [])
            else:
                raise self.fail(f"definition '{name}' must be a string or {{expr, indices}}")
            if not isinstance(indices, list) or not all(isinstance(i, str) for i in indices):
                raise self.fail(f"definition '{name}': 'indices' must be a list of index names")
            for i in indices:
                if i not in index_symbols:
                    raise self.fail(f"definition '{name}' uses undeclared index '{i}'")
            ns.definitions, ns.indexed_definitions = defs, idefs
            expr = parse_expression(text, ns, self._where(f"definition '{name}'"))
            isyms = tuple(index_symbols[i] for i in indices)
            if indices:
                idefs[name] = (isyms, expr)
            else:
                defs[name] = expr
            out[name] = Definition(name=name, text=text, expr=expr, indices=tuple(indices),
                                   index_symbols=isyms)
        ns.definitions, ns.indexed_definitions = defs, idefs
        return out

    def _assumptions(self, ns: Namespace) -> list[Assumption]:
        raw = self.raw.get("assumptions", [])
        if not isinstance(raw, list):
            raise self.fail("'assumptions' must be a list")
        out = []
        for j, item in enumerate(raw):
            if isinstance(item, str):
                out.append(Assumption(text=item))
            elif isinstance(item, dict) and isinstance(item.get("text"), str):
                check = None
                if item.get("check") is not None:
                    text = str(item["check"])
                    expr = parse_expression(text, ns, self._where(f"assumption {j + 1} check"))
                    if not isinstance(expr, sp.core.relational.Relational):
                        raise self.fail(f"assumption {j + 1}: 'check' must be a comparison")
                    check = Written(text, expr)
                out.append(Assumption(text=item["text"], check=check))
            else:
                raise self.fail(f"assumption {j + 1} must be a string or {{text, check}}")
        return out

    def _prune_shared(self, symbols: dict[str, SymbolSpec], expression: sp.Expr,
                      params: dict[str, ParameterSpec], definitions: dict[str, Definition],
                      terms: list[str]) -> dict[str, SymbolSpec]:
        """Drop family-level symbols this entry never uses (entry-level ones are kept); a
        symbol the entry reports as one of its ``terms`` is used."""
        exprs: list[sp.Basic] = [expression, *(d.expr for d in definitions.values())]
        for p in params.values():
            exprs.extend(p.grid.args if p.grid is not None else ())
            if p.closed_form is not None:
                exprs.append(p.closed_form)
        checks = self.raw.get("assumptions", [])
        if not isinstance(checks, list):  # refused with its own message where it is parsed
            checks = []
        used: set[str] = set(terms)
        for ex in exprs:
            used |= {s.name for s in ex.free_symbols if isinstance(s, sp.Symbol)}
            used |= {b.label.name for b in ex.atoms(sp.Indexed) for b in [b.base]}
        for item in checks:
            if isinstance(item, dict) and isinstance(item.get("check"), str):
                used |= set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", item["check"]))
        sizes = {self.raw.get("indices", {}).get(i) for i in self.raw.get("indices", {})}
        own = set(self.raw.get("symbols", {}))
        return {n: s for n, s in symbols.items() if n in own or n in used or n in sizes}

    def _check_kind(self, kind: str, symbols: dict[str, SymbolSpec]) -> None:
        hidden = [s.name for s in symbols.values() if s.role == "hidden_constant"]
        if kind == "rate" and not hidden:
            raise self.fail("a 'rate' entry must expose its hidden constant as a symbol with "
                            "role 'hidden_constant'")
        if kind in ("certified", "conditional") and hidden:
            raise self.fail(f"a '{kind}' entry cannot have hidden constants ({hidden[0]})")
