"""LaTeX export: every registry entry renders and compiles with pdflatex; numbers, labels,
Greek letters and escaping are checked against independent computations."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import boundcalc as bc
from boundcalc.files.atomic_write import write_text_atomic
from boundcalc.report.latex import (entry_latex, latex_document, symbol_latex, tex_escape,
                                    write_latex)

PDFLATEX = shutil.which("pdflatex")


def _need_tex() -> None:
    if PDFLATEX is None:
        pytest.skip("pdflatex not installed: install texlive-latex-base texlive-latex-recommended")


def _compile(tex: Path, draft: bool = True) -> tuple[int, str]:
    """Run pdflatex on ``tex`` in its folder; returns (exit code, tail of the log)."""
    cmd = [PDFLATEX, "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape"]
    if draft:
        cmd.append("-draftmode")  # full check, no PDF written: faster
    proc = subprocess.run([*cmd, tex.name], cwd=tex.parent, stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=120)
    return proc.returncode, proc.stdout.decode("latin-1")[-1500:]


def _compile_many(docs: dict[str, str], folder: Path) -> dict[str, str]:
    """Compile the documents; returns the failures by name.

    They share one preamble, so their bodies go into a single run (about 0.15 s per pdflatex
    start saved per entry); only if that run fails is each compiled alone to name the culprit.
    """
    preambles = {d.split(r"\begin{document}", 1)[0] for d in docs.values()}
    if len(preambles) == 1:
        bodies = [d.split(r"\begin{document}", 1)[1].rsplit(r"\end{document}", 1)[0]
                  for d in docs.values()]
        combined = folder / "all.tex"
        combined.write_text(preambles.pop() + "\\begin{document}\n"
                            + "\n\\clearpage\n".join(bodies) + "\\end{document}\n",
                            encoding="ascii")
        if _compile(combined)[0] == 0:
            return {}
    failures = {}
    for name, text in docs.items():
        d = folder / name
        d.mkdir()
        (d / "doc.tex").write_text(text, encoding="ascii")
        rc, log = _compile(d / "doc.tex")
        if rc != 0:
            failures[name] = log
    return failures


def _label_line(doc: str) -> str:
    lines = [ln for ln in doc.splitlines() if ln.startswith(r"\item[Label]")]
    assert len(lines) == 1, lines
    return lines[0][len(r"\item[Label]"):].strip()


# ---- every entry ------------------------------------------------------------------------------

def test_every_entry_renders_with_honest_label(registry):
    assert len(registry) >= 3
    for e in registry:
        eq = entry_latex(e)
        assert eq.startswith(r"\begin{align*}") and eq.endswith(r"\end{align*}"), e.id
        assert r"\mathcal{B} &=" in eq
        if e.definitions:
            assert r"\intertext{where}" in eq
            # one row per definition, each written as "name &= ..."
            assert eq.count("&=") >= len(e.definitions) + 1, e.id
        doc = latex_document(e)
        assert doc.isascii(), e.id
        assert doc.startswith(r"\documentclass") and doc.rstrip().endswith(r"\end{document}")
        assert set(re.findall(r"\\usepackage(?:\[[^]]*\])?\{([^}]*)\}", doc)) == \
            {"amsmath", "amssymb", "booktabs"}
        assert r"\texttt{%s}" % tex_escape(e.id) in doc
        for s in e.symbols.values():  # the symbol table carries every meaning
            assert tex_escape(s.meaning) in doc, (e.id, s.name)
        label = _label_line(doc)
        if e.kind == "certified":
            assert label == "certified bound"
        elif e.kind == "conditional":  # never called certified; the condition is spelled out
            assert label.startswith("conditional: an upper bound only if ")
            for c in e.conditions:
                assert r"\item[Condition] %s" % tex_escape(c) in doc, e.id
        elif e.kind == "rate":
            hidden = [s for s in e.symbols.values() if s.role == "hidden_constant"]
            assert re.match(r"rate \(hidden constants? ", label) and hidden
            for s in hidden:
                assert "= %g$" % s.default in label, (e.id, label)
            assert "bound" not in label
        elif e.kind == "conditional":
            assert label == "conditional on a named assumption, not a bound"
        else:
            assert label == "complexity proxy, not a bound"
            # "bound" appears only as "not a bound"
            assert all(label[max(0, m.start() - 6):m.start()] == "not a "
                       for m in re.finditer("bound", label))


def test_every_entry_compiles(registry, tmp_path):
    _need_tex()
    docs = {e.id: latex_document(e) for e in registry}
    failures = _compile_many(docs, tmp_path)
    assert not failures, "\n\n".join(f"{k}:\n{v}" for k, v in failures.items())


# ---- McAllester with a result -------------------------------------------------------------------

MC_VALUES = {"emp_risk": 0.05, "KL": 5000.0, "n": 60000, "delta": 0.05}


def _mcallester(emp, kl, n, delta):
    comp = math.sqrt((kl + math.log(2 * math.sqrt(n) / delta)) / (2 * n))
    return emp + comp, comp


def test_mcallester_document_has_numbers_and_label(registry, tmp_path):
    e = registry.get("mcallester")
    r = bc.evaluate(e, MC_VALUES)
    value, comp = _mcallester(0.05, 5000.0, 60000, 0.05)
    assert r.value == pytest.approx(value, rel=1e-12)
    doc = latex_document(e, r)
    assert r"\sqrt" in doc and r"\sqrt" in entry_latex(e)
    assert "certified" in doc
    assert _label_line(doc) == "certified bound"
    assert r"\mathcal{B} = %s$" % f"{value:.6g}" in doc        # the value line
    # the instantiated complexity row: numbers substituted, its value appended
    row = next(ln for ln in doc.splitlines() if ln.startswith(r"\mathrm{complexity} &=")
               and "60000" in ln)
    assert "5000" in row and "0.05" in row and row.endswith("= %s" % f"{comp:.6g}")
    assert r"\delta" in doc and "[holds]" in doc
    _need_tex()
    path = write_latex(tmp_path / "mc.tex", e, r)
    rc, log = _compile(path, draft=False)
    assert rc == 0, log
    assert (tmp_path / "mc.pdf").stat().st_size > 1000


def test_failed_assumption_is_not_called_a_bound(registry):
    e = registry.get("mcallester")
    r = bc.evaluate(e, {**MC_VALUES, "n": 4})  # the check n >= 8 fails
    doc = latex_document(e, r)
    assert _label_line(doc) == "not a bound: an assumption fails"
    assert "[fails]" in doc
    other = next(x for x in registry if x.id != "mcallester")
    with pytest.raises(bc.BoundcalcError, match="is for entry 'mcallester'"):
        latex_document(other, r)


# ---- spectrum-adaptive with a result (GridMin, indexed symbols, union-bound costs) -------------

def _spectrum_adaptive_case(L=2, A=2, N=8, dh=4, seed=1):
    rng = np.random.default_rng(seed)
    w = {k: rng.normal(size=(L, N, N)) * 0.3 for k in "qkvo"}
    fin, fout = rng.normal(size=(L, 4 * N, N)) * 0.2, rng.normal(size=(L, N, 4 * N)) * 0.2
    mats = {}
    for l in range(L):
        for h in range(A):
            hs = slice(h * dh, (h + 1) * dh)
            mats[("QK", l, h)] = w["q"][l][hs, :].T @ w["k"][l][hs, :]
            mats[("V", l, h)] = w["v"][l][hs, :].T @ w["o"][l].T[hs, :]
        mats[("in", l)], mats[("out", l)] = fin[l].T, fout[l].T
    sv = {key: np.linalg.svd(M, compute_uv=False) for key, M in mats.items()}
    spec = {key: s[0] for key, s in sv.items()}
    rk = {key: int(np.sum(s > 1e-10 * min(mats[key].shape) * max(s[0], 1)))
          for key, s in sv.items()}
    lphi = 1.13

    def alpha(l):
        out = 1.0
        for k in range(l + 1, L):
            out *= lphi * spec[("in", k)] * spec[("out", k)] * sum(
                spec[("V", k, h)] * (1 + 4 * spec[("QK", k, h)]) for h in range(A))
        return out

    m = math.ceil(L + math.log(N))
    grid = [j / m for j in range(2 * m + 1)]

    def best(key, gamma, l):
        return min((rk[key] if p == 0 else float(np.sum(sv[key] ** p))) ** (1 / (p + 2))
                   * (gamma * alpha(l) * L) ** (p / (p + 2)) * N ** ((p + 1) / (p + 2))
                   for p in grid)

    total = math.sqrt(L)
    for l in range(L):
        for h in range(A):
            gamma_qk = 2 * spec[("V", l, h)] * spec[("out", l)] * spec[("in", l)]
            total += best(("QK", l, h), gamma_qk, l)
            total += best(("V", l, h), spec[("out", l)] * spec[("in", l)], l)
        total += best(("in", l), spec[("out", l)], l) + best(("out", l), 1.0, l)
    LA = [(l, h) for l in range(L) for h in range(A)]

    def per_head(f):
        return np.array([[f(l, h) for h in range(A)] for l in range(L)])

    values = dict(
        N=N,
        C_QK=per_head(lambda l, h: spec[("QK", l, h)]),
        C_V=per_head(lambda l, h: spec[("V", l, h)]),
        C_in=np.array([spec[("in", l)] for l in range(L)]),
        C_out=np.array([spec[("out", l)] for l in range(L)]),
        sv_QK=np.array([[sv[("QK", l, h)][:dh] for h in range(A)] for l in range(L)]),
        sv_V=np.array([[sv[("V", l, h)][:dh] for h in range(A)] for l in range(L)]),
        sv_in=np.array([sv[("in", l)] for l in range(L)]),
        sv_out=np.array([sv[("out", l)] for l in range(L)]),
        rank_QK=per_head(lambda l, h: rk[("QK", l, h)]),
        rank_V=per_head(lambda l, h: rk[("V", l, h)]),
        rank_in=np.array([rk[("in", l)] for l in range(L)]),
        rank_out=np.array([rk[("out", l)] for l in range(L)]),
    )
    costs = {"p_QK": len(LA) * math.log(len(grid)), "p_V": len(LA) * math.log(len(grid)),
             "p_in": L * math.log(len(grid)), "p_out": L * math.log(len(grid))}
    return values, total, costs


def test_spectrum_adaptive_expression_and_result_document(registry, tmp_path):
    e = registry.get("spectrum_adaptive_ours")
    eq = entry_latex(e)
    for piece in (r"\sum", r"\min", r"\prod", r"\begin{cases}", r"{\alpha}^{(\ell)}",
                  r"^{(\ell,h)}", r"\mathcal{P}_{p_{\mathrm{QK}}}", r"{\|W^{QK}\|_2}"):
        assert piece in eq, piece
    values, total, costs = _spectrum_adaptive_case()
    r = bc.evaluate(e, values)
    assert r.value == pytest.approx(total, rel=1e-9)
    doc = latex_document(e, r)
    assert _label_line(doc) == "complexity proxy, not a bound"
    assert r"\mathcal{B} = %s$" % f"{total:.6g}" in doc
    for name, cost in costs.items():  # union-bound cost per GridMin parameter, and the total
        assert r"$%s$ & $%s$" % (symbol_latex(name), f"{cost:.5g}") in doc, name
    assert "$%s$" % f"{sum(costs.values()):.5g}" in doc
    _need_tex()
    path = write_latex(tmp_path / "sa.tex", e, r)
    rc, log = _compile(path, draft=False)
    assert rc == 0, log
    assert (tmp_path / "sa.pdf").stat().st_size > 1000


# ---- names, Greek letters, escaping ------------------------------------------------------------

@pytest.mark.parametrize("name, tex", [
    ("sigma", r"\sigma"), ("lam", r"\lambda"), ("delta", r"\delta"), ("alpha", r"\alpha"),
    ("gamma", r"\gamma"), ("rho", r"\rho"), ("omega", r"\omega"), ("Sigma", r"\Sigma"),
    ("C_QK", r"C_{\mathrm{QK}}"), ("L_phi", r"L_{\phi}"),
    ("sigma_prior", r"\sigma_{\mathrm{prior}}"),
    ("emp_risk", r"\mathrm{emp\_risk}"), ("x2", r"x_{2}"), ("KL", r"\mathrm{KL}"), ("n", "n"),
])
def test_symbol_latex(name, tex):
    assert symbol_latex(name) == tex


GREEK_TOML = r'''
family = "latex_test"
title = "t"

[[entry]]
id = "greek_demo"
title = "Greek demo"
source = "test"
provenance = "[test]"
kind = "certified"
expression = """sigma*lam + Sum(W[l]**2, (l, 0, L - 1)) + rho/omega + gamma*alpha + Sigma \
               + log(1/delta)"""

[entry.indices]
l = "L"

[entry.symbols]
sigma = { meaning = "s", role = "measured", domain = "[0, inf)" }
lam = { meaning = "l", role = "measured", domain = "[0, inf)" }
rho = { meaning = "r", role = "measured", domain = "[0, inf)" }
omega = { meaning = "o", role = "measured", domain = "(0, inf)" }
gamma = { meaning = "g", role = "measured", domain = "[0, inf)" }
alpha = { meaning = "a", role = "measured", domain = "[0, inf)" }
Sigma = { meaning = "S", role = "measured", domain = "[0, inf)" }
delta = { meaning = "d", role = "confidence", domain = "(0, 1)", default = 0.05 }
L = { meaning = "layers", role = "size", domain = "[1, inf)", integer = true }
W = { meaning = "norm", role = "measured", domain = "[0, inf)", indices = ["l"], latex = "W^{QK}" }
'''


def test_greek_letters_and_superscripted_indexed_symbol(tmp_path):
    (tmp_path / "g.toml").write_text(GREEK_TOML, encoding="utf-8")
    e = bc.load_registry([tmp_path]).get("greek_demo")
    eq = entry_latex(e)
    for g in (r"\sigma", r"\lambda", r"\rho", r"\omega", r"\gamma", r"\alpha", r"\Sigma",
              r"\delta", r"\sum_{\ell=0}^{L - 1}"):
        assert g in eq, g
    assert "lam" not in eq.replace(r"\lambda", "")
    # a declared latex with its own superscript, indexed and squared: no double superscript
    assert r"\left({{W^{QK}}}^{(\ell)}\right)^{2}" in eq
    _need_tex()
    r = bc.evaluate(e, {"sigma": 0.5, "lam": 2, "rho": 1, "omega": 4, "gamma": 1, "alpha": 3,
                        "Sigma": 0.1, "W": [1.0, 2.0]})
    assert r.value == pytest.approx(1 + 5 + 0.25 + 3 + 0.1 + math.log(20), rel=1e-12)
    failures = _compile_many({"g": latex_document(e), "gr": latex_document(e, r)}, tmp_path)
    assert not failures, failures


SPECIAL = r"100% of A & B_c #1 {x} \path ~ ^ $5"
SPECIAL_TOML = '''
family = "latex_special"
title = "t"

[[entry]]
id = "special_chars"
title = {title}
source = {source}
provenance = "[test] ‖W‖₂ ≥ δ·σ² — L̂(Q), Ṽ, n ≠ n', ∉, 中"
kind = "certified"
variant = "v_1 % 2"
assumptions = [{assumption}, {{ text = {assumption}, check = "n >= 8" }}]
expression = "x + sqrt(log(2/delta)/n)"
notes = [{assumption}]

[entry.symbols]
x = {{ meaning = {meaning}, role = "measured", domain = "[0, 1]" }}
n = {{ meaning = "count", role = "data_size", domain = "[1, inf)", integer = true }}
delta = {{ meaning = "confidence ≥ 0 % 1", role = "confidence", domain = "(0, 1)", default = 0.05 }}
'''


def _toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def test_special_characters_are_escaped_and_compile(tmp_path):
    text = SPECIAL_TOML.format(title=_toml_str("Title: " + SPECIAL),
                               source=_toml_str("Source " + SPECIAL),
                               assumption=_toml_str("[R] assume " + SPECIAL
                                                    + " and ‖x‖ ≤ 1, x²₁³, a^{b}_{c}^{d}"),
                               meaning=_toml_str("meaning " + SPECIAL))
    formulas = tmp_path / "formulas"
    formulas.mkdir()
    (formulas / "s.toml").write_text(text, encoding="utf-8")
    e = bc.load_registry([formulas]).get("special_chars")
    r = bc.evaluate(e, {"x": 0.1, "n": 100})
    for doc in (latex_document(e), latex_document(e, r)):
        assert doc.isascii()
        esc = tex_escape(SPECIAL)
        assert r"100\% of A \& B\_" in esc and r"\#1 \{x\} \textbackslash{}path" in esc
        assert r"\textasciitilde{} \textasciicircum{} \$5" in esc
        assert doc.count(esc) >= 5  # title, source, assumptions (2), meaning, notes
        body = doc.split(r"\begin{document}", 1)[1]
        assert not re.search(r"(?<!\\)%", body)          # every % escaped
        assert not re.search(r"(?<![\\\\{])#", body)     # every # escaped
        for tex in (r"\|", r"\geq", r"\delta", r"\sigma", r"^{2}", r"\^{L}", r"\~{V}", r"\neq",
                    r"\notin", r"\leq"):
            assert tex in doc, tex
        assert "?" in doc  # the CJK character has no LaTeX form
        assert r"\item{} [R] assume" in doc  # not taken as an item label
        assert r"^{\text{b}} _{\text{c}} {} ^{\text{d}}" in doc  # no double superscript
    _need_tex()
    failures = _compile_many({"plain": latex_document(e), "result": latex_document(e, r)},
                             tmp_path)
    assert not failures, failures


def test_tex_escape_properties():
    out = tex_escape("‖QK^{(l,h)}‖₂ ≥ δ, W₁₂ Wᵀ café x_{}")
    assert out.isascii()
    assert r"^{\text{(l,h)}}" in out and r"_{12}" in out and r"{\top}" in out
    assert r"caf\'{e}" in out
    assert tex_escape("") == ""
    assert tex_escape("a\x00b\nc") == "ab c"
    hostile = tex_escape("^{" * 5000 + "x")  # unbalanced and deep: linear time, literal
    assert hostile.endswith(r"\textasciicircum{}\{x")


# ---- atomic writes -------------------------------------------------------------------------------

def test_write_latex_is_atomic(registry, tmp_path):
    e = registry.get("mcallester")
    target = tmp_path / "out" / "m.tex"
    assert write_latex(target, e) == target
    assert target.read_text(encoding="utf-8") == latex_document(e)
    r = bc.evaluate(e, MC_VALUES)
    write_latex(target, e, r)  # overwrite
    assert target.read_text(encoding="utf-8") == latex_document(e, r)
    assert sorted(p.name for p in target.parent.iterdir()) == ["m.tex"]


def test_write_text_atomic_keeps_old_file_on_failure(tmp_path):
    path = tmp_path / "a.txt"
    write_text_atomic(path, "old")
    with pytest.raises(UnicodeEncodeError):
        write_text_atomic(path, "new \ud800")  # a lone surrogate cannot be encoded
    assert path.read_text(encoding="utf-8") == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_two_confidences_are_named_under_confidence_as_under_inputs(registry):
    """Issue 44: the LaTeX showed δ = 0.05 under Inputs and δ = 0.06 under Confidence (the
    total with the Monte Carlo's δ′). The Confidence line names the total and each share."""
    e = registry.get("pac_bayes_kl_gaussian_mc")
    r = bc.evaluate(e, {"n": 5000, "E_hat": 0.1, "k": 5000, "dist_init": 3.0,
                        "sigma": math.sqrt(0.1 * math.exp(-500 / 100)), "delta": 0.05,
                        "delta_mc": 0.01})
    assert r.delta == pytest.approx(0.06)
    line = next(ln for ln in latex_document(e, r).splitlines() if "total $\\delta" in ln)
    assert line.startswith(r"total $\delta = 0.06$ ($\delta = 0.05$, $\delta' = 0.01$)"), line
    assert r"\delta_{\mathrm{eff}} = \delta\, e^{-" in line
    # one confidence: as before
    one = bc.evaluate(registry.get("mcallester"), MC_VALUES)
    doc = latex_document(registry.get("mcallester"), one)
    assert "total $\\delta" not in doc and r"$\delta = 0.05$, $\delta_{\mathrm{eff}}" in doc
