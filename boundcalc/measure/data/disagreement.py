"""How often the model disagrees with its own Gibbs posterior on rows that are not in S
(docs/sources/disagreement.md).

For the 0-1 loss R(h) ≤ R(Q) + D(h, Q), with D(h, Q) = P_{x, w∼Q}(h(x) ≠ h_w(x)) a quantity
of inputs alone. Given m rows drawn independently of S, of h and of Q, one fresh draw w_i ∼ Q
per row makes the indicators 1[h(x_i) ≠ h_{w_i}(x_i)] i.i.d. Bernoulli(D), so their mean d̂
enters a test-set bound kl⁻¹(d̂, ln(1/δ_d)/m) with no further Monte Carlo term.

* :func:`measure_disagreement`: h's prediction (index of the largest logit) on every row, then
  one pass of :func:`.gibbs.gibbs_estimate` in ``sample`` mode (every row its own exact
  posterior draw: the row-wise hooks of :mod:`.row_noise`, or one weight draw per row where
  they are not provably exact) with h's predictions in place of the labels: the pass's mean
  0-1 loss is d̂. The rows' own labels are never read.
* :func:`add_disagreement`: the same at the per-group σ vector of the stats file's Gibbs
  measurement on S (``provenance.gibbs_groups``), written into the stats file as the curve
  ``disagreement_groups`` (one point: the scale of ``gibbs_risk_groups``), the scalar
  ``disagreement_rows`` and ``provenance.disagreement_groups``; the entry
  ``disagreement_gibbs_groups_mc`` reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from ...errors import BoundcalcError, StatsError
from ...stats import Curve, Quantity, Stats
from .dataset_io import Batched
from .gibbs import MonteCarlo, gibbs_estimate
from .hf import TaskModel
from .inputs import Progress, to_device

CURVE = "disagreement_groups"
COUNT = "disagreement_rows"
RECORD = "disagreement_groups"
SEED_OFFSET = 20_000  # never a seed of the Gibbs draws on S (seed + i) or of the σ search
WHAT = "disagreement of the model with its Gibbs posterior"


@dataclass
class Disagreement:
    """``count`` of the ``rows`` rows on which h and its row's posterior draw disagree, and
    how the draws were made (``engine``: ``hooks`` or ``loop``; ``note``: why not hooks)."""

    count: int
    rows: int
    engine: str
    note: str | None
    seed: int

    @property
    def mean(self) -> float:
        """d̂ = count / rows."""
        return self.count / self.rows


def predictions(tm: TaskModel, rows: Batched, device: torch.device) -> list[torch.Tensor]:
    """h's prediction on every row, batch by batch (int64, on the CPU): the index of the
    largest logit, computed as the Gibbs 0-1 loss computes it (``argmax`` of float64 logits)."""
    out = []
    with torch.no_grad():
        for inputs, _ in rows.batches:
            logits = tm.model(**to_device(inputs, device)).logits
            if not bool(torch.isfinite(logits).all()):
                raise BoundcalcError(f"{tm.source}: the model produced NaN or infinite logits "
                                     f"on {rows.source}")
            out.append(logits.double().argmax(-1).cpu())
    return out


def measure_disagreement(tm: TaskModel, rows: Batched, device: torch.device,
                         sigma: Mapping[str, float], *, seed: int = 0,
                         progress: Progress | None = None) -> Disagreement:
    """Count the rows of ``rows`` on which ``tm``'s prediction differs from that of its own
    posterior draw N(θ, diag σ²) (``sigma``: one std per trainable parameter name), one
    independent draw per row from a device generator seeded ``seed``. Labels in ``rows`` are
    ignored. Classifiers only (the inequality is for the 0-1 loss)."""
    if tm.is_lm:
        raise BoundcalcError(f"{tm.source}: the disagreement route bounds a 0-1 risk, for "
                             f"classifiers; this is a {tm.task.replace('_', ' ')} model")
    if tm.model.training:
        raise BoundcalcError(f"{tm.source}: the model is in training mode (dropout makes h "
                             "random); put it in evaluation mode (model.eval()) first")
    if rows.n < 1:
        raise BoundcalcError(f"{rows.source}: no rows to measure the disagreement on (m = 0)")
    preds = predictions(tm, rows, device)
    relabelled = Batched([(inputs, p) for (inputs, _), p in zip(rows.batches, preds)], rows.n,
                         rows.seq_len, rows.source, rows.description, rows.tokens,
                         dict(rows.columns))

    def tell(done: int, total: int, what: str) -> None:
        if progress:
            progress(done, total, WHAT)

    est = gibbs_estimate(tm, relabelled, device, [dict(sigma)],
                         MonteCarlo(1, seed, 0.0, mode="sample"), tell if progress else None)
    if est.mode != "sample" or est.losses_per_pass != rows.n or est.passes != 1:
        raise BoundcalcError(f"{WHAT}: expected one draw for each of the {rows.n} rows, got "
                             f"{est.describe()}")  # pragma: no cover - sample mode always is
    count = int(round(float(est.means[0, 0]) * rows.n))
    return Disagreement(count, rows.n, est.engine, est.note, seed)


def group_sigma(model: torch.nn.Module, record: Mapping[str, object]) -> dict[str, float]:
    """``{parameter name: σ_g}`` from a ``provenance.gibbs_groups`` record (its ``groups`` and
    ``sigma``), for the parameters of ``model`` grouped as the Gibbs measurement grouped them
    (:func:`.tune.sigma_groups`); a model whose groups the record does not name is refused."""
    from .tune import sigma_groups

    groups, sigma = record.get("groups"), record.get("sigma")
    if not isinstance(groups, list) or not isinstance(sigma, list) or len(groups) != len(sigma):
        raise StatsError("provenance.gibbs_groups: expected lists 'groups' and 'sigma' of one "
                         "length (a stats file from measure with tune_data or sigma_groups)")
    of = dict(zip(groups, (float(s) for s in sigma)))
    named = sigma_groups(model)
    missing = sorted({g for g in named.values() if g not in of})
    if missing:
        raise StatsError(f"provenance.gibbs_groups names no σ for the group(s) "
                         f"{', '.join(missing[:4])} of this model: not the model it was "
                         "measured on")
    return {n: of[g] for n, g in named.items()}


def add_disagreement(stats: Stats, tm: TaskModel, rows: Batched, device: torch.device, *,
                     seed: int = 0, progress: Progress | None = None) -> Disagreement:
    """Measure the disagreement of ``tm`` (the model the stats file was measured on) with its
    per-group Gibbs posterior on ``rows`` (rows not in S; labels unused), at the σ vector of
    ``provenance.gibbs_groups``, with the seed ``seed`` + :data:`SEED_OFFSET`, and write it
    into ``stats`` (module docstring). Refused, with one line, without that record."""
    rec = stats.provenance.get("gibbs_groups")
    curve = stats.curves.get("gibbs_risk_groups")
    if not isinstance(rec, dict) or curve is None or len(curve.at) != 1:
        raise StatsError("the disagreement is measured at the σ vector of the per-group Gibbs "
                         "risk: the stats file has no provenance.gibbs_groups with its one-point "
                         "curve gibbs_risk_groups")
    sigma = group_sigma(tm.model, rec)
    got = measure_disagreement(tm, rows, device, sigma, seed=seed + SEED_OFFSET,
                               progress=progress)
    how = ("every row its own draw (forward hooks: exact law of each module's output)"
           if got.engine == "hooks" else "every row its own whole weight draw")
    if got.note:
        how += f" ({got.note})"
    stats.curves[CURVE] = Curve(
        "scale", np.array([float(curve.at[0])]), np.array([got.mean]), estimated=True,
        n_samples=got.rows,
        method=(f"fraction of {got.rows} rows of {rows.source} (labels unused) on which the "
                f"model's prediction differs from that of its posterior draw N(θ, diag σ_g²) "
                f"at σ_g = scale·ρ_g of provenance.gibbs_groups; {how}; one draw per row, "
                f"seed {got.seed}"))
    stats.scalars[COUNT] = Quantity(float(got.rows), method=(
        f"rows of {rows.source} on which the disagreement was measured, one draw each"))
    stats.provenance[RECORD] = {
        "rows": got.rows, "disagreements": got.count, "source": rows.source,
        "labels": "unused", "scale": float(curve.at[0]), "groups": list(rec["groups"]),
        "sigma": [float(s) for s in rec["sigma"]], "draws_per_row": 1, "engine": got.engine,
        "note": got.note, "seed": got.seed,
        "rule": "h(x) = argmax of the logits, the same rule as the Gibbs 0-1 loss; one "
                "posterior draw per row, independent of the rows and of each other"}
    return got
