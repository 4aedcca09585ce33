"""Text into LaTeX: every text field of a formula file, escaped and pure ASCII.

:func:`tex_escape` maps LaTeX's special characters and the common unicode symbols (Greek
letters, dashes, quotes, super- and subscripts, accents, math symbols) to LaTeX, so a document
needs only ``amsmath`` and ``amssymb``. The Greek names here are also those of symbol names
(:mod:`.latex_formula`).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

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
