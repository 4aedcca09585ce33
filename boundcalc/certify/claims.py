"""The compare step of ``certify``: what is claimed, about which predictor, at which δ.

Three kinds of rows, each saying what it certifies:

* **Gibbs rows** (every certified PAC-Bayes row on ``stats.json``): they certify the *Gibbs
  predictor* of model/, the random classifier that answers each input with its own draw
  w ∼ N(model/, σ²) (σ per parameter group for the ``groups`` rows), not model/ itself. Beside
  each, that predictor's held-out error, measured with the per-row draws the certificate uses
  (:func:`boundcalc.measure.data.tune.final_risk`, at the row's σ). Their least is quoted as
  ``compare`` quotes it (:func:`boundcalc.optimize.compare.least_certified`: the least row
  re-evaluated at δ/k, probability ≥ 1 − ``delta_total``).
* **Rows about model/ itself** (:data:`MODEL_ROWS`, one function each, a list to extend): the
  test-set bound of model/ on the held-out rows (``test_set_kl``), when they were given.
* **The baseline**, shown, never claimed: the test-set bound of the *prior* on S (the prior
  never saw S, so S is a held-out set for it): what holding S out would certify without any
  PAC-Bayes machinery.

Everything claimed together (the Gibbs minimum and every model/ row) holds with probability
≥ 1 − Σ of their δ's (a union bound); ``report["claimed"]`` says so, and the baseline says it is
not counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

TEST_SET_ID = "test_set_kl"
TEST_SET_DELTA = 0.05  # fixed before any held-out row is read


@dataclass
class Count:
    """``errors`` of one fixed classifier on ``m`` rows it never saw."""

    errors: int
    m: int

    @property
    def rate(self) -> float:
        return self.errors / self.m


@dataclass
class Evidence:
    """What the compare step measured besides ``stats.json``: model/ and the prior on the
    held-out rows (``model_test``, ``prior_test``; None without them), the prior on S
    (``prior_on_S``) and ``gibbs(sigma, passes)``: the held-out error of the Gibbs predictor at
    a σ (a float, or ``{group: σ}``), as ``(mean, N, how)``; None without held-out rows."""

    model_test: Count | None = None
    prior_test: Count | None = None
    prior_on_S: Count | None = None
    gibbs: Callable[[Any, int], tuple[float, int, str]] | None = None
    cache: dict[str, Any] = field(default_factory=dict)
    # passes of the held-out Gibbs error (shown only); None: the certificate's own passes
    heldout_passes: int | None = None
    # rows about model/ measured elsewhere (the disagreement route, certify/model_rows.py)
    extra_model_rows: list[dict[str, Any]] = field(default_factory=list)


def test_set_bound(count: Count, delta: float = TEST_SET_DELTA) -> Any:
    """The registry's ``test_set_kl`` at ``count`` and ``delta`` (a :class:`Result`)."""
    from ..evaluation import evaluate
    from ..registry import load_registry

    entry = load_registry().get(TEST_SET_ID)
    return evaluate(entry, {"test_errors": count.errors, "m": count.m, "delta": delta})


def test_set_row(ev: Evidence) -> dict[str, Any] | None:
    """model/ itself, certified by its errors on the held-out rows (none without them)."""
    if ev.model_test is None:
        return None
    r = test_set_bound(ev.model_test)
    c = ev.model_test
    return {"id": r.id, "certifies": "model/ itself", "value": r.value, "delta": r.delta,
            "is_bound": r.is_bound, "errors": c.errors, "m": c.m, "on": "the held-out rows",
            "how": f"test-set bound: {c.errors} errors of model/ on {c.m} held-out rows, "
                   "kl⁻¹(k/m, ln(1/δ)/m)", "source": r.source}


# rows about model/ itself; each takes the Evidence and returns a row or None. A new route
# (another certificate for model/) is one more function here.
MODEL_ROWS: list[Callable[[Evidence], dict[str, Any] | None]] = [test_set_row]


def baseline(ev: Evidence) -> dict[str, Any] | None:
    """The prior's test-set bound on S (shown for comparison, not claimed)."""
    if ev.prior_on_S is None:
        return None
    r = test_set_bound(ev.prior_on_S)
    c = ev.prior_on_S
    return {"id": r.id, "certifies": "prior/ (the prior, trained without S)", "value": r.value,
            "delta": r.delta, "errors": c.errors, "m": c.m, "on": "S", "claimed": False,
            "how": f"test-set bound: {c.errors} errors of the prior on the {c.m} rows of S, "
                   "which it never saw", "note": "shown for comparison, not claimed: not in "
                   "the total probability"}


def gibbs_sigma(entry: Any, params: Mapping[str, Any], stats: Any) -> tuple[Any, int] | None:
    """``(σ, passes)`` of the Gibbs predictor a certified row is about: an isotropic row's σ
    (its chosen point of ``gibbs_risk_mean``) or a groups row's ``{group: σ_g}``
    (``provenance.gibbs_groups``); None for a row that is not about a Gibbs predictor."""
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


def predictor_text(sigma: Any) -> str:
    """The Gibbs predictor in words."""
    if isinstance(sigma, Mapping):
        vals = sorted(set(sigma.values()))
        what = (f"σ = {vals[0]:.4g} on every group" if len(vals) == 1 else
                f"σ_g from {vals[0]:.3g} to {vals[-1]:.3g} over {len(sigma)} groups")
        return ("the Gibbs predictor of model/: each input answered by its own draw "
                f"w ∼ N(model/, diag σ_g²), {what}")
    return ("the Gibbs predictor of model/: each input answered by its own draw "
            f"w ∼ N(model/, σ²I), σ = {sigma:.4g}")


def _gibbs_error(ev: Evidence, sigma: Any, passes: int) -> dict[str, Any] | None:
    if ev.gibbs is None or sigma is None:
        return None
    passes = ev.heldout_passes or passes
    key = repr((sorted(sigma.items()) if isinstance(sigma, Mapping) else sigma, passes))
    if key not in ev.cache:
        mean, n, how = ev.gibbs(sigma, passes)
        ev.cache[key] = {"value": mean, "draws": n, "how": how}
    return ev.cache[key]


def _row(r: Any, entry: Any, stats: Any, ev: Evidence) -> dict[str, Any]:
    from ..floor import breakdown_text

    f = r.floor or {}
    gs = gibbs_sigma(entry, r.parameters, stats) if r.is_bound else None
    sigma, passes = gs if gs is not None else (None, 0)
    return {
        "id": r.id, "value": r.value if np.isfinite(r.value) else None, "label": r.label,
        "is_bound": r.is_bound, "vacuous": r.vacuous, "vacuous_against": r.vacuous_text,
        "vacuous_at": r.vacuous_threshold, "delta": r.delta,
        "certifies": predictor_text(sigma) if sigma is not None else None,
        "sigma": sigma, "gibbs_test_error": _gibbs_error(ev, sigma, passes),
        "floor": f.get("own"), "dominates": breakdown_text(r.floor, short=True)
        if r.floor else None, "breakdown": breakdown_text(r.floor) if r.floor else None}


def _other_text(record: Any) -> str:
    """What a certified row that is not a Gibbs row certifies (a compression row: the model its
    code decodes to, in :mod:`boundcalc.which_model`' words)."""
    if isinstance(record, Mapping) and record.get("text"):
        text = str(record["text"])
        return text[len("certifies "):] if text.startswith("certifies ") else text
    return "the predictor its entry states (not a Gibbs row; see its entry)"


def build(stats_path: Any, ev: Evidence) -> tuple[list[Any], dict[str, Any]]:
    """The certified results on ``stats.json`` (least first) and the report: ``certified``
    (one row each, with the predictor it certifies and that predictor's held-out error),
    ``minimum`` (compare's least row at δ/k, its ``line``, its predictor and held-out error),
    ``model_rows`` (:data:`MODEL_ROWS`), ``baseline`` and ``claimed`` (the δ's of everything
    claimed together)."""
    from ..optimize.compare import compare_entries
    from ..registry import load_registry
    from ..report.compare_view import minimum_line
    from ..rounding import decimal_total, round_up
    from ..stats import load_stats

    stats = load_stats(stats_path)
    reg = load_registry()
    comp = compare_entries(stats, {}, reg)  # no test error: model/'s is not a Gibbs row's
    rows = sorted(comp.groups.get("certified", []), key=lambda r: r.value)
    entries = {r.id: reg.get(r.id) for r in rows}
    report: dict[str, Any] = {"stats": str(stats_path),
                              "certified": [_row(r, entries[r.id], stats, ev) for r in rows]}
    m = comp.minimum
    if m is not None:
        m = dict(m)
        gs = gibbs_sigma(entries[m["id"]], m.get("parameters") or {}, stats)
        sigma, passes = gs if gs is not None else (None, 0)
        own = next(x for x in report["certified"] if x["id"] == m["id"])
        # values rounded up to 4 digits first: minimum_line's %.4g then prints them as they are
        shown = {**m, "value": round_up(m["value"], 4), "row_value": round_up(m["row_value"], 4)}
        m.update(line=minimum_line(shown), sigma=sigma,
                 certifies=predictor_text(sigma) if sigma is not None else
                 _other_text(m.get("certifies")),
                 gibbs_test_error=_gibbs_error(ev, sigma, passes),
                 model_test_error=ev.model_test.rate if ev.model_test else None,
                 floor=own["floor"], dominates=own["dominates"],
                 vacuous_at=own["vacuous_at"])
    report["minimum"] = m
    report["model_rows"] = [x for x in (f(ev) for f in MODEL_ROWS) if x is not None] + \
        list(ev.extra_model_rows)
    report["baseline"] = baseline(ev)
    parts = ([("Gibbs minimum " + m["id"], m["delta_total"])]
             if m is not None and m["delta_total"] < 1 else []) + \
        [(x["id"] + " (model/)", x["delta"]) for x in report["model_rows"]
         if x.get("is_bound") and x.get("value") is not None]
    total = decimal_total(d for _, d in parts)
    report["claimed"] = {"rows": [p for p, _ in parts], "deltas": [d for _, d in parts],
                         "delta_total": total, "probability": 1 - total if total < 1 else None,
                         "rule": "union bound: every claimed row holds at once with "
                                 "probability ≥ 1 − Σδ; the baseline is not counted"}
    return rows, report
