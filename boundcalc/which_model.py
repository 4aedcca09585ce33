"""Which model a certified compression row is about.

A compression (Occam) bound certifies the model its code decodes to, not the float model the
user measured. ``measure --compress`` records, in ``provenance.compression``, the decoded
model's fingerprint, its agreement with the measured model on S (mean over units of the
fraction of predictions they share) and the distances from the prior centre of the decoded
and of the measured model (Euclidean, over the coded weights). From those, and never from bit
equality, one word says what the row is about:

* ``measured``: the decoded model agrees with the measured one on at least
  :data:`MIN_AGREEMENT` of S: "certifies the measured model up to quantization";
* ``prior``: the decoded model lies within :data:`PRIOR_TOLERANCE` × (the measured model's
  distance from the prior) of the prior: "certifies the prior: the code decodes to it";
* ``other``: neither: a quantized model that disagrees with the measured one on more than
  1 − :data:`MIN_AGREEMENT` of S;
* ``unknown``: no record (hand-set code lengths, or a stats file from before the record).

Only ``measured`` rows are about the user's model; the others are listed apart. So is a row on
a posterior a route trained after the measured model (:data:`POSTERIOR_ROUTES`: the
bound-trained Gibbs posterior, ``about`` = ``bound_posterior``, whose mean was trained on the
bound, :mod:`boundcalc.measure.data.bound_posterior`). Every certified row's predictor, these
and the others, is named by :mod:`boundcalc.claim`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

MIN_AGREEMENT = 0.95
PRIOR_TOLERANCE = 0.01
COMPRESSION_STATS = ("scalars.code_bits", "scalars.quantized_", "curves.quantized_")
ABOUT_USERS = "measured"


def is_compression_entry(entry: Any) -> bool:
    """Does the entry read a compression statistic (its value is about a decoded model)?"""
    return any((s.stat or "").startswith(COMPRESSION_STATS) for s in entry.symbols.values())


def _num(x: Any) -> float | None:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def classify(record: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a compression record (``provenance.compression``) says the code decodes to:
    ``about`` (one word, see the module docstring), ``text`` (one line), ``fingerprint``,
    ``agreement``, ``distance_from_prior``, ``measured_distance_from_prior``."""
    record = record if isinstance(record, Mapping) else {}
    decoded = record.get("decoded") if isinstance(record.get("decoded"), Mapping) else {}
    agreement = _num(decoded.get("agreement", record.get("agreement")))
    dist = _num(decoded.get("distance_from_prior"))
    ref = _num(decoded.get("measured_distance_from_prior"))
    fingerprint = decoded.get("fingerprint") or record.get("fingerprint")
    out: dict[str, Any] = {"fingerprint": fingerprint, "agreement": agreement,
                           "distance_from_prior": dist, "measured_distance_from_prior": ref,
                           "min_agreement": MIN_AGREEMENT, "prior_tolerance": PRIOR_TOLERANCE}
    agree = "" if agreement is None else f"agreement {agreement:.3f}"
    where = ("" if dist is None or ref is None else
             f"distance from the prior {dist:.3g} (the measured model's: {ref:.3g})")
    if not record:
        out["about"] = "unknown"
        out["text"] = ("certifies the model its code describes; no compression record says "
                       "which (a measurement with compression writes one)")
    elif dist is not None and ref is not None and ref > 0 and dist <= PRIOR_TOLERANCE * ref:
        out["about"] = "prior"
        out["text"] = ("certifies the prior: the code decodes to it ("
                       + ", ".join(x for x in (where, agree and agree + " on S") if x) + ")")
    elif agreement is not None and agreement >= MIN_AGREEMENT:
        out["about"] = ABOUT_USERS
        out["text"] = (f"certifies the measured model up to quantization, {agree}"
                       + (f"; {where}" if where else ""))
    elif agreement is not None:
        out["about"] = "other"
        out["text"] = (f"certifies another model: the decoded model agrees with the measured "
                       f"one on {agreement:.1%} of S (< {MIN_AGREEMENT:.0%})"
                       + (f"; {where}" if where else ""))
    else:
        out["about"] = "unknown"
        out["text"] = ("certifies the decoded model; its agreement with the measured model "
                       "is not recorded (measuring with compression again records it)")
    if fingerprint:
        out["text"] += f"; decoded model {fingerprint}"
    return out


LEARNED_STAT = "curves.gibbs_risk_learned"


def bound_posterior(record: Any) -> dict[str, Any]:
    """What a row on the bound-trained Gibbs posterior (``provenance.gibbs_learned``) is about:
    that posterior, whose mean was trained on the bound, not the measured model's weights."""
    mean = record.get("mean_model") if isinstance(record, Mapping) else None
    return {"about": "bound_posterior",
            "text": "certifies the bound-trained Gibbs posterior N(μ, diag σ_Q,g²) (μ and σ "
                    "trained on S on the bound" + (f"; μ saved in {mean}" if mean else "")
                    + "), not the measured model's own weights"}


SUBSPACE_STAT = "scalars.gibbs_subspace_mean"


def subspace_posterior(record: Any) -> dict[str, Any]:
    """What a row on the subspace Gibbs posterior (``provenance.gibbs_subspace``) is about:
    that posterior around the prior, not the measured model's weights."""
    mean = record.get("mean_model") if isinstance(record, Mapping) else None
    return {"about": "subspace_posterior",
            "text": "certifies the subspace Gibbs posterior N(z, s_Q² I) on the coordinates of "
                    "a random subspace around the prior (z and s_Q trained on S on the bound"
                    + (f"; its mean saved in {mean}" if mean else "")
                    + "), not the measured model's own weights"}


@dataclass(frozen=True)
class PosteriorRoute:
    """A posterior that a route trains after the measured model and certifies instead of it:
    ``key`` (the word in ``about``), ``stat`` (the curve its certified rows read),
    ``record`` (its ``stats.provenance`` entry), ``heading`` (the predictor in a table's
    title) and ``describe(record)`` (the ``{"about", "text"}`` of a row, from that record)."""

    key: str
    stat: str
    record: str
    heading: str
    describe: Callable[[Any], dict[str, Any]]


# The posteriors certified apart from the measured model, one line each: a new posterior
# route (a subspace posterior, …) declares its predictor here, and certify's tables, report.json,
# compare and LaTeX name it from this line (boundcalc.claim).
POSTERIOR_ROUTES: tuple[PosteriorRoute, ...] = (
    PosteriorRoute("bound_posterior", LEARNED_STAT, "gibbs_learned",
                   "the bound-trained Gibbs posterior (not model/'s own weights)",
                   bound_posterior),
    PosteriorRoute("subspace_posterior", SUBSPACE_STAT, "gibbs_subspace",
                   "the subspace Gibbs posterior (around prior/, not model/'s own weights)",
                   subspace_posterior),
)


def certified_model(entry: Any, stats: Any) -> dict[str, Any] | None:
    """For a certified row on a posterior of :data:`POSTERIOR_ROUTES`: its ``describe`` of
    its provenance record; for a certified compression entry: :func:`classify` of the stats
    file's compression record; None for every other entry."""
    prov = getattr(stats, "provenance", None) if stats is not None else None
    if getattr(entry, "kind", None) != "certified":
        return None
    read = {s.stat for s in entry.symbols.values()}
    for route in POSTERIOR_ROUTES:
        if route.stat in read:
            return route.describe(prov.get(route.record) if isinstance(prov, Mapping)
                                  else None)
    if not is_compression_entry(entry):
        return None
    record = prov.get("compression") if isinstance(prov, Mapping) else None
    return classify(record)


def about_users_model(result: Any) -> bool:
    """Is a result about the user's model: not a compression row, or one that certifies the
    measured model up to quantization?"""
    c = getattr(result, "certifies", None)
    return c is None or c.get("about") == ABOUT_USERS
