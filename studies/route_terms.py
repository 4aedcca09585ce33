"""The arithmetic of issue 50's table: each Gibbs route's certified value taken apart into its
Gibbs error on S, its KL and its floor, and projected to other n beside the baseline.

A route is one registry entry (:data:`ROUTES`): the proximal per-group posterior
(``pac_bayes_kl_gaussian_groups_mc``), the bound-trained one (``…_learned_mc``) and the
subspace one (``…_subspace_mc``). Every number here is the registry's own evaluation of that
entry, never a formula written again:

* :func:`route_value`: the entry at a Gibbs error Ê on S, N Monte Carlo losses, n rows and a
  KL of ``kl`` nats (the KL put into the entry's own inputs as one group, or one coordinate,
  whose ‖·‖²/(2σ²) is ``kl``; the entry's own union-bound costs stay: ln 17 for the learned
  scale of the groups and learned rows, ln J for a subspace prior std chosen on a grid of J);
* :func:`floor_zero_kl`: the same at KL 0: what the row would certify had its posterior been
  its prior, the Monte Carlo step and the grid cost kept (the route's own floor);
* :func:`baseline_value`: ``test_set_kl`` of a rate of errors on n rows (the prior's
  test-set bound on S, certify's baseline, δ = 0.05);
* :func:`break_even`: the least n at which a route with the same Ê, KL and N/n would certify
  less than the baseline with the same error rate of the prior: a projection, never a bound;
* :func:`maurer_xi` and :func:`with_maurer_xi`: Maurer's exact ξ(n) = Σ_k C(n,k)(k/n)^k
  (1 − k/n)^(n−k) (Maurer 2004, arXiv cs/0411099) in place of the registry's 2√n, for the
  record's one line of arithmetic (the registry keeps 2√n, as the reference table states it);
* :func:`route_terms`: the routes' rows of a stats file as ``compare`` evaluates them, with the
  pieces above read off each row (its Ê, N, n, KL nats and grid cost).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

ROUTES = {"pac_bayes_kl_gaussian_groups_mc": "proximal groups",
          "pac_bayes_kl_gaussian_learned_mc": "bound-trained",
          "pac_bayes_kl_gaussian_subspace_mc": "subspace"}
UNITS = {"pac_bayes_kl_gaussian_groups_mc": "gibbs_groups_units",
         "pac_bayes_kl_gaussian_learned_mc": "gibbs_learned_units",
         "pac_bayes_kl_gaussian_subspace_mc": "gibbs_subspace_units"}
MC_PER_ROW = 6  # the projection's Monte Carlo losses per row of S: N = 6n
N_MAX = 10 ** 9  # break_even searches no further


def _entry(entry_id: str) -> Any:
    from boundcalc.registry import load_registry

    if entry_id not in ROUTES:
        raise ValueError(f"not a Gibbs route of issue 50: {entry_id!r}")
    return load_registry().get(entry_id)


def route_value(entry_id: str, e_hat: float, units: float, kl: float, n: float,
                prior_grid: int = 1) -> float:
    """The registry's value of route ``entry_id`` at Gibbs error ``e_hat`` on S, ``units``
    Monte Carlo losses, ``n`` rows and a KL of ``kl`` nats (module docstring); ``prior_grid``
    is the subspace row's J (ignored by the other two)."""
    from boundcalc.evaluation import evaluate

    if not (0 <= e_hat <= 1 and kl >= 0 and units >= 1 and n >= 8):
        raise ValueError(f"route_value: Ê {e_hat}, KL {kl}, N {units}, n {n} out of range")
    base = {"E_hat": e_hat, "k": units, "n": n}
    if entry_id.endswith("subspace_mc"):
        s = 0.05  # any s_P: with s_Q = s_P the KL is ‖z‖²/(2 s_P²) exactly
        return evaluate(_entry(entry_id), {**base, "dim": 1, "dist_sq": 2 * kl * s * s,
                                           "sigma_post": s, "sigma_prior": s,
                                           "prior_grid": prior_grid}).value
    scale = 1.0  # a point of the scale grid geomspace(1/4, 4, 17): ln 17 charged as in a run
    vals = {**base, "G": 1, "dist_sq": [2 * kl * scale ** 2], "rho": [1.0], "scale": scale}
    if entry_id.endswith("learned_mc"):  # σ_Q = σ_P: no variance term
        vals.update(d=[1], sigma_post=[scale])
    return evaluate(_entry(entry_id), vals, fixed=["rho"]).value


def floor_zero_kl(entry_id: str, e_hat: float, units: float, n: float,
                  prior_grid: int = 1) -> float:
    """:func:`route_value` at KL 0 (the posterior at its prior; Monte Carlo step and grid
    cost kept)."""
    return route_value(entry_id, e_hat, units, 0.0, n, prior_grid)


def baseline_value(rate: float, n: int) -> float:
    """``test_set_kl`` at ⌊rate·n⌋ errors of the prior on n rows, δ = 0.05 (certify's
    baseline, :func:`boundcalc.certify.claims.baseline`; the count rounded down, so the
    projected baseline is never above the one of the exact rate)."""
    from boundcalc.evaluation import evaluate
    from boundcalc.registry import load_registry

    return evaluate(load_registry().get("test_set_kl"),
                    {"test_errors": math.floor(rate * n + 1e-9), "m": n}).value


def break_even(entry_id: str, e_hat: float, kl: float, base_rate: float,
               prior_grid: int = 1) -> int | None:
    """The least n (≥ 8) at which :func:`route_value` at N = 6n is below
    :func:`baseline_value` at the same n, the rates Ê and ``base_rate`` and the KL held as
    measured: a projection, not a bound. None ("never") when Ê is not below the prior's rate,
    or the crossing lies beyond :data:`N_MAX`."""
    if e_hat >= base_rate:
        return None

    def wins(n: int) -> bool:
        return route_value(entry_id, e_hat, MC_PER_ROW * n, kl, n, prior_grid) \
            < baseline_value(base_rate, n)

    lo, hi = 8, 16
    if wins(lo):
        return lo
    while not wins(hi):
        if hi >= N_MAX:
            return None
        lo, hi = hi, min(2 * hi, N_MAX)
    while hi - lo > 1:  # wins(hi), not wins(lo); the gap narrows as n grows (one crossing)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if wins(mid) else (mid, hi)
    return hi


def maurer_xi(n: int) -> float:
    """Maurer's ξ(n) = Σ_{k=0}^{n} C(n,k) (k/n)^k (1 − k/n)^(n−k) (0⁰ = 1), summed in log
    space (each term by lgamma, float64)."""
    if n < 1:
        raise ValueError("maurer_xi: n must be >= 1")
    total = 2.0  # k = 0 and k = n: each term is 1
    for k in range(1, n):
        p = k / n
        total += math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                          + k * math.log(p) + (n - k) * math.log1p(-p))
    return total


def with_maurer_xi(entry_id: str, e_hat: float, units: float, kl: float, n: int,
                   prior_grid: int = 1) -> float:
    """The route's value with ln(2√n/δ) replaced by ln(ξ(n)/δ): the registry's value at a KL
    smaller by ln(2√n/ξ(n)) nats (the two enter the budget as one sum); below KL 0 the saving
    is taken from the budget by hand (kl⁻¹ of the entry's own Monte Carlo upper end)."""
    save = math.log(2 * math.sqrt(n) / maurer_xi(n))
    if kl >= save:
        return route_value(entry_id, e_hat, units, kl - save, n, prior_grid)
    from boundcalc.engine.functions import kl_inv_upper

    grid = 17 if not entry_id.endswith("subspace_mc") else prior_grid
    upper = kl_inv_upper(e_hat, math.log(2 / 0.01) / units)
    return kl_inv_upper(upper, (kl - save + math.log(grid) + math.log(2 * math.sqrt(n) / 0.05))
                        / n)


def _kl_nats(floor: dict[str, Any]) -> tuple[float, float]:
    """(KL nats, ln J) from a compare row's floor breakdown: every complexity addend is KL but
    the subspace row's ln prior_grid (an addend of its budget, not of the KL)."""
    nats = dict(floor.get("budget_nats") or {})
    nats.pop("confidence", None)
    nats.pop("grid cost", None)
    grid = sum(v for k, v in nats.items() if "prior_grid" in k)
    return sum(v for k, v in nats.items() if "prior_grid" not in k), grid


def route_terms(stats_path: str | Path) -> list[dict[str, Any]]:
    """The Gibbs routes' certified rows of the stats file (``compare``'s evaluation, no test
    error given), each with: ``value``, ``gibbs_error_on_S`` (Ê), ``units`` (N), ``n``, ``KL``
    (nats), ``prior_grid`` (J of a subspace row), ``floor_zero_KL`` (:func:`floor_zero_kl`),
    ``reproduced`` (:func:`route_value` at the row's own Ê, N, KL and n: equal to ``value`` when
    the row is read right) and ``floor_compare`` (compare's own floor, kl⁻¹(Ê, ln(2√n/δ)/n))."""
    from boundcalc.optimize.compare import compare_entries
    from boundcalc.registry import load_registry
    from boundcalc.stats import load_stats

    stats = load_stats(stats_path)
    comp = compare_entries(stats, {}, load_registry())
    out = []
    for r in comp.groups.get("certified", []):
        if r.id not in ROUTES or not r.floor:
            continue
        kl, ln_grid = _kl_nats(r.floor)
        grid = int(round(math.exp(ln_grid)))
        e_hat, n = float(r.floor["emp_risk"]), float(r.floor["n"])
        units = float(stats.scalars[UNITS[r.id]].value)
        out.append({"route": ROUTES[r.id], "id": r.id, "value": float(r.value),
                    "gibbs_error_on_S": e_hat, "units": units, "n": n, "KL": kl,
                    "prior_grid": grid,
                    "floor_zero_KL": floor_zero_kl(r.id, e_hat, units, n, grid),
                    "reproduced": route_value(r.id, e_hat, units, kl, n, grid),
                    "floor_compare": r.floor.get("own")})
    return out
