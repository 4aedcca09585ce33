"""Formula trees without SymPy: the engine's plain trees (engine/tree.py) equal the SymPy forms
they stand for, the cache serves them without importing SymPy, and an entry served that way
evaluates to exactly the same result as the parsed one."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

import boundcalc as bc
from _draw_helpers import grid_points, inputs
from boundcalc.engine import tree
from boundcalc.engine.tree import Node, as_tree
from boundcalc.errors import BoundcalcError
from boundcalc.registry import cache, load_file
from boundcalc.registry.registry import _CACHE

FORMULAS = Path(__file__).resolve().parents[2] / "formulas"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("BOUNDCALC_CACHE_DIR", str(d))
    monkeypatch.delenv("BOUNDCALC_NO_CACHE", raising=False)
    _CACHE.clear()
    yield d
    _CACHE.clear()


# ---- the node type ---------------------------------------------------------------------------

def test_nodes_compare_by_structure_and_numbers_keep_their_kind():
    x, n = sp.symbols("x n", positive=True)
    a = as_tree(sp.sqrt(x / (2 * n)) + sp.Rational(1, 3))
    b = as_tree(sp.sqrt(x / (2 * n)) + sp.Rational(1, 3))
    assert a == b and hash(a) == hash(b) and a is not as_tree(sp.sqrt(x / n))
    assert as_tree(sp.Integer(2)) == tree.integer(2)
    assert as_tree(sp.Integer(2)) != as_tree(sp.Float(2.0))  # SymPy: Float(2) != 2 as well
    assert as_tree(sp.S.Half) == tree.HALF and float(tree.HALF) == 0.5
    assert as_tree(sp.Float("0.01")).op == "Float" and float(as_tree(sp.Float("0.01"))) == 0.01
    assert as_tree(sp.pi).op == "Pi" and float(as_tree(sp.pi)) == math.pi
    assert as_tree(sp.oo).op == "Inf" and as_tree(sp.true) == tree.TRUE


def test_one_minus_exp_is_recognised_only_in_that_shape():
    y = sp.Symbol("y")
    assert tree.one_minus_exp_arg(as_tree(1 - sp.exp(-y))) == as_tree(-y)
    assert tree.one_minus_exp_arg(as_tree(1 - 2 * sp.exp(-y))) is None
    assert tree.one_minus_exp_arg(as_tree(2 - sp.exp(-y))) is None


def test_text_form_reads_like_the_formula():
    x, n = sp.symbols("x n")
    assert str(as_tree(sp.log(x) + n ** 2)) in ("n**2 + log(x)", "log(x) + n**2")
    i = sp.Symbol("i")
    assert str(as_tree(sp.IndexedBase("s")[i])) == "s[i]"


def test_tree_operators_match_the_cache_allow_list():
    assert cache.TREE_OPS == frozenset(cache._sympy_classes())


# ---- trees from the cache equal trees from SymPy -----------------------------------------------

def _formulas(entry) -> list[tuple[str, object]]:
    """Every formula-valued field of an entry, by a readable path."""
    out = [("expression", entry.expression)]
    out += [(f"definition {n}", d.expr) for n, d in entry.definitions.items()]
    out += [(f"symbol {n}", s.symbol) for n, s in entry.symbols.items()]
    for n, p in entry.parameters.items():
        out.append((f"parameter {n}", p.symbol))
        if p.closed_form is not None:
            out.append((f"closed form {n}", p.closed_form))
        if p.grid is not None:
            out += [(f"grid {n}[{k}]", a) for k, a in enumerate(p.grid.args)]
    out += [(f"assumption {a.text}", a.check.expr) for a in entry.assumptions if a.check is not None]
    out += [(f"index {n}", s) for n, s in entry.index_symbols.items()]
    return out


def test_every_bundled_entry_decodes_to_the_trees_of_its_sympy_form(cache_dir):
    files = sorted(FORMULAS.glob("*.toml"))
    checked = 0
    for f in files:
        cache.load_file_cached(f)  # a miss: parse and store
        plain = cache.load_file_cached(f, symbolic=False)
        parsed = load_file(f)
        assert [e.id for e in plain] == [e.id for e in parsed]
        for a, b in zip(plain, parsed):
            assert isinstance(a.expression, Node), f"{a.id} was not served as a plain tree"
            fa, fb = _formulas(a), _formulas(b)
            assert [k for k, _ in fa] == [k for k, _ in fb]
            for (what, x), (_, y) in zip(fa, fb):
                assert isinstance(x, Node) and x == as_tree(y), (a.id, what)
                checked += 1
            assert a.summary() == b.summary()
    assert checked > 500


def test_a_plain_entry_evaluates_exactly_like_the_parsed_one(cache_dir):
    symbolic = bc.load_registry()
    _CACHE.clear()
    plain = bc.load_registry(symbolic=False)
    assert isinstance(plain.get("mcallester").expression, Node)
    compared = 0
    for entry in symbolic:
        other = plain.get(entry.id)
        rng = np.random.default_rng(sum(map(ord, entry.id)))
        for i in range(8):
            vals = inputs(entry, rng, edgy=i < 2)
            outcomes = []
            for e in (entry, other):
                try:
                    prep = bc.Prepared(e, vals)
                    r = prep.result(grid_points(prep, np.random.default_rng(i)))
                    outcomes.append((r.value, r.terms, r.delta_effective, r.union_bound_cost,
                                     r.assumptions, r.label, r.extra.get("interval")))
                except BoundcalcError as exc:
                    outcomes.append(("error", str(exc)))
            left, right = outcomes
            assert repr(left) == repr(right), (entry.id, vals)
            compared += left[0] != "error"
    assert compared > 100


def test_plain_kl_inverse_entry_gives_the_hand_value(cache_dir):
    from boundcalc.engine.kernels import kl_inv_upper

    bc.load_registry()
    _CACHE.clear()
    plain = bc.load_registry(symbolic=False)
    assert isinstance(plain.get("occam_kl").expression, Node)
    r = bc.compute(plain.get("occam_kl"), None,
                   {"emp_risk": 0.1, "code_bits": 800, "n": 1000, "delta": 0.05})
    want = kl_inv_upper(0.1, (800 * math.log(2) + math.log(1 / 0.05)) / 1000)
    assert r.value == pytest.approx(want, rel=1e-12) and r.label == "certified bound"
    assert r.terms["divergence"] == pytest.approx(800 * math.log(2), rel=1e-15)


def test_exact_value_of_a_plain_entry_says_what_it_needs(cache_dir):
    bc.load_registry()
    _CACHE.clear()
    prep = bc.Prepared(bc.load_registry(symbolic=False).get("mcallester"),
                       {"emp_risk": 0.05, "KL": 100, "n": 10000})
    with pytest.raises(BoundcalcError, match="symbolic=True"):
        prep.exact_value()
