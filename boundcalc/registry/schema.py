"""What a registry entry is: kinds, roles, domains, symbols, free parameters, assumptions."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Formula = Any
"""A formula as data: a SymPy expression after parsing, or the engine's
:class:`~boundcalc.engine.tree.Node` when a registry is loaded from the cache without SymPy
(``load_registry(symbolic=False)``, what ``boundcalc evaluate`` does). The engine accepts both
(:func:`~boundcalc.engine.tree.as_tree`)."""

KINDS = ("certified", "conditional", "rate", "proxy")
"""What an entry's number promises.

- ``certified``: every constant known; under the listed assumptions a valid upper bound with
  probability ≥ 1 − δ.
- ``conditional``: an upper bound only if its named ``conditions`` hold, which boundcalc cannot
  check and the source does not establish (a dropped remainder of unknown sign, an informal
  step, an unverified transcription). Never called certified, never compared with 1.
- ``rate``: O(·) with its hidden constant as an explicit symbol.
- ``proxy``: a complexity measure, not a bound.
"""
OUTPUTS = ("risk", "divergence", "count", "probability", "loss")
"""What an entry's value is. Only a ``risk`` (a loss in [0, 1]) is compared with 1 (vacuity)."""
ROLES = ("measured", "data_size", "confidence", "hidden_constant", "constant", "free", "size")
CHOICES = ("simultaneous", "grid", "prior", "fixed")
"""How a free parameter may be chosen.

- ``simultaneous``: the theorem holds for all values at once; optimise freely, no cost.
- ``grid``: a declared finite grid; choosing a point after seeing the data costs ln|grid|
  (uniform union bound), charged to δ.
- ``prior``: a countable grid with weights (Dziugaite & Roy: σ_j² = c·e^{−j/b}, δ_j = 6δ/(π²j²));
  the cost ln(π²j²/6) of the chosen point is charged to δ.
- ``fixed``: must be set before seeing the data; never optimised.
"""


@dataclass(frozen=True)
class Domain:
    """An interval of the real line, optionally restricted to integers."""

    lo: float
    hi: float
    lo_open: bool
    hi_open: bool
    integer: bool = False

    _PATTERN = re.compile(r"^\s*([\[(])\s*([^,]+?)\s*,\s*([^\])]+?)\s*([\])])\s*$")

    @classmethod
    def parse(cls, text: str, integer: bool = False) -> "Domain":
        """Parse ``"(0, 1)"``, ``"[0, inf)"``, ``"[8, inf)"`` and the like."""
        m = cls._PATTERN.match(text or "")
        if not m:
            raise ValueError(f"domain {text!r} is not an interval like \"(0, 1)\" or \"[0, inf)\"")
        lo, hi = (_num(m.group(2)), _num(m.group(3)))
        if lo > hi:
            raise ValueError(f"domain {text!r} is empty")
        return cls(lo, hi, m.group(1) == "(", m.group(4) == ")", integer)

    def contains(self, x: np.ndarray) -> np.ndarray:
        """Element-wise membership (NaN is never a member)."""
        x = np.asarray(x, dtype=np.float64)
        ok = ~np.isnan(x)
        ok &= (x > self.lo) if self.lo_open else (x >= self.lo)
        ok &= (x < self.hi) if self.hi_open else (x <= self.hi)
        if self.integer:
            ok &= np.isfinite(x) & (np.floor(x) == x)
        return ok

    def text(self) -> str:
        f = lambda v: "inf" if v == math.inf else "-inf" if v == -math.inf else f"{v:g}"  # noqa: E731
        core = f"{'(' if self.lo_open else '['}{f(self.lo)}, {f(self.hi)}{')' if self.hi_open else ']'}"
        return ("integer " if self.integer else "") + core


def _num(text: str) -> float:
    t = text.strip().lower()
    if t in ("inf", "+inf", "oo", "infinity"):
        return math.inf
    if t in ("-inf", "-oo", "-infinity"):
        return -math.inf
    return float(t)


@dataclass(frozen=True)
class Written:
    """A formula and the text it was written as in its formula file, kept together: the engine
    evaluates ``expr``; tables, ``show --json`` and LaTeX quote ``text``. A definition's body,
    an assumption's check and a parameter's closed-form optimum are each one of these."""

    text: str
    expr: Formula


@dataclass(kw_only=True)
class Declared:
    """What a formula declares of every name, symbol or free parameter: its name, its valid
    values, the index variables it carries (none for a scalar), its default and its SymPy
    symbol (a Symbol, or an IndexedBase when indexed)."""

    name: str
    domain: Domain
    indices: tuple[str, ...] = ()
    default: float | None = None
    symbol: Any = None

    @property
    def indexed(self) -> bool:
        return bool(self.indices)


@dataclass(kw_only=True)
class SymbolSpec(Declared):
    """A declared symbol: what it means, where its value comes from, which values are valid."""

    meaning: str
    role: str
    stat: str | None = None
    latex: str | None = None


@dataclass
class GridSpec:
    """A finite grid: explicit values, ``range`` (start, stop, step) or ``linspace``/``geomspace``."""

    kind: str
    args: tuple[Formula, ...]

    def values(self, evaluate_scalar) -> np.ndarray:
        """The grid points, given a function that evaluates a scalar formula."""
        nums = [float(evaluate_scalar(a)) for a in self.args]
        if not all(math.isfinite(x) for x in nums):
            raise ValueError("grid arguments must be finite numbers")
        if self.kind in ("linspace", "geomspace") and not 1 <= nums[2] <= 100_000:
            raise ValueError(f"grid has {nums[2]:g} points; 1 to 100000 are allowed")
        if self.kind == "values":
            pts = np.array(nums)
        elif self.kind == "range":
            start, stop, step = nums
            if step <= 0:
                raise ValueError(f"grid step must be positive, got {step}")
            span = (stop - start) / step
            if not span < 100_000:  # also an overflow to inf
                raise ValueError(f"grid range has {span:.3g} points; at most 100000 are allowed")
            count = int(math.floor(span + 1e-9)) + 1
            pts = start + step * np.arange(count)
        elif self.kind == "linspace":
            start, stop, num = nums
            pts = np.linspace(start, stop, int(num))
        elif self.kind == "geomspace":
            start, stop, num = nums
            pts = np.geomspace(start, stop, int(num))
        else:  # pragma: no cover - validated at load time
            raise ValueError(self.kind)
        if pts.size == 0 or not np.all(np.isfinite(pts)):
            raise ValueError("grid is empty or has non-finite points")
        return pts


LN_PI2_6 = math.log(math.pi ** 2 / 6.0)  # ln(π²/6) = ln Σ_j 1/j², the Dziugaite–Roy normaliser


@dataclass
class PriorSpec:
    """Dziugaite & Roy grid: value² = c·exp(−j/b) (or value = c·exp(−j/b)), j = 1, 2, …"""

    c: float
    b: float
    squared: bool = True
    j_max: int = 100_000

    def value(self, j: np.ndarray | int) -> np.ndarray:
        log_v = math.log(self.c) - np.asarray(j, dtype=np.float64) / self.b
        return np.exp(0.5 * log_v) if self.squared else np.exp(log_v)  # no underflow of σ²

    def index_of(self, value: float) -> int:
        """Nearest grid index (in log space) to ``value``; clipped to [1, j_max]."""
        log_v = (2.0 if self.squared else 1.0) * math.log(value)  # no underflow of value²
        j = round(-self.b * (log_v - math.log(self.c)))
        return int(min(max(j, 1), self.j_max))

    COST_TEXT = "2 ln j + ln(π²/6)"  # the cost as printed in messages and method stories

    @staticmethod
    def cost(j: Any) -> Any:
        """ln(1/w_j) = 2 ln j + ln(π²/6), with w_j = 6/(π² j²): the confidence spent on grid
        point j (with numpy's log for numpy values and arrays of j, elementwise)."""
        if isinstance(j, (np.ndarray, np.generic)):
            return 2.0 * np.log(j) + LN_PI2_6
        return 2.0 * math.log(j) + LN_PI2_6


@dataclass(kw_only=True)
class ParameterSpec(Declared):
    """A free parameter and the rule by which it may be chosen (see :data:`CHOICES`)."""

    choice: str
    grid: GridSpec | None = None
    prior: PriorSpec | None = None
    optimum: Written | None = None  # ``closed_form = "..."`` in the file
    bounds: tuple[float, float] | None = None
    log_scale: bool = False
    note: str = ""
    optimize: bool = True  # False: the value must be given (e.g. a margin that an input depends on)
    measured: bool = False  # True: chosen only among the points where its curves were measured

    @property
    def closed_form(self) -> Formula | None:
        """The closed-form optimum's formula (what the engine evaluates), or None: where a
        ``simultaneous`` parameter is taken, and where a grid/prior search starts."""
        return None if self.optimum is None else self.optimum.expr


@dataclass
class Assumption:
    """An assumption in words, optionally with a comparison checked against the values."""

    text: str
    check: Written | None = None


@dataclass(frozen=True, kw_only=True)
class Definition(Written):
    """A named sub-expression, optionally indexed (e.g. the depth factor alpha[l])."""

    name: str
    indices: tuple[str, ...] = ()
    index_symbols: tuple[Formula, ...] = ()


@dataclass
class Entry:
    """One bound (or rate, or proxy) as declared in a formula file."""

    id: str
    title: str
    family: str
    kind: str
    source: str
    provenance: str
    expression_text: str
    expression: Formula
    symbols: dict[str, SymbolSpec]
    parameters: dict[str, ParameterSpec]
    indices: dict[str, str]  # index variable -> size symbol name
    index_symbols: dict[str, Formula]
    definitions: dict[str, Definition]
    terms: list[str]
    assumptions: list[Assumption]
    file: str
    variant: str | None = None
    description: str = ""
    notes: list[str] = field(default_factory=list)
    estimated_inputs_ok: tuple[str, ...] = ()
    output: str = "risk"
    conditions: list[str] = field(default_factory=list)  # kind 'conditional' only
    # where a certified value may lie; outside it the value is an error, never a bound
    output_range: Domain = field(default_factory=lambda: Domain.parse("[0, inf)"))

    def required_stats(self) -> list[str]:
        """Stats-file paths this entry binds to (``matrix.QK.spectral``, ``scalars.n``, ...)."""
        return sorted({s.stat for s in self.symbols.values() if s.stat})

    def summary(self) -> dict[str, Any]:
        """The fields of the ``list --json`` contract."""
        return {
            "id": self.id, "title": self.title, "family": self.family, "kind": self.kind,
            "source": self.source, "provenance": self.provenance, "variant": self.variant,
            "output": self.output, "file": self.file, "conditions": list(self.conditions),
        }


def confidence_symbol(entry: Entry) -> str | None:
    """The δ to which union-bound costs are charged: ``delta`` if declared, else the first
    symbol of role ``confidence``; None for an entry without one."""
    conf = [s.name for s in entry.symbols.values() if s.role == "confidence"]
    if "delta" in conf:
        return "delta"
    return conf[0] if conf else None
