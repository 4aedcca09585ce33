"""How much Monte Carlo certify does when the counts are left to it: one declared rule, the
same on every machine (issue 54 item 4).

The measure step's cost beyond the trainings is its passes over S with a posterior draw per
row (the isotropic rows: ``draws`` passes per σ; the per-group row: ``group_draws`` passes)
and the σ search (at most :func:`~boundcalc.measure.data.tune.search_evaluations` passes over
``tune_rows`` rows of the prior's data, fewer with the isotropic shape only). Each pass costs in proportion to the weights a row
meets times its tokens, so the work of a plan is counted in **weight·token products**

    W = weights · tokens per row · (SAMPLE_COST · passes over S · |S| + evaluations · tune rows)

with ``weights`` the Linear weights of the classifier the base builds (embeddings are
look-ups, not products) and the tokens per row of DATA as the model reads them (truncated at
``max_length``). The richest plan of :data:`LEVELS` whose W is at most :data:`BUDGET` is taken
(the last one when none is). The rule reads the base's config and DATA's texts, never a label
and never this machine's speed, so the same inputs give the same plan, hence the same
certificate, on a fast and on a loaded machine. The counts only steer how tight the Monte
Carlo term and the σ search are: each Monte Carlo bound holds for any count fixed before its
draws, and the search never sees S. A count given by the caller is kept as given.

:data:`BUDGET` was set from one measurement: the README's real-text run (the bundled
MiniLM-L6, 2,000 docstring openings of 57 tokens on average) took 14 min 48 s on 2 CPU cores
with the full plan (W ≈ 2.5·10¹³) and 11 min 15 s with a lean plan that still searched
per-group shapes (the search chose the isotropic one; W ≈ 6.0·10¹²); the lean plan (W ≈
3.2·10¹²) searches the isotropic shape only. The synthetic benchmarks (12 tokens a row: W ≈
5.3·10¹² for MiniLM's full plan, 2.9·10¹⁰ for the 2-layer BERT's) keep the full plan and their
figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

SAMPLE_COST = 2.0  # a pass with its own draw per row ≈ two plain passes (MiniLM, 2 cores:
#                    benchmarks/results/real_text_cuts_cpu.json)
BUDGET = 1.0e13  # weight·token products of the Monte Carlo passes and the σ search


@dataclass(frozen=True)
class Level:
    """One plan: the isotropic σ measured (None: none), the passes over S at the per-group σ,
    the rows of the prior's data the σ search reads and the shapes it tries."""

    name: str
    sigmas: tuple[float, ...] | None
    group_draws: int
    tune_rows: int
    tune_shape: str


LEVELS = (Level("full", (0.003, 0.01), 6, 192, "per-group"),
          Level("reduced", (0.01,), 4, 128, "per-group"),
          Level("lean", None, 2, 64, "isotropic"))
RULED = ("sigmas", "group_draws", "tune_rows", "tune_shape")  # filled by the rule when None


@dataclass(frozen=True)
class Facts:
    """What the rule reads: the classifier's Linear weights, its σ groups, DATA's rows and
    their mean tokens as the model reads them."""

    weights: int
    groups: int
    rows: int
    tokens_per_row: float


def facts(model: Any, lengths: Sequence[int]) -> Facts:
    """:class:`Facts` of ``model`` (the base's classifier; the meta device will do: only
    shapes are read) and ``lengths``, each row's count of token ids as the model reads it
    (truncated as training truncates: :func:`.preflight.token_ids`)."""
    import torch

    from ..measure.data.tune import sigma_groups

    weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    lengths = [int(n) for n in lengths]
    return Facts(int(weights), len(set(sigma_groups(model).values())), len(lengths),
                 sum(lengths) / max(len(lengths), 1))


def work(level: Level, f: Facts, draws: int, prior_fraction: float) -> float:
    """W of ``level`` (module docstring) for ``f``, ``draws`` passes per isotropic σ and the
    share ``prior_fraction`` of DATA that is not S."""
    from ..measure.data.tune import search_evaluations

    n_s = f.rows * (1 - prior_fraction)
    passes = (len(level.sigmas) if level.sigmas else 0) * draws + level.group_draws
    search = (search_evaluations(f.groups, level.tune_shape == "per-group")
              * min(level.tune_rows, f.rows * prior_fraction))
    return f.weights * f.tokens_per_row * (SAMPLE_COST * passes * n_s + search)


def choose(f: Facts, draws: int, prior_fraction: float) -> tuple[Level, dict[str, float]]:
    """The richest level whose work is within :data:`BUDGET` (else the last), and every
    level's work."""
    works = {lv.name: work(lv, f, draws, prior_fraction) for lv in LEVELS}
    for lv in LEVELS:
        if works[lv.name] <= BUDGET:
            return lv, works
    return LEVELS[-1], works


def record(level: Level, works: dict[str, float], f: Facts, kept: Sequence[str]) -> dict:
    """What report.json keeps of the rule's choice (``kept``: the ruled fields the caller
    gave, kept as given)."""
    return {"level": level.name, "budget": BUDGET, "work": works,
            "unit": "weight·token products of the Monte Carlo passes and the σ search",
            "weights": f.weights, "groups": f.groups, "rows": f.rows,
            "tokens_per_row": round(f.tokens_per_row, 2),
            "counts": {"sigmas": level.sigmas, "group_draws": level.group_draws,
                       "tune_rows": level.tune_rows, "tune_shape": level.tune_shape},
            "given_by_caller": list(kept),
            "rule": "the richest plan of full, reduced, lean whose work is within the budget "
                    "(boundcalc/certify/plan_rule.py)"}
