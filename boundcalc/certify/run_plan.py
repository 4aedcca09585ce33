"""The plan of one ``certify`` run, said once the split is known and before anything slow starts
(issue 54): what each later step will do, in rows and passes, from the settings and the split's
sizes. Each pass
of the measure step is timed by its own plan once the model is loaded
(:mod:`boundcalc.measure.data.work_plan`); this line is the whole run's, in counts, not
seconds."""

from __future__ import annotations

from .config import CertifyConfig


def plan_text(cfg: CertifyConfig, sizes: dict[str, int], test_rows: int | None,
              pretrained: bool, rates: tuple[float, float, int]) -> str:
    """One line: the two trainings, the measurement's passes, the compare step's (``sizes``:
    the split's rows of the prior's data, S and the σ search)."""
    parts = [
        f"prior: {rates[2]} epoch(s) on the prior's data ({sizes['prior']} rows) from "
        + ("the pretrained base" if pretrained else "a random initialisation"),
        f"posterior: {cfg.post_epochs} epoch(s) on S ({sizes['S']} rows)",
        "measure: one pass over S"
        + (f", {len(cfg.sigmas)} isotropic σ × {cfg.draws} Monte Carlo pass(es) over S"
           if cfg.sigmas else "")
        + (f", σ search on {sizes['tune']} rows of the prior's data, "
           f"{cfg.group_draws} pass(es) over S at the per-group σ" if sizes["tune"] else ""),
        "compare: " + (f"{test_rows} held-out rows: model/ and the prior, "
                       f"{cfg.heldout_draws} pass(es) per certified row's Gibbs predictor, one "
                       "disagreement pass; the prior on S" if test_rows else
                       "the prior on S (no held-out rows)")]
    return "plan: " + "; ".join(parts)
