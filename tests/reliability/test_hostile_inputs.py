"""Hostile inputs: formula files, stats files and checkpoints that try to run code, exhaust
memory or time, or smuggle in a wrong number. Each is refused with a one-line error that names
the culprit; nothing is ever executed.

Fuzzers (hypothesis, derandomized so CI is reproducible):

* the formula parser, ``parse_expression``, on Python-expression-like text from a grammar
  (operators, declared and undeclared names, numbers up to 1e999, calls of allowed and
  forbidden functions, subscripts, lambdas, attribute chains, dunders, strings, deep nesting)
  and on raw text;
* whole formula documents through ``entries_from_document``: every real registry entry with
  1–3 hostile mutations (wrong types, code payloads, deleted or extra fields), and a valid
  document whose expression comes from the grammar; a document that loads is evaluated;
* the stats loader, ``stats_from_json``/``load_stats``, on mutated stats documents, raw bytes
  and truncated files, followed by binding and evaluation.

Property everywhere: the input is accepted or a ``BoundcalcError`` subclass is raised — never
another exception — and the canary file that every code payload tries to create never appears.
"""

from __future__ import annotations

import copy
import json
import math
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest
import sympy as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import boundcalc as bc
from boundcalc.binding import bind
from boundcalc.cli import app
from boundcalc.errors import (BoundcalcError, CheckpointError, DomainError, FormulaError,
                              MissingValueError, StatsError)
from boundcalc.evaluation import Prepared
from boundcalc.registry.loader import entries_from_document, load_file
from boundcalc.registry.parser import Namespace, parse_expression
from boundcalc.stats import load_stats, stats_from_json

CANARY_DIR = Path(tempfile.mkdtemp(prefix="boundcalc_canary_"))
CANARY = CANARY_DIR / "CANARY"
CP = str(CANARY)  # the path every payload tries to create

FUZZ = dict(deadline=None, derandomize=True, database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                   HealthCheck.data_too_large])


def assert_no_canary() -> None:
    assert not CANARY.exists(), "a formula/stats/checkpoint payload executed code"


# ---- the expression grammar ---------------------------------------------------------------------

DECLARED = ["x", "n", "delta", "L", "A", "l", "h", "p", "comp", "pi", "E"]
UNDECLARED = ["y", "os", "sys", "__import__", "__builtins__", "eval", "exec", "open", "compile",
              "globals", "getattr", "setattr", "type", "object", "breakpoint", "oo", "zoo", "nan",
              "inf", "I", "S", "Symbol", "sympify", "Rational", "Integer", "__class__",
              "__dict__", "__globals__", "_", "sp", "np", "self", "lambda_", "é", "ℓ"]
FUNCS_OK = ["sqrt", "log", "exp", "Abs", "Min", "Max", "ceiling", "floor", "kl_inv", "kl",
            "Sum", "Product", "GridMin", "Piecewise"]
FUNCS_BAD = ["eval", "exec", "__import__", "open", "getattr", "print", "compile", "vars", "dir",
             "Function", "lambdify", "sympify", "N", "evalf", "subs", "x", "C", "comp"]
ATTRS = ["real", "__class__", "__class__.__mro__", "__globals__", "__init__.__globals__",
         "func", "args", "evalf", "__dict__", "__subclasses__()", "system"]
BINOPS = ["+", "-", "*", "/", "**", "//", "%", "@", "&", "|", "^", "<<", ">>", "and", "or"]
UNOPS = ["-", "+", "~", "not "]
CMPOPS = ["<", "<=", "==", "!=", ">", ">=", "is", "is not", "in", "not in"]
NUMBER_TEXT = ["1e999", "-1e999", "1e-400", "4.9e-324", "1e308", "1.7976931348623157e308",
               "0x1F", "0o17", "0b101", "1_000_000", "1.", ".5", "0", "0.0", "9" * 80,
               "0.1e-320", "123456789012345678901234567890.5", "1j", "2.5J", "10**10**10",
               "2**2**2**2**2**2", "(1e300*1e300)", "10**-10000", "2**(1/10**50)"]
PAYLOADS = [
    f"__import__('os').system('touch {CP}')",
    f"open('{CP}', 'w').write('x')",
    f"exec(\"open('{CP}','w')\")",
    f"eval(\"__import__('os').system('touch {CP}')\")",
    "().__class__.__bases__[0].__subclasses__()",
    "x.__class__.__mro__[1].__subclasses__()",
    f"getattr(__builtins__, 'exec')(\"open('{CP}','w')\")",
    f"[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'Popen'][0]"
    f"(['touch', '{CP}'])",
    f"(lambda: __import__('os').system('touch {CP}'))()",
    f"sqrt.__globals__['__builtins__']['exec'](\"open('{CP}','w')\")",
    f"Sum(__import__('os').system('touch {CP}'), (l, 0, 1))",
    f"kl_inv(x, exp.__init__.__globals__['os'].system('touch {CP}'))",
    f"Piecewise((x, x > 0), (__import__('os').system('touch {CP}'), True))",
    f"x if __import__('os').system('touch {CP}') else x",
    f"f\"{{__import__('os').system('touch {CP}')}}\"",
    "(y := __import__('os'))",
    f"sympify(\"__import__('os').system('touch {CP}')\")",
    f"C[__import__('os').system('touch {CP}')]",
    "GridMin(x, __import__('os'))",
    f"Min(x, *[__import__('os').system('touch {CP}')])",
    f"sqrt(x, **{{'a': __import__('os').system('touch {CP}')}})",
    f"Symbol('x').__class__.__init__.__globals__['os'].system('touch {CP}')",
    f"lambdify(x, \"__import__('os').system('touch {CP}')\")(1)",
    f"__builtins__.__dict__['__import__']('os').system('touch {CP}')",
]
LEAF_TEXT = ["'s'", 'b"x"', "...", "None", "True", "False", "C[l]", "D[l, h]", "alpha[l]", "C",
             "alpha", "comp", "(l, 0, L - 1)"]


def _nest(n: int, template: str) -> str:
    s = "x"
    for _ in range(n):
        s = template.format(s)
    return s


def expressions() -> st.SearchStrategy[str]:
    numbers = st.one_of(st.integers(-10 ** 80, 10 ** 80).map(str),
                        st.floats(allow_nan=True, allow_infinity=True).map(repr),
                        st.sampled_from(NUMBER_TEXT))
    leaves = st.one_of(st.sampled_from(DECLARED), st.sampled_from(UNDECLARED), numbers,
                       st.sampled_from(PAYLOADS), st.sampled_from(LEAF_TEXT))

    def extend(c):
        return st.one_of(
            st.tuples(c, st.sampled_from(BINOPS), c).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
            st.tuples(st.sampled_from(UNOPS), c).map(lambda t: f"{t[0]}({t[1]})"),
            st.tuples(c, st.sampled_from(CMPOPS), c).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
            st.tuples(st.sampled_from(FUNCS_OK + FUNCS_BAD + UNDECLARED),
                      st.lists(c, max_size=4)).map(lambda t: f"{t[0]}({', '.join(t[1])})"),
            st.tuples(st.sampled_from(["C", "D", "alpha", "x", "y", "comp", "sqrt"]),
                      st.lists(c, min_size=1, max_size=3)).map(
                lambda t: f"{t[0]}[{', '.join(t[1])}]"),
            st.tuples(c, st.sampled_from(ATTRS)).map(lambda t: f"({t[0]}).{t[1]}"),
            c.map(lambda e: f"(lambda: {e})()"),
            st.tuples(c, c).map(lambda t: f"[{t[0]} for _ in {t[1]}]"),
            st.tuples(c, c, c).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
            st.tuples(st.sampled_from(["Sum", "Product"]), c, st.sampled_from(["l", "h", "y"]),
                      c, c).map(lambda t: f"{t[0]}({t[1]}, ({t[2]}, {t[3]}, {t[4]}))"),
            st.tuples(c, st.sampled_from(["p", "x", "y"])).map(
                lambda t: f"GridMin({t[0]}, {t[1]})"),
            st.tuples(c, c, c).map(lambda t: f"Piecewise(({t[0]}, {t[1]} > 0), ({t[2]}, True))"),
            st.tuples(st.sampled_from(["sqrt", "log", "kl_inv"]), c).map(
                lambda t: f"{t[0]}({t[1]}, base={t[1]})"),
            c.map(lambda e: f"sqrt(*{e})"),
            st.lists(c, max_size=3).map(lambda cs: "(" + ", ".join(cs) + ",)"),
            st.lists(c, max_size=3).map(lambda cs: "[" + ", ".join(cs) + "]"),
            st.tuples(c, c).map(lambda t: f"{{{t[0]}: {t[1]}}}"),
            c.map(lambda e: f"{e}[1:2]"),
            st.tuples(c, c).map(lambda t: f"{t[0]} ** {t[1]} ** {t[1]}"),
            st.tuples(c, c).map(lambda t: f"log({t[0]}, {t[1]})"),
        )

    grammar = st.recursive(leaves, extend, max_leaves=20)
    deep = st.tuples(st.integers(1, 1200),
                     st.sampled_from(["({})", "-{}", "sqrt({})", "exp({})", "x**{}", "({} + 1)",
                                      "C[{}]", "Abs({})", "[{}]", "not {}", "{}.a", "{} + x",
                                      "Sum({}, (l, 0, L))", "({0})*({0})"])).map(
        lambda t: _nest(t[0], t[1]) if t[1] != "({0})*({0})" else _nest(min(t[0], 12), t[1]))
    raw = st.one_of(st.text(max_size=200),
                    st.text(alphabet="()[]{}.,:;+-*/%@&|^~<>=!'\"_ xnlCpE0123456789#\\\n\t",
                            max_size=300))
    return st.one_of(grammar, grammar, grammar, deep, raw)


EXPRESSIONS = expressions()


def namespace() -> Namespace:
    l, h = sp.Symbol("l", integer=True), sp.Symbol("h", integer=True)
    scal = {n: sp.Symbol(n, real=True) for n in ("x", "n", "delta", "L", "A")}
    C, D = sp.IndexedBase("C", real=True), sp.IndexedBase("D", real=True)
    return Namespace(scalars=scal, indexed={"C": (C, 1), "D": (D, 2)}, indices={"l": l, "h": h},
                     definitions={"comp": sp.sqrt(scal["x"]) + 1},
                     indexed_definitions={"alpha": ((l,), 2 * C[l])},
                     grid_params={"p": sp.Symbol("p", real=True)})


NS = namespace()


@settings(max_examples=2500, **FUZZ)
@given(text=EXPRESSIONS)
def test_fuzz_parse_expression_accepts_or_raises_formula_error(text):
    try:
        out = parse_expression(text, NS, "f.toml: entry 'e': expression: ")
    except FormulaError as exc:
        msg = str(exc)
        assert msg.startswith("f.toml: entry 'e': expression: ") and "\n" not in msg
    else:
        assert isinstance(out, sp.Basic)
        # what is accepted is finite, real and representable as doubles
        assert not out.has(sp.zoo, sp.nan, sp.oo, -sp.oo, sp.I)
        for num in out.atoms(sp.Rational):
            assert abs(num) <= 1.8e308
    assert_no_canary()


@pytest.mark.parametrize("payload", PAYLOADS)
def test_every_code_payload_is_refused_by_name(payload):
    with pytest.raises(FormulaError) as exc:
        parse_expression(payload, NS, "w: ")
    msg = str(exc.value)
    assert msg.startswith("w: ") and "\n" not in msg
    assert any(k in msg for k in ("not allowed", "unknown symbol", "syntax error", "must be",
                                  "takes")), msg
    assert_no_canary()


BOMBS = ["10**10**10", "2**2**2**2**2**2", "(10**300)**(10**300)", "x**(10**10)",
         "(2*x)**(10**9)", "10**-10000", "1e308*1e308", "Max(1e308*10, x)", "2**10000",
         "9" * 5000, "(" * 5000 + "x" + ")" * 5000, "x" + "+x" * 5000, "-" * 100000 + "x",
         "sqrt(" * 3000 + "x" + ")" * 3000]


def test_expression_bombs_are_refused_quickly():
    """Exact SymPy evaluation of 10**10**10 would never finish: run in a child with a timeout."""
    code = textwrap.dedent("""
        import json, sys, time
        import sympy as sp
        from boundcalc.registry.parser import Namespace, parse_expression
        from boundcalc.errors import FormulaError
        x = sp.Symbol("x", real=True)
        ns = Namespace(scalars={"x": x, "L": sp.Symbol("L", real=True)},
                       indices={"l": sp.Symbol("l", integer=True)})
        for b in json.loads(sys.stdin.read()):
            t = time.time()
            try:
                parse_expression(b, ns)
                print("ACCEPTED", b[:30])
            except FormulaError as e:
                print("REFUSED", round(time.time() - t, 2), str(e)[:60])
    """)
    out = subprocess.run([sys.executable, "-c", code], input=json.dumps(BOMBS),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert len(lines) == len(BOMBS)
    for b, line in zip(BOMBS, lines):
        assert line.startswith("REFUSED"), (b[:40], line)
        assert float(line.split()[1]) < 5.0, (b[:40], line)


def test_silent_number_changes_are_refused():
    """Literals that double precision cannot hold, log bases 0 and 1, constant division by
    zero, complex constants: each would otherwise become a silently wrong number."""
    for text, needle in [("x + 1e-400", "underflows"), ("x * 1e-320", "subnormal"),
                         ("log(x, 0)", "log base"), ("log(x, 1)", "log base"),
                         ("x / 0", "division by zero"), ("sqrt(-1) * x", "imaginary"),
                         ("(-8)**(1/3) + x", "negative number"), ("0/0 + x", "undefined"),
                         ("C[1.5]", "integer"), ("x**(1/0)", "undefined")]:
        with pytest.raises(FormulaError, match=needle):
            parse_expression(text, NS)
    assert float(parse_expression("1e-300 + 0", NS)) == 1e-300
    assert parse_expression("log(x, 2)", NS) == sp.log(NS.scalars["x"]) / sp.log(2)


# ---- whole formula documents ---------------------------------------------------------------------

SCALAR_JSON = st.one_of(st.none(), st.booleans(), st.integers(-10 ** 30, 10 ** 30),
                        st.floats(), st.text(max_size=12),
                        st.sampled_from([10 ** 400, "", "x", "l", "L", "(0, 1)", "__class__",
                                         PAYLOADS[0]]))
JSONISH = st.recursive(SCALAR_JSON, lambda c: st.lists(c, max_size=3)
                       | st.dictionaries(st.text(max_size=6), c, max_size=3), max_leaves=6)
HOSTILE_TEXT = ["x", "n", "l", "L", "C", "__class__", "sqrt", "1x", "x y", "", "é", "True",
                "lambda", "a" * 60, "Sum", "oo", "E", "certified", "proxy", "grid", "prior",
                "[0, inf)", "(0, 1)", "(nan, 1)", "[1, 0]", "(0, 1e999)", "0, 1", "(1,",
                "(" + " " * 3000 + "1" + " " * 3000, "[a, b]", "scalars.n", "matrix.QK.spectral",
                "model.n_layers", "dziugaite_roy", "[/]", "\x1b[2J", "line\nbreak", *PAYLOADS]
HOSTILE_VALUES = st.one_of(JSONISH, EXPRESSIONS, st.sampled_from(HOSTILE_TEXT),
                           st.sampled_from([float("nan"), float("inf"), -1, 0, 1, 2, 10 ** 400,
                                            1e308, True, False, [], {}, [1, 2, 3], [0.5],
                                            {"values": [1, 2]}, {"geomspace": [1, 100, 10 ** 12]},
                                            {"kind": "dziugaite_roy", "c": 0.1, "b": 0}]))


def _seed_documents() -> list[tuple[str, dict]]:
    """One document per registry entry (shared symbols + that entry), from the real files."""
    import tomllib

    from boundcalc.registry.registry import default_formula_dirs

    seeds = []
    for folder in default_formula_dirs():
        for path in sorted(Path(folder).glob("*.toml")):
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
            for entry in doc.get("entry", []):
                one = {k: v for k, v in doc.items() if k != "entry"}
                one["entry"] = [entry]
                seeds.append((f"{path.name}:{entry.get('id')}", one))
    return seeds


SEEDS = _seed_documents()


@st.composite
def mutated_documents(draw):
    """A real entry's document with 1–3 fields replaced, deleted or duplicated."""
    _, doc = draw(st.sampled_from(SEEDS))
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, 3))):
        places = _containers(doc, [])
        if not places:
            break
        container, key = draw(st.sampled_from(places))
        action = draw(st.sampled_from(["replace", "replace", "replace", "delete", "add"]))
        if action == "replace":
            container[key] = copy.deepcopy(draw(HOSTILE_VALUES))
        elif action == "delete":
            del container[key]
        elif isinstance(container, list):
            container.append(copy.deepcopy(draw(HOSTILE_VALUES)))
        else:
            container[draw(st.sampled_from(HOSTILE_TEXT[:20]))] = copy.deepcopy(
                draw(HOSTILE_VALUES))
    return doc


def _typical_values(entry) -> dict:
    sizes = {s: 2 for s in set(entry.indices.values())}
    values = {}
    for name, s in entry.symbols.items():
        if s.role == "size":
            values[name] = float(sizes.get(name, 2))
            continue
        x = next((c for c in (0.1, 1.0, 2.0, 1000.0, s.domain.lo, s.domain.hi)
                  if math.isfinite(c) and s.domain.contains(c)), 0.5)
        if s.indexed:
            values[name] = np.full(tuple(sizes[entry.indices[i]] for i in s.indices), x)
        else:
            values[name] = x
    return values


def _well_formed_seed(expr: str) -> dict:
    return {"family": "fam", "entry": [{
        "id": "e", "title": "t", "source": "s", "provenance": "p", "kind": "proxy",
        "expression": expr, "indices": {"l": "L"},
        "symbols": {"x": {"meaning": "x", "role": "measured", "domain": "[0, inf)"},
                    "n": {"meaning": "n", "role": "data_size", "domain": "[1, inf)",
                          "integer": True},
                    "delta": {"meaning": "d", "role": "confidence", "domain": "(0, 1)",
                              "default": 0.05},
                    "L": {"meaning": "L", "role": "size", "domain": "[1, inf)", "integer": True},
                    "C": {"meaning": "C", "role": "measured", "domain": "[0, inf)",
                          "indices": ["l"]}},
        "definitions": {"comp": "sqrt(x) + 1", "alpha": {"expr": "2*C[l]", "indices": ["l"]}},
        "parameters": {"p": {"choice": "grid", "domain": "(0, inf)",
                             "grid": {"geomspace": [0.01, 100, 5]}}},
    }]}


def _check_document(doc) -> None:
    try:
        entries = entries_from_document(doc, "fuzz.toml")
    except FormulaError as exc:
        msg = str(exc)
        assert msg.startswith("fuzz.toml") and "\n" not in msg, msg
        return
    for entry in entries:
        try:
            r = bc.evaluate(entry, _typical_values(entry))
        except BoundcalcError as exc:
            assert "\n" not in str(exc)
            continue
        assert not math.isnan(r.value)
        json.dumps(r.to_json(), default=str)


def test_seed_documents_cover_the_registry():
    assert len(SEEDS) == len(bc.load_registry())
    for name, doc in SEEDS[:5]:
        entries_from_document(copy.deepcopy(doc), name)


@settings(max_examples=1500, **FUZZ)
@given(doc=mutated_documents())
def test_fuzz_formula_documents_load_or_raise_formula_error(doc):
    """Real registry entries with 1–3 hostile mutations (wrong types, hostile strings, code
    payloads, deleted or extra fields); documents that still load are evaluated at typical
    values (Result or BoundcalcError)."""
    _check_document(doc)
    assert_no_canary()


@settings(max_examples=400, **FUZZ)
@given(expr=EXPRESSIONS)
def test_fuzz_expressions_in_a_valid_document_load_and_evaluate_or_raise(expr):
    """A well-formed document whose expression comes from the grammar: loading and evaluating
    it gives a Result or a BoundcalcError."""
    _check_document(_well_formed_seed(expr))
    assert_no_canary()


@settings(max_examples=300, **FUZZ)
@given(raw=st.one_of(st.binary(max_size=400), st.text(max_size=400).map(str.encode),
                     st.text(alphabet='[]{}="\n.,# abc01', max_size=300).map(
                         lambda t: ('family = "t"\n' + t).encode())))
def test_fuzz_formula_file_bytes(raw):
    path = CANARY_DIR / "fuzz.toml"
    path.write_bytes(raw)
    try:
        load_file(path)
    except FormulaError as exc:
        assert "\n" not in str(exc)
    assert_no_canary()


def test_exponential_definition_nesting_is_refused_quickly(tmp_path):
    """'Billion laughs' with definitions: each level doubles the expression tree."""
    defs = "\n".join([f'd{k} = "(d{k - 1} + 1)*(d{k - 1} + 2)"' for k in range(1, 60)])
    path = tmp_path / "laughs.toml"
    path.write_text(textwrap.dedent("""
        family = "laughs"
        [[entry]]
        id = "e"
        title = "t"
        source = "s"
        provenance = "p"
        kind = "proxy"
        expression = "d59"
        [entry.symbols]
        x = { meaning = "x", role = "measured", domain = "[0, inf)" }
        [entry.definitions]
        d0 = "x + 1"
    """) + defs + "\n")
    import time
    t = time.time()
    with pytest.raises(FormulaError, match=r"laughs\.toml: entry 'e': definition 'd\d+': "
                                           r"expression is too large"):
        load_file(path)
    assert time.time() - t < 60  # refused by size in well under a second; generous against machine load


def test_deeply_nested_toml_is_refused(tmp_path):
    path = tmp_path / "deep.toml"
    path.write_text('family = "t"\nx = ' + "[" * 20000 + "]" * 20000 + "\n")
    with pytest.raises(FormulaError, match="deep.toml: not valid TOML"):
        load_file(path)


def test_regex_dos_in_domain_is_refused_quickly(tmp_path):
    path = tmp_path / "redos.toml"
    domain = "(" + " " * 20000 + "1" + " " * 20000
    path.write_text(textwrap.dedent(f"""
        family = "t"
        [[entry]]
        id = "e"
        title = "t"
        source = "s"
        provenance = "p"
        kind = "proxy"
        expression = "x"
        [entry.symbols]
        x = {{ meaning = "x", role = "measured", domain = "{domain}" }}
    """))
    import time
    t = time.time()
    with pytest.raises(FormulaError, match="symbol 'x': 'domain' must be an interval"):
        load_file(path)
    assert time.time() - t < 20  # the parse takes milliseconds; a generous bound keeps load from failing it


def test_free_index_in_expression_is_refused_at_load():
    doc = _well_formed_seed("C[l] + x")
    with pytest.raises(FormulaError, match="index 'l' is free"):
        entries_from_document(doc, "f.toml")


# ---- stats files ----------------------------------------------------------------------------------

def valid_stats() -> dict:
    """A small stats document that binds mcallester and spectrum_adaptive_edelman fully."""
    mats = []
    for layer in range(2):
        for head in range(2):
            for t in ("QK", "V"):
                mats.append({"type": t, "layer": layer, "head": head, "name": f"{t}{layer}{head}",
                             "shape": [4, 4], "stats": {"spectral": 1.5 + layer, "norm_21": 3.0,
                                                        "rank": 2.0},
                             "singular_values": [1.5 + layer, 0.5]})
        for t in ("M_in", "M_out"):
            mats.append({"type": t, "layer": layer, "head": None, "name": f"{t}{layer}",
                         "shape": [4, 16] if t == "M_in" else [16, 4],
                         "stats": {"spectral": 2.0, "norm_21": 5.0, "rank": 4.0},
                         "singular_values": [2.0, 1.0, 0.5, 0.25]})
    return {"schema": "boundcalc.stats", "version": 1,
            "provenance": {"boundcalc": "0.1.0", "seed": 0},
            "model": {"architecture": "bert", "n_layers": 2, "n_heads": 2, "hidden": 4,
                      "head_dim": 2, "n_kv_heads": 2},
            "layer_map": [], "excluded": [], "matrices": mats,
            "scalars": {"n": {"value": 1000}, "kl": {"value": 50.0},
                        "emp_risk": {"value": 0.05}},
            "groups": {"names": ["a", "b"], "stats": {"dist_init_sq": [1.0, 2.0]},
                       "estimated": {"dist_init_sq": False}}}


STATS_ENTRIES = [e for e in ("mcallester", "spectrum_adaptive_edelman", "trauger_tewari_l11_sum",
                             "pac_bayes_kl") if e in bc.load_registry()]
REGISTRY = bc.load_registry()


def _containers(obj, out):
    if isinstance(obj, dict):
        for k in list(obj):
            out.append((obj, k))
            _containers(obj[k], out)
    elif isinstance(obj, list):
        for i in range(len(obj)):
            out.append((obj, i))
            _containers(obj[i], out)
    return out


STATS_VALUES = st.one_of(JSONISH, st.sampled_from(
    [10 ** 400, -1, -1e-300, 0, 10 ** 12, 1e308, float("nan"), float("inf"), -float("inf"), "",
     "QK", True, [], {}, [1.0] * 5, [[1.0]], {"value": float("nan")},
     {"value": 1, "estimated": "yes"}, {"value": 1, "ci": [2, 1]}, None]))


@st.composite
def mutated_stats(draw):
    doc = valid_stats()
    for _ in range(draw(st.integers(1, 3))):
        places = _containers(doc, [])
        if not places:
            break
        container, key = draw(st.sampled_from(places))
        action = draw(st.sampled_from(["replace", "replace", "delete", "duplicate"]))
        if action == "replace":
            container[key] = copy.deepcopy(draw(STATS_VALUES))
        elif action == "delete":
            del container[key]
        elif isinstance(container, list):
            container.append(copy.deepcopy(container[key]))
        else:
            container[draw(st.text(max_size=4))] = copy.deepcopy(container[key])
    return doc


def _check_stats(doc) -> None:
    try:
        stats = stats_from_json(doc, "s.json")
    except StatsError as exc:
        assert str(exc).startswith("s.json: ") and "\n" not in str(exc)
        return
    for eid in STATS_ENTRIES:
        entry = REGISTRY.get(eid)
        try:
            binding = bind(entry, stats, strict=True)
            prep = Prepared(entry, binding.values, binding.estimated)
            r = prep.result()
        except BoundcalcError as exc:
            assert "\n" not in str(exc)
            continue
        assert not math.isnan(r.value)
        if binding.estimated:
            assert r.estimated or entry.kind != "certified" or all(
                n in entry.estimated_inputs_ok for n in binding.estimated)


def test_valid_stats_document_binds_and_evaluates():
    stats = stats_from_json(valid_stats())
    for eid in ("mcallester", "spectrum_adaptive_edelman"):
        if eid in REGISTRY:
            r = bc.compute(eid, stats)
            assert math.isfinite(r.value)


@settings(max_examples=2000, **FUZZ)
@given(doc=mutated_stats())
def test_fuzz_stats_documents_load_bind_and_evaluate_or_raise(doc):
    _check_stats(doc)


@settings(max_examples=300, **FUZZ)
@given(doc=mutated_stats(), cut=st.floats(0, 1), nonfinite=st.booleans())
def test_fuzz_stats_files_as_text(doc, cut, nonfinite):
    """The same documents as JSON text (NaN/Infinity tokens included, truncated at a random
    point): load_stats gives Stats or a StatsError."""
    try:
        text = json.dumps(doc, allow_nan=True)
    except (OverflowError, ValueError):
        return
    if not nonfinite:
        text = text[: int(len(text) * cut)]
    path = CANARY_DIR / "fuzz_stats.json"
    path.write_text(text)
    try:
        load_stats(path)
    except StatsError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc)


@settings(max_examples=300, **FUZZ)
@given(raw=st.binary(max_size=300))
def test_fuzz_stats_file_bytes(raw):
    path = CANARY_DIR / "fuzz_bytes.json"
    path.write_bytes(raw)
    with pytest.raises(StatsError):
        load_stats(path)


def test_huge_layer_index_does_not_allocate(tmp_path):
    """One matrix at layer 999999 would ask bind for a 10⁶-row array (or 10¹² with heads)."""
    doc = valid_stats()
    doc["matrices"][0]["layer"] = 999_999
    stats = stats_from_json(doc)
    if "spectrum_adaptive_edelman" in REGISTRY:
        with pytest.raises(StatsError, match="matrix type QK: no entry for layer"):
            bind(REGISTRY.get("spectrum_adaptive_edelman"), stats)
    doc["matrices"][0]["layer"] = 10 ** 9
    with pytest.raises(StatsError, match=r"matrices\[0\]\.layer"):
        stats_from_json(doc)


def test_duplicate_matrix_entries_are_refused_not_overwritten():
    doc = valid_stats()
    dup = copy.deepcopy(doc["matrices"][0])
    dup["stats"]["spectral"] = 99.0
    doc["matrices"].append(dup)
    stats = stats_from_json(doc)
    if "spectrum_adaptive_edelman" in REGISTRY:
        with pytest.raises(StatsError, match="QK: two entries for layer 0 head 0"):
            bind(REGISTRY.get("spectrum_adaptive_edelman"), stats)


# ---- the CLI: one line on stderr naming the culprit, and the documented exit code ---------------

runner = CliRunner()


def _invoke(args):
    return runner.invoke(app, [str(a) for a in args])


def assert_one_line_error(result, code: int, *culprits: str) -> None:
    stderr = result.stderr
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert result.exit_code == code, (result.exit_code, result.output[-1500:])
    assert len(lines) == 1, stderr[-1500:]
    assert lines[0].startswith("error:"), lines[0]
    for c in culprits:
        assert c in lines[0], (c, lines[0])
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


FORMULA_CASES = {
    "import_in_expression": ('expression = "{p}"', "expression", "not allowed"),
    "attribute_chain": ('expression = "x.__class__.__mro__[1].__subclasses__()"', "expression",
                        "attribute access"),
    "dunder_name": ('expression = "__builtins__"', "expression", "unknown symbol '__builtins__'"),
    "lambda": ('expression = "(lambda: 1)()"', "expression", "not allowed"),
    "payload_in_definition": ('expression = "d"\n[entry.definitions]\nd = "{p}"',
                              "definition 'd'", "not allowed"),
    "payload_in_check": ('expression = "x"\nassumptions = [{{ text = "t", check = "{p}" }}]',
                         "assumption 1 check", "not allowed"),
    "payload_in_closed_form": ('expression = "x + q"\n[entry.parameters]\nq = {{ choice = '
                               '"fixed", domain = "(0, 1)", closed_form = "{p}" }}',
                               "parameter 'q' closed_form", "not allowed"),
    "payload_in_grid": ('expression = "x + q"\n[entry.parameters]\nq = {{ choice = "grid", '
                        'domain = "(0, 1)", grid = {{ values = ["{p}"] }} }}',
                        "parameter 'q' grid", "not allowed"),
    "power_bomb": ('expression = "x + 10**10**10"', "expression", "too large"),
    "huge_literal": ('expression = "x + 1e999"', "expression", "non-finite"),
    "complex_constant": ('expression = "x + sqrt(-1)"', "expression", "imaginary"),
    "division_by_zero": ('expression = "x / 0"', "expression", "division by zero"),
    "dunder_symbol": ('expression = "x"\n[entry.symbols.__class__]\nmeaning = "m"\n'
                      'role = "measured"\ndomain = "[0, inf)"', "symbol '__class__'", "invalid"),
    "domain_not_string": ('expression = "x"\n[entry.symbols.y]\nmeaning = "m"\nrole = "measured"'
                          '\ndomain = 5', "symbol 'y'", "'domain' must be"),
}


@pytest.mark.parametrize("case", sorted(FORMULA_CASES))
def test_cli_hostile_formula_file(case, tmp_path, monkeypatch):
    monkeypatch.chdir(CANARY_DIR)
    body, where, needle = FORMULA_CASES[case]
    payload = PAYLOADS[0].replace("\\", "\\\\").replace('"', '\\"')  # a TOML basic string
    text = ('family = "hostile"\n[[entry]]\nid = "e"\ntitle = "t"\nsource = "s"\n'
            'provenance = "p"\nkind = "proxy"\n' + body.format(p=payload) + '\n')
    if "[entry.symbols" not in body:
        text += '[entry.symbols]\nx = { meaning = "x", role = "measured", domain = "[0, inf)" }\n'
    else:
        text = text.replace('expression = "x"\n', 'expression = "x"\n[entry.symbols.x]\n'
                            'meaning = "x"\nrole = "measured"\ndomain = "[0, inf)"\n')
    (tmp_path / "hostile.toml").write_text(text)
    res = _invoke(["--formulas", tmp_path, "list"])
    assert_one_line_error(res, FormulaError.exit_code, "hostile.toml", "entry 'e'", where, needle)
    assert_no_canary()


def _write_stats(path: Path, doc=None, text: str | None = None) -> Path:
    path.write_text(text if text is not None else json.dumps(doc))
    return path


def _mut(fn):
    doc = valid_stats()
    fn(doc)
    return doc


STATS_CASES = {
    # name: (document or text, culprit substrings)
    "not_json": ("{not json", ["not valid JSON"]),
    "truncated": (json.dumps(valid_stats())[:300], ["not valid JSON"]),
    "top_level_array": ("[1, 2, 3]", ["top level"]),
    "deep_nesting": ('{"a": ' + "[" * 100000 + "]" * 100000 + "}", ["not valid JSON"]),
    "nan_token": (json.dumps(valid_stats()).replace('"value": 50.0', '"value": NaN'),
                  ["not valid JSON", "NaN"]),
    "infinity_token": (json.dumps(valid_stats()).replace('"value": 50.0', '"value": Infinity'),
                       ["Infinity"]),
    "overflowing_number": (json.dumps(valid_stats()).replace('"value": 50.0', '"value": 1e999'),
                           ["scalars.kl.value", "finite"]),
    "huge_integer": (json.dumps(valid_stats()).replace('"value": 1000}', '"value": 1' + "0" * 400
                                                       + "}"), ["scalars.n.value"]),
    "wrong_schema": (_mut(lambda d: d.update(schema="other")), ["field 'schema'"]),
    "wrong_version": (_mut(lambda d: d.update(version=2)), ["field 'version'"]),
    "missing_matrices": (_mut(lambda d: d.pop("matrices")), ["missing field 'matrices'"]),
    "scalars_wrong_type": (_mut(lambda d: d.update(scalars=[1])), ["field 'scalars'"]),
    "scalar_is_string": (_mut(lambda d: d["scalars"].update(n="1000")), ["scalars.n"]),
    "estimated_not_bool": (_mut(lambda d: d["scalars"]["kl"].update(estimated="no")),
                           ["scalars.kl.estimated"]),
    "ci_reversed": (_mut(lambda d: d["scalars"]["kl"].update(ci=[60, 40])), ["scalars.kl.ci"]),
    "negative_norm": (_mut(lambda d: d["matrices"][0]["stats"].update(spectral=-1.5)),
                      ["matrices[0].stats.spectral", "negative"]),
    "negative_singular_value": (_mut(lambda d: d["matrices"][0].update(
        singular_values=[1.0, -0.5])), ["matrices[0].singular_values[1]"]),
    "too_many_singular_values": (_mut(lambda d: d["matrices"][0].update(
        singular_values=[1.0] * 5)), ["matrices[0].singular_values", "4x4"]),
    "huge_array": (_mut(lambda d: d["matrices"][0].update(shape=[10 ** 7, 10 ** 7],
                                                          singular_values=[0.5] * 1_000_001)),
                   ["matrices[0].singular_values", "1000001"]),
    "huge_layer_index": (_mut(lambda d: d["matrices"][0].update(layer=10 ** 9)),
                         ["matrices[0].layer"]),
    "missing_stats_field": (_mut(lambda d: d["matrices"][1].pop("stats")),
                            ["matrices[1]", "'stats'"]),
    "bad_shape": (_mut(lambda d: d["matrices"][0].update(shape=[0, 4])), ["matrices[0].shape"]),
    "layer_map_wrong_type": (_mut(lambda d: d.update(layer_map=5)), ["field 'layer_map'"]),
    "provenance_wrong_type": (_mut(lambda d: d.update(provenance=[1])), ["field 'provenance'"]),
    "groups_estimated_wrong_type": (_mut(lambda d: d["groups"].update(estimated=3)),
                                    ["groups.estimated"]),
    "duplicate_matrix": (_mut(lambda d: d["matrices"].append(copy.deepcopy(d["matrices"][0]))),
                         ["QK", "two entries for layer 0 head 0"]),
    "missing_layer": (_mut(lambda d: d.update(matrices=[m for m in d["matrices"]
                                                        if not (m["type"] == "QK"
                                                                and m["layer"] == 0)])),
                      ["QK", "no entry for layer 0"]),
}


@pytest.mark.skipif("spectrum_adaptive_edelman" not in REGISTRY, reason="entry not in registry")
@pytest.mark.parametrize("case", sorted(STATS_CASES))
def test_cli_hostile_stats_file(case, tmp_path):
    content, culprits = STATS_CASES[case]
    path = tmp_path / "stats.json"
    if isinstance(content, str):
        _write_stats(path, text=content)
    else:
        _write_stats(path, content)
    res = _invoke(["evaluate", "spectrum_adaptive_edelman", "--stats", path])
    assert_one_line_error(res, StatsError.exit_code, *culprits)
    if case not in ("duplicate_matrix", "missing_layer"):  # those fail at binding, not loading
        assert str(path) in res.stderr


@pytest.mark.skipif("spectrum_adaptive_edelman" not in REGISTRY, reason="entry not in registry")
def test_cli_valid_stats_file_evaluates(tmp_path):
    path = _write_stats(tmp_path / "stats.json", valid_stats())
    res = _invoke(["evaluate", "spectrum_adaptive_edelman", "--stats", path, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["id"] == "spectrum_adaptive_edelman"


def test_cli_stats_file_binary_garbage_and_missing(tmp_path):
    bad = tmp_path / "garbage.json"
    bad.write_bytes(bytes(range(256)) * 4)
    res = _invoke(["evaluate", "mcallester", "--stats", bad])
    assert_one_line_error(res, StatsError.exit_code, "garbage.json")
    res = _invoke(["evaluate", "mcallester", "--stats", tmp_path / "nope.json"])
    assert_one_line_error(res, StatsError.exit_code, "nope.json")
    res = _invoke(["evaluate", "mcallester", "--stats", tmp_path])
    assert_one_line_error(res, StatsError.exit_code, str(tmp_path))


@pytest.mark.parametrize("sets, code, culprits", [
    (["emp_risk=1.5", "KL=1", "n=100"], DomainError.exit_code, ["emp_risk"]),
    (["emp_risk=0.1", "KL=-1", "n=100"], DomainError.exit_code, ["'KL'"]),
    (["emp_risk=0.1", "KL=1", "n=100.5"], DomainError.exit_code, ["'n'"]),
    (["emp_risk=0.1", "KL=1", "n=100", "delta=0"], DomainError.exit_code, ["'delta'"]),
    (["emp_risk=0.1", "KL=1", "n=100", "delta=1"], DomainError.exit_code, ["'delta'"]),
    (["emp_risk=0.1", "KL=1"], MissingValueError.exit_code, ["'n'"]),
    (["emp_risk=0.1", "KL=nan", "n=100"], BoundcalcError.exit_code, ["KL"]),
    (["emp_risk=0.1", "KL=1e999", "n=100"], BoundcalcError.exit_code, ["KL"]),
    (["emp_risk=0.1", "KL=[1,2]", "n=100"], DomainError.exit_code, ["'KL'"]),
    (["emp_risk=0.1", "KL=__import__('os')", "n=100"], BoundcalcError.exit_code, ["KL"]),
    (["emp_risk"], BoundcalcError.exit_code, ["emp_risk"]),
    (["emp_risk=0.1", "emp_risk=0.2", "KL=1", "n=100"], BoundcalcError.exit_code, ["emp_risk"]),
    (["zzz=1", "emp_risk=0.1", "KL=1", "n=100"], DomainError.exit_code, ["'zzz'"]),
])
def test_cli_bad_values(sets, code, culprits):
    args = ["evaluate", "mcallester"]
    for s in sets:
        args += ["--set", s]
    res = _invoke(args)
    assert_one_line_error(res, code, *culprits)


def test_cli_error_text_from_a_formula_file_is_not_rich_markup(tmp_path):
    (tmp_path / "m.toml").write_text('family = "t"\n[[entry]]\nid = "e"\ntitle = "t"\n'
                                     'source = "s"\nprovenance = "p"\nkind = "[/]"\n'
                                     'expression = "x"\n')
    res = _invoke(["--formulas", tmp_path, "list"])
    assert_one_line_error(res, FormulaError.exit_code, "m.toml", "kind", "[/]")


def test_cli_error_text_from_a_stats_file_is_not_rich_markup(tmp_path):
    doc = valid_stats()
    doc["scalars"]["[/]"] = "not a number"
    path = _write_stats(tmp_path / "s.json", doc)
    res = _invoke(["evaluate", "mcallester", "--stats", path])
    assert_one_line_error(res, StatsError.exit_code, "scalars.[/]")


@pytest.mark.parametrize("command", [["list", "--wide"], ["show", "e"],
                                     ["evaluate", "e", "--set", "x=1"]])
def test_cli_tables_print_formula_text_literally(tmp_path, command):
    (tmp_path / "m.toml").write_text(
        'family = "t"\n[[entry]]\nid = "e"\ntitle = "[/]"\nsource = "[bold]s[/bold]"\n'
        'provenance = "p"\nkind = "proxy"\nexpression = "x"\n[entry.symbols]\n'
        'x = { meaning = "x", role = "measured", domain = "[0, inf)" }\n')
    res = runner.invoke(app, ["--formulas", str(tmp_path), *command], env={"COLUMNS": "300"})
    assert res.exit_code == 0, repr(res.exception)
    if command[0] != "evaluate":
        assert "[bold]s[/bold]" in res.stdout
    assert "[/]" in res.stdout


def test_error_messages_escape_control_characters(tmp_path):
    """Newlines and terminal escape sequences from a file never reach the terminal raw."""
    (tmp_path / "esc.toml").write_text('family = "t"\n[[entry]]\nid = "e"\ntitle = "t"\n'
                                       'source = "s"\nprovenance = "p"\n'
                                       'kind = "x\\u001b[2J\\nsecond line"\nexpression = "x"\n')
    with pytest.raises(FormulaError) as exc:
        load_file(tmp_path / "esc.toml")
    msg = str(exc.value)
    assert "\x1b" not in msg and "\n" not in msg and "\\x1b[2J\\nsecond line" in msg
    doc = valid_stats()
    doc["scalars"]["a\nb\x1b[31m"] = "x"
    with pytest.raises(StatsError) as exc:
        stats_from_json(doc)
    assert "\n" not in str(exc.value) and "\x1b" not in str(exc.value)
    res = _invoke(["--formulas", tmp_path, "list"])
    assert_one_line_error(res, FormulaError.exit_code, "esc.toml", "second line")


def test_cli_unknown_entry():
    res = _invoke(["evaluate", "no_such_entry"])
    assert_one_line_error(res, BoundcalcError.exit_code, "no_such_entry")


# ---- checkpoints ------------------------------------------------------------------------------------

def _measure_available() -> bool:
    return runner.invoke(app, ["measure", "--help"]).exit_code == 0


needs_measure = pytest.mark.skipif(not _measure_available(),
                                   reason="`boundcalc measure` is not available yet")


class _Evil:
    def __reduce__(self):
        return (os.system, (f"touch {CP}",))


def _tiny_encoder_state():
    import torch

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16,
                                             batch_first=True)
    enc = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    return {k: v.detach().clone().contiguous() for k, v in enc.state_dict().items()}


def _checkpoint_cases(tmp: Path) -> dict[str, tuple[Path, list[str]]]:
    import torch
    from safetensors.torch import save_file

    cases: dict[str, tuple[Path, list[str]]] = {}
    torch.save({"w": torch.zeros(2, 2), "evil": _Evil()}, tmp / "evil_zip.pt")
    cases["pickle_needing_code_torch_zip"] = (tmp / "evil_zip.pt", ["evil_zip.pt", "refused"])
    with open(tmp / "evil_raw.pt", "wb") as f:
        pickle.dump({"evil": _Evil()}, f, protocol=4)
    cases["pickle_needing_code_raw"] = (tmp / "evil_raw.pt", ["evil_raw.pt", "refused"])
    state = _tiny_encoder_state()
    save_file(state, str(tmp / "good.safetensors"))
    raw = (tmp / "good.safetensors").read_bytes()
    (tmp / "truncated.safetensors").write_bytes(raw[: len(raw) // 2])
    cases["truncated_safetensors"] = (tmp / "truncated.safetensors", ["truncated.safetensors"])
    (tmp / "header_only.safetensors").write_bytes(raw[:12])
    cases["header_only_safetensors"] = (tmp / "header_only.safetensors",
                                        ["header_only.safetensors"])
    (tmp / "garbage.safetensors").write_bytes(bytes(range(256)) * 8)
    cases["garbage_safetensors"] = (tmp / "garbage.safetensors", ["garbage.safetensors"])
    hdr = b'{"a.weight": {"dtype": "F32", "shape": [100000, 100000], "data_offsets": [0, 40000000000]}}'
    (tmp / "lying_header.safetensors").write_bytes(struct.pack("<Q", len(hdr)) + hdr + bytes(16))
    cases["header_claims_40GB"] = (tmp / "lying_header.safetensors", ["lying_header.safetensors"])
    (tmp / "huge_header.safetensors").write_bytes(struct.pack("<Q", 2 ** 62) + b"{}")
    cases["header_length_2**62"] = (tmp / "huge_header.safetensors", ["huge_header.safetensors"])
    nan_state = {k: v.clone() for k, v in state.items()}
    nan_state["layers.0.self_attn.in_proj_weight"][0, 0] = float("nan")
    save_file(nan_state, str(tmp / "nan.safetensors"))
    cases["nan_weights"] = (tmp / "nan.safetensors", ["layers.0.self_attn.in_proj_weight",
                                                      "NaN"])
    outside = tmp / "sharded"
    outside.mkdir()
    (outside / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a.weight": "../../etc/passwd"}}))
    cases["shard_outside_folder"] = (outside, ["lies outside"])
    badidx = tmp / "badidx"
    badidx.mkdir()
    (badidx / "model.safetensors.index.json").write_text("{nope")
    cases["index_not_json"] = (badidx, ["model.safetensors.index.json"])
    badcfg = tmp / "badcfg"
    badcfg.mkdir()
    save_file(state, str(badcfg / "model.safetensors"))
    (badcfg / "config.json").write_text("[1, 2")
    cases["config_not_json"] = (badcfg, ["config.json"])
    (tmp / "model.onnx").write_bytes(b"abc")
    cases["unknown_format"] = (tmp / "model.onnx", ["model.onnx", "unknown checkpoint format"])
    cases["missing_file"] = (tmp / "nope.safetensors", ["nope.safetensors"])
    empty = tmp / "empty_dir"
    empty.mkdir()
    cases["folder_without_model"] = (empty, ["empty_dir"])
    return cases


@pytest.fixture(scope="module")
def checkpoint_cases(tmp_path_factory):
    return _checkpoint_cases(tmp_path_factory.mktemp("ckpt"))


CHECKPOINT_NAMES = ["pickle_needing_code_torch_zip", "pickle_needing_code_raw",
                    "truncated_safetensors", "header_only_safetensors", "garbage_safetensors",
                    "header_claims_40GB", "header_length_2**62", "nan_weights",
                    "shard_outside_folder", "index_not_json", "config_not_json",
                    "unknown_format", "missing_file", "folder_without_model"]


@needs_measure
@pytest.mark.parametrize("case", CHECKPOINT_NAMES)
def test_measure_api_refuses_hostile_checkpoint(case, checkpoint_cases, monkeypatch):
    from boundcalc.measure import measure

    monkeypatch.chdir(CANARY_DIR)
    path, culprits = checkpoint_cases[case]
    with pytest.raises(CheckpointError) as exc:
        measure(path, progress=False, n_heads=2)
    msg = str(exc.value)
    assert "\n" not in msg
    for c in culprits:
        assert c in msg, (c, msg)
    assert_no_canary()


@needs_measure
@pytest.mark.parametrize("case", [c for c in CHECKPOINT_NAMES if c != "pickle_needing_code_raw"])
def test_cli_measure_refuses_hostile_checkpoint(case, checkpoint_cases, tmp_path, monkeypatch):
    monkeypatch.chdir(CANARY_DIR)
    path, culprits = checkpoint_cases[case]
    out = tmp_path / "stats.json"
    res = _invoke(["measure", path, "-o", out, "--n-heads", "2"])
    assert_no_canary()
    assert not out.exists()
    assert_one_line_error(res, CheckpointError.exit_code, *culprits)


@pytest.fixture(scope="module")
def raw_pickle_cli(checkpoint_cases, tmp_path_factory):
    path, _ = checkpoint_cases["pickle_needing_code_raw"]
    out = tmp_path_factory.mktemp("rawpickle") / "s.json"
    return _cli_subprocess(["measure", path, "-o", out], CANARY_DIR), out


def _cli_subprocess(args, cwd) -> subprocess.CompletedProcess:
    """The real console entry point in a fresh interpreter: warnings reach stderr there (under
    pytest they are captured, so an in-process CliRunner cannot see them)."""
    return subprocess.run([sys.executable, "-c", "from boundcalc.cli import main; main()",
                           *map(str, args)], capture_output=True, text=True, timeout=300,
                          cwd=cwd)


@needs_measure
def test_cli_measure_raw_pickle_is_refused_and_nothing_runs(raw_pickle_cli):
    """A plain (non-zip) pickle whose unpickling would run os.system: exit 6, no canary."""
    res, out = raw_pickle_cli
    assert res.returncode == CheckpointError.exit_code, res.stderr[-2000:]
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and "evil_raw.pt" in last and "refused" in last
    assert "Traceback" not in res.stderr
    assert not out.exists()
    assert_no_canary()


@needs_measure
def test_cli_measure_raw_pickle_error_is_one_line(raw_pickle_cli):
    res, _ = raw_pickle_cli
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr


def test_canary_mechanism_works(tmp_path):
    """The canary would catch an executed payload: unpickling the payload without safeguards
    creates it (then the file is removed again)."""
    pickle.loads(pickle.dumps(_Evil()))
    assert CANARY.exists()
    CANARY.unlink()
