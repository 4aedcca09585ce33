"""The parsed-registry cache: cached entries equal parsed ones, a bad cache is ignored, and the
CLI imports only what a command uses (checked in fresh processes, never timed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sympy as sp

import boundcalc as bc
from boundcalc.registry import cache, load_file

ROOT = Path(__file__).resolve().parents[2]
FORMULAS = ROOT / "formulas"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("BOUNDCALC_CACHE_DIR", str(d))
    monkeypatch.delenv("BOUNDCALC_NO_CACHE", raising=False)
    return d


def _docs(d: Path) -> list[Path]:
    return sorted((d / "registry").glob("*.json"))


def test_every_bundled_file_round_trips_through_the_cache(cache_dir):
    files = sorted(FORMULAS.glob("*.toml"))
    for f in files:
        cache.load_file_cached(f)  # miss: parse and store
    assert len(_docs(cache_dir)) == len(files)
    assert all(cache._read(d, d.stem) for d in _docs(cache_dir))  # every document decodes
    for f in files:
        parsed = load_file(f)
        key_docs = _docs(cache_dir)
        hit = cache.load_file_cached(f)  # hit: decoded from the JSON document
        assert len(_docs(cache_dir)) == len(key_docs)
        assert [e.id for e in hit] == [e.id for e in parsed]
        for a, b in zip(hit, parsed):
            assert a is not b
            assert sp.srepr(a.expression) == sp.srepr(b.expression), a.id
            assert a.expression.free_symbols == b.expression.free_symbols
            for name in b.definitions:
                assert sp.srepr(a.definitions[name].expr) == sp.srepr(b.definitions[name].expr)
            assert {n: s.symbol.assumptions0 for n, s in a.symbols.items()} == \
                   {n: s.symbol.assumptions0 for n, s in b.symbols.items()}
            assert a.summary() == b.summary()


def test_cached_registry_gives_the_hand_value(cache_dir):
    import math

    bc.load_registry()  # fills the cache
    from boundcalc.registry.registry import _CACHE

    _CACHE.clear()  # force the disk path, not the in-process memo
    r = bc.compute("mcallester", None, {"emp_risk": 0.05, "KL": 5000, "n": 60000})
    n, delta = 60000, 0.05
    hand = 0.05 + math.sqrt((5000 + math.log(2 * math.sqrt(n) / delta)) / (2 * n))
    assert r.value == pytest.approx(hand, rel=1e-12)


def _one_doc(cache_dir: Path, name: str = "edelman.toml") -> tuple[Path, Path]:
    src = FORMULAS / name
    cache.load_file_cached(src)
    docs = _docs(cache_dir)
    assert len(docs) == 1
    return src, docs[0]


@pytest.mark.parametrize("damage", ["truncate", "flip", "foreign_class", "string_as_node",
                                    "not_json"])
def test_a_damaged_cache_is_ignored_not_trusted(cache_dir, damage, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    src, doc_path = _one_doc(cache_dir)
    text = doc_path.read_text(encoding="utf-8")
    if damage == "truncate":
        text = text[: len(text) // 2]
    elif damage == "flip":  # payload changed, checksum not: must be refused
        doc = json.loads(text)
        assert '"y":"m"' in doc["entries"]
        doc["entries"] = doc["entries"].replace('"y":"m"', '"y":"M"', 1)
        text = json.dumps(doc)
    else:
        doc = json.loads(text)
        payload = json.loads(doc["entries"])
        if damage == "foreign_class":  # a callable outside the allow-list
            payload["nodes"].append({"o": "sympify", "x": []})
        elif damage == "string_as_node":  # a string where SymPy's parser would eval it
            payload["nodes"].append({"o": "log", "x": ["__import__('os').system('touch PWNED')"]})
        else:
            payload = "not a tree"
        doc["entries"] = json.dumps(payload)
        doc["sha256"] = cache._digest(doc["entries"])  # a consistent checksum: still refused
        text = json.dumps(doc)
    doc_path.write_text(text, encoding="utf-8")
    if damage == "not_json":
        doc_path.write_bytes(b"\x00\xff garbage")
    got = cache.load_file_cached(src)
    ref = load_file(src)
    assert [sp.srepr(e.expression) for e in got] == [sp.srepr(e.expression) for e in ref]
    assert not (tmp_path / "PWNED").exists()


def test_changed_file_is_parsed_again(cache_dir, tmp_path):
    f = tmp_path / "f.toml"
    f.write_text((FORMULAS / "edelman.toml").read_text(encoding="utf-8"), encoding="utf-8")
    first = cache.load_file_cached(f)
    text = f.read_text(encoding="utf-8")
    f.write_text(text.replace("Edelman et al. 2022 Corollary", "Changed", 1), encoding="utf-8")
    second = cache.load_file_cached(f)
    assert second[0].title != first[0].title
    assert len(_docs(cache_dir)) == 2


def test_cache_off_and_unwritable_cache_still_load(tmp_path, monkeypatch):
    monkeypatch.setenv("BOUNDCALC_NO_CACHE", "1")
    monkeypatch.setenv("BOUNDCALC_CACHE_DIR", str(tmp_path / "c"))
    assert cache.load_file_cached(FORMULAS / "edelman.toml")
    assert not (tmp_path / "c").exists()
    monkeypatch.delenv("BOUNDCALC_NO_CACHE")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("BOUNDCALC_CACHE_DIR", str(blocker))  # a file, not a folder
    assert [e.id for e in cache.load_file_cached(FORMULAS / "edelman.toml")] == \
           [e.id for e in load_file(FORMULAS / "edelman.toml")]


_PROBE = """
import sys, atexit
def report():
    heavy = ("sympy", "numpy", "scipy", "pandas", "matplotlib", "cvxpy", "transformers", "torch")
    sys.stderr.write("LOADED " + " ".join(m for m in heavy if m in sys.modules) + "\\n")
atexit.register(report)
sys.argv = ["boundcalc"] + sys.argv[1:]
from boundcalc.cli import main
main()
"""


def _loaded(*args: str) -> set[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True,
                         env=env, timeout=120)
    line = [ln for ln in res.stderr.splitlines() if ln.startswith("LOADED")][-1]
    return set(line.split()[1:])


def test_help_imports_no_heavy_library():
    assert _loaded("--help") == set()


def test_evaluate_from_a_warm_cache_imports_numpy_only(cache_dir):
    args = ("evaluate", "mcallester", "--set", "emp_risk=0.05", "--set", "KL=5000",
            "--set", "n=60000")
    assert _loaded(*args) == {"sympy", "numpy"}  # cold: the formula files are parsed
    assert _loaded(*args) == {"numpy"}  # warm: plain trees from the cache, no SymPy
