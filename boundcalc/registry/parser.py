"""Safe parsing of formula expressions: Python's ``ast`` → SymPy, never ``eval``.

Only arithmetic, numbers, declared names, subscripts of declared indexed symbols, comparisons
and calls of a fixed list of functions are accepted. Attribute access, strings, lambdas,
comprehensions, keyword arguments, starred arguments and anything else are refused with an
error that names the construct. Nothing in a formula file is ever executed.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np
import sympy as sp

from ..engine.functions import Cases, GridMin, kl, kl_inv, var_ratio_div
from ..errors import FormulaError, one_line

MAX_EXPRESSION_CHARS = 20_000
MAX_DEPTH = 60
MAX_NUMBER_CHARS = 60
MAX_EXPONENT = 400
# Numeric constants must be doubles: the evaluator works in float64 / signed-log, and a SymPy
# integer such as 10**10**10 would take forever (or all memory) to build.
MAX_CONSTANT = 1.7976931348623157e308
MIN_CONSTANT = 2.2250738585072014e-308
MAX_CONSTANT_DIGITS = 1000
MAX_ROUNDED_LOG = 53 * math.log(2)  # floor/ceiling of a constant: |x| ≤ 2**53
# Tree size (after substituting definitions) of one expression: bounds the work of every
# later pass over it; nested definitions could otherwise double the size at each level.
MAX_TREE_NODES = 50_000

_BINOPS: dict[type, Callable[[sp.Expr, sp.Expr], sp.Expr]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.Pow: lambda a, b: a ** b,
}
_CMPOPS: dict[type, Callable[[sp.Expr, sp.Expr], sp.Basic]] = {
    ast.Lt: sp.Lt, ast.LtE: sp.Le, ast.Gt: sp.Gt, ast.GtE: sp.Ge, ast.Eq: sp.Eq, ast.NotEq: sp.Ne,
}

# Functions a formula may call: name -> (SymPy constructor, allowed argument counts).
FUNCTIONS: dict[str, tuple[Callable[..., sp.Basic], tuple[int, ...]]] = {
    "sqrt": (sp.sqrt, (1,)),
    "log": (sp.log, (1, 2)),
    "exp": (sp.exp, (1,)),
    "Abs": (sp.Abs, (1,)),
    "Min": (sp.Min, tuple(range(2, 33))),
    "Max": (sp.Max, tuple(range(2, 33))),
    # unevaluated: SymPy would otherwise compute floor(exp(10**7)) digit by digit
    "ceiling": (lambda x: sp.ceiling(x, evaluate=False), (1,)),
    "floor": (lambda x: sp.floor(x, evaluate=False), (1,)),
    "kl_inv": (kl_inv, (2,)),
    "kl": (kl, (2,)),
    "var_ratio_div": (var_ratio_div, (2,)),
}
REDUCTIONS = {"Sum": sp.Sum, "Product": sp.Product}
CONSTANTS = {"pi": sp.pi, "E": sp.E}


@dataclass
class Namespace:
    """What names an expression may use.

    ``scalars``: declared scalar symbols; ``indexed``: declared indexed symbols with their
    number of indices; ``indices``: declared index variables; ``definitions``: already parsed
    named sub-expressions (scalar), ``indexed_definitions``: name -> (index symbols, expr);
    ``grid_params``: free parameters that may appear as the second argument of ``GridMin``.
    """

    scalars: Mapping[str, sp.Symbol] = field(default_factory=dict)
    indexed: Mapping[str, tuple[sp.IndexedBase, int]] = field(default_factory=dict)
    indices: Mapping[str, sp.Symbol] = field(default_factory=dict)
    definitions: Mapping[str, sp.Expr] = field(default_factory=dict)
    indexed_definitions: Mapping[str, tuple[tuple[sp.Symbol, ...], sp.Expr]] = field(
        default_factory=dict)
    grid_params: Mapping[str, sp.Symbol] = field(default_factory=dict)


def parse_expression(text: str, ns: Namespace, where: str = "") -> sp.Expr:
    """Parse ``text`` into a SymPy expression using only names from ``ns``.

    Raises :class:`FormulaError` prefixed with ``where`` on anything unsafe or unknown.
    """
    try:
        return _parse(text, ns, where)
    except FormulaError as exc:
        raise FormulaError(one_line(str(exc))) from None


def _parse(text: str, ns: Namespace, where: str) -> sp.Expr:
    if not isinstance(text, str):
        raise FormulaError(f"{where}expression must be a string, got {type(text).__name__}")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise FormulaError(f"{where}expression is longer than {MAX_EXPRESSION_CHARS} characters")
    if "\x00" in text:
        raise FormulaError(f"{where}expression contains a NUL byte")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise FormulaError(f"{where}syntax error in expression at column {exc.offset}: "
                           f"{exc.msg}") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise FormulaError(f"{where}cannot parse expression ({exc.__class__.__name__})") from None
    builder = _Builder(ns, where, text.strip())
    try:
        expr = builder.build(tree.body, 0)
    except RecursionError:
        raise FormulaError(f"{where}expression is nested too deeply") from None
    builder.check_result(expr)
    return expr


class _Builder:
    def __init__(self, ns: Namespace, where: str, source: str = ""):
        self.ns = ns
        self.where = where
        self.source = source
        self.inserted = 0  # tree nodes brought in by substituted definitions
        self._sizes: dict[int, int] = {}

    def _insert(self, name: str, expr: sp.Basic) -> None:
        """Account for substituting definition ``name``; refuse exponential blow-up."""
        self.inserted += _tree_size(expr, self._sizes)
        if self.inserted > MAX_TREE_NODES:
            raise self.fail(f"expression is too large after substituting definitions (at "
                            f"'{name}': more than {MAX_TREE_NODES} nodes)")

    def check_result(self, expr: sp.Basic) -> None:
        """Refuse results that are not finite real numbers or not representable as doubles."""
        if _tree_size(expr, self._sizes) > MAX_TREE_NODES:
            raise self.fail(f"expression has more than {MAX_TREE_NODES} nodes")
        for atom, what in _NOT_FINITE_REAL.items():
            if expr.has(atom):
                raise self.fail(f"expression contains {what}")
        for p in expr.atoms(sp.Pow):
            if p.base.is_Number and p.base.is_negative and p.exp.is_Number \
                    and not p.exp.is_Integer:
                raise self.fail(f"expression contains a fractional power of a negative number "
                                f"({_short(p)})")
        for num in expr.atoms(sp.Rational):
            self._check_constant(num)

    def _check_constant(self, num: sp.Rational) -> None:
        if _digits(num) > MAX_CONSTANT_DIGITS:
            raise self.fail(f"a numeric constant has more than {MAX_CONSTANT_DIGITS} digits")
        mag = abs(num)
        if mag > MAX_CONSTANT or (mag != 0 and mag < MIN_CONSTANT):
            raise self.fail(f"numeric constant {_short(num)} lies outside the range of double "
                            f"precision (about 1e-308 to 1e308)")

    def fail(self, msg: str) -> FormulaError:
        return FormulaError(f"{self.where}{msg}")

    def build(self, node: ast.AST, depth: int) -> sp.Basic:
        if depth > MAX_DEPTH:
            raise self.fail(f"expression is nested deeper than {MAX_DEPTH} levels")
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            raise self.fail(f"{_describe(node)} is not allowed in a formula "
                            f"(only arithmetic, numbers, declared symbols and the functions "
                            f"{', '.join(sorted([*FUNCTIONS, *REDUCTIONS, 'GridMin', 'Piecewise']))})")
        out = method(node, depth + 1)
        self._refuse_undefined(out)
        return out

    def _refuse_undefined(self, out: object) -> None:
        """Refuse an undefined or imaginary constant (1/0, 0/0, sqrt(-1), log(-1)) where it is
        written, before SymPy carries it on: into a comparison or a Max (a TypeError or a
        ValueError) or folded away ((1/0)**0 = 1, Abs(sqrt(-1)) = 1: accepted, and wrong).
        Constants fold as they are built, so the node and its terms or factors suffice."""
        if not isinstance(out, sp.Basic):
            return
        for part in (out, *(out.args if out.is_Add or out.is_Mul else ())):
            if part in _UNDEFINED:
                raise self.fail(f"expression contains {_NOT_FINITE_REAL[part]}")

    # ---- leaves --------------------------------------------------------------------------
    def _Constant(self, node: ast.Constant, depth: int) -> sp.Basic:
        value = node.value
        if isinstance(value, bool):
            return sp.true if value else sp.false
        if isinstance(value, int):
            if len(str(abs(value))) > MAX_NUMBER_CHARS:
                raise self.fail(f"integer literal with more than {MAX_NUMBER_CHARS} digits")
            return sp.Integer(value)
        if isinstance(value, float):
            rep = repr(value)
            if value != value or value in (float("inf"), float("-inf")):
                raise self.fail("non-finite number literal")
            mant, _, exp = rep.partition("e")
            if exp and abs(int(exp)) > MAX_EXPONENT:
                raise self.fail(f"number literal {rep} has an exponent beyond ±{MAX_EXPONENT}")
            if value == 0.0 and node.col_offset is not None and _has_nonzero_digit(node, self):
                raise self.fail("number literal underflows to 0 in double precision")
            if value != 0.0 and abs(value) < MIN_CONSTANT:
                raise self.fail(f"number literal {rep} is below the double-precision range "
                                f"(subnormal)")
            return sp.Rational(rep)
        raise self.fail(f"literal {type(value).__name__} {value!r:.30} is not allowed "
                        f"(only numbers)")

    def _Name(self, node: ast.Name, depth: int) -> sp.Basic:
        name = node.id
        ns = self.ns
        if name in ns.definitions:
            self._insert(name, ns.definitions[name])
            return ns.definitions[name]
        if name in ns.scalars:
            return ns.scalars[name]
        if name in ns.indices:
            return ns.indices[name]
        if name in ns.grid_params:
            return ns.grid_params[name]
        if name in CONSTANTS:
            return CONSTANTS[name]
        if name in ns.indexed or name in ns.indexed_definitions:
            raise self.fail(f"indexed symbol '{name}' must be used with its indices, "
                            f"e.g. {name}[l]")
        if name in FUNCTIONS or name in REDUCTIONS:
            raise self.fail(f"function '{name}' must be called")
        raise self.fail(f"unknown symbol '{name}': declare it under [entry.symbols] "
                        f"(or [entry.indices] / [entry.definitions])")

    # ---- operators -----------------------------------------------------------------------
    def _BinOp(self, node: ast.BinOp, depth: int) -> sp.Basic:
        op = _BINOPS.get(type(node.op))
        if op is None:
            hint = " (use ** for powers)" if isinstance(node.op, ast.BitXor) else ""
            raise self.fail(f"operator {type(node.op).__name__} is not allowed{hint}")
        left = self.build(node.left, depth)
        right = self.build(node.right, depth)
        _require_expr(self, left, right)
        if isinstance(node.op, ast.Pow):
            self._check_power(left, right)
        return op(left, right)

    def _check_power(self, base: sp.Expr, expo: sp.Expr) -> None:
        """Refuse powers whose exact evaluation by SymPy would explode (10**10**10)."""
        if not expo.is_Number:
            return
        if not expo.is_finite:
            raise self.fail("exponent is not finite")
        mag = abs(expo)
        if mag <= 1:
            return
        digits = max([_digits(n) for n in base.atoms(sp.Rational)] + [1])
        if mag * digits > 4 * MAX_CONSTANT_DIGITS:
            raise self.fail(f"power with exponent {_short(expo)} is too large to evaluate")

    def _UnaryOp(self, node: ast.UnaryOp, depth: int) -> sp.Basic:
        operand = self.build(node.operand, depth)
        _require_expr(self, operand)
        if isinstance(node.op, ast.USub):
            return -operand
        if isinstance(node.op, ast.UAdd):
            return operand
        raise self.fail(f"operator {type(node.op).__name__} is not allowed")

    def _Compare(self, node: ast.Compare, depth: int) -> sp.Basic:
        if len(node.ops) != 1:
            raise self.fail("chained comparisons are not allowed; write (a < b) separately")
        op = _CMPOPS.get(type(node.ops[0]))
        if op is None:
            raise self.fail(f"comparison {type(node.ops[0]).__name__} is not allowed")
        left = self.build(node.left, depth)
        right = self.build(node.comparators[0], depth)
        _require_expr(self, left, right)
        try:  # a value SymPy cannot order (refused as written by _refuse_undefined first)
            return op(left, right)
        except (TypeError, ValueError) as exc:
            raise self.fail(f"comparison is undefined ({one_line(str(exc))})") from None

    def _Subscript(self, node: ast.Subscript, depth: int) -> sp.Basic:
        if not isinstance(node.value, ast.Name):
            raise self.fail("only declared indexed symbols can be subscripted, as name[i, j]")
        name = node.value.id
        idx_nodes = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if any(isinstance(n, ast.Slice) for n in idx_nodes):
            raise self.fail(f"slices are not allowed in '{name}[...]'")
        idx = [self.build(n, depth) for n in idx_nodes]
        _require_expr(self, *idx)
        for i in idx:
            if i.is_Number and not i.is_Integer:
                raise self.fail(f"index of '{name}' must be an integer, got {_short(i)}")
            bad = [s for s in i.free_symbols if s.name not in self.ns.indices
                   and s.name not in self.ns.scalars]
            if bad:
                raise self.fail(f"index of '{name}' uses '{bad[0]}', which is not an index "
                                f"variable or size")
        if name in self.ns.indexed:
            base, rank = self.ns.indexed[name]
            if len(idx) != rank:
                raise self.fail(f"'{name}' is declared with {rank} indices, used with {len(idx)}")
            return base[tuple(idx)]
        if name in self.ns.indexed_definitions:
            vars_, expr = self.ns.indexed_definitions[name]
            if len(idx) != len(vars_):
                raise self.fail(f"definition '{name}' takes {len(vars_)} indices, "
                                f"used with {len(idx)}")
            self._insert(name, expr)
            return expr.xreplace(dict(zip(vars_, idx)))
        raise self.fail(f"'{name}' is not a declared indexed symbol")

    def _Call(self, node: ast.Call, depth: int) -> sp.Basic:
        if not isinstance(node.func, ast.Name):
            raise self.fail(f"call of {_describe(node.func)} is not allowed; only the listed "
                            f"functions can be called by name")
        name = node.func.id
        if node.keywords:
            raise self.fail(f"keyword arguments are not allowed (in call of '{name}')")
        if any(isinstance(a, ast.Starred) for a in node.args):
            raise self.fail(f"starred arguments are not allowed (in call of '{name}')")
        if name in REDUCTIONS:
            return self._reduction(name, node, depth)
        if name == "GridMin":
            return self._gridmin(node, depth)
        if name == "Piecewise":
            return self._piecewise(node, depth)
        if name not in FUNCTIONS:
            raise self.fail(f"function '{name}' is not allowed; allowed: "
                            f"{', '.join(sorted([*FUNCTIONS, *REDUCTIONS, 'GridMin', 'Piecewise']))}")
        ctor, counts = FUNCTIONS[name]
        if len(node.args) not in counts:
            want = (" or ".join(map(str, counts)) if len(counts) <= 2
                    else f"{counts[0]} to {counts[-1]}")
            raise self.fail(f"'{name}' takes {want} arguments, got {len(node.args)}")
        args = [self.build(a, depth) for a in node.args]
        _require_expr(self, *args)
        if name == "log" and len(args) == 2:
            b = args[1]
            if b.is_Number and (b <= 0 or b == 1):
                raise self.fail(f"log base must be positive and not 1, got {_short(b)}")
        if name in ("floor", "ceiling") and not args[0].free_symbols:
            self._check_rounded_constant(name, args[0])
        try:  # e.g. Max of values SymPy cannot order
            return ctor(*args)
        except (TypeError, ValueError) as exc:
            raise self.fail(f"{name}() is undefined for these arguments ({one_line(str(exc))})"
                            ) from None

    def _check_rounded_constant(self, name: str, arg: sp.Expr) -> None:
        """Refuse floor/ceiling of a constant above 2**53 (beyond the doubles' whole numbers,
        so also beyond the double range): SymPy computes its
        integer part digit by digit whenever it prints or compares it (floor(exp(10**7)) has
        4 million digits), so it would hang ``show``/``latex`` long after the parse. The size
        is found in signed-log space by the numeric engine, which never builds the number."""
        from ..engine.compile import Compiled, Context

        try:
            lv = Compiled({}, {}, set()).compile(arg)(Context({}, {}, {}))
            log_mag = float(np.asarray(lv.a).reshape(-1)[0])
        except Exception:  # noqa: BLE001 - anything the engine cannot size is refused
            log_mag = math.nan
        if not log_mag <= MAX_ROUNDED_LOG:
            size = (f"about 1e{log_mag / math.log(10):.0f}" if math.isfinite(log_mag)
                    else "beyond any float")
            raise self.fail(f"{name}() of a constant {size}: above 2**53 every double is already "
                            f"a whole number, so {name}() changes nothing there and only makes "
                            f"SymPy compute every digit; write the constant without {name}()")

    def _reduction(self, name: str, node: ast.Call, depth: int) -> sp.Basic:
        if len(node.args) < 2:
            raise self.fail(f"{name}(expr, (i, start, end), ...) needs at least one limit")
        body = self.build(node.args[0], depth)
        _require_expr(self, body)
        limits = []
        for lim in node.args[1:]:
            if not (isinstance(lim, ast.Tuple) and len(lim.elts) == 3
                    and isinstance(lim.elts[0], ast.Name)):
                raise self.fail(f"{name} limits must be (index, start, end)")
            var = lim.elts[0].id
            if var not in self.ns.indices:
                raise self.fail(f"{name} index '{var}' is not declared under [entry.indices]")
            lo = self.build(lim.elts[1], depth)
            hi = self.build(lim.elts[2], depth)
            _require_expr(self, lo, hi)
            limits.append((self.ns.indices[var], lo, hi))
        return REDUCTIONS[name](body, *limits)

    def _gridmin(self, node: ast.Call, depth: int) -> sp.Basic:
        if len(node.args) != 2 or not isinstance(node.args[1], ast.Name):
            raise self.fail("GridMin(expr, p) takes an expression and a grid parameter name")
        pname = node.args[1].id
        if pname not in self.ns.grid_params:
            raise self.fail(f"GridMin parameter '{pname}' must be a free parameter declared "
                            f"with choice = \"grid\"")
        body = self.build(node.args[0], depth)
        _require_expr(self, body)
        return GridMin(body, self.ns.grid_params[pname])

    def _piecewise(self, node: ast.Call, depth: int) -> sp.Basic:
        pairs = []
        for arg in node.args:
            if not (isinstance(arg, ast.Tuple) and len(arg.elts) == 2):
                raise self.fail("Piecewise takes (value, condition) pairs")
            val = self.build(arg.elts[0], depth)
            cond = self.build(arg.elts[1], depth)
            _require_expr(self, val)
            if not isinstance(cond, (sp.core.relational.Relational, sp.logic.boolalg.BooleanAtom)):
                raise self.fail("Piecewise condition must be a comparison or True")
            pairs.append((val, cond))
        if not pairs or pairs[-1][1] is not sp.true:
            raise self.fail("Piecewise must end with a (value, True) pair")
        flat = [x for v, c in pairs[:-1] for x in (v, c)]
        return Cases(*flat, pairs[-1][0])

    def _Tuple(self, node: ast.Tuple, depth: int) -> sp.Basic:
        raise self.fail("a tuple is only allowed as a Sum/Product limit or a Piecewise pair")


def _tree_size(expr: sp.Basic, memo: dict[int, int]) -> int:
    """Number of nodes of ``expr`` as a tree, computed over the shared DAG (linear time)."""
    stack = [(expr, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if key in memo:
            continue
        if done:
            memo[key] = 1 + sum(memo[id(a)] for a in node.args)
        else:
            stack.append((node, True))
            stack.extend((a, False) for a in node.args if id(a) not in memo)
    return memo[id(expr)]


def _digits(num: sp.Rational) -> int:
    """Decimal digits of the larger of numerator and denominator (without str())."""
    p, q = int(num.p), int(num.q)
    return int(max(abs(p).bit_length(), q.bit_length()) * 0.30103) + 1


# what an accepted expression may not contain, in the words of the refusal
_NOT_FINITE_REAL = {
    sp.zoo: "an undefined constant: a division by zero or log(0)",
    sp.nan: "an undefined constant (0/0)",
    sp.oo: "an infinite constant", -sp.oo: "an infinite constant",
    sp.I: "an imaginary constant (square root or log of a negative number)"}
_UNDEFINED = (sp.zoo, sp.nan, sp.I)


def _short(x: sp.Basic) -> str:
    if isinstance(x, sp.Rational) and x != 0 and _digits(x) > 30:
        return f"about {'-' if x < 0 else ''}1e{math.log10(abs(int(x.p))) - math.log10(int(x.q)):.0f}"
    text = str(x)
    return text if len(text) <= 40 else text[:37] + "..."


def _has_nonzero_digit(node: ast.Constant, builder: "_Builder") -> bool:
    """Whether a float literal that parsed to 0.0 was written with a nonzero mantissa."""
    seg = ast.get_source_segment(builder.source, node) if builder.source else None
    if seg is None:
        return False
    mant = seg.lower().split("e")[0]
    return any(c in "123456789" for c in mant)


def _require_expr(builder: _Builder, *items: sp.Basic) -> None:
    for item in items:
        if not isinstance(item, sp.Expr):
            raise builder.fail("a comparison or boolean cannot be used as a number")


def _describe(node: ast.AST) -> str:
    kinds = {
        ast.Attribute: "attribute access",
        ast.Lambda: "a lambda",
        ast.ListComp: "a comprehension", ast.GeneratorExp: "a comprehension",
        ast.SetComp: "a comprehension", ast.DictComp: "a comprehension",
        ast.JoinedStr: "an f-string", ast.List: "a list", ast.Dict: "a dict", ast.Set: "a set",
        ast.BoolOp: "and/or", ast.IfExp: "an if-expression", ast.NamedExpr: "':='",
        ast.Await: "await", ast.Yield: "yield", ast.Starred: "a starred expression",
    }
    return kinds.get(type(node), type(node).__name__)
