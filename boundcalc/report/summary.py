"""One line per certified row of ``compare --json``: its floor, whether it is vacuous (and
against what level), and what dominates it; what every example prints beside its values."""

from __future__ import annotations

from typing import Any, Mapping


def floor_line(row: Mapping[str, Any], scale: float = 1.0) -> str:
    """'floor 0.0940; vacuous no (< 0.9, the error of …); dominated by KL 23.3 nats (+0.059)'
    from a row of ``boundcalc compare --json`` (keys ``floor``, ``vacuous``,
    ``vacuous_against``); a piece the row lacks says so. ``scale`` multiplies the floor (a
    value the caller converted, e.g. to bits); the vacuity level and the effects stay in the entry's
    own unit, and the line says so when ``scale`` is not 1. The floor, the least the value
    could reach, is rounded down (:func:`~boundcalc.rounding.lower_text`)."""
    from ..floor import breakdown_text
    from ..rounding import lower_text

    f = row.get("floor")
    parts = [f"floor {lower_text(f['own'] * scale)}" if f and f.get("own") is not None
             else "floor — (not a kl inverse)"]
    if row.get("vacuous") is None:
        parts.append("vacuous — (not a [0, 1] risk bound)")
    else:
        text = row.get('vacuous_against') or ('yes' if row['vacuous'] else 'no')
        parts.append(f"vacuous {text}" if scale == 1.0 else
                     f"vacuous {text} on the entry's own scale (the value ÷ {scale:.4g})")
    parts.append(f"dominated by {breakdown_text(f, short=True)}" if f and f.get("effects")
                 else "dominated by —")
    return "; ".join(parts)


def target_words(what_it_takes: dict[str, Any]) -> str:
    """The target of 'what would it take', with what it is: '0.658 (the vacuity level: the
    error of always answering the majority class of S)', '1' or a target the user gave."""
    t, rule = what_it_takes["target"], what_it_takes.get("target_rule")
    return f"{t:.4g}" + (f" ({rule})" if rule and rule not in ("1", "given") else "")

