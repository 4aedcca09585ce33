"""One claim: what a certified row says, about which predictor, on which data, at which δ.

A :class:`Claim` is built from a result in one place (:meth:`Claim.of`) and rendered by every
output from :meth:`Claim.row` (certify's terminal tables and ``report.json``; compare and LaTeX
read the same words through ``Result.certifies``). Each names its :class:`Predictor`, one of
:data:`PREDICTORS` (the key, and the heading certify's tables group rows under):

* ``gibbs``: the Gibbs predictor of the measured model (model/ in certify), the random
  classifier that answers each input with its own draw w ∼ N(model/, σ²): every PAC-Bayes row
  on a Gaussian posterior around the measured model;
* one key per posterior a route trains after the measured model and certifies instead of it
  (:data:`boundcalc.which_model.POSTERIOR_ROUTES`: the bound-trained Gibbs posterior; a new
  route adds its line there);
* ``decoded``: the model a compression code decodes to (:func:`boundcalc.which_model.classify`
  says how it relates to the measured one);
* ``model``: the measured model itself (a test-set bound, the disagreement route, a bound on the
  deterministic network);
* ``prior``: the prior, shown for comparison (certify's baseline), never claimed.

No row is without its predictor: :func:`predictor_of` names one for every certified entry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from .which_model import POSTERIOR_ROUTES, certified_model

MODEL = "model/"  # certify's name for the measured model
MEASURED = ("the measured model", "w")  # its name elsewhere (compare, optimize), and its weights

# the predictors, in the order certify's tables list them; their headings
PREDICTORS: dict[str, str] = {
    "gibbs": "the Gibbs predictor of model/ (a random classifier, not model/ itself)",
    **{r.key: r.heading for r in POSTERIOR_ROUTES},
    "decoded": "the decoded model (the model a compression code describes)",
    "model": "model/ itself",
    "prior": "the prior (shown for comparison, not claimed)",
}

# statistics that make a row one on a Gaussian posterior around the measured model
GIBBS_STATS = ("curves.gibbs_risk", "scalars.gibbs_risk", "scalars.kl", "groups.dist_init_sq",
               "scalars.dist_init_total", "groups.hessian_trace")
# statistics that make a row one on the measured model itself, whatever else it reads
ITSELF_STATS = ("curves.disagreement_",)
THROUGH_GIBBS = "model/ itself (through the Gibbs posterior)"


@dataclass(frozen=True)
class Predictor:
    """What a claim is about: ``key`` (one of :data:`PREDICTORS`) and ``text`` (the predictor
    in words, without a leading "certifies")."""

    key: str
    text: str

    def __post_init__(self) -> None:
        if self.key not in PREDICTORS:
            raise ValueError(f"unknown predictor {self.key!r}: expected one of "
                             f"{', '.join(PREDICTORS)}")

    @property
    def heading(self) -> str:
        """The heading a table of rows about this predictor carries."""
        return PREDICTORS[self.key]


def gibbs_sigma(entry: Any, params: Mapping[str, Any], stats: Any) -> tuple[Any, int] | None:
    """``(σ, passes)`` of the Gibbs predictor a certified row is about: an isotropic row's σ
    (its chosen point of ``gibbs_risk_mean``) or a groups row's ``{group: σ_g}``
    (``provenance.gibbs_groups``); None for a row whose σ is not recorded that way."""
    stat_of = {(s.stat or "") for s in entry.symbols.values()}
    if "curves.gibbs_risk_groups" in stat_of:
        rec = (stats.provenance or {}).get("gibbs_groups") or {}
        if not rec.get("groups") or "scale" not in params:
            return None
        if not math.isclose(float(params["scale"]), float(rec["scale"]), rel_tol=1e-9):
            return None
        return dict(zip(rec["groups"], map(float, rec["sigma"]))), int(rec["mc"]["passes"])
    if "curves.gibbs_risk_mean" in stat_of and "sigma" in params:
        passes = stats.scalars.get("gibbs_passes")
        return float(params["sigma"]), int(passes.value) if passes is not None else 1
    return None


def predictor_text(sigma: Any, model: str = MODEL, centre: str | None = None) -> str:
    """The Gibbs predictor of ``model`` (its weights ``centre``, default ``model``) at
    ``sigma`` (a float, or ``{group: σ_g}``) in words."""
    centre = centre or model
    draw = f"{'w' if centre == model else 'w′'} ∼ N({centre}"
    if isinstance(sigma, Mapping):
        vals = sorted(set(sigma.values()))
        what = (f"σ = {vals[0]:.4g} on every group" if len(vals) == 1 else
                f"σ_g from {vals[0]:.3g} to {vals[-1]:.3g} over {len(sigma)} groups")
        return (f"the Gibbs predictor of {model}: each input answered by its own draw "
                f"{draw}, diag σ_g²), {what}")
    return (f"the Gibbs predictor of {model}: each input answered by its own draw "
            f"{draw}, σ²I), σ = {sigma:.4g}")


def _words(record: Mapping[str, Any]) -> str:
    text = str(record.get("text") or "")
    return text[len("certifies "):] if text.startswith("certifies ") else text


def predictor_of(entry: Any, params: Mapping[str, Any], stats: Any, model: str = MODEL,
                 centre: str | None = None) -> Predictor:
    """The predictor a certified row of ``entry`` (at ``params``, on ``stats``) is about
    (module docstring); ``model``: the measured model's name in the words, ``centre``: its
    weights' (default ``model``)."""
    record = certified_model(entry, stats)
    if record is not None:  # a posterior route's row, or a compression row
        routes = {r.key for r in POSTERIOR_ROUTES}
        key = record["about"] if record["about"] in routes else "decoded"
        return Predictor(key, _words(record))
    read = {(s.stat or "") for s in entry.symbols.values()}
    if any(s.startswith(ITSELF_STATS) for s in read):
        return Predictor("model", THROUGH_GIBBS.replace(MODEL, model))
    if any(s.startswith(GIBBS_STATS) for s in read):
        gs = gibbs_sigma(entry, params, stats) if stats is not None else None
        return Predictor("gibbs", predictor_text(gs[0], model, centre) if gs is not None
                         else f"the Gibbs predictor of {model}: each input answered by its "
                              f"own draw from a Gaussian posterior around {centre or model}")
    return Predictor("model", f"{model} itself")


def about(entry: Any, params: Mapping[str, Any], stats: Any) -> dict[str, Any] | None:
    """``Result.predictor`` of a row of ``entry`` measured on ``stats`` (None for an entry that
    is not certified, or without a stats file): ``{"about": key, "text": "certifies …"}``,
    in the words of a measurement outside certify (:data:`MEASURED`)."""
    if stats is None or getattr(entry, "kind", None) != "certified":
        return None
    p = predictor_of(entry, params, stats, *MEASURED)
    return {"about": p.key, "text": "certifies " + p.text}


@dataclass
class Claim:
    """A row as every output renders it: ``id``, ``value`` (None when not finite), ``delta``,
    ``kind`` (the registry's), ``is_bound``, the ``predictor`` it is about, the data it was
    measured ``on`` ("S", "the held-out rows"), whether it is ``claimed`` (counted in the total
    probability) and the row's own ``fields`` (floor, error counts, how it was measured)."""

    id: str
    value: float | None
    delta: float | None
    kind: str
    is_bound: bool
    predictor: Predictor
    on: str
    claimed: bool = True
    fields: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, result: Any, predictor: Predictor, on: str, claimed: bool = True,
           **fields: Any) -> "Claim":
        """The claim of a :class:`~boundcalc.result.Result` (the one place a row is built
        from a result): its value, δ, kind and vacuity, with ``fields`` added."""
        value = result.value if result.value is not None and math.isfinite(result.value) \
            else None
        return cls(result.id, value, result.delta, result.kind, result.is_bound, predictor, on,
                   claimed, {"label": result.label, "vacuous": result.vacuous,
                             "vacuous_against": result.vacuous_text,
                             "vacuous_at": result.vacuous_threshold, **fields})

    def row(self) -> dict[str, Any]:
        """The row in ``report.json`` (and certify's tables): ``certifies`` (the predictor in
        words, never None), ``predictor`` (its key) and ``about`` (its heading) beside the
        numbers."""
        return {"id": self.id, "value": self.value, "delta": self.delta, "kind": self.kind,
                "is_bound": self.is_bound, **self.fields, "certifies": self.predictor.text,
                "predictor": self.predictor.key, "about": self.predictor.heading,
                "on": self.on, "claimed": self.claimed}


def grouped(rows: list[Mapping[str, Any]]) -> list[tuple[str, list[Mapping[str, Any]]]]:
    """``rows`` (of :meth:`Claim.row`) grouped by predictor, in :data:`PREDICTORS` order:
    ``[(heading, rows), …]``, no empty group."""
    out = []
    for key, heading in PREDICTORS.items():
        mine = [r for r in rows if r.get("predictor") == key]
        if mine:
            out.append((heading, mine))
    return out
