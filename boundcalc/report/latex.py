"""LaTeX export: a registry entry in paper notation, and a standalone document with a result.

``entry_latex`` prints the expression in terms of its named definitions, then each definition,
inside an ``align*``. ``latex_document`` adds provenance, assumptions, symbols, free parameters
and, given a :class:`~boundcalc.evaluation.Result`, the instantiated numbers. The document uses
only ``amsmath``, ``amssymb`` and ``booktabs`` and is pure ASCII: every text field of a formula
file goes through :func:`tex_escape`, which maps the common unicode symbols to LaTeX.
"""

from __future__ import annotations

import math
import re
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np
import sympy as sp
from sympy.printing.latex import LatexPrinter

from ..errors import BoundcalcError, FormulaError
from ..evaluation import Result, confidence_symbol, gridmin_params
from ..registry.parser import Namespace, parse_expression
from ..registry.schema import Definition, Domain, Entry, ParameterSpec
from .io import write_text_atomic

__all__ = ["entry_latex", "latex_document", "write_latex", "tex_escape", "symbol_latex",
           "honest_label"]

# ---- names ------------------------------------------------------------------------------------

_GREEK_LOWER = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi pi "
                "rho sigma tau upsilon phi chi psi omega").split()
_GREEK_UPPER = "Gamma Delta Theta Lambda Xi Pi Sigma Upsilon Phi Psi Omega".split()
_GREEK = {g: "\\" + g for g in (*_GREEK_LOWER, *_GREEK_UPPER)}
_GREEK.update({
    "lam": r"\lambda", "lamda": r"\lambda", "lmbda": r"\lambda", "eps": r"\epsilon",
    "varepsilon": r"\varepsilon", "vartheta": r"\vartheta", "varphi": r"\varphi",
    "varrho": r"\varrho", "varsigma": r"\varsigma", "varpi": r"\varpi", "omicron": "o",
    "ell": r"\ell",
})
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


def _names(entry: Entry) -> dict[str, str]:
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

class _Printer(LatexPrinter):
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


def _printer(entry: Entry, values: dict[str, str] | None = None, **settings: Any) -> _Printer:
    return _Printer(_names(entry), values, **settings)


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


def _named(entry: Entry) -> tuple[sp.Expr, list[tuple[Definition, sp.Expr]]]:
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


def _named_check(entry: Entry, a: Any) -> sp.Basic:
    """An assumption's predicate written with definition names (as in the symbolic form)."""
    try:
        return parse_expression(a.check_text, _named_namespace(entry))
    except (FormulaError, TypeError):
        return a.check


def _lhs(d: Definition, p: _Printer) -> str:
    name = sp.IndexedBase(d.name)[d.index_symbols] if d.indices else sp.Symbol(d.name)
    return p.doprint(name)


BOUND_SYMBOL = r"\mathcal{B}"
_ROW_WIDTH = 50  # rough number of glyphs that fit on one display line


def _width(tex: str) -> int:
    """A rough glyph count of a LaTeX math string (a macro counts as one glyph)."""
    tex = re.sub(r"\\(left|right|mathrm|frac|sqrt|substack|limits)\b", "", tex)
    tex = re.sub(r"\\[A-Za-z]+", "x", tex)
    return len(re.sub(r"[{}^_ &]", "", tex))


def _rhs(expr: sp.Basic, p: _Printer) -> list[str]:
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


def _equation(lhs: str, expr: sp.Basic, p: _Printer, tail: str = "") -> str:
    """One ``align*`` equation ``lhs &= expr tail``, broken over several rows if long."""
    rows = _rhs(expr, p)
    rows[-1] += tail
    out = r"%s &= %s" % (lhs, rows[0])
    for row in rows[1:]:
        out += " \\\\\n" + r"&\quad %s" % row
    return out


def _equation_rows(entry: Entry, p: _Printer) -> tuple[str, list[str]]:
    expr, defs = _named(entry)
    main = _equation(BOUND_SYMBOL, expr, p)
    rows = [_equation(_lhs(d, p), body, p) for d, body in defs]
    return main, rows


def entry_latex(entry: Entry) -> str:
    """The symbolic form of ``entry`` in paper notation, as an ``align*`` environment.

    The first row is the expression written with the definition names; the rows after
    "where" give each definition, in order of first use.
    """
    p = _printer(entry)
    main, rows = _equation_rows(entry, p)
    body = main
    if rows:
        body += "\n\\intertext{where}\n" + " \\\\\n".join(rows)
    return "\\begin{align*}\n%s\n\\end{align*}" % body


# ---- text escaping ----------------------------------------------------------------------------

_TEXT_SPECIAL = {
    "\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "$": r"\$", "&": r"\&", "#": r"\#",
    "%": r"\%", "^": r"\textasciicircum{}", "~": r"\textasciitilde{}",
    "_": r"\_\allowbreak{}", "/": r"/\allowbreak{}",  # let long paths and names break
    "`": "{}`",  # keeps ?` and !` from turning into the OT1 ligatures for inverted ? and !
}
_ASCII_MATH = {"<": "<", ">": ">", "|": "|"}  # OT1 text fonts print these wrongly
_UNICODE_TEXT = {
    "\u2013": "--", "\u2014": "---", "\u2026": r"\ldots{}", "\u201c": "``", "\u201d": "''",
    "\u2018": "`", "\u2019": "'", "\u00a7": r"\S{}", "\u00b6": r"\P{}", "\u00a0": "~",
    "\u2009": r"\,", "\u202f": r"\,", "\u00df": r"\ss{}", "\u00e6": r"\ae{}", "\u00c6": r"\AE{}",
    "\u00f8": r"\o{}", "\u00d8": r"\O{}", "\u0153": r"\oe{}", "\u0152": r"\OE{}",
    "\u0142": r"\l{}", "\u0141": r"\L{}", "\u0131": r"\i{}", "\u2022": r"$\bullet$",
    "\u00ab": "<<", "\u00bb": ">>", "\u2010": "-", "\u2011": "-", "\u2012": "-",
}
_UNICODE_MATH = {
    "\u2016": r"\|", "\u2225": r"\|", "\u2265": r"\geq", "\u2264": r"\leq", "\u2260": r"\neq",
    "\u2248": r"\approx", "\u2243": r"\simeq", "\u2261": r"\equiv", "\u2208": r"\in",
    "\u2209": r"\notin", "\u221e": r"\infty", "\u221a": r"\surd", "\u00d7": r"\times",
    "\u00b7": r"\cdot", "\u22c5": r"\cdot", "\u2219": r"\cdot", "\u2212": "-", "\u00b1": r"\pm",
    "\u2213": r"\mp", "\u2192": r"\to", "\u2190": r"\leftarrow", "\u2194": r"\leftrightarrow",
    "\u21d2": r"\Rightarrow", "\u21d0": r"\Leftarrow", "\u21d4": r"\Leftrightarrow",
    "\u21a6": r"\mapsto", "\u2211": r"\sum", "\u220f": r"\prod", "\u222b": r"\int",
    "\u2202": r"\partial", "\u2207": r"\nabla", "\u2308": r"\lceil", "\u2309": r"\rceil",
    "\u230a": r"\lfloor", "\u230b": r"\rfloor", "\u27e8": r"\langle", "\u27e9": r"\rangle",
    "\u2329": r"\langle", "\u232a": r"\rangle", "\u223c": r"\sim", "\u221d": r"\propto",
    "\u22a4": r"\top", "\u22a5": r"\perp", "\u2200": r"\forall", "\u2203": r"\exists",
    "\u2229": r"\cap", "\u222a": r"\cup", "\u2282": r"\subset", "\u2286": r"\subseteq",
    "\u2283": r"\supset", "\u2287": r"\supseteq", "\u2205": r"\emptyset", "\u2218": r"\circ",
    "\u2297": r"\otimes", "\u2295": r"\oplus", "\u2227": r"\wedge", "\u2228": r"\vee",
    "\u00ac": r"\neg", "\u226a": r"\ll", "\u226b": r"\gg", "\u2272": r"\lesssim",
    "\u2273": r"\gtrsim", "\u2113": r"\ell", "\u211d": r"\mathbb{R}", "\u2115": r"\mathbb{N}",
    "\u2124": r"\mathbb{Z}", "\u211a": r"\mathbb{Q}", "\u2102": r"\mathbb{C}",
    "\U0001d53c": r"\mathbb{E}", "\u2119": r"\mathbb{P}", "\u00b0": r"^{\circ}",
    "\u00b5": r"\mu", "\u00bd": r"\tfrac{1}{2}", "\u00bc": r"\tfrac{1}{4}",
    "\u2223": r"\mid", "\u2032": r"'", "\u2033": r"''", "\u2217": "*", "\u22c6": r"\star",
    "\u2020": r"\dagger", "\u2021": r"\ddagger", "\u22ef": r"\cdots",
    "\u03d1": r"\vartheta", "\u03d5": r"\phi", "\u03c6": r"\varphi", "\u03f5": r"\epsilon",
    "\u03b5": r"\varepsilon", "\u03c2": r"\varsigma", "\u03f1": r"\varrho", "\u03d6": r"\varpi",
}
_SUPERSCRIPTS = dict(zip("\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079"
                         "\u207a\u207b\u207d\u207e\u207f\u2071", "0123456789+-()ni"))
_SUPERSCRIPTS["\u1d40"] = r"{\top}"
_SUBSCRIPTS = dict(zip("\u2080\u2081\u2082\u2083\u2084\u2085\u2086\u2087\u2088\u2089"
                       "\u208a\u208b\u208d\u208e", "0123456789+-()"))
_TEXT_ACCENTS = {"\u0300": "`", "\u0301": "'", "\u0302": "^", "\u0303": "~", "\u0304": "=",
                 "\u0306": "u", "\u0307": ".", "\u0308": '"', "\u030a": "r", "\u030b": "H",
                 "\u030c": "v", "\u0327": "c", "\u0328": "k"}
_MATH_ACCENTS = {"\u0300": r"\grave", "\u0301": r"\acute", "\u0302": r"\hat", "\u0303": r"\tilde",
                 "\u0304": r"\bar", "\u0305": r"\bar", "\u0306": r"\breve", "\u0307": r"\dot",
                 "\u0308": r"\ddot", "\u030c": r"\check", "\u20d7": r"\vec"}


def _greek(ch: str) -> str | None:
    try:
        name = unicodedata.name(ch)
    except ValueError:
        return None
    m = re.match(r"^GREEK (SMALL|CAPITAL) LETTER ([A-Z]+)$", name)
    if not m:
        return None
    word = m.group(2).lower().replace("lamda", "lambda")
    if m.group(1) == "SMALL":
        return "o" if word == "omicron" else ("\\" + word if word in _GREEK_LOWER else None)
    cap = word.capitalize()
    if cap in _GREEK_UPPER:
        return "\\" + cap
    latin = {"alpha": "A", "beta": "B", "epsilon": "E", "zeta": "Z", "eta": "H", "iota": "I",
             "kappa": "K", "mu": "M", "nu": "N", "omicron": "O", "rho": "P", "tau": "T",
             "chi": "X"}
    return (r"\mathrm{%s}" % latin[word]) if word in latin else None


def tex_escape(text: Any) -> str:
    """Text from a formula file (or a result) as LaTeX text: special characters escaped,
    common unicode symbols (‖ ≥ δ σ ² ᵀ L̂ Ṽ …) turned into LaTeX, anything else shown as ``?``.
    The output is pure ASCII."""
    return _escape(str(text), 0)


def _escape(text: str, depth: int) -> str:
    tokens: list[list[str]] = []  # [kind, content]; kind: text, math, sup, sub
    src = unicodedata.normalize("NFC", text)
    i = 0
    while i < len(src):
        script = _script(src, i) if depth < 4 else None
        if script is not None:  # x^{...}, x_{...}, x^2, x^p written in plain text
            kind, inner, i = script
            tokens.append([kind, r"\text{%s}" % _escape(inner, depth + 1)])
            continue
        ch = src[i]
        i += 1
        if not _add_token(ch, tokens):
            parts = unicodedata.normalize("NFD", ch)
            if parts == ch or not all(_add_token(c, tokens) for c in parts):
                tokens.append(["text", "?"])
    return _join_tokens(tokens)


def _script(src: str, i: int) -> tuple[str, str, int] | None:
    """``^{..}``/``_{..}`` (balanced) or ``^x``/``^12`` at ``src[i]``: (kind, inner, next)."""
    ch = src[i]
    if ch not in "^_" or i + 1 >= len(src):
        return None
    kind = "sup" if ch == "^" else "sub"
    if src[i + 1] == "{":
        depth = 0
        for j in range(i + 1, min(len(src), i + 200)):  # short scripts only
            depth += (src[j] == "{") - (src[j] == "}")
            if depth == 0:
                return (kind, src[i + 2:j], j + 1) if j > i + 2 else None
        return None
    if ch == "^":
        m = re.compile(r"\d+|\w").match(src, i + 1)
        if m:
            return kind, m.group(0), m.end()
    return None


def _add_token(ch: str, tokens: list[list[str]]) -> bool:
    """Append the LaTeX for one character; False when the character is unknown."""
    if ch in _TEXT_SPECIAL:
        tokens.append(["text", _TEXT_SPECIAL[ch]])
    elif ch in _ASCII_MATH:
        tokens.append(["math", _ASCII_MATH[ch]])
    elif ch in "\n\t\r":
        tokens.append(["text", " "])
    elif " " <= ch <= "~":
        tokens.append(["text", ch])
    elif ch < " " or ch == "\x7f":
        pass
    elif ch == "\u0338":  # combining negation: = becomes \neq, \in becomes \not\in
        last = tokens[-1] if tokens else None
        if last == ["text", "="]:
            tokens[-1] = ["math", r"\neq"]
        elif last and last[0] == "math":
            tokens[-1] = ["math", r"\not" + last[1]]
        elif last and last[0] == "text" and len(last[1]) == 1 and last[1].isalnum():
            tokens[-1] = ["math", r"\not\mathrm{%s}" % last[1]]
        # otherwise the overlay is dropped
    elif ch in _TEXT_ACCENTS or ch in _MATH_ACCENTS:
        last = tokens[-1] if tokens else None
        if last and last[0] == "text" and len(last[1]) == 1 and last[1].isalpha() \
                and ch in _TEXT_ACCENTS:
            base = {"i": r"\i", "j": r"\j"}.get(last[1], last[1])
            last[1] = "\\%s{%s}" % (_TEXT_ACCENTS[ch], base)
        elif last and last[0] == "math" and ch in _MATH_ACCENTS:
            last[1] = "%s{%s}" % (_MATH_ACCENTS[ch], last[1])
        # otherwise the accent is dropped
    elif ch in _UNICODE_TEXT:
        tokens.append(["text", _UNICODE_TEXT[ch]])
    elif ch in _UNICODE_MATH:
        tokens.append(["math", _UNICODE_MATH[ch]])
    elif ch in _SUPERSCRIPTS:
        tokens.append(["sup", _SUPERSCRIPTS[ch]])
    elif ch in _SUBSCRIPTS:
        tokens.append(["sub", _SUBSCRIPTS[ch]])
    elif _greek(ch):
        tokens.append(["math", _greek(ch)])  # type: ignore[list-item]
    elif unicodedata.category(ch).startswith("Z"):
        tokens.append(["text", " "])
    else:
        return False
    return True


def _join_tokens(tokens: list[list[str]]) -> str:
    # merge runs of super/subscripts, then runs of math into one $...$
    merged: list[list[str]] = []
    for kind, s in tokens:
        if merged and kind in ("sup", "sub") and merged[-1][0] == kind:
            merged[-1][1] += s
        else:
            merged.append([kind, s])
    out: list[str] = []
    math_run: list[str] = []
    scripts: set[str] = set()  # scripts the current math atom already carries

    def flush() -> None:
        if math_run:
            out.append("$%s$" % " ".join(math_run))
            math_run.clear()
        scripts.clear()

    for kind, s in merged:
        if kind == "text":
            flush()
            out.append(s)
        elif kind in ("sup", "sub"):
            if kind in scripts:  # x^a_b^c: start an empty atom, never a double superscript
                math_run.append("{}")
                scripts.clear()
            scripts.add(kind)
            math_run.append(("^{%s}" if kind == "sup" else "_{%s}") % s)
        else:
            scripts.clear()
            math_run.append(s)
    flush()
    return "".join(out)


# ---- numbers, domains, grids --------------------------------------------------------------------

def _num(x: Any, digits: int = 6) -> str:
    """A number in LaTeX math: ``0.05``, ``60000``, ``1.234 \\cdot 10^{-7}``, ``\\infty``."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return r"\mathrm{?}"
    if math.isnan(x):
        return r"\mathrm{NaN}"
    if math.isinf(x):
        return r"\infty" if x > 0 else r"-\infty"
    if x == int(x) and abs(x) < 1e7:
        return str(int(x))
    return _sci(f"{x:.{digits}g}")


def _sci(text: str) -> str:
    m = re.match(r"^(-?[0-9.]+)e([+-]?)0*(\d+)$", text)
    if not m:
        return text
    return r"%s \cdot 10^{%s%s}" % (m.group(1), "-" if m.group(2) == "-" else "", m.group(3))


def _value_num(x: Any) -> str:
    """A number that replaces a symbol inside an expression: parenthesised when needed."""
    s = _num(x)
    return r"\left(%s\right)" % s if (s.startswith("-") or "\\cdot" in s) else s


def _domain(d: Domain) -> str:
    core = r"%s%s, %s%s" % ("(" if d.lo_open else "[", _num(d.lo), _num(d.hi),
                            ")" if d.hi_open else "]")
    return (r"\mathbb{Z} \cap " + core) if d.integer else core


def _grid(p: ParameterSpec, pr: _Printer) -> str:
    if p.prior is not None:
        v = r"%s^{2}" % symbol_latex(p.name) if p.prior.squared else symbol_latex(p.name)
        return (r"$%s = %s\, e^{-j/%s}$, $j \geq 1$, weight $6/(\pi^{2} j^{2})$"
                % (v, _num(p.prior.c), _num(p.prior.b)))
    if p.grid is None:
        return "--"
    a = [pr.doprint(x) for x in p.grid.args]
    if p.grid.kind == "values":
        shown = a if len(a) <= 8 else [*a[:3], r"\ldots", *a[-2:]]
        return r"$\{%s\}$ (%d points)" % (", ".join(shown), len(a))
    if p.grid.kind == "range":
        return r"$\{%s + j\, t\}_{j \geq 0} \cap [%s, %s]$, $t = %s$" % (a[0], a[0], a[1], a[2])
    spacing = "evenly" if p.grid.kind == "linspace" else "geometrically"
    return r"$%s$ points %s spaced in $[%s, %s]$" % (a[2], spacing, a[0], a[1])


_COST_RULE = {
    "simultaneous": "none (holds for all values at once)",
    "grid": r"$\ln|\text{grid}|$ per chosen value",
    "prior": r"$2 \ln j + \ln(\pi^{2}/6)$",
    "fixed": "none (set before seeing the data)",
}


# ---- labels -----------------------------------------------------------------------------------

_KIND_MEANING = {
    "certified": "every constant is known: under the listed assumptions the value is a valid "
                 "upper bound with probability ≥ 1 − δ",
    "conditional": "an upper bound only if the named condition holds, which the calculator "
                   "cannot check and the source does not establish; it is not certified",
    "rate": "stated with O(·) in its source: the number depends on the hidden constant, which is "
            "set explicitly; it is not a guarantee",
    "proxy": "a complexity measure evaluated in its source paper, for comparing models; it is "
             "not a guarantee on the risk",
}


def honest_label(entry: Entry, result: Result | None = None) -> str:
    """How the number may be called (LaTeX text): only a certified entry is called a bound."""
    if entry.kind == "proxy":
        return "complexity proxy, not a bound"
    if entry.kind == "rate":
        consts = dict(result.hidden_constants) if result is not None else {
            s.name: s.default for s in entry.symbols.values() if s.role == "hidden_constant"}
        names = _names(entry)
        parts = ", ".join(r"$%s = %s$" % (names.get(k, symbol_latex(k)), _num(v))
                          for k, v in consts.items())
        return "rate (hidden constant%s %s)" % ("s" if len(consts) > 1 else "", parts)
    if entry.kind == "conditional" and (result is None or not result.failed_assumptions):
        est = "estimated (a stochastic estimate without its confidence term) and " \
            if result is not None and result.estimated else ""
        return tex_escape(f"{est}conditional: an upper bound only if the "
                          f"conditions below hold")
    if result is None or result.is_bound:
        return "certified bound"
    return tex_escape(result.label)


# ---- document ---------------------------------------------------------------------------------

_PREAMBLE = r"""\documentclass[11pt]{article}
\usepackage{amsmath}
\usepackage{amssymb}
\usepackage{booktabs}
\addtolength{\textwidth}{4cm}
\addtolength{\oddsidemargin}{-2cm}
\addtolength{\evensidemargin}{-2cm}
\addtolength{\textheight}{3cm}
\addtolength{\topmargin}{-1.5cm}
\allowdisplaybreaks
\setlength{\parindent}{0pt}
\sloppy
\setlength{\parskip}{0.5ex}
"""

_ROWS_PER_TABLE = 28


def _table(header: list[str], rows: list[list[str]], spec: str) -> list[str]:
    """booktabs tables, split every few rows so that a long one never runs off the page."""
    # paragraph columns are set ragged right; \tabularnewline, since \raggedright redefines \\
    ragged = [c.startswith("p") for c in spec.split()]

    def row(cells: list[str]) -> str:
        return " & ".join((r"\raggedright " if rag else "") + c
                          for c, rag in zip(cells, ragged)) + r" \tabularnewline"

    out: list[str] = []
    for start in range(0, max(len(rows), 1), _ROWS_PER_TABLE):
        chunk = rows[start:start + _ROWS_PER_TABLE]
        out += [r"\begin{center}\small", r"\begin{tabular}{%s}" % spec, r"\toprule",
                row([r"\textbf{%s}" % h for h in header]), r"\midrule"]
        out += [row(r) for r in chunk]
        out += [r"\bottomrule", r"\end{tabular}", r"\end{center}"]
    return out


def _symbol_name(entry: Entry, name: str, p: _Printer) -> str:
    s = entry.symbols[name]
    if s.indexed:
        return p.doprint(s.symbol[tuple(entry.index_symbols[i] for i in s.indices)])
    return p.doprint(s.symbol)


def _array_text(v: Any) -> str:
    try:
        arr = np.asarray(v, dtype=float)
    except (TypeError, ValueError):
        return tex_escape(str(v)[:80])
    if arr.ndim == 0:
        return "$%s$" % _num(arr)
    if arr.size <= 8:
        return "$(%s)$" % ", ".join(_num(x, 4) for x in arr.reshape(-1))
    return (r"array of shape %s: min $%s$, max $%s$" % (
        tex_escape(str(tuple(arr.shape))), _num(np.nanmin(arr), 4), _num(np.nanmax(arr), 4)))


def _value_text(result: Result) -> str:
    """The value in LaTeX; beyond the float range from its log10 (products over many layers)."""
    if not math.isfinite(result.value) and math.isfinite(result.log10_value):
        exp = math.floor(result.log10_value)
        return r"%.4f \cdot 10^{%d}" % (10 ** (result.log10_value - exp), exp)
    return _num(result.value)


def latex_document(entry: Entry, result: Result | None = None) -> str:
    """A standalone LaTeX document for ``entry`` (and the numbers of ``result``, if given)."""
    if result is not None and result.id != entry.id:
        raise BoundcalcError(f"the result is for entry '{result.id}', not '{entry.id}'")
    p = _printer(entry)
    esc = tex_escape
    L: list[str] = [_PREAMBLE, r"\begin{document}", ""]
    L.append(r"\begin{center}{\Large\bfseries %s}\end{center}" % esc(entry.title))
    L.append(r"\begin{description}")
    L.append(r"\item[Identifier] \texttt{%s}" % esc(entry.id))
    L.append(r"\item[Family] \texttt{%s}" % esc(entry.family))
    L.append(r"\item[Kind] %s: %s." % (esc(entry.kind), esc(_KIND_MEANING.get(entry.kind, ""))))
    L.append(r"\item[Label] %s" % honest_label(entry, result))
    for c in entry.conditions:
        L.append(r"\item[Condition] %s" % esc(c))
    if entry.variant:
        L.append(r"\item[Variant] %s" % esc(entry.variant))
    L.append(r"\item[Source] %s" % esc(entry.source))
    L.append(r"\item[Provenance] %s" % esc(entry.provenance))
    L.append(r"\item[Formula file] \texttt{%s}" % esc(entry.file))
    L.append(r"\end{description}")
    if entry.description:
        L.append(esc(entry.description))

    L.append(r"\section*{Assumptions}")
    statuses = result.assumptions if result is not None else []
    if entry.assumptions:
        L.append(r"\begin{enumerate}")
        for j, a in enumerate(entry.assumptions):
            item = esc(a.text)
            if a.check is not None:
                item += r" \quad (check: $%s$)" % p.doprint(_named_check(entry, a))
            if j < len(statuses):
                item += r" \quad \textbf{[%s]}" % esc(statuses[j].get("status", "unchecked"))
            elif result is None:
                item += "" if a.check is not None else r" \quad [stated in words]"
            L.append(r"\item{} " + item)
        L.append(r"\end{enumerate}")
    else:
        L.append("None declared.")

    main, rows = _equation_rows(entry, p)
    L.append(r"\section*{Symbolic form}")
    L += [r"\begin{align*}", main, r"\end{align*}"]
    if rows:
        L.append(r"\subsection*{Definitions}")
        L += [r"\begin{align*}", " \\\\\n".join(rows), r"\end{align*}"]
    if entry.index_symbols:
        ranges = ", ".join(r"$%s = 0, \ldots, %s - 1$" % (p._names[i], p._names.get(s, s))
                           for i, s in entry.indices.items())
        L.append("Indices: %s." % ranges)

    if entry.parameters:
        L.append(r"\section*{Free parameters}")
        prow = [[r"$%s$" % p._names[n] + (r"$^{(%s)}$" % ",".join(
                    p._names[i] for i in par.indices) if par.indices else ""),
                 esc(par.choice), "$%s$" % _domain(par.domain), _grid(par, p),
                 _COST_RULE.get(par.choice, ""), esc(par.note)]
                for n, par in entry.parameters.items()]
        L += _table(["name", "choice", "domain", "grid / prior", "union-bound cost", "note"],
                    prow, r"l l l p{0.24\textwidth} p{0.17\textwidth} p{0.2\textwidth}")
        L.append(r"Union-bound costs are charged to the confidence: the formula is evaluated "
                 r"at $\delta_{\mathrm{eff}} = \delta\, e^{-\sum \mathrm{cost}}$.")

    L.append(r"\section*{Symbols}")
    srows = []
    for n, s in entry.symbols.items():
        role = esc(s.role.replace("_", " "))
        if s.default is not None:
            role += ", default $%s$" % _num(s.default)
        srows.append(["$%s$" % _symbol_name(entry, n, p), esc(s.meaning),
                      "$%s$" % _domain(s.domain), role])
    L += _table(["symbol", "meaning", "domain", "role"], srows,
                r"l p{0.46\textwidth} l p{0.2\textwidth}")

    if entry.notes:
        L.append(r"\section*{Notes}")
        L.append(r"\begin{itemize}")
        L += [r"\item{} " + esc(n) for n in entry.notes]
        L.append(r"\end{itemize}")

    if result is not None:
        L += _result_section(entry, result)
    L += ["", r"\end{document}", ""]
    text = "\n".join(L)
    if not text.isascii():  # only a bug could put non-ASCII here; never hand pdflatex one
        text = text.encode("ascii", "replace").decode("ascii")
    return text


def _result_section(entry: Entry, r: Result) -> list[str]:
    esc = tex_escape
    names = _names(entry)
    L = [r"\section*{Instantiated (%s)}" % esc(r.method)]
    L.append(r"\textbf{Value:} $%s = %s$ \quad (%s)" % (BOUND_SYMBOL, _value_text(r),
                                                          honest_label(entry, r)))
    if r.vacuous is not None:
        L.append(r"\\ Vacuous: %s." % esc(r.vacuous_text))
    if r.unit:
        L.append(r"\\ Unit: %s." % esc(r.unit))
    if r.certifies:
        L.append(r"\\ Certifies (%s): %s." % (esc(r.certifies["about"]),
                                                esc(r.certifies["text"])))
    L += _floor_section(r)
    if r.estimated_inputs:
        L.append(r"\\ \textbf{Estimated inputs:} "
                 + "; ".join(esc(x) for x in r.estimated_inputs))

    # confidence accounting
    conf = confidence_symbol(entry)
    total = float(sum(r.union_bound_cost.values()))
    if r.delta is not None:
        L.append(r"\subsection*{Confidence}")
        line = (r"$\delta = %s$, $\delta_{\mathrm{eff}} = %s$, total union-bound cost $%s$"
                % (_num(r.delta), _num(r.delta_effective), _num(total, 4)))
        if total > 0:
            line += (r" (the formula is evaluated at $\delta_{\mathrm{eff}} = \delta\, "
                     r"e^{-%s}$)" % _num(total, 4))
        L.append(line + ".")
    if r.union_bound_cost:
        crow = [["$%s$" % names.get(k, symbol_latex(k)), "$%s$" % _num(v, 5)]
                for k, v in r.union_bound_cost.items()]
        crow.append([r"\textit{total}", "$%s$" % _num(total, 5)])
        L += _table(["parameter", "union-bound cost (nats)"], crow, "l r")

    if r.parameters:
        L.append(r"\subsection*{Free parameters}")
        prow = [["$%s$" % names.get(k, symbol_latex(k)), _array_text(v),
                 esc(r.parameter_choice.get(k, ""))] for k, v in r.parameters.items()]
        L += _table(["parameter", "value", "chosen by"], prow,
                    r"l p{0.45\textwidth} p{0.3\textwidth}")

    # the expression with scalar inputs and scalar parameters replaced by their numbers
    values = {k: _value_num(v) for k, v in r.inputs.items()
              if k in entry.symbols and not entry.symbols[k].indexed}
    per_instance = set(gridmin_params(entry))  # chosen inside GridMin: stay symbolic
    for k, v in r.parameters.items():
        if np.ndim(v) == 0 and k not in per_instance:
            values[k] = _value_num(v)
    if conf is not None and r.delta_effective is not None and conf in values:
        values[conf] = _value_num(r.delta_effective)
    vp = _printer(entry, values, mul_symbol="dot")
    expr, defs = _named(entry)
    rows = [_equation(BOUND_SYMBOL, expr, vp, " = %s" % _value_text(r))]
    for d, body in defs:
        if d.indices:
            continue
        tail = " = %s" % _num(r.terms[d.name]) if d.name in r.terms else ""
        rows.append(_equation(vp.doprint(sp.Symbol(d.name)), body, vp, tail))
    L.append(r"\subsection*{With the numbers}")
    note = (r" ($%s$ stands at $\delta_{\mathrm{eff}}$)" % names[conf]
            if conf is not None and conf in values and total > 0 else "")
    L.append("Scalar inputs and scalar free parameters substituted%s:" % note)
    L += [r"\begin{align*}", " \\\\\n".join(rows), r"\end{align*}"]

    if r.terms:
        L.append(r"\subsection*{Terms}")
        trow = [["$%s$" % vp._names.get(k, symbol_latex(k)), "$%s$" % _num(v)]
                for k, v in r.terms.items()]
        L += _table(["term", "value"], trow, "l r")

    scalars = [(k, v) for k, v in r.inputs.items() if k in entry.symbols]
    if scalars:
        L.append(r"\subsection*{Scalar inputs}")
        irow = [["$%s$" % names.get(k, symbol_latex(k)), "$%s$" % _num(v),
                 esc(entry.symbols[k].meaning)] for k, v in scalars]
        L += _table(["symbol", "value", "meaning"], irow, r"l r p{0.55\textwidth}")
    if r.notes:
        L.append(r"\subsection*{Notes}")
        L.append(r"\begin{itemize}")
        L += [r"\item{} " + esc(n) for n in r.notes]
        L.append(r"\end{itemize}")
    return L


def _floor_section(r: Result) -> list[str]:
    """The zero-complexity floor, each piece of the budget with its effect, and the gap to a
    held-out test error (see :mod:`boundcalc.floor`)."""
    f = r.floor
    L: list[str] = []
    if f:
        L.append(r"\subsection*{Floor and what dominates}")
        L.append(r"With zero complexity the value would be at least $\mathrm{kl}^{-1}(\hat e, "
                 r"c(\delta)/n) = %s$ with the entry's own confidence term $c(\delta) = %s$, and "
                 r"$\mathrm{kl}^{-1}(\hat e, \ln(1/\delta)/n) = %s$ "
                 r"($\hat e = %s$, $\delta = %s$, $n = %s$). Each piece of the budget and its "
                 r"effect (the value minus the value without it); %s dominates."
                 % (_num(f["own"], 4), tex_escape(f["own_form"]), _num(f["plain"], 4),
                    _num(f["emp_risk"], 4), _num(f["delta"]), _num(f["n"]),
                    tex_escape(f["dominant"])))
        rows = [[tex_escape(k), "$%s$" % _num(v, 4), "$%s$" % _num(f["effects"].get(k, 0.0), 3)]
                for k, v in f["budget_nats"].items()]
        if f.get("mc_upper") is not None:
            rows.append(["Monte Carlo step", "$%s \\to %s$" % (_num(f["emp_risk"], 4),
                                                              _num(f["mc_upper"], 4)),
                         "$%s$" % _num(f["effects"]["Monte Carlo"], 3)])
        L += _table(["piece", "nats (or risk)", "effect"], rows, "l r r")
    if r.test_error is not None and r.gap is not None:
        L.append(r"Held-out test error $%s$; value minus test error $%s$."
                 % (_num(r.test_error), _num(r.gap, 4)))
    return L


def write_latex(path: str | Path, entry: Entry, result: Result | None = None) -> Path:
    """Write :func:`latex_document` to ``path`` atomically; returns the path."""
    return write_text_atomic(path, latex_document(entry, result))
