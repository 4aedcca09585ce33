"""Formulas as plain data: the expression trees the numeric engine walks.

SymPy is the symbolic front end (parsing, canonical forms, derivatives, LaTeX); the engine
(:mod:`.compile`, :mod:`.interval`) evaluates :class:`Node` trees, which need no SymPy at all.
A SymPy expression becomes a tree with :func:`as_tree` (memoised, loss-free for everything the
engine evaluates); the registry cache stores trees, so ``boundcalc evaluate`` on cached
formula files never imports SymPy (about 0.3 s of every start).

A node is an operator name and its arguments, mirroring SymPy's own layout so that the two
read alike: ``op`` is SymPy's class name (``Add``, ``Mul``, ``Pow``, ``Sum``, ``Indexed``,
``StrictLessThan``, ``GridMin``, …) except for atoms, which are ``Symbol`` (``value`` is the
name), ``Integer`` (an ``int``), ``Rational`` (``(p, q)``), ``Float`` (its exact decimal text)
and the constants ``Pi``, ``E``, ``Inf``, ``NegInf``, ``NaN``, ``ComplexInf``, ``True`` and
``False``.
"""

from __future__ import annotations

import math
from typing import Any, Iterator

NUMBERS = ("Integer", "Rational", "Float", "Pi", "E", "Inf", "NegInf", "NaN")
RELATIONS = ("StrictLessThan", "LessThan", "StrictGreaterThan", "GreaterThan", "Equality",
             "Unequality")
_CONSTANT_VALUES = {"Pi": math.pi, "E": math.e, "Inf": math.inf, "NegInf": -math.inf,
                    "NaN": math.nan}


class Node:
    """One immutable node: ``op``, ``args`` (child nodes) and, for atoms, ``value``.

    Equality and hashing are structural, like SymPy's, so equal sub-trees share compiled code
    and memoised values.
    """

    __slots__ = ("op", "args", "value", "_hash")

    def __init__(self, op: str, args: tuple["Node", ...] = (), value: Any = None):
        self.op = op
        self.args = args
        self.value = value
        self._hash = hash((op, args, value))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return (isinstance(other, Node) and self._hash == other._hash and self.op == other.op
                and self.value == other.value and self.args == other.args)

    def __repr__(self) -> str:
        if not self.args:
            return f"Node({self.op!r}, value={self.value!r})"
        return f"Node({self.op!r}, {len(self.args)} args)"

    def __str__(self) -> str:
        return to_text(self)

    # ---- SymPy-like views used by the engine ------------------------------------------------
    @property
    def name(self) -> str:
        """A Symbol's name (an IndexedBase's label)."""
        if self.op == "Symbol":
            return self.value
        if self.op == "IndexedBase":
            return self.args[0].name
        raise AttributeError(f"a {self.op} node has no name")

    @property
    def is_number(self) -> bool:
        """A number or a numeric constant (what ``float()`` accepts)."""
        return self.op in NUMBERS

    def __float__(self) -> float:
        if self.op == "Integer":
            return float(self.value)
        if self.op == "Rational":
            return self.value[0] / self.value[1]
        if self.op == "Float":
            return float(self.value)
        if self.op in _CONSTANT_VALUES:
            return _CONSTANT_VALUES[self.op]
        raise TypeError(f"{self} is not a number")

    def atoms(self, op: str) -> set["Node"]:
        """Every sub-tree (itself included) whose operator is ``op``."""
        return {n for n in walk(self) if n.op == op}


def symbol(name: str) -> Node:
    return Node("Symbol", (), name)


def integer(k: int) -> Node:
    return Node("Integer", (), int(k))


ONE = integer(1)
MINUS_ONE = integer(-1)
HALF = Node("Rational", (), (1, 2))
TRUE = Node("True")
FALSE = Node("False")


def walk(root: Node) -> Iterator[Node]:
    """Each distinct sub-tree once (pre-order, iterative: deep trees do not recurse)."""
    seen: set[Node] = set()
    stack = [root]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        yield n
        stack.extend(reversed(n.args))


# ---- SymPy-like accessors by position (SymPy's own argument layout) ---------------------------

def indexed_name(e: Node) -> str:
    """``x`` of ``x[i, j]`` (args: the IndexedBase, then the indices)."""
    return e.args[0].name


def indices(e: Node) -> tuple[Node, ...]:
    return e.args[1:]


def limits(e: Node) -> list[tuple[Node, Node, Node]]:
    """``Sum``/``Product`` limits as (variable, lower, upper) triples."""
    return [tuple(lim.args) for lim in e.args[1:]]  # type: ignore[misc]


def body(e: Node) -> Node:
    """The summand of a ``Sum``/``Product`` (or the minimised body of a ``GridMin``)."""
    return e.args[0]


def pairs(e: Node) -> list[tuple[Node, Node]]:
    """(value, condition) pairs of a ``Piecewise`` or of ``Cases(v1, c1, …, v_else)``."""
    if e.op == "Piecewise":
        return [(p.args[0], p.args[1]) for p in e.args]
    a = e.args
    return [(a[i], a[i + 1]) for i in range(0, len(a) - 1, 2)] + [(a[-1], TRUE)]


def one_minus_exp_arg(e: Node) -> Node | None:
    """``y`` when ``e`` is ``1 - exp(y)`` (SymPy's ``Add(1, Mul(-1, exp(y)))``), else None."""
    if e.op != "Add" or len(e.args) != 2 or ONE not in e.args:
        return None
    other = e.args[0] if e.args[1] == ONE else e.args[1]
    if (other.op == "Mul" and len(other.args) == 2 and other.args[0] == MINUS_ONE
            and other.args[1].op == "exp"):
        return other.args[1].args[0]
    return None


# ---- conversion from SymPy ---------------------------------------------------------------------

_FROM_SYMPY: dict[tuple, Node] = {}


def as_tree(e: Any) -> Node:
    """The engine's tree for a SymPy expression (memoised); a :class:`Node` is returned as is."""
    if isinstance(e, Node):
        return e
    if isinstance(e, bool):
        return TRUE if e else FALSE
    key = (type(e), e)  # SymPy may call a Float equal to an Integer
    hit = _FROM_SYMPY.get(key)
    if hit is None:
        hit = _convert(e)
        if len(_FROM_SYMPY) > 100_000:  # formulas are few; derivatives in a long search are not
            _FROM_SYMPY.clear()
        _FROM_SYMPY[key] = hit
    return hit


def _convert(e: Any) -> Node:
    import sympy as sp

    if isinstance(e, sp.Symbol):  # Dummy too
        return symbol(e.name)
    if e.is_Integer:
        return integer(int(e))
    if e.is_Rational:
        return Node("Rational", (), (int(e.p), int(e.q)))
    if e.is_Float:
        return Node("Float", (), str(e))  # the decimal digits it was written with
    named = {sp.S.Pi: "Pi", sp.S.Exp1: "E", sp.S.Infinity: "Inf", sp.S.NegativeInfinity: "NegInf",
             sp.S.NaN: "NaN", sp.S.ComplexInfinity: "ComplexInf", sp.S.true: "True",
             sp.S.false: "False"}
    for const, op in named.items():
        if e is const:
            return Node(op)
    return Node(type(e).__name__, tuple(as_tree(a) for a in e.args))


# ---- text --------------------------------------------------------------------------------------

_INFIX = {"Add": " + ", "Mul": "*", "StrictLessThan": " < ", "LessThan": " <= ",
          "StrictGreaterThan": " > ", "GreaterThan": " >= ", "Equality": " == ",
          "Unequality": " != ", "And": " & ", "Or": " | "}


def to_text(e: Node) -> str:
    """A readable one-line form (for messages; LaTeX and ``show`` use SymPy's printers)."""
    op = e.op
    if op == "Symbol":
        return e.value
    if op == "Integer":
        return str(e.value)
    if op == "Rational":
        return f"{e.value[0]}/{e.value[1]}"
    if op == "Float":
        return e.value
    if not e.args:
        return {"Pi": "pi", "E": "E", "Inf": "oo", "NegInf": "-oo", "ComplexInf": "zoo",
                "True": "True", "False": "False"}.get(op, op)
    if op == "IndexedBase":
        return e.name
    if op == "Indexed":
        return f"{indexed_name(e)}[{', '.join(to_text(i) for i in indices(e))}]"
    if op == "Pow":
        return f"{_wrapped(e.args[0])}**{_wrapped(e.args[1])}"
    if op in _INFIX:
        return _INFIX[op].join(_wrapped(a) if op != "Add" else to_text(a) for a in e.args)
    return f"{op}({', '.join(to_text(a) for a in e.args)})"


def _wrapped(e: Node) -> str:
    text = to_text(e)
    return f"({text})" if e.op in ("Add", "Mul", "Pow") or text.startswith("-") else text


def sympy_text(node: Node) -> str:
    """A term as SymPy would print it (``log(2*sqrt(n)/delta)``: square roots, reciprocals and
    quotients written out), from the plain tree, so that printing never needs SymPy; shapes
    other than symbols, numbers, logs, sums, products and powers fall back to :func:`to_text`."""
    op, args = node.op, node.args
    if op in ("Symbol", "Integer", "Rational"):
        return to_text(node)
    if op == "log" and len(args) == 1:
        return f"log({sympy_text(args[0])})"
    if op == "Pow" and args[1].op == "Rational" and args[1].value == (1, 2):
        return f"sqrt({sympy_text(args[0])})"
    if op == "Add":
        return " + ".join(sympy_text(a) for a in args)
    if op == "Pow" and args[1].op == "Integer" and args[1].value == -1:
        return f"1/{sympy_text(args[0])}" if args[0].op in ("Symbol", "Integer") \
            else f"1/({sympy_text(args[0])})"
    if op == "Mul":
        inv = [a.args[0] for a in args if a.op == "Pow" and a.args[1].op == "Integer"
               and a.args[1].value == -1]
        num = [a for a in args if not (a.op == "Pow" and a.args[0] in inv
                                       and a.args[1].op == "Integer")]

        def factor(a: Node) -> str:
            text = sympy_text(a)
            return f"({text})" if a.op == "Add" else text

        top = "*".join(factor(a) for a in num) or "1"
        if not inv:
            return top
        bottom = "*".join(factor(a) for a in inv)
        return f"{top}/{bottom if len(inv) == 1 else '(' + bottom + ')'}"
    return to_text(node)
