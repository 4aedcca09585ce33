"""The plan of one ``certify`` run, said once the split is known and before anything slow starts
(issue 54): what each later step will do, in rows and passes, from the settings and the split's
sizes. Each pass
of the measure step is timed by its own plan once the model is loaded
(:mod:`boundcalc.measure.data.work_plan`); this line is the whole run's, in counts, not
seconds."""

from __future__ import annotations

from .config import CertifyConfig


def plan_text(cfg: CertifyConfig, sizes: dict[str, int], test_rows: int | None,
              pretrained: bool, rates: tuple[float, float, int],
              rule: dict | None = None) -> str:
    """One line: the two trainings, the measurement's passes, the compare step's (``sizes``:
    the split's rows of the prior's data, S and the σ search; ``rule``: the plan rule's
    record, :func:`.plan_rule.record`, named when it filled a count)."""
    parts = [
        f"prior: {rates[2]} epoch(s) on the prior's data ({sizes['prior']} rows) from "
        + ("the pretrained base" if pretrained else "a random initialisation"),
        f"posterior: {cfg.post_epochs} epoch(s) on S ({sizes['S']} rows)",
        "measure" + (_rule_words(rule) if rule else "") + ": one pass over S"
        + (f", {len(cfg.sigmas)} isotropic σ × {cfg.draws} Monte Carlo pass(es) over S"
           if cfg.sigmas else "")
        + (f", σ search ({cfg.tune_shape or 'per-group'} shape) on {sizes['tune']} rows of "
           "the prior's data, "
           f"{cfg.group_draws} pass(es) over S at the per-group σ" if sizes["tune"] else ""),
        "compare: " + (f"{test_rows} held-out rows: model/ and the prior, "
                       f"{cfg.heldout_draws} pass(es) per certified row's Gibbs predictor, one "
                       "disagreement pass; the prior on S" if test_rows else
                       "the prior on S (no held-out rows)")]
    return "plan: " + "; ".join(parts)


def _rule_words(rule: dict) -> str:
    """`` (the lean plan: 6.0e12 weight·token products, budget 1.0e13)`` when the rule filled
    a count; empty when every count was given."""
    if len(rule["given_by_caller"]) == len(rule["counts"]):
        return ""
    w = rule["work"][rule["level"]]
    return (f" (the {rule['level']} plan of the rule: {w:.1e} weight·token products of "
            f"Monte Carlo and search, budget {rule['budget']:.1e})")
