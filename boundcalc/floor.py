"""What a certified number is measured against: its zero-complexity floor, what dominates it,
the trivial predictor's error, and a held-out test error. (What the task is and what an entry
bounds — a classifier? a 0-1 risk? in which unit? — are facts of their own:
:mod:`boundcalc.task_facts`.)

*Floor.* A certified entry whose value is a kl inverse of an empirical risk, kl⁻¹(ê, B) with the
budget B = (complexity + confidence term)/n, could at best reach its value with zero complexity.
Both forms are read off the entry's own expression, no constant is invented:

* ``plain``: kl⁻¹(ê, ln(1/δ)/n), the floor of any kl bound on n samples at the entry's δ;
* ``own``: kl⁻¹(ê, c(δ)/n) with c(δ) the addends of the entry's budget that hold δ (Maurer's
  ln(2√n/δ) for PAC-Bayes-kl, ln(1/δ) for the Occam bound), at δ itself (no grid cost: with
  zero complexity nothing is chosen after seeing the data).

ê is the risk the entry used: for a Monte Carlo entry kl⁻¹(kl⁻¹(Ê, ·), B) it is the measured
mean Ê, not its upper end. Entries of another shape have no floor (shown as "—").

*Breakdown.* The budget in nats splits into the complexity addends (KL, code length), the
confidence term at δ and the union-bound (grid) cost; the Monte Carlo step moves Ê to its upper
end. Each piece's effect is the value minus the value without that piece; the largest effect is
what dominates. Floors and effects are float computations for reading a number, not bounds.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping, Protocol

from .engine.kernels import kl_inv_upper
from .engine.tree import Node, as_tree, sympy_text
from .registry.schema import confidence_symbol
from .rounding import upper_text
from .task_facts import ZERO_ONE_STATS, bounds_zero_one, is_classifier, unit_of

# importable from here as before (they moved to :mod:`.task_facts`)
__all__ = ["ZERO_ONE_STATS", "Evaluator", "annotate", "bounds_zero_one", "breakdown_text",
           "is_classifier", "kl_shape", "trivial_predictor", "unit_of", "vacuity_level",
           "zero_complexity_floor"]

if TYPE_CHECKING:
    from .engine.compile import Context
    from .registry.schema import Entry
    from .result import Result
    from .stats import Stats


class Evaluator(Protocol):
    """What the floor needs of an entry with validated values (``evaluation.Prepared`` is one):
    its entry and scalar inputs, an evaluation context at a point and δ, a scalar evaluator, and
    δ_eff for the union-bound costs. The floor is drawn below the evaluation, which calls it."""

    entry: Entry
    scalars: dict[str, float]

    def context(self, params: Mapping[str, float] | None = None,
                delta_eff: float | None = None) -> Context: ...

    def eval_scalar(self, expr: Any, ctx: Context | None = None) -> float: ...

    def delta_effective(self, costs: Mapping[str, float]) -> float | None: ...

def _symbols(node: Node) -> set[str]:
    if node.op == "Symbol":
        return {node.value}
    out: set[str] = set()
    for a in node.args:
        out |= _symbols(a)
    return out


def kl_shape(entry: Entry) -> dict[str, Any] | None:
    """The parts of a kl-inverse entry: the risk symbol ê, the Monte Carlo step (or None), the
    sample-size symbol n, the confidence addends and the complexity addends of its budget. None
    for an entry of another shape."""
    root = as_tree(entry.expression)
    if root.op != "kl_inv":
        return None
    risk, budget = root.args
    mc = None
    if risk.op == "kl_inv":
        mc, risk = risk, risk.args[0]
        if risk.op == "kl_inv":
            return None
    if risk.op != "Symbol":
        return None
    conf = confidence_symbol(entry)
    sizes = [s.name for s in entry.symbols.values() if s.role == "data_size"]
    if conf is None or budget.op != "Mul":
        return None
    inv_n = [a for a in budget.args if a.op == "Pow" and a.args[0].op == "Symbol"
             and a.args[0].value in sizes and a.args[1].op == "Integer" and a.args[1].value == -1]
    rest = [a for a in budget.args if a not in inv_n]
    if len(inv_n) != 1 or len(rest) != 1:
        return None
    total = rest[0]
    addends = list(total.args) if total.op == "Add" else [total]
    conf_parts = [a for a in addends if conf in _symbols(a)]
    complexity = [a for a in addends if conf not in _symbols(a)]
    if not conf_parts:
        return None
    names = {i: a.value for i, a in enumerate(complexity) if a.op == "Symbol"}
    for t in entry.terms:  # name each complexity addend after the entry's own term, if one
        d = entry.definitions.get(t)
        if d is not None:  # the term itself, or a sum whose every addend is in the budget
            tree = as_tree(d.expr)
            parts = list(tree.args) if tree.op == "Add" else [tree]
            hits = [i for i, a in enumerate(complexity) if tree == a or a in parts]
            if tree in complexity or len(hits) == len(parts):
                names.update({i: t for i in hits})
    conf_text = " + ".join(sympy_text(a) for a in conf_parts)
    # an addend no term names keeps its own text (two unnamed addends never share one name)
    return {"risk": risk.value, "mc": mc, "n": inv_n[0].args[0].value, "delta": conf,
            "confidence": conf_parts, "confidence_text": conf_text, "complexity": complexity,
            "complexity_names": [names.get(i, sympy_text(a)) for i, a in enumerate(complexity)]}


def zero_complexity_floor(prep: Evaluator, values: Mapping[str, float],
                          costs: Mapping[str, float]) -> dict[str, Any] | None:
    """The floor and breakdown of a certified risk entry at its resolved point (see the module
    docstring), or None where the entry has no kl-inverse shape."""
    e = prep.entry
    if e.kind != "certified" or e.output != "risk":
        return None
    shape = kl_shape(e)
    if shape is None:
        return None
    delta = prep.scalars[shape["delta"]]
    at_delta = prep.context(values, delta)
    at_eff = prep.context(values, prep.delta_effective(costs))

    def total(nodes: list[Node], ctx) -> float:
        return sum(prep.eval_scalar(x, ctx) for x in nodes)

    try:
        risk = prep.eval_scalar(Node("Symbol", value=shape["risk"]), at_delta)
        n = prep.eval_scalar(Node("Symbol", value=shape["n"]), at_delta)
        conf = total(shape["confidence"], at_delta)
        conf_eff = total(shape["confidence"], at_eff)
        complexity = [prep.eval_scalar(x, at_delta) for x in shape["complexity"]]
        upper = prep.eval_scalar(shape["mc"], at_eff) if shape["mc"] is not None else risk
    except Exception:  # noqa: BLE001 - a reading aid: never let it break the number itself
        return None
    if not (0 <= risk <= 1 and n > 0 and all(map(math.isfinite, [conf, conf_eff, *complexity]))):
        return None
    cost = max(conf_eff - conf, 0.0)
    nats: dict[str, float] = {}
    for name, c in zip(shape["complexity_names"], complexity):  # a term's addends summed
        nats[name] = nats.get(name, 0.0) + c
    budget = sum(complexity) + conf + cost

    def inv(q: float, b: float) -> float:
        return kl_inv_upper(min(max(q, 0.0), 1.0), max(b, 0.0) / n)

    base = inv(upper, budget)
    effects = {name: base - inv(upper, budget - c) for name, c in nats.items()}
    if cost > 0:
        effects["grid cost"] = base - inv(upper, budget - cost)
    if shape["mc"] is not None:
        effects["Monte Carlo"] = base - inv(risk, budget)
    effects["confidence"] = base - inv(upper, budget - conf)
    dominant = max(effects, key=lambda k: effects[k])
    return {
        "risk_symbol": shape["risk"], "emp_risk": risk, "n": n, "delta": delta,
        "plain": kl_inv_upper(risk, math.log(1 / delta) / n),
        "own": kl_inv_upper(risk, conf / n), "own_form": shape["confidence_text"],
        "mc_upper": upper if shape["mc"] is not None else None,
        "budget_nats": {**nats, "confidence": conf, "grid cost": cost},
        "effects": effects, "dominant": dominant,
    }


def breakdown_text(floor: Mapping[str, Any] | None, short: bool = False) -> str:
    """'KL_gauss 77.6 nats (+0.31), grid cost 13.1 nats (+0.02), Monte Carlo Ê 0.125 → 0.279
    (+0.12)', largest effect first; with ``short`` only the dominant piece. The Monte Carlo
    upper end, an upper confidence limit, is rounded up; the rest are readings, to nearest."""
    if not floor:
        return "—"
    eff = floor["effects"]
    parts = []
    for name in sorted(eff, key=lambda k: -eff[k]):
        if name == "Monte Carlo":
            what = f"Monte Carlo {floor['emp_risk']:.3g} → {upper_text(floor['mc_upper'], 3)}"
        else:
            what = f"{name} {floor['budget_nats'][name]:.4g} nats"
        parts.append(f"{what} (+{eff[name]:.2g})")
    return parts[0] if short else ", ".join(parts)


def trivial_predictor(stats: Stats | None) -> dict[str, Any] | None:
    """The error of the trivial predictors of a classification stats file: guessing among K
    classes (1 − 1/K, K from ``provenance.n_classes``) and always answering the majority class
    of S (``scalars.majority_error``); ``error`` is the smaller of those given."""
    if stats is None:
        return None
    k = stats.provenance.get("n_classes") if isinstance(stats.provenance, dict) else None
    maj = stats.scalars.get("majority_error")
    out: dict[str, Any] = {}
    if isinstance(k, (int, float)) and not isinstance(k, bool) and k >= 2:
        out["n_classes"] = int(k)
        out["guess"] = 1 - 1 / int(k)
    if maj is not None and math.isfinite(maj.value) and 0 <= maj.value <= 1:
        out["majority"] = float(maj.value)
    if not out:
        return None
    cands = [(out["guess"], f"guessing among K = {out['n_classes']} classes (1 − 1/K)")
             if "guess" in out else None,
             (out["majority"], "always answering the majority class of S")
             if "majority" in out else None]
    out["error"], out["against"] = min((c for c in cands if c), key=lambda c: c[0])
    return out


def vacuity_level(entry: Entry, stats: Stats | None) -> tuple[float, str]:
    """What a certified bound of ``entry`` must stay below to say anything, and why: the
    trivial predictor's error for a 0-1 risk bound where the stats file gives it
    (:func:`trivial_predictor`), else 1 (the same level ``Result.vacuous_threshold`` uses)."""
    triv = trivial_predictor(stats) if bounds_zero_one(entry) else None
    if triv and triv["error"] < 1:
        return float(triv["error"]), f"the vacuity level: the error of {triv['against']}"
    return 1.0, "1"


def annotate(result: Result, entry: Entry, stats: Stats | None,
             test_error: float | None = None) -> Result:
    """Attach the trivial predictor's error (for a 0-1 risk bound), a held-out test error,
    for a certified compression row the model its code decodes to (:mod:`.which_model`), and
    for every certified row on a stats file the predictor it is about (:mod:`.claim`)."""
    from .claim import about
    from .which_model import certified_model

    result.certifies = certified_model(entry, stats)
    result.predictor = about(entry, result.parameters, stats)
    result.unit = unit_of(entry, stats)
    if bounds_zero_one(entry):
        result.trivial = trivial_predictor(stats)
    if test_error is not None:
        result.test_error = float(test_error)
    return result
