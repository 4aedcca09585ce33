"""Every citation in the registry can be followed inside the repository: each provenance tag
names a note under docs/sources/ that exists, and every section (§N) it cites is a heading of
that note. The notes cite their papers by arXiv id or venue."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import boundcalc as bc

ROOT = Path(__file__).resolve().parents[2]
NOTE = re.compile(r"docs/sources/([a-z_]+)\.md")
SECTION = re.compile(r"§\s?(\d+(?:\.\d+)?)")
MD = re.compile(r"[\w./-]+\.md\b")


def _headings(note: Path) -> set[str]:
    out = set()
    for line in note.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            out.update(SECTION.findall(line))
    return out


def _citations(text: str) -> list[tuple[str, list[str]]]:
    """(note, sections) for every docs/sources reference; sections up to the next ';' or note."""
    found = []
    matches = list(NOTE.finditer(text))
    for k, m in enumerate(matches):
        end = matches[k + 1].start() if k + 1 < len(matches) else len(text)
        tail = text[m.end():end].split(";")[0]
        found.append((m.group(1), SECTION.findall(tail)))
    return found


ENTRIES = list(bc.load_registry())


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.id for e in ENTRIES])
def test_provenance_resolves_to_a_note_and_its_sections(entry):
    cites = _citations(entry.provenance)
    assert cites, f"{entry.id}: provenance names no docs/sources note: {entry.provenance!r}"
    for name, sections in cites:
        note = ROOT / "docs" / "sources" / f"{name}.md"
        assert note.is_file(), f"{entry.id}: {note} does not exist"
        heads = _headings(note)
        for sec in sections:
            assert sec in heads, f"{entry.id}: {name}.md has no section §{sec}"
    for path in MD.findall(entry.provenance):  # every note cited is one of the repository's
        assert path.startswith("docs/sources/") and (ROOT / path).is_file(), (entry.id, path)
    assert ".txt" not in entry.provenance, entry.id  # no private seed files


def test_descriptions_notes_and_readmes_point_only_to_files_in_the_repository():
    texts = {e.id: " ".join([e.description or "", *e.notes, *(a.text for a in e.assumptions)])
             for e in ENTRIES}
    texts["README.md"] = (ROOT / "README.md").read_text(encoding="utf-8")
    texts["formulas/README.md"] = (ROOT / "formulas" / "README.md").read_text(encoding="utf-8")
    for where, text in texts.items():
        assert "shared/reference" not in text and "../shared" not in text, where
        for name, sections in _citations(text):
            note = ROOT / "docs" / "sources" / f"{name}.md"
            assert note.is_file(), (where, name)
            heads = _headings(note)
            assert all(s in heads for s in sections), (where, name, sections)


@pytest.mark.parametrize("name", ["pac_bayes", "norm_bounds", "sharper_picture",
                                  "spectrum_adaptive", "shallow_gd", "compression"])
def test_each_note_cites_its_papers(name):
    text = (ROOT / "docs" / "sources" / f"{name}.md").read_text(encoding="utf-8")
    assert re.search(r"arXiv \d{4}\.\d{4,5}|arXiv cs/\d{7}|under (double-blind )?review", text)
    assert "shared/" not in text and "seeds/" not in text
