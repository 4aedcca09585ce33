"""The compare step of ``certify``: what is claimed, about which predictor, at which δ.

Every row is a :class:`boundcalc.claim.Claim` (built by :meth:`~boundcalc.claim.Claim.of` from
its result, written by :meth:`~boundcalc.claim.Claim.row`): its value, δ, kind, the data it
was measured on and the predictor it certifies (``certifies`` in words, never None;
``predictor``, the key certify's tables group rows by). Three kinds of rows:

* **Rows on stats.json** (every certified entry): a PAC-Bayes row certifies the *Gibbs
  predictor* of model/, the random classifier that answers each input with its own draw
  w ∼ N(model/, σ²) (σ per parameter group for the ``groups`` rows), not model/ itself. Beside
  each, that predictor's held-out error, measured with the per-row draws the certificate uses
  (:func:`boundcalc.measure.data.tune.final_risk`, at the row's σ). Their least is quoted as
  ``compare`` quotes it (:func:`boundcalc.optimize.compare.least_certified`: the least row
  re-evaluated at δ/k, probability ≥ 1 − ``delta_total``). The others name theirs
  (:func:`boundcalc.claim.predictor_of`): a posterior a route trained (the bound-trained
  Gibbs posterior), the decoded model of a compression code, model/ itself.
* **Rows about model/ itself** (:data:`MODEL_ROWS`, one function each, a list to extend, the
  only way they reach the report): the test-set bound of model/ on the held-out rows
  (``test_set_kl``) and the disagreement route (:mod:`.model_rows`), when they were given.
* **The baseline**, shown, never claimed: the test-set bound of the *prior* on S (the prior
  never saw S, so S is a held-out set for it): what holding S out would certify without any
  PAC-Bayes machinery.

Everything claimed together (the Gibbs minimum and every model/ row) holds with probability
≥ 1 − Σ of their δ's (a union bound); ``report["claimed"]`` says so, and the baseline says it is
not counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..claim import Claim, Predictor, gibbs_sigma, predictor_of

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
    a σ (a float, or ``{group: σ}``), as ``(mean, N, how)``; None without held-out rows;
    ``disagreement(test_error)``: the disagreement route's rows (:mod:`.model_rows`, measured
    when called, with model/'s held-out error), None where it is not run."""

    model_test: Count | None = None
    prior_test: Count | None = None
    prior_on_S: Count | None = None
    gibbs: Callable[[Any, int], tuple[float, int, str]] | None = None
    cache: dict[str, Any] = field(default_factory=dict)
    disagreement: Callable[[float | None], list[dict[str, Any]]] | None = None
    # passes of the held-out Gibbs error (shown only); None: the certificate's own passes
    heldout_passes: int | None = None


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
    return Claim.of(r, Predictor("model", "model/ itself"), "the held-out rows",
                    errors=c.errors, m=c.m, source=r.source,
                    how=f"test-set bound: {c.errors} errors of model/ on {c.m} held-out rows, "
                        "kl⁻¹(k/m, ln(1/δ)/m)").row()


def disagreement_rows(ev: Evidence) -> list[dict[str, Any]]:
    """model/ itself through its Gibbs posterior: the Gibbs bound plus the disagreement on the
    held-out texts (:mod:`.model_rows`; ``[]`` where the route is not run)."""
    if ev.disagreement is None:
        return []
    return ev.disagreement(ev.model_test.rate if ev.model_test else None)


# rows about model/ itself, the one way they reach the report: each function takes the
# Evidence and returns a row, a list of rows or None. A new route (another certificate for
# model/) is one more function here.
MODEL_ROWS: list[Callable[[Evidence], Any]] = [test_set_row, disagreement_rows]


def baseline(ev: Evidence) -> dict[str, Any] | None:
    """The prior's test-set bound on S (shown for comparison, not claimed)."""
    if ev.prior_on_S is None:
        return None
    r = test_set_bound(ev.prior_on_S)
    c = ev.prior_on_S
    return Claim.of(r, Predictor("prior", "prior/ (the prior, trained without S)"), "S",
                    claimed=False, errors=c.errors, m=c.m,
                    how=f"test-set bound: {c.errors} errors of the prior on the {c.m} rows of "
                        "S, which it never saw",
                    note="shown for comparison, not claimed: not in the total "
                         "probability").row()


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
    """The claim of one certified result on ``stats.json``, with the held-out error of the
    Gibbs predictor it certifies (at the row's σ) and its floor."""
    from ..floor import breakdown_text

    f = r.floor or {}
    gs = gibbs_sigma(entry, r.parameters, stats) if r.is_bound else None
    sigma, passes = gs if gs is not None else (None, 0)
    return Claim.of(r, predictor_of(entry, r.parameters, stats), "S",
                    sigma=sigma, gibbs_test_error=_gibbs_error(ev, sigma, passes),
                    floor=f.get("own"), dominates=breakdown_text(r.floor, short=True)
                    if r.floor else None,
                    breakdown=breakdown_text(r.floor) if r.floor else None).row()


def _rows(found: Any) -> list[dict[str, Any]]:
    """A model row function's answer as a list (a row, rows, or None)."""
    return [] if found is None else list(found) if isinstance(found, list) else [found]


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
        m.update(line=minimum_line(shown), sigma=sigma, certifies=own["certifies"],
                 predictor=own["predictor"], about=own["about"],
                 gibbs_test_error=_gibbs_error(ev, sigma, passes),
                 model_test_error=ev.model_test.rate if ev.model_test else None,
                 floor=own["floor"], dominates=own["dominates"],
                 vacuous_at=own["vacuous_at"])
    report["minimum"] = m
    report["model_rows"] = [row for f in MODEL_ROWS for row in _rows(f(ev))]
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
