"""The outcome of evaluating or optimizing an entry, and its JSON form."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .rounding import bound_text


@dataclass
class Result:
    """The outcome of evaluating (or optimizing) one entry. See :meth:`to_json`."""

    id: str
    title: str
    family: str
    kind: str
    variant: str | None
    value: float
    log10_value: float
    estimated: bool
    estimated_inputs: list[str]
    parameters: dict[str, Any]
    parameter_choice: dict[str, str]
    terms: dict[str, float]
    delta: float | None
    delta_effective: float | None
    union_bound_cost: dict[str, float]
    assumptions: list[dict[str, Any]]
    hidden_constants: dict[str, float]
    inputs: dict[str, Any]
    source: str = ""
    provenance: str = ""
    method: str = "evaluate"
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    output: str = "risk"
    conditions: list[str] = field(default_factory=list)
    # what the number is read against (see boundcalc.floor): the zero-complexity floor and
    # breakdown, the trivial predictor's error (0-1 risks of a classifier), a held-out error
    floor: dict[str, Any] | None = None
    trivial: dict[str, Any] | None = None
    test_error: float | None = None
    # for a certified compression row, the model its code decodes to (boundcalc.which_model)
    certifies: dict[str, Any] | None = None
    # for every certified row on a stats file, the predictor it is about (boundcalc.claim)
    predictor: dict[str, Any] | None = None
    unit: str | None = None  # of a value that is not a probability ('bits per token')

    @property
    def about_text(self) -> str | None:
        """What the row certifies, in words ("certifies …"): the compression or posterior
        record's (``certifies``), else the predictor's (``predictor``); None without either."""
        found = self.certifies or self.predictor
        return found["text"] if found else None

    @property
    def failed_assumptions(self) -> list[str]:
        return [a["text"] for a in self.assumptions if a["status"] == "fails"]

    @property
    def condition_names(self) -> list[str]:
        """Short names of the conditions (the text before the first ': '), for tables."""
        return [c.split(": ", 1)[0] for c in self.conditions]

    @property
    def is_bound(self) -> bool:
        """True only for a certified entry with no estimated input, no failed assumption and a
        total δ (the sum of every confidence it spends) below 1."""
        return (self.kind == "certified" and not self.estimated and not self.failed_assumptions
                and not self.delta_exhausted)

    @property
    def delta_exhausted(self) -> bool:
        """The confidences spent add up to 1 or more: the statement holds with probability
        ≥ 1 − δ ≤ 0, which says nothing."""
        return self.delta is not None and not self.delta < 1.0

    @property
    def label(self) -> str:
        """How this number may be called: 'certified bound', 'conditional ...', 'estimated',
        'rate', 'proxy'. A conditional number always carries its condition(s)."""
        head, rest = self._label_parts()
        return head + rest

    @property
    def label_head(self) -> str:
        """The label's first words, for narrow tables: 'certified bound', 'estimated',
        'conditional', 'not a bound', 'rate', 'proxy', 'certified divergence', ..."""
        return self._label_parts()[0]

    def _label_parts(self) -> tuple[str, str]:
        if self.kind == "proxy":
            return "proxy", " (complexity measure, not a bound)"
        if self.kind == "rate":
            consts = ", ".join(f"{k}={v:g}" for k, v in self.hidden_constants.items())
            return "rate", f" (O(·) with hidden constant {consts})"
        if self.delta_exhausted:
            return "not a bound", f": total δ = {self.delta:g} ≥ 1 (no guarantee)"
        if self.failed_assumptions:
            return "not a bound", ": an assumption fails"
        estimated = " (uses a stochastic estimate without its confidence term)"
        if self.kind == "conditional":
            what = "an upper bound" if self.output in ("risk", "loss") else f"a valid {self.output}"
            condition = f"conditional: {what} only if {'; and '.join(self.conditions)}"
            if self.estimated:
                return "estimated", f"{estimated} and {condition}"
            head, _, rest = condition.partition(":")
            return head, ":" + rest
        if self.estimated:
            return "estimated", estimated
        if self.output == "loss":
            return ("certified bound on an expected loss",
                    " (in its own unit; not compared with 1)")
        if self.output != "risk":
            return f"certified {self.output}", " (exact under the assumptions; not a risk bound)"
        return "certified bound", ""

    @property
    def vacuous(self) -> bool | None:
        """For a certified bound on a [0,1] risk: is it ≥ 1, or (for a 0-1 risk with a known
        trivial predictor) ≥ the trivial predictor's error? None for everything else."""
        if not (self.is_bound and self.output == "risk"):
            return None
        return self.value >= self.vacuous_threshold

    @property
    def vacuous_threshold(self) -> float:
        """What a certified risk bound must stay below to say anything: 1, or the trivial
        predictor's error where it is known."""
        return min(1.0, self.trivial["error"]) if self.trivial else 1.0

    @property
    def vacuous_text(self) -> str:
        """'yes (≥ 0.45, the error of always answering the majority class of S)', 'no (< 1)',
        or '—'."""
        v = self.vacuous
        if v is None:
            return "—"
        t = self.vacuous_threshold
        against = (f"{t:.3g}, the error of {self.trivial['against']}" if self.trivial and t < 1
                   else "1")
        return f"yes (≥ {against})" if v else f"no (< {against})"

    @property
    def gap(self) -> float | None:
        """The value minus the held-out test error, when one was given."""
        if self.test_error is None or not math.isfinite(self.value):
            return None
        return self.value - self.test_error

    @property
    def value_side(self) -> str:
        """How the value is rounded when shown (:func:`boundcalc.rounding.bound_text`):
        'upper' (rounded up) for a certified or conditional entry, whose value claims to be ≥
        what it bounds (a risk, a loss, a divergence), whether or not it is a bound here;
        'nearest' for a rate or a proxy, which bound nothing."""
        return "upper" if self.kind in ("certified", "conditional") else "nearest"

    def value_text(self, digits: int = 6) -> str:
        """The value in at most ``digits`` significant digits, rounded on :attr:`value_side`:
        a certified or conditional value up (the text is never below the value), a rate or a
        proxy to nearest (``%g``). Beyond the float range, from ``log10_value``: mantissa
        (at most 5 digits) ``e+`` exponent, the mantissa raised by 1e-12 relative (above the
        error of the nearest-double log10 and of 10**frac) before it is rounded the same way.
        Non-finite values without a log10 print as Python prints them."""
        side = self.value_side
        if math.isfinite(self.value):
            return bound_text(self.value, digits, side)
        if math.isfinite(self.log10_value):
            exp = math.floor(self.log10_value)
            mant = 10 ** (self.log10_value - exp)
            text = bound_text(mant * (1 + 1e-12) if side == "upper" else mant,
                              min(digits, 5), side)
            if float(text) >= 10:  # 9.99996 rounded up: the next power of ten
                text, exp = "1", exp + 1
            return f"{text}e+{exp}"
        return str(self.value)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "title": self.title, "family": self.family, "kind": self.kind,
            "variant": self.variant, "label": self.label, "is_bound": self.is_bound,
            "value": self.value if math.isfinite(self.value) else None,
            "value_text": self.value_text(), "log10_value": self.log10_value,
            "vacuous": self.vacuous, "vacuous_against": self.vacuous_text,
            "floor": _jsonable(self.floor), "trivial": self.trivial,
            "test_error": self.test_error, "gap": self.gap, "output": self.output,
            "estimated": self.estimated, "certifies": self.certifies, "unit": self.unit,
            "conditions": list(self.conditions),
            "estimated_inputs": self.estimated_inputs, "parameters": _jsonable(self.parameters),
            "parameter_choice": self.parameter_choice, "terms": self.terms,
            "delta": self.delta, "delta_effective": self.delta_effective,
            "union_bound_cost": self.union_bound_cost,
            "union_bound_cost_total": float(sum(self.union_bound_cost.values())),
            "assumptions": self.assumptions, "hidden_constants": self.hidden_constants,
            "inputs": _jsonable(self.inputs), "source": self.source,
            "provenance": self.provenance, "method": self.method, "notes": self.notes,
            **_jsonable(self.extra),
        }


def jsonable(obj: Any) -> Any:
    """``obj`` as plain JSON values: dict keys as strings, tuples and arrays as lists, numpy
    scalars as Python ones, and non-finite floats as the strings 'inf', '-inf', 'nan' (JSON has
    no number for them)."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        x = float(obj)
        return x if math.isfinite(x) else ("inf" if x > 0 else "-inf" if x < 0 else "nan")
    return obj


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    return obj
