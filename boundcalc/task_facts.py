"""Facts of the task a stats file measured and of what an entry bounds, read from their
declarations alone: is the model a classifier (:func:`is_classifier`), does an entry bound a 0-1
risk (:func:`bounds_zero_one`, by the statistics it reads: :data:`ZERO_ONE_STATS`), and the unit
of its value when that is not a probability (:func:`unit_of`).

They sit on the ground floor (nothing of the package imported): the floor of a certified number
(:mod:`boundcalc.floor`), the comparison of entries (:mod:`boundcalc.optimize.compare`) and the
reports read them without reaching into each other. An entry is anything with ``output`` and
``symbols`` (a :class:`~boundcalc.registry.schema.Entry`); a stats file anything with
``provenance`` (a :class:`~boundcalc.stats.Stats`).
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol

# stats paths whose values are 0-1 risks (or a ramp risk ≥ the 0-1 risk): the entries bound a
# 0-1 risk, so the trivial predictor is the reference
ZERO_ONE_STATS = ("scalars.emp_risk", "scalars.gibbs_risk", "scalars.gibbs_risk_mean",
                  "curves.gibbs_risk_mean", "curves.gibbs_risk_groups",
                  "curves.gibbs_risk_learned",
                  "scalars.quantized_error", "curves.ramp_risk")


class Declared(Protocol):
    """What these facts read of an entry: what it bounds and its symbols (each with ``stat``)."""

    output: str
    symbols: Mapping[str, Any]


class Measured(Protocol):
    """What these facts read of a stats file: its provenance."""

    provenance: Any


def is_classifier(stats: Measured | None) -> bool:
    """Is the stats file about a classifier (a task head with classes, not a language model)?"""
    prov = stats.provenance if stats is not None and isinstance(stats.provenance, dict) else {}
    task = str(prov.get("task") or "")
    return task.endswith("classification") or (not task and "n_classes" in prov)


def bounds_zero_one(entry: Declared) -> bool:
    """Does the entry bound a 0-1 risk (its risk comes from a 0-1 statistic)?"""
    return entry.output == "risk" and any(s.stat in ZERO_ONE_STATS
                                          for s in entry.symbols.values())


def unit_of(entry: Declared, stats: Measured | None) -> str | None:
    """The unit of an entry's value when it is not a probability: a smoothed log-loss is in
    bits per token (per example for a classifier). None for a risk (a probability) and for a
    loss in the loss's own unit."""
    if entry.output != "loss" or "smoothed_nll" not in entry.symbols:
        return None
    return "bits per example" if is_classifier(stats) else "bits per token"
