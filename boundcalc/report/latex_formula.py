"""A registry entry in paper notation: symbol names, the SymPy printer, named definitions.

:func:`entry_latex` prints the expression in terms of its named definitions, then each
definition, inside an ``align*``; :func:`symbol_latex` turns a symbol name (``sigma_g``,
``lam``, ``W2``) into LaTeX. The document around it is :mod:`.latex`.
"""

from __future__ import annotations

import re
from typing import Any

import sympy as sp
from sympy.printing.latex import LatexPrinter

from ..errors import FormulaError
from ..registry.parser import Namespace, parse_expression
from ..registry.schema import Assumption, Definition, Entry
from .tex_text import _GREEK

_HEAD_DIGITS = re.compile(r"^([A-Za-z]+?)(\d+)$")


def _piece(part: str) -> str:
    if part in _GREEK:
        return _GREEK[part]
    if len(part) == 1 or part.isdigit():
        return part
    return r"\mathrm{%s}" % part


def symbol_latex(name: str) -> str:
    """Paper-style LaTeX for an identifier.

    ``sigma`` → ``\\sigma``, ``lam`` → ``\\lambda``, ``C_QK`` → ``C_{\\mathrm{QK}}``,
    ``L_phi`` → ``L_{\\phi}``, ``x2`` → ``x_{2}``, ``emp_risk`` → ``\\mathrm{emp\\_risk}``.
    """
    parts = [p for p in name.split("_") if p]
    if not parts:
        return r"\mathrm{?}"
    head, subs = parts[0], parts[1:]
    m = _HEAD_DIGITS.match(head)
    if m:
        head, subs = m.group(1), [m.group(2), *subs]
    # a phrase such as emp_risk or depth_term reads best upright as a whole; sv_in, C_QK as x_{y}
    wordy = [s for s in subs if len(s) >= 4 and s.islower() and s not in _GREEK]
    if head not in _GREEK and len(head) > 1 and wordy:
        return r"\mathrm{%s}" % r"\_".join(parts)
    out = _piece(head)
    if subs:
        out += "_{%s}" % ",".join(_piece(s) for s in subs)
    return out


def _declared(latex: str | None) -> str | None:
    """A declared ``latex`` field, if usable (ASCII, balanced braces); braced for safety."""
    if not latex or not latex.isascii():
        return None
    depth = 0
    for ch in latex.replace(r"\{", "").replace(r"\}", ""):
        depth += (ch == "{") - (ch == "}")
        if depth < 0:
            return None
    if depth != 0:
        return None
    return "{%s}" % latex if any(c in latex for c in "^_") else latex


def entry_names(entry: Entry) -> dict[str, str]:
    names: dict[str, str] = {}
    for n in entry.definitions:
        names[n] = symbol_latex(n)
    for n in entry.parameters:
        names[n] = symbol_latex(n)
    for n in entry.index_symbols:
        names[n] = r"\ell" if n == "l" else symbol_latex(n)
    for n, s in entry.symbols.items():
        names[n] = _declared(s.latex) or symbol_latex(n)
    return names


# ---- printer ----------------------------------------------------------------------------------

class EntryPrinter(LatexPrinter):
    """LaTeX printer with per-entry symbol names, ``x^{(l,h)}`` indexing and number overrides."""

    def __init__(self, names: dict[str, str], values: dict[str, str] | None = None,
                 **settings: Any):
        settings.setdefault("ln_notation", True)
        super().__init__(settings)
        self._names = names
        self._values = values or {}
        self._sep = self._settings["mul_symbol_latex"]

    def _print_Mul(self, expr: sp.Mul) -> str:
        # juxtaposition, but a thin space next to an upright multi-letter name (C \, \mathrm{term})
        wordy = self._sep.strip() == "" and any(
            self._print(f).startswith(r"\mathrm{") for f in expr.args
            if isinstance(f, (sp.Symbol, sp.Indexed)))
        saved = self._settings["mul_symbol_latex"]
        self._settings["mul_symbol_latex"] = r" \, " if wordy else self._sep
        try:
            return super()._print_Mul(expr)
        finally:
            self._settings["mul_symbol_latex"] = saved

    def _print_Symbol(self, expr: sp.Symbol, style: str = "plain") -> str:
        if expr.name in self._values:
            return self._values[expr.name]
        return self._names.get(expr.name) or symbol_latex(expr.name)

    def _print_IndexedBase(self, expr: sp.IndexedBase) -> str:
        return self._print_Symbol(expr.label)

    def _print_Indexed(self, expr: sp.Indexed) -> str:
        base = self._print(expr.base)
        idx = ",".join(self._print(i) for i in expr.indices)
        return "{%s}^{(%s)}" % (base, idx)

    def _helper_print_standard_power(self, expr: sp.Pow, template: str) -> str:
        if isinstance(expr.base, sp.Indexed) or (
                isinstance(expr.base, sp.Symbol) and expr.base.name in self._values):
            base = self._print(expr.base)
            if "^" in base and not base.startswith(r"\left("):
                base = r"\left(%s\right)" % base
            return template % (base, self._print(expr.exp))
        return super()._helper_print_standard_power(expr, template)


def printer_for(entry: Entry, values: dict[str, str] | None = None,
                **settings: Any) -> EntryPrinter:
    return EntryPrinter(entry_names(entry), values, **settings)


# ---- the expression with its definitions kept by name ------------------------------------------

def _named_namespace(entry: Entry) -> Namespace:
    scalars = {n: s.symbol for n, s in entry.symbols.items() if not s.indexed}
    scalars.update({n: p.symbol for n, p in entry.parameters.items()
                    if not p.indices and p.choice != "grid"})
    defs = {n: sp.Symbol(n) for n, d in entry.definitions.items() if not d.indices}
    idefs = {n: (d.index_symbols, sp.IndexedBase(n)[d.index_symbols])
             for n, d in entry.definitions.items() if d.indices}
    return Namespace(
        scalars=scalars,
        indexed={n: (s.symbol, len(s.indices)) for n, s in entry.symbols.items() if s.indexed},
        indices=dict(entry.index_symbols),
        definitions=defs, indexed_definitions=idefs,
        grid_params={n: p.symbol for n, p in entry.parameters.items() if p.choice == "grid"},
    )


def named_expression(entry: Entry) -> tuple[sp.Expr, list[tuple[Definition, sp.Expr]]]:
    """The expression and the definitions (ordered by first use) with definitions as names."""
    try:
        ns = _named_namespace(entry)
        expr = parse_expression(entry.expression_text, ns)
        bodies = {n: parse_expression(d.text, ns) for n, d in entry.definitions.items()}
    except FormulaError:  # cannot happen for a loaded entry; fall back to the expanded form
        return entry.expression, []
    order: list[str] = []
    queue = [entry.expression_text]
    while queue:
        text = queue.pop(0)
        used = [(m.start(), n) for n in entry.definitions if n not in order
                for m in [re.search(r"\b%s\b" % re.escape(n), text)] if m]
        for _, n in sorted(used):
            if n not in order:
                order.append(n)
                queue.append(entry.definitions[n].text)
    order += [n for n in entry.definitions if n not in order]
    return expr, [(entry.definitions[n], bodies[n]) for n in order]


def named_check(entry: Entry, a: Assumption) -> sp.Basic:
    """An assumption's check written with definition names (as in the symbolic form)."""
    assert a.check is not None
    try:
        return parse_expression(a.check.text, _named_namespace(entry))
    except (FormulaError, TypeError):
        return a.check.expr


def _lhs(d: Definition, p: EntryPrinter) -> str:
    name = sp.IndexedBase(d.name)[d.index_symbols] if d.indices else sp.Symbol(d.name)
    return p.doprint(name)


BOUND_SYMBOL = r"\mathcal{B}"
_ROW_WIDTH = 50  # rough number of glyphs that fit on one display line


def _width(tex: str) -> int:
    """A rough glyph count of a LaTeX math string (a macro counts as one glyph)."""
    tex = re.sub(r"\\(left|right|mathrm|frac|sqrt|substack|limits)\b", "", tex)
    tex = re.sub(r"\\[A-Za-z]+", "x", tex)
    return len(re.sub(r"[{}^_ &]", "", tex))


def _rhs(expr: sp.Basic, p: EntryPrinter) -> list[str]:
    """``expr`` printed, split at its top-level + and − into pieces that fit on a line."""
    full = p.doprint(expr)
    if _width(full) <= _ROW_WIDTH:
        return [full]
    if isinstance(expr, sp.Mul) and sp.fraction(expr)[1] == 1:
        # c * (long sum): keep c, split the sum inside \Bigl( ... \Bigr)
        adds = [f for f in expr.args if isinstance(f, sp.Add)]
        if len(adds) == 1:
            rest = p.doprint(sp.Mul(*[f for f in expr.args if f is not adds[0]]))
            rows = _rhs(adds[0], p)
            rows[0] = r"%s \Bigl(%s" % (rest, rows[0])
            rows[-1] += r"\Bigr)"
            return rows
    if not isinstance(expr, sp.Add):
        return [full]
    pieces = []
    for i, term in enumerate(p._as_ordered_terms(expr, order=None)):
        sign = "" if i == 0 else "+ "
        if i and term.could_extract_minus_sign():
            sign, term = "- ", -term
        tex = p._print(term)
        if p._needs_add_brackets(term):
            tex = r"\left(%s\right)" % tex
        pieces.append(sign + tex)
    rows = [pieces[0]]
    for piece in pieces[1:]:
        if _width(rows[-1]) + _width(piece) > _ROW_WIDTH:
            rows.append(piece)
        else:
            rows[-1] += " " + piece
    return rows


def equation_latex(lhs: str, expr: sp.Basic, p: EntryPrinter, tail: str = "") -> str:
    """One ``align*`` equation ``lhs &= expr tail``, broken over several rows if long."""
    rows = _rhs(expr, p)
    rows[-1] += tail
    out = r"%s &= %s" % (lhs, rows[0])
    for row in rows[1:]:
        out += " \\\\\n" + r"&\quad %s" % row
    return out


def equation_rows(entry: Entry, p: EntryPrinter) -> tuple[str, list[str]]:
    expr, defs = named_expression(entry)
    main = equation_latex(BOUND_SYMBOL, expr, p)
    rows = [equation_latex(_lhs(d, p), body, p) for d, body in defs]
    return main, rows


def entry_latex(entry: Entry) -> str:
    """The symbolic form of ``entry`` in paper notation, as an ``align*`` environment.

    The first row is the expression written with the definition names; the rows after
    "where" give each definition, in order of first use.
    """
    p = printer_for(entry)
    main, rows = equation_rows(entry, p)
    body = main
    if rows:
        body += "\n\\intertext{where}\n" + " \\\\\n".join(rows)
    return "\\begin{align*}\n%s\n\\end{align*}" % body


def instantiated_latex(entry: Entry, values: dict[str, str], bound_text: str) -> str:
    """``entry`` with its symbols' ``values`` (as written) put in and ``≤ bound_text`` (its
    value, rounded as the caller rounds it) after the expression: an ``align*`` environment,
    the definitions after "where" (``boundcalc holdout --latex``)."""
    main, rows = equation_rows(entry, printer_for(entry, dict(values)))
    main += r" \le %s" % bound_text
    body = main + ("\n\\intertext{where}\n" + " \\\\\n".join(rows) if rows else "")
    return "\\begin{align*}\n%s\n\\end{align*}" % body
