"""MkDocs hooks: pages generated at build time from the registry and the docstrings.

- ``families/<family>.md``: one page per bound family, every entry with its kind, source,
  provenance (linked to ``docs/sources/``), assumptions, symbols and its formula in LaTeX
  (rendered by MathJax through pymdownx.arithmatex);
- ``api.md``: the public Python API, read from the docstrings with :mod:`ast` (no import of
  torch or of the measurement code is needed to build the site).

Nothing here fetches anything: the build is offline.
"""

from __future__ import annotations

import ast
import html
import re
import sys
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
KIND_TEXT = {
    "certified": "certified: every constant known; under the listed assumptions a valid upper "
                 "bound with probability at least 1 − δ",
    "conditional": "conditional: a bound only if the named, uncheckable condition holds",
    "rate": "rate: an O(·) statement; the number depends on a hidden constant you set — not a "
            "bound",
    "proxy": "proxy: a complexity measure for comparing models — not a bound",
}
API_MODULES = [
    ("boundcalc/registry/registry.py", "Registry and formula folders"),
    ("boundcalc/api.py", "Evaluation"),
    ("boundcalc/evaluation.py", "Results"),
    ("boundcalc/binding.py", "Binding values to symbols"),
    ("boundcalc/stats.py", "Stats files"),
    ("boundcalc/optimize/entry_points.py", "Optimisation"),
    ("boundcalc/measure/pipeline.py", "Measurement"),
    ("boundcalc/report/latex.py", "LaTeX export"),
]


def _registry():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from boundcalc.registry import load_registry
    from boundcalc.registry.registry import bundled_formula_dir

    return load_registry([bundled_formula_dir()])


def _md(text: str) -> str:
    """Plain text from a formula file, safe inside Markdown (no markup, no raw HTML)."""
    text = html.escape(text, quote=False)
    return re.sub(r"([\\`*_\[\]<>|$])", r"\\\1", text)


def _link_sources(text: str) -> str:
    out = _md(text)
    return re.sub(r"docs/sources/([a-z_]+)\\\.md|docs/sources/([a-z_]+)\.md",
                  lambda m: f"[docs/sources/{m.group(1) or m.group(2)}.md]"
                            f"(../sources/{m.group(1) or m.group(2)}.md)", out)


def _math(latex: str) -> str:
    """Display math for MathJax: ``align*`` becomes ``aligned`` inside ``$$`` (MathJax does not
    nest ``align*`` in display math and has no ``\\intertext``, so the block splits at 'where')."""
    body = latex.replace("\\begin{align*}", "").replace("\\end{align*}", "").strip("\n")
    blocks = body.split("\n\\intertext{where}\n")
    out = [f"$$\n\\begin{{aligned}}\n{b.strip()}\n\\end{{aligned}}\n$$" for b in blocks]
    return "\n\nwhere\n\n".join(out)


def family_page(family: str, entries) -> str:
    from boundcalc.report.latex import entry_latex

    lines = [f"# Family `{family}`", ""]
    lines.append(f"{len(entries)} entries, generated from `formulas/` at build time. The "
                 "kind says what a number may be called.")
    lines.append("")
    first = entries[0]
    if getattr(first, "description", None):
        lines += [_link_sources(first.description), ""]
    for e in entries:
        lines += [f"## `{e.id}`", "", f"**{_md(e.title)}**", ""]
        lines.append(f"- **kind**: {KIND_TEXT.get(e.kind, e.kind)}")
        if e.variant:
            lines.append(f"- **variant**: {_md(e.variant)}")
        lines.append(f"- **source**: {_md(e.source)}")
        lines.append(f"- **provenance**: {_link_sources(e.provenance)}")
        lines.append(f"- **file**: `formulas/{Path(e.file).name}`")
        lines.append("")
        try:
            latex = entry_latex(e)
        except Exception as exc:  # noqa: BLE001 - a page without its formula beats no page
            lines += [f"*(no LaTeX: {_md(str(exc))})*", ""]
        else:
            lines += [_math(latex), ""]
        if e.assumptions:
            lines += ["**Assumptions**", ""]
            for a in e.assumptions:
                check = f" — checked: `{a.check.text}`" if a.check else " — stated, not checkable"
                lines.append(f"- {_md(a.text)}{check}")
            lines.append("")
        lines += ["| symbol | role | domain | stats path | meaning |", "|---|---|---|---|---|"]
        for s in e.symbols.values():
            lines.append(f"| `{s.name}` | {s.role} | {_md(s.domain.text())} | "
                         f"{'`' + s.stat + '`' if s.stat else ''} | {_md(s.meaning)} |")
        lines.append("")
        if e.parameters:
            lines += ["| free parameter | choice | domain | note |", "|---|---|---|---|"]
            for p in e.parameters.values():
                lines.append(f"| `{p.name}` | {p.choice} | {_md(p.domain.text())} | "
                             f"{_md(p.note or '')} |")
            lines.append("")
        for note in e.notes:
            lines.append(f"> {_link_sources(note)}")
            lines.append("")
    return "\n".join(lines)


def families_index(reg) -> str:
    lines = ["# Bound families", "", "One page per formula file; each is generated from the "
             "registry when the site is built.", "", "| family | entries | kinds |", "|---|---|---|"]
    for fam in reg.families():
        es = [e for e in reg if e.family == fam]
        kinds = ", ".join(sorted({e.kind for e in es}))
        lines.append(f"| [{fam}]({fam}.md) | {len(es)} | {kinds} |")
    return "\n".join(lines) + "\n"


def _signature(node: ast.FunctionDef) -> str:
    args = ast.unparse(node.args)
    ret = f" -> {ast.unparse(node.returns)}" if node.returns else ""
    return f"{node.name}({args}){ret}"


def api_page() -> str:
    lines = ["# Python API", "", "Generated from the docstrings of the public functions and "
             "classes (names without a leading underscore).", ""]
    for rel, title in API_MODULES:
        path = ROOT / rel
        if not path.is_file():
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module = rel[:-3].replace("/", ".")
        lines += [f"## {title}: `{module}`", ""]
        doc = ast.get_docstring(tree)
        if doc:
            lines += [_md(doc.strip().splitlines()[0]), ""]
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                d = ast.get_docstring(node)
                if not d:
                    continue
                sig = _signature(node) if isinstance(node, ast.FunctionDef) else f"class {node.name}"
                lines += [f"### `{node.name}`", "", "```python", sig, "```", "",
                          _md(d.strip()), ""]
    return "\n".join(lines)


def on_files(files, config):
    reg = _registry()
    pages = {"families/index.md": families_index(reg), "api.md": api_page()}
    for fam in reg.families():
        pages[f"families/{fam}.md"] = family_page(fam, [e for e in reg if e.family == fam])
    for uri, content in pages.items():
        files.append(File.generated(config, uri, content=content))
    return files
