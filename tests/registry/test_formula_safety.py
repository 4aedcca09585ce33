"""Formula files are data: unsafe or inconsistent ones are refused with a named culprit."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

import boundcalc as bc
from boundcalc.cli import app
from boundcalc.errors import FormulaError

HEADER = 'family = "t"\n'

ENTRY = """
[[entry]]
id = "e"
title = "t"
source = "s"
provenance = "p"
kind = "certified"
expression = "{expr}"
[entry.symbols]
x = {{ meaning = "x", role = "measured", domain = "[0, inf)" }}
"""


def write(tmp_path: Path, body: str, name: str = "f.toml") -> Path:
    p = tmp_path / name
    p.write_text(HEADER + textwrap.dedent(body), encoding="utf-8")
    return p


@pytest.mark.parametrize("expr, needle", [
    ("__import__('os').system('touch PWNED')", "not allowed"),
    ("x.__class__", "attribute access"),
    ("(lambda: 1)()", "not allowed"),
    ("[c for c in ()]", "comprehension"),
    ("eval('1')", "not allowed"),
    ("exec('1')", "not allowed"),
    ("getattr(x, 'real')", "not allowed"),
    ("x if x else 1", "if-expression"),
    ("'abc'", "only numbers"),
    ("x ^ 2", "use ** for powers"),
    ("sqrt(x, base=2)", "keyword arguments"),
    ("sqrt(*x)", "starred"),
    ("x[0]", "not a declared indexed symbol"),
    ("1e9999", "non-finite"),
])
def test_malicious_or_invalid_expression_is_refused(tmp_path, expr, needle, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, ENTRY.format(expr=expr.replace('"', '\\"')))
    with pytest.raises(FormulaError) as exc:
        bc.load_registry([path])
    msg = str(exc.value)
    assert "f.toml" in msg and "entry 'e'" in msg
    assert needle in msg
    assert not (tmp_path / "PWNED").exists()


def test_malicious_file_via_cli_gives_one_line_and_exit_code(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, ENTRY.format(expr="__import__('os').system('touch PWNED')"))
    res = CliRunner().invoke(app, ["--formulas", str(tmp_path), "list"])
    assert res.exit_code == FormulaError.exit_code
    lines = [ln for ln in res.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "error:" in lines[0] and "Traceback" not in res.output
    assert not (tmp_path / "PWNED").exists()


def test_undeclared_symbol_is_named(tmp_path):
    path = write(tmp_path, ENTRY.format(expr="x + y"))
    with pytest.raises(FormulaError, match=r"f\.toml: entry 'e': expression: unknown symbol 'y'"):
        bc.load_registry([path])


@pytest.mark.parametrize("body, needle", [
    ('[[entry]]\nid = "e"\n', "missing required field"),
    (ENTRY.format(expr="x").replace('kind = "certified"', 'kind = "theorem"'), "kind must be one of"),
    (ENTRY.format(expr="x").replace('role = "measured"', 'role = "magic"'), "role must be one of"),
    (ENTRY.format(expr="x").replace('domain = "[0, inf)"', 'domain = "0..1"'), "not an interval"),
    (ENTRY.format(expr="x").replace('kind = "certified"', 'kind = "rate"'), "hidden constant"),
    ("this is = not toml [", "not valid TOML"),
])
def test_malformed_files_name_the_problem(tmp_path, body, needle):
    path = tmp_path / "bad.toml"
    path.write_text(HEADER + body if "not toml" not in body else body, encoding="utf-8")
    with pytest.raises(FormulaError, match="bad.toml") as exc:
        bc.load_registry([path])
    assert needle in str(exc.value)


def test_duplicate_ids_across_files(tmp_path):
    write(tmp_path, ENTRY.format(expr="x"), "a.toml")
    write(tmp_path, ENTRY.format(expr="2*x"), "b.toml")
    with pytest.raises(FormulaError, match="already defined in a.toml"):
        bc.load_registry([tmp_path])


def test_bundled_registry_loads_and_every_entry_declares_kind_and_provenance():
    reg = bc.load_registry()
    assert len(reg) >= 3
    for e in reg:
        assert e.kind in ("certified", "conditional", "rate", "proxy")
        assert e.source and e.provenance, e.id
        for s in e.symbols.values():
            assert s.meaning and s.role, (e.id, s.name)
