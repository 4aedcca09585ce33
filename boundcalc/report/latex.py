"""LaTeX export: a registry entry in paper notation, and a standalone document with a result.

``entry_latex`` (:mod:`.latex_formula`) prints the expression in terms of its named definitions,
then each definition, inside an ``align*``. ``latex_document`` adds provenance, assumptions,
symbols, free parameters and, given a :class:`~boundcalc.evaluation.Result`, the instantiated
numbers. The document uses only ``amsmath``, ``amssymb`` and ``booktabs`` and is pure ASCII:
every text field of a formula file goes through :func:`tex_escape` (:mod:`.tex_text`), which
maps the common unicode symbols to LaTeX.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import sympy as sp

from ..errors import BoundcalcError
from ..evaluation import Result, confidence_symbol, gridmin_params
from ..registry.schema import Domain, Entry, ParameterSpec
from ..files.atomic_write import write_text_atomic
from ..rounding import bound_text
from .latex_formula import BOUND_SYMBOL, entry_latex, symbol_latex
from .latex_formula import EntryPrinter as _Printer
from .latex_formula import entry_names as _names
from .latex_formula import equation_latex as _equation
from .latex_formula import equation_rows as _equation_rows
from .latex_formula import named_check as _named_check
from .latex_formula import named_expression as _named
from .latex_formula import printer_for as _printer
from .tex_text import tex_escape

__all__ = ["entry_latex", "latex_document", "write_latex", "tex_escape", "symbol_latex",
           "honest_label"]


# ---- numbers, domains, grids --------------------------------------------------------------------

def _num(x: Any, digits: int = 6, side: str = "nearest") -> str:
    """A number in LaTeX math: ``0.05``, ``60000``, ``1.234 \\cdot 10^{-7}``, ``\\infty``;
    rounded on ``side`` (:func:`~boundcalc.rounding.bound_text`: 'lower' for a floor)."""
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
    return _sci(bound_text(x, digits, side))


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
    """The value in LaTeX, :meth:`Result.value_text` (6 digits) typeset: a certified or
    conditional value rounded up, beyond the float range from its log10 (products over many
    layers). Parameters, terms and δ elsewhere in the document (:func:`_num`) bound nothing
    and are rounded to nearest."""
    if not math.isfinite(result.value) and not math.isfinite(result.log10_value):
        return _num(result.value)
    return _sci(result.value_text(6))


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
    if r.about_text:
        L.append(r"\\ About: %s." % esc(r.about_text))
    L += _floor_section(r)
    if r.estimated_inputs:
        L.append(r"\\ \textbf{Estimated inputs:} "
                 + "; ".join(esc(x) for x in r.estimated_inputs))

    # confidence accounting
    conf = confidence_symbol(entry)
    total = float(sum(r.union_bound_cost.values()))
    if r.delta is not None:
        L.append(r"\subsection*{Confidence}")
        parts = [(k, r.inputs[k]) for k, sym in entry.symbols.items()
                 if sym.role == "confidence" and isinstance(r.inputs.get(k), (int, float))]
        if len(parts) > 1:  # the total first, then each share, named as under Inputs
            shares = ", ".join("$%s = %s$" % (names.get(k, symbol_latex(k)), _num(v))
                               for k, v in parts)
            line = (r"total $\delta = %s$ (%s), $\delta_{\mathrm{eff}} = %s$, total "
                    r"union-bound cost $%s$" % (_num(r.delta), shares, _num(r.delta_effective),
                                                _num(total, 4)))
        else:
            line = (r"$\delta = %s$, $\delta_{\mathrm{eff}} = %s$, total union-bound cost $%s$"
                    % (_num(r.delta), _num(r.delta_effective), _num(total, 4)))
        if total > 0:
            line += (r" (the formula is evaluated at $\delta_{\mathrm{eff}} = %s\, "
                     r"e^{-%s}$)" % (names.get(conf, symbol_latex(conf)) if conf else r"\delta",
                                     _num(total, 4)))
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
    """The zero-complexity floor (a lower limit of the value: rounded down), each piece of
    the budget with its effect, and the gap to a held-out test error (see
    :mod:`boundcalc.floor`)."""
    f = r.floor
    L: list[str] = []
    if f:
        L.append(r"\subsection*{Floor and what dominates}")
        L.append(r"With zero complexity the value would be at least $\mathrm{kl}^{-1}(\hat e, "
                 r"c(\delta)/n) = %s$ with the entry's own confidence term $c(\delta) = %s$, and "
                 r"$\mathrm{kl}^{-1}(\hat e, \ln(1/\delta)/n) = %s$ "
                 r"($\hat e = %s$, $\delta = %s$, $n = %s$). Each piece of the budget and its "
                 r"effect (the value minus the value without it); %s dominates."
                 % (_num(f["own"], 4, "lower"), tex_escape(f["own_form"]),
                    _num(f["plain"], 4, "lower"),
                    _num(f["emp_risk"], 4), _num(f["delta"]), _num(f["n"]),
                    tex_escape(f["dominant"])))
        rows = [[tex_escape(k), "$%s$" % _num(v, 4), "$%s$" % _num(f["effects"].get(k, 0.0), 3)]
                for k, v in f["budget_nats"].items()]
        if f.get("mc_upper") is not None:
            rows.append(["Monte Carlo step", "$%s \\to %s$" % (_num(f["emp_risk"], 4),
                                                              _num(f["mc_upper"], 4, "upper")),
                         "$%s$" % _num(f["effects"]["Monte Carlo"], 3)])
        L += _table(["piece", "nats (or risk)", "effect"], rows, "l r r")
    if r.test_error is not None and r.gap is not None:
        L.append(r"Held-out test error $%s$; value minus test error $%s$."
                 % (_num(r.test_error), _num(r.gap, 4)))
    return L


def write_latex(path: str | Path, entry: Entry, result: Result | None = None) -> Path:
    """Write :func:`latex_document` to ``path`` atomically; returns the path."""
    return write_text_atomic(path, latex_document(entry, result))
