"""A disk cache of parsed formula files, so a command that needs one entry skips SymPy parsing.

Parsing every formula file (AST whitelist → SymPy construction and canonicalisation) takes about
0.6 s; ``boundcalc evaluate`` needs none of that work again when the files have not changed.
A hit can be decoded two ways: into SymPy trees (``symbolic=True``: what ``show``, LaTeX export
and the optimizer's derivatives need) or into the engine's plain trees
(:class:`~boundcalc.engine.tree.Node`, ``symbolic=False``), which does not import SymPy at all.

The cache is data, never code: a JSON document per formula file holding its entries as a tree
of plain values, the registry's own dataclasses (by name, from :mod:`.schema` only) and SymPy
nodes (by class name, from a fixed allow-list). Nodes are rebuilt with ``evaluate=False`` from
their already canonical arguments, which skips the canonicalisation that dominates parsing; no
string ever reaches SymPy's parser. Keys: the SHA-256 of the formula file's bytes and of the
source of the code that builds entries (so a changed loader invalidates it). A document whose
checksum, format or contents do not match is ignored and the file is parsed as usual; so is
any error while reading or writing. A file is cached only after its entries survived a round
trip (decoded entries equal to the parsed ones, SymPy trees compared with ``srepr`` and their
assumptions).

Location: ``$BOUNDCALC_CACHE_DIR``, else ``$XDG_CACHE_HOME/boundcalc``, else
``~/.cache/boundcalc``; ``BOUNDCALC_NO_CACHE=1`` turns it off.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from ..errors import FormulaError
from ..files import MAX_FORMULA_FILE_BYTES, read_limited

FORMAT = 1
_CODE_FILES = ("registry/loader.py", "registry/parser.py", "registry/schema.py",
               "registry/cache.py", "engine/functions.py", "engine/tree.py")
_code_hash: str | None = None

# operators a plain tree may carry: the allow-listed SymPy classes by name (tests keep the two
# lists equal); a plain tree is only data, so this is a consistency check, not a safety one
TREE_OPS = frozenset((
    "Add", "Mul", "Pow", "Tuple", "Indexed", "IndexedBase", "Sum", "Product", "Equality",
    "Unequality", "StrictLessThan", "LessThan", "StrictGreaterThan", "GreaterThan", "And", "Or",
    "Not", "Abs", "exp", "log", "ceiling", "floor", "Max", "Min", "Piecewise", "ExprCondPair",
    "kl_inv", "kl", "GridMin", "Cases", "var_ratio_div"))


class _Unsupported(Exception):
    """A value the cache cannot represent: the file is simply not cached."""


def cache_dir() -> Path | None:
    """The cache folder, or None when caching is off."""
    if os.environ.get("BOUNDCALC_NO_CACHE", "").strip() not in ("", "0"):
        return None
    env = os.environ.get("BOUNDCALC_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "boundcalc"


def _code_key() -> str:
    global _code_hash
    if _code_hash is None:
        root = Path(__file__).resolve().parents[1]
        h = hashlib.sha256(str(FORMAT).encode())
        for rel in _CODE_FILES:
            h.update(rel.encode() + b"\0" + (root / rel).read_bytes() + b"\0")
        h.update(_sympy_release())
        _code_hash = h.hexdigest()
    return _code_hash


def _sympy_release() -> bytes:
    """SymPy's version file, read without importing SymPy (an evaluate from the cache never
    imports it)."""
    spec = importlib.util.find_spec("sympy")
    if spec is None or spec.origin is None:
        return b"no sympy"
    return (Path(spec.origin).parent / "release.py").read_bytes()


# ---- encoding --------------------------------------------------------------------------------

def _sympy_classes() -> dict[str, type]:
    import sympy as sp
    from sympy.concrete.products import Product
    from sympy.concrete.summations import Sum
    from sympy.functions.elementary.piecewise import ExprCondPair

    from ..engine import functions as fn

    classes = [sp.Add, sp.Mul, sp.Pow, sp.Tuple, sp.Indexed, sp.IndexedBase, Sum, Product,
               sp.Eq, sp.Ne, sp.Lt, sp.Le, sp.Gt, sp.Ge, sp.And, sp.Or, sp.Not, sp.Abs, sp.exp,
               sp.log, sp.ceiling, sp.floor, sp.Max, sp.Min, sp.Piecewise, ExprCondPair]
    # every formula function boundcalc defines itself (kl, kl_inv, GridMin, Cases, ...; not a
    # private base such as _Binary, which no formula names)
    classes += [c for c in vars(fn).values() if isinstance(c, type)
                and issubclass(c, sp.Function) and c.__module__ == fn.__name__
                and not c.__name__.startswith("_")]
    return {c.__name__: c for c in classes}


_SINGLETONS = ("Zero", "One", "NegativeOne", "Half", "Infinity", "NegativeInfinity",
               "ComplexInfinity", "NaN", "Pi", "Exp1", "true", "false", "EulerGamma")


def _schema_classes() -> dict[str, type]:
    from . import schema

    return {n: c for n, c in vars(schema).items()
            if isinstance(c, type) and dataclasses.is_dataclass(c) and c.__module__ == schema.__name__}


class _Decoder:
    """A cache document back into entries; subclasses say how a node of the table is built."""

    def __init__(self) -> None:
        self.schema = _schema_classes()

    def load(self, payload: str) -> list:
        doc = json.loads(payload)
        self.built: list = []
        for node in doc["nodes"]:
            self.built.append(self.dec_node(node))
        out = self.dec(doc["body"])
        if not isinstance(out, list):
            raise _Unsupported("body is not a list")
        return out

    def dec(self, o: Any) -> Any:
        if o is None or isinstance(o, (bool, str, float)):
            return o
        if isinstance(o, list):
            return [self.dec(v) for v in o]
        if not isinstance(o, dict) or len(o) == 0:
            raise _Unsupported("bad node")
        if "i" in o:
            return int(o["i"])
        if "t" in o:
            return tuple(self.dec(v) for v in o["t"])
        if "d" in o:
            return {self.dec(k): self.dec(v) for k, v in o["d"]}
        if "r" in o:
            return self.built[o["r"]]
        if "c" in o:
            cls = self.schema[o["c"]]
            obj = cls.__new__(cls)
            fields = {f.name for f in dataclasses.fields(cls)}
            if set(o["f"]) != fields:
                raise _Unsupported(f"{o['c']}: fields differ")
            for n, v in o["f"].items():
                object.__setattr__(obj, n, self.dec(v))
            return obj
        raise _Unsupported("bad node")

    def dec_node(self, o: dict) -> Any:
        raise NotImplementedError


class _TreeDecoder(_Decoder):
    """Nodes of the table as :class:`~boundcalc.engine.tree.Node` (no SymPy)."""

    def __init__(self) -> None:
        from ..engine import tree

        super().__init__()
        self.tree = tree
        t = tree
        self.singletons = {
            "Zero": t.integer(0), "One": t.ONE, "NegativeOne": t.MINUS_ONE, "Half": t.HALF,
            "Infinity": t.Node("Inf"), "NegativeInfinity": t.Node("NegInf"),
            "ComplexInfinity": t.Node("ComplexInf"), "NaN": t.Node("NaN"), "Pi": t.Node("Pi"),
            "Exp1": t.Node("E"), "true": t.TRUE, "false": t.FALSE,
            "EulerGamma": t.Node("EulerGamma")}

    def dec_node(self, o: dict) -> Any:
        t = self.tree
        if "s" in o:
            return self.singletons[o["s"]]
        if "y" in o:
            if not isinstance(o["y"], str):
                raise _Unsupported("bad symbol")
            return t.symbol(o["y"])
        if "n" in o:
            return t.integer(int(o["n"]))
        if "q" in o:
            return t.Node("Rational", (), (int(o["q"][0]), int(o["q"][1])))
        if o["o"] not in TREE_OPS:
            raise _Unsupported(f"operator {str(o['o'])[:40]}")
        if any(not isinstance(a, int) or not 0 <= a < len(self.built) for a in o["x"]):
            raise _Unsupported("bad reference")
        return t.Node(o["o"], tuple(self.built[a] for a in o["x"]))


class _Codec(_Decoder):
    """Entries to a cache document and back, with SymPy trees."""

    def __init__(self) -> None:
        import sympy as sp

        super().__init__()
        self.sp = sp
        self.classes = _sympy_classes()
        self.singletons = {n: getattr(sp.S, n) for n in _SINGLETONS if hasattr(sp.S, n)}
        self.singleton_names = {type(v): n for n, v in self.singletons.items()}

    def enc(self, o: Any) -> Any:
        sp = self.sp
        if o is None or isinstance(o, (bool, str)):
            return o
        if type(o) is int:
            return {"i": str(o)}
        if type(o) is float:
            return o
        if isinstance(o, sp.Basic):
            return self.enc_sympy(o)
        if type(o) is list:
            return [self.enc(v) for v in o]
        if type(o) is tuple:
            return {"t": [self.enc(v) for v in o]}
        if type(o) is dict:
            return {"d": [[self.enc(k), self.enc(v)] for k, v in o.items()]}
        cls = type(o)
        if self.schema.get(cls.__name__) is cls:
            names = [f.name for f in dataclasses.fields(o)]
            if set(getattr(o, "__dict__", {})) - set(names):
                raise _Unsupported(f"{cls.__name__} has attributes beyond its fields")
            return {"c": cls.__name__, "f": {n: self.enc(getattr(o, n)) for n in names}}
        raise _Unsupported(type(o).__name__)

    def enc_sympy(self, o: Any) -> Any:
        """A reference into the node table; each distinct node is stored (and rebuilt) once."""
        key = (type(o), o)
        ref = self.index.get(key)
        if ref is None:
            node = self._node(o)
            ref = self.index[key] = len(self.table)
            self.table.append(node)
        return {"r": ref}

    def _node(self, o: Any) -> Any:
        sp = self.sp
        t = type(o)
        if t in self.singleton_names:
            return {"s": self.singleton_names[t]}
        if t is sp.Symbol:
            return {"y": o.name, "a": dict(o._assumptions_orig)}
        if t is sp.Integer:
            return {"n": str(o.p)}
        if t is sp.Rational:
            return {"q": [str(o.p), str(o.q)]}
        if self.classes.get(t.__name__) is t:
            return {"o": t.__name__, "x": [self.enc_sympy(a)["r"] for a in o.args]}
        raise _Unsupported(t.__name__)

    def dump(self, entries: list) -> str:
        self.table: list = []
        self.index: dict = {}
        body = self.enc(entries)
        return json.dumps({"nodes": self.table, "body": body}, separators=(",", ":"))

    def dec_node(self, o: dict) -> Any:
        sp = self.sp
        if "s" in o:
            return self.singletons[o["s"]]
        if "y" in o:
            if not isinstance(o["y"], str) or not all(isinstance(v, bool) for v in o["a"].values()):
                raise _Unsupported("bad symbol")
            return sp.Symbol(o["y"], **o["a"])
        if "n" in o:
            return sp.Integer(int(o["n"]))
        if "q" in o:
            return sp.Rational(int(o["q"][0]), int(o["q"][1]))
        cls = self.classes[o["o"]]
        if any(not isinstance(a, int) or not 0 <= a < len(self.built) for a in o["x"]):
            raise _Unsupported("bad reference")
        args = [self.built[a] for a in o["x"]]
        if cls in (sp.Tuple, sp.Indexed, sp.IndexedBase) or cls.__name__ in ("Sum", "Product"):
            return cls(*args)
        return cls(*args, evaluate=False)


def _same(a: Any, b: Any, sp: Any) -> bool:
    """Deep equality; SymPy trees by ``srepr`` and assumptions (``==`` ignores some)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, sp.Basic):
        return (sp.srepr(a) == sp.srepr(b) and a == b
                and getattr(a, "assumptions0", None) == getattr(b, "assumptions0", None))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y, sp) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k], sp) for k in a)
    if dataclasses.is_dataclass(a):
        return all(_same(getattr(a, f.name), getattr(b, f.name), sp)
                   for f in dataclasses.fields(a))
    if isinstance(a, float) and a != a:
        return b != b
    return bool(a == b)


# ---- the cache -----------------------------------------------------------------------------

def _digest(payload: str) -> str:
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def load_file_cached(path: str | Path, symbolic: bool = True) -> list:
    """:func:`~boundcalc.registry.loader.load_file`, through the cache when a valid document
    exists for these bytes, this file name and this code; a miss parses (errors propagate) and
    stores the result. ``symbolic=False``: a hit comes back as plain trees, without SymPy (a
    miss still parses, so its entries hold SymPy trees, which the engine takes as well)."""
    path = Path(path)
    folder = cache_dir()
    if folder is None:
        return _parse(path)
    try:
        # bounded and stat-checked: a FIFO would hang a plain read, /dev/zero never end it
        raw = read_limited(path, MAX_FORMULA_FILE_BYTES, FormulaError, "formula file")
        key = hashlib.sha256(_code_key().encode() + b"\0" + path.name.encode() + b"\0"
                             + raw).hexdigest()
    except Exception:  # noqa: BLE001 - unreadable here: let the loader name the problem
        return _parse(path)
    target = folder / "registry" / f"{key}.json"
    hit = _read(target, key, symbolic)
    if hit is not None:
        return hit
    entries = _parse(path)
    _write(target, key, entries)
    return entries


def _parse(path: Path) -> list:
    from .loader import load_file  # deferred: the parser needs SymPy, a cache hit does not

    return load_file(path)


def _read(target: Path, key: str, symbolic: bool = True) -> list | None:
    try:
        doc = json.loads(target.read_text(encoding="utf-8"))
        if (not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("key") != key
                or doc.get("sha256") != _digest(doc.get("entries", ""))):
            return None
        return (_Codec() if symbolic else _TreeDecoder()).load(doc["entries"])
    except Exception:  # noqa: BLE001 - missing, corrupt or foreign: ignore, parse as usual
        return None


def _write(target: Path, key: str, entries: list) -> None:
    try:
        codec = _Codec()
        payload = codec.dump(entries)
        if not _same(_Codec().load(payload), entries, codec.sp):
            return
        doc = json.dumps({"format": FORMAT, "key": key, "sha256": _digest(payload),
                          "entries": payload})
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(doc)
            os.replace(tmp, target)
        except BaseException:
            os.unlink(tmp)
            raise
    except Exception:  # noqa: BLE001 - read-only home, full disk, unsupported value: no cache
        return
