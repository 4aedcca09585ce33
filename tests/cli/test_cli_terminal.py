"""The CLI in an 80-column terminal: whole ids in `list`, no word broken in `show`, one-line
usage errors, `--json` on every command, `compare`'s skipped entries (text and JSON) and the
hints that point to a stats file where `--set` cannot help."""

from __future__ import annotations

import json
import re

import numpy as np
from rich.cells import cell_len
import pytest
from typer.testing import CliRunner

import boundcalc as bc
from boundcalc.binding import lookup
from boundcalc.errors import BoundcalcError
from boundcalc.cli import app
from test_optimize_sensitivity import spectrum_stats

from tests._cli_helpers import BOX, invoke, runner, words  # noqa: F401


@pytest.mark.parametrize("extra", [[], ["--wide"]])
def test_list_shows_every_id_whole_at_80_columns(registry, extra):
    res = invoke("list", *extra)
    assert res.exit_code == 0, res.output
    assert max(cell_len(line) for line in res.stdout.splitlines()) <= 80
    shown = words(res.stdout)
    assert {e.id for e in registry} <= shown
    assert "…" not in res.stdout
    if extra:
        assert "Catoni 2007, Theorem 1.2.6" in " ".join(BOX.sub(" ", res.stdout).split())


def test_show_breaks_no_word_at_80_columns(registry):
    for entry in registry:
        res = invoke("show", entry.id)
        assert res.exit_code == 0, (entry.id, res.output)
        assert max(cell_len(line) for line in res.stdout.splitlines()) <= 80, entry.id
        texts = [entry.title, entry.source, entry.provenance, *entry.notes]
        texts += [s.meaning for s in entry.symbols.values()]
        texts += [a.text for a in entry.assumptions]
        out = words(res.stdout)
        for token in {t for text in texts for t in text.split() if len(t) <= 40}:
            assert token in out, (entry.id, token)


@pytest.mark.parametrize("args, culprit", [
    (["list", "--no-such-option"], "--no-such-option"),
    (["evaluate"], "ID"),
    (["show"], "ID"),
    (["measure", "model.safetensors", "--n-heads", "0"], "--n-heads"),
    (["optimize", "mcallester", "--target", "abc"], "--target"),
])
def test_usage_errors_are_one_line(args, culprit):
    res = invoke(*args)
    assert res.exit_code == 2
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and culprit in lines[0], res.stderr
    assert "╭" not in res.stderr and "Traceback" not in res.stderr


def test_latex_has_json(tmp_path):
    out = tmp_path / "m.tex"
    res = invoke("latex", "mcallester", "-o", out, "--set", "emp_risk=0.05", "--set", "KL=5000",
                 "--set", "n=60000", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["output"] == str(out) and out.read_text().startswith("\\documentclass")
    assert "\\mathrm{KL}" in doc["latex"] or "KL" in doc["latex"]
    assert doc["result"]["value"] == pytest.approx(0.05 + np.sqrt(
        (5000 + np.log(2 * np.sqrt(60000) / 0.05)) / 120000), rel=1e-12)


def _has_value(stats, spec) -> bool:
    if spec.default is not None or spec.role == "size":
        return True
    if not spec.stat:
        return False
    try:
        return lookup(stats, spec.stat, spec)[0] is not None
    except (KeyError, BoundcalcError):
        return False


def test_compare_lists_every_skipped_entry_with_what_it_lacks(tmp_path, registry):
    st = spectrum_stats(L=2, A=2, seed=1)
    path = st.save(tmp_path / "s.json")
    res = invoke("compare", "--stats", path, "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    computed = [r["id"] for k in ("certified", "conditional", "rate", "proxy", "hidden")
                for r in out[k]]  # every kind's group (certified, rate, proxy, …)
    skipped = [r["id"] for r in out["skipped"]]
    failed = [r["id"] for r in out["failed"]]
    everything = computed + skipped + failed
    assert len(everything) == len(set(everything))
    assert set(everything) == {e.id for e in registry}
    assert "spectrum_adaptive_ours" in computed
    for r in out["skipped"]:
        entry = registry.get(r["id"])
        lacks = {m["symbol"] for m in r["missing"]}
        assert lacks, r
        # independently: exactly the symbols with no value from the file or a default
        without = {n for n, s in entry.symbols.items() if not _has_value(st, s)}
        assert lacks <= without and lacks, (r["id"], lacks, without)
    mc = next(r for r in out["skipped"] if r["id"] == "mcallester")
    assert {m["symbol"] for m in mc["missing"]} == {"emp_risk", "KL"}
    for row in out["certified"] + out["proxy"]:
        assert {"terms", "assumptions"} <= set(row)
    assert out["proxy"][0]["terms"]

    text = invoke("compare", "--stats", path)
    assert text.exit_code == 0
    shown = words(text.stdout)
    assert set(skipped) <= shown
    assert f"{len(skipped)} entries not computed" in text.stdout


def test_missing_arrays_point_to_stats_not_set():
    res = invoke("optimize", "spectrum_adaptive_ours")
    assert res.exit_code != 0
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and "--stats" in err and "--set C_QK" not in err
    res = invoke("evaluate", "mcallester", "--set", "KL=1", "--set", "n=100")
    assert "--set emp_risk=VALUE" in res.stderr and "--data" in res.stderr


def test_optimize_explains_p_zero_everywhere(tmp_path):
    path = spectrum_stats(L=2, A=2, seed=1, scale=(20, 60), n=100).save(tmp_path / "big.json")
    res = invoke("optimize", "spectrum_adaptive_ours", "--stats", path, "--no-what-if", "--json")
    out = json.loads(res.stdout)
    chosen = np.concatenate([np.ravel(s["values"]) for s in out["selections"]])
    assert np.all(chosen == 0) and chosen.size == 12
    assert any("T_p/T_0 > 1" in n for n in out["selection_notes"])
    text = invoke("optimize", "spectrum_adaptive_ours", "--stats", path, "--no-what-if")
    assert "T_p/T_0 > 1 for every p > 0" in " ".join(text.stdout.split())
    # a mixed choice gets no such note
    mixed = spectrum_stats(L=2, A=2, seed=1).save(tmp_path / "s.json")
    out = json.loads(invoke("optimize", "spectrum_adaptive_ours", "--stats", mixed,
                            "--no-what-if", "--json").stdout)
    assert "selection_notes" not in out


def test_compare_certified_table_fits_80_columns_with_whole_labels(tmp_path):
    """The certified table keeps its label column readable at 80 columns (it once folded the
    label one letter per line): each label head is whole on its row and no line exceeds 80."""
    from boundcalc.stats import Quantity

    st = spectrum_stats(L=2, A=2, seed=1)
    st.scalars.update({"n": Quantity(10000.0), "kl": Quantity(50.0),
                       # an estimated input makes some rows 'estimated (...)': a long label
                       "emp_risk": Quantity(0.05, estimated=True, method="Monte Carlo")})
    path = st.save(tmp_path / "s.json")
    res = invoke("compare", "--stats", path, "--set", "KL=50")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert max(cell_len(ln) for ln in lines) <= 80
    labels = [ln.split("│")[3].strip() for ln in lines  # id │ value │ label │ vacuous │ δ
              if ln.startswith("│") and ln.count("│") == 6 and ln.split("│")[2].strip()]
    assert labels and "estimated" in labels, labels
    assert set(labels) <= {"certified bound", "estimated", "not a bound"}, labels


def _description(help_text: str) -> list[list[str]]:
    """The paragraphs of a command's description (between Usage and the first box), as lines."""
    body = help_text.split("Usage:", 1)[1].split("\n", 1)[1]
    body = re.split(r"\n\s*[╭┌]", body, maxsplit=1)[0]
    paras: list[list[str]] = [[]]
    for line in body.splitlines():
        text = line.strip()
        if text:
            paras[-1].append(text)
        elif paras[-1]:
            paras.append([])
    return [p for p in paras if p]


def test_every_command_help_wraps_its_prose_to_80_columns():
    """Typer keeps the source line breaks of a docstring's later paragraphs; at 80 columns
    they came out ragged ('... charged to' / 'δ, unless' / '--fixed NAME says ...')."""
    from boundcalc.cli import app as typer_app

    names = [c.name or c.callback.__name__ for c in typer_app.registered_commands]
    assert {"evaluate", "optimize", "measure", "sweep", "correlate"} <= set(names)
    for name in [None, *names]:
        res = invoke(*([name] if name else []), "--help")
        assert res.exit_code == 0, (name, res.output)
        for para in _description(res.stdout):
            for line, following in zip(para, para[1:]):
                # a line that stops well short of the width although the next word would fit
                assert cell_len(line) + 1 + len(following.split()[0]) > 78, (name, line)


def test_reflow_keeps_lists_and_joins_prose():
    from boundcalc.cli.app import reflow_help

    doc = """Title line.

    A paragraph written
    over two lines.

    - an item
    - another item
    """
    assert reflow_help(doc) == ("Title line.\n\nA paragraph written over two lines.\n\n"
                                "- an item\n- another item")
