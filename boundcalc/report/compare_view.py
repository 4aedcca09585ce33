"""What `compare` says before its tables: a headline in every case, the least certified value
with its honest δ, one line per missing ingredient, and where to go when KL dominates.

Every function returns plain strings (the CLI styles them; ``compare --json`` carries them).
A certified value is rounded up (:func:`~boundcalc.rounding.upper_text`), the probability
1 − δ it holds with down (:func:`~boundcalc.rounding.probability_text`); a δ spent is shown as
given (``%g``).
"""

from __future__ import annotations

from typing import Any

from ..evaluation import Result
from ..rounding import lower_text, probability_text, upper_text
from ..words import command

GUIDE = "docs/guide/certify-your-model.md"
_NOT_KL = ("grid cost", "Monte Carlo", "confidence", "divergence")


def minimum_line(m: dict[str, Any]) -> str:
    """How the least certified value is quoted, in one line: at δ/k (the least row
    re-evaluated), with the sum of the δ's, or a single row at its own δ."""
    k, rid = m["k"], m["id"]
    if m["method"] == "single":
        return (f"one certified row about your model: {upper_text(m['value'])} ({rid}, holds "
                f"with probability ≥ {probability_text(m['delta_total'])})")
    if m["method"] == "delta_over_k":
        fixed = (f", Monte Carlo confidences {m['delta_fixed']:.3g} undivided"
                 if m.get("delta_fixed") else "")
        return (f"minimum over {k} certified rows, each at δ/k: {rid} re-evaluated at "
                f"δ/{k} = {m['delta_each']:.3g} gives {upper_text(m['value'])}, so the minimum "
                f"holds with probability ≥ {probability_text(m['delta_total'])} (union bound "
                f"over the {k} rows{fixed}); per-row values are at their own δ ({rid}: "
                f"{upper_text(m['row_value'])})")
    total = m["delta_total"]
    holds = (f"holds with probability ≥ 1 − Σδ = {probability_text(total)}" if total < 1 else
             f"would need Σδ = {total:g} ≥ 1: no guarantee")
    return (f"minimum over {k} certified rows with the sum of their δ's: "
            f"{upper_text(m['value'])} "
            f"({rid}) {holds} (union bound over the {k} rows)"
            + (f"; {m['note']}" if m.get("note") else ""))


def headline(minimum: dict[str, Any] | None, another: list[Result], certified: list[Result],
             test_error: float | None = None) -> str:
    """One line: the certified value a user can quote about their model, or why there is
    none."""
    if minimum is not None:
        vac = minimum.get("vacuous")
        against = minimum["vacuous_against"].split(" ", 1)[-1].strip("()").split(",")[0]
        state = "" if vac is None else (", vacuous" if vac else ", not vacuous") + \
            f" ({against})"
        test = "" if test_error is None else f"; held-out test error {test_error:g}"
        on = "" if minimum.get("quantity", "0-1 error") == "0-1 error" else \
            f" on the {minimum['quantity']}"
        return (f"headline: {upper_text(minimum['value'])} certified{on} ({minimum['id']}, "
                f"probability ≥ {probability_text(minimum['delta_total'])}){state}{test}")
    if another:
        return (f"headline: no certified bound about your model; {len(another)} compression "
                f"row(s) certify another model (listed apart)")
    if certified:
        return ("headline: no certified bound on a risk (the certified rows are estimated, "
                "not bounds, or in another unit)")
    return "headline: no certified bound"


def missing_lines(missing: list[dict[str, Any]], limit: int = 3) -> list[str]:
    """One line per missing ingredient: what gives it and the certified entries it gives."""
    out = []
    for m in missing:
        ids = m["entries"]
        names = ", ".join(ids[:limit]) + (", …" if len(ids) > limit else "")
        n = f"{len(ids)} certified entr{'y' if len(ids) == 1 else 'ies'}"
        if m.get("by_hand"):
            out.append(f"{n} need values no measurement gives ({m['give']}; the table of "
                       f"entries not computed says which)")
        else:
            out.append(f"missing: {m['give']}, for {n} ({names})")
    return out


def guidance_line(best: Result | None, has_certify: bool) -> str | None:
    """When the best certified row is vacuous: if even its zero-complexity floor is at the
    vacuity level, that the risk itself is the cause (a degenerate σ search: no KL recipe can
    help, issue 44); else, when a KL divergence dominates, the recipe that makes the KL small
    (a prior trained on a split disjoint from S) and its docs page."""
    if best is None or not best.vacuous or not best.floor:
        return None
    own, level = best.floor.get("own"), best.vacuous_threshold
    if own is not None and own >= level:  # no complexity could save it: the risk itself
        emp = best.floor.get("emp_risk")
        against = (best.trivial or {}).get("against") if level < 1 else None
        return (f"vacuous whatever the complexity: with zero complexity it would still be "
                f"{lower_text(own, 4)}, at or above the vacuity level {level:.3g}"
                + (f" ({against})" if against else "")
                + (f", because the empirical (Gibbs) risk on S is already {emp:.3g}"
                   if isinstance(emp, (int, float)) else "")
                + ": the posterior's noise makes the predictor no better than trivial (a "
                  "degenerate σ search, or a prior centre that does not predict, e.g. a head "
                  "centred at zero); measure smaller σ, or centre the prior on a model with a "
                  f"trained head; see {GUIDE}")
    dominant = str(best.floor.get("dominant", ""))
    if dominant in _NOT_KL or "kl" not in dominant.lower():
        return None
    recipe = ("train the prior on a split disjoint from S, fine-tune from it, then "
              + command("measure MODEL init=PRIOR tune_data=SPLIT"))
    return (f"vacuous because {dominant} dominates: {recipe}"
            + (" (or `boundcalc certify` does it all)" if has_certify else "")
            + f"; see {GUIDE}")
