"""The `conditional` kind: declared conditions, refused without them, never a bound, carried in
every output (JSON, LaTeX, Markdown, `show`, compare's own table)."""

from __future__ import annotations

import json
import math
import textwrap

import pytest
from typer.testing import CliRunner

import boundcalc as bc
from boundcalc.cli import app
from boundcalc.errors import FormulaError
from boundcalc.report.latex import latex_document
from boundcalc.report.markdown import headline, markdown_report
from boundcalc.stats import Quantity, Stats

HEAD = """
family = "condtest"
title = "conditional kind test"
[symbols]
n = { meaning = "sample size", role = "data_size", domain = "[1, inf)", integer = true, stat = "scalars.n" }
delta = { meaning = "confidence", role = "confidence", domain = "(0, 1)", default = 0.05 }
emp = { meaning = "empirical risk", role = "measured", domain = "[0, 1]", stat = "scalars.emp_risk" }
"""

ENTRY = """
[[entry]]
id = "{id}"
title = "Hoeffding-like, with a gap"
source = "test"
provenance = "test"
kind = "{kind}"
{conditions}
assumptions = ["loss in [0, 1]"]
expression = "emp + sqrt(log(1/delta)/(2*n))"
"""

COND = 'conditions = ["sign gap: the dropped remainder is ≤ 0; nothing establishes this"]'


def write(tmp_path, *entries: str):
    path = tmp_path / "condtest.toml"
    path.write_text(textwrap.dedent(HEAD) + "".join(entries), encoding="utf-8")
    return path


def test_conditional_needs_conditions_and_only_it_may_have_them(tmp_path):
    with pytest.raises(FormulaError, match=r"'conditional' entry must name its condition"):
        bc.load_registry([write(tmp_path, ENTRY.format(id="a", kind="conditional",
                                                       conditions=""))])
    with pytest.raises(FormulaError, match=r"only a 'conditional' entry names conditions"):
        bc.load_registry([write(tmp_path, ENTRY.format(id="a", kind="certified",
                                                       conditions=COND))])
    with pytest.raises(FormulaError, match=r"non-empty strings"):
        bc.load_registry([write(tmp_path, ENTRY.format(id="a", kind="conditional",
                                                       conditions='conditions = [""]'))])


@pytest.fixture()
def reg(tmp_path):
    return bc.load_registry([write(tmp_path,
                                   ENTRY.format(id="gap", kind="conditional", conditions=COND),
                                   ENTRY.format(id="sure", kind="certified", conditions=""))])


def test_conditional_result_is_never_a_bound_and_carries_its_condition(reg):
    vals = {"emp": 0.9, "n": 10}
    r = bc.evaluate(reg.get("gap"), vals)
    sure = bc.evaluate(reg.get("sure"), vals)
    want = 0.9 + math.sqrt(math.log(20) / 20)
    assert want > 1  # a certified value here is vacuous; a conditional one is never compared
    assert sure.vacuous is True and sure.is_bound
    assert r.value == sure.value == pytest.approx(want, rel=1e-15)
    assert r.kind == "conditional" and not r.is_bound and r.vacuous is None
    assert r.label == ("conditional: an upper bound only if sign gap: the "
                       "dropped remainder is ≤ 0; nothing establishes this")
    assert r.condition_names == ["sign gap"]
    doc = r.to_json()
    assert doc["conditions"] == [COND.split('"')[1]] and doc["is_bound"] is False
    assert "certified" not in headline(r).split("not certified")[0]
    md = markdown_report(r)
    assert "- condition: sign gap: the dropped remainder is ≤ 0" in md
    assert "compared with 1" in headline(r) and "vacuous" not in md
    tex = latex_document(reg.get("gap"), r)
    assert r"\item[Condition] sign gap: the dropped remainder is" in tex
    assert r"\item[Label] conditional: an upper bound only if the conditions below hold" in tex


def test_estimated_conditional_says_both(reg):
    st = Stats(scalars={"n": Quantity(10.0), "emp_risk": Quantity(0.1, estimated=True,
                                                                   method="sampled")})
    r = bc.compute(reg.get("gap"), st, registry=reg)
    assert r.estimated and not r.is_bound
    assert r.label.startswith("estimated") and "only if sign gap" in r.label


def test_compare_puts_conditional_entries_in_their_own_table(tmp_path):
    fdir = tmp_path / "formulas"
    fdir.mkdir()
    write(fdir, ENTRY.format(id="gap", kind="conditional", conditions=COND),
          ENTRY.format(id="sure", kind="certified", conditions=""))
    Stats(scalars={"n": Quantity(1000.0), "emp_risk": Quantity(0.05)}).save(tmp_path / "s.json")
    res = CliRunner().invoke(app, ["--formulas", str(fdir), "compare", "--stats",
                                   str(tmp_path / "s.json"), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    gap = [r for r in out["conditional"] if r["id"] == "gap"]
    assert gap and gap[0]["is_bound"] is False and gap[0]["vacuous"] is None
    assert gap[0]["conditions"][0].startswith("sign gap:")
    assert all(r["id"] != "gap" for r in out["certified"])
    text = CliRunner().invoke(app, ["--formulas", str(fdir), "compare", "--stats",
                                    str(tmp_path / "s.json")]).stdout
    table = text[text.index("conditional ("):]
    assert "gap" in table and "sign gap" in table and "certified bound" not in table
