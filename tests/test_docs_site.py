"""The documentation site builds offline with `mkdocs build --strict`, with one page per bound
family generated from the registry (every entry, its formula as MathJax display math) and the
API page generated from the docstrings."""

from __future__ import annotations

import html
import os
import subprocess
import sys
from pathlib import Path

import pytest

import boundcalc as bc

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                          str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "WARNING" not in res.stderr
    return out


def test_one_page_per_family_with_every_entry_and_its_formula(site, registry):
    for family in registry.families():
        page = site / "families" / family / "index.html"
        assert page.is_file(), family
        text = html.unescape(page.read_text(encoding="utf-8"))
        entries = [e for e in registry if e.family == family]
        for e in entries:
            assert f'id="{e.id}"' in text or e.id in text, (family, e.id)
        assert text.count('class="arithmatex"') >= len(entries), family
        assert "\\begin{aligned}" in text and "align*" not in text
        assert "../../sources/" in text  # provenance links into the source notes


def test_sources_guide_and_api_pages(site):
    for name in ("pac_bayes", "norm_bounds", "sharper_picture", "spectrum_adaptive",
                 "shallow_gd"):
        assert (site / "sources" / name / "index.html").is_file()
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    assert "load_registry" in api and "default_formula_dirs" in api
    assert (site / "guide" / "index.html").is_file()
    index = (site / "index.html").read_text(encoding="utf-8")
    assert "fonts.googleapis" not in index  # nothing fetched for fonts
