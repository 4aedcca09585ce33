"""Defaults that scale with n (issue 44 item 4): the σ points and the Monte Carlo draws of
``measure --data`` when the caller leaves them to the data side (``sigmas``, ``draws`` or
``tune_draws`` None in :class:`~.options.MeasureOptions`).

* **With tune data** (``tune_data``, a split disjoint from S) the isotropic σ is chosen there
  and S is measured at that one σ only (:func:`.stage_runs.isotropic_sigma`), the way
  ``certify`` measures its per-group posterior: the per-group search of :mod:`.tune` already bisects the isotropic
  σ with the prior weights on the tune rows (its first step); where the prior predicts (a
  checkpoint with its own task head) that σ is taken, and since nothing in it depends on S it
  costs nothing on S: the curve ``gibbs_risk_mean`` holds one point and
  ``provenance.gibbs_sigma`` says it was chosen on the tune split (``disjoint_from_S``), which
  the evaluator reads as a σ fixed before S was seen (:mod:`boundcalc.measured`). Where the
  prior's head comes from ``head_init`` (a headless base: the prior does not predict, so its
  noise tolerance says nothing) the same bisection runs with the model's weights on the tune
  rows; those weights were fit on S, so that σ is recorded as chosen with data that depend on
  S and pays its Dziugaite–Roy weight 2 ln j + ln(π²/6), as any data-dependent grid point does
  (the stage :class:`.stages.IsotropicSearch`, run by :func:`.stage_runs.isotropic_sigma`).
* **Without tune data** the default grid :data:`~.sigma_grid.DEFAULT_SIGMAS` and draws are cut
  (:func:`size`) until the plan of :mod:`.work_plan`, at this machine's calibrated speeds, fits
  :func:`target_seconds` (8 min, or 0.8 of a smaller time budget) for the whole command: the
  estimate counts the seconds spent before the plan (loading the model and the prior, the
  weights side, reading the data, the calibration) and the whole-model draws of the σ
  searches, beside the passes (issue 44: the acceptance run took 12.9 min for a plan of
  7.3); the draws first where every
  row gets its own draw (N = draws·n stays large), the σ points first where one draw covers a
  pass (N = draws). ``tune_draws`` None: 4 per σ vector, fewer when the plan needs it (the
  search never sees S, so fewer draws only make it noisier, never less honest), cut first;
  ``hessian_probes`` None: 20, fewer or none when the plan needs it (no certified row reads the
  Hessian trace), cut next; with tune data, ``search_rows`` None: every tune row, then 128,
  then 64 read by the σ searches (:func:`search_split`), cut before the draws on S.
* :func:`more_draws`: what more draws would buy: each Monte Carlo upper end kl⁻¹(Ê, ln(2k/δ′)/N)
  at the N measured and at 4·N.

Contract: what is chosen here is recorded (``provenance.sizing``, ``provenance.gibbs_sigma``,
``provenance.more_draws``); a σ is called free only when it was chosen with the prior weights
on a tune split that shares no row with S; the sizing is an estimate of this machine now, never
used in a certificate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...limits import duration_text, time_budget
from ...plan import Counts
from .options import MeasureOptions
from .sigma_grid import DEFAULT_SIGMAS

TARGET_SECONDS = 480.0  # the whole command: what it spent before the plan, then the passes
DRAW_STEPS = (20, 10, 5, 3, 2)
TUNE_DRAW_STEPS = (4, 2, 1)
SEARCH_ROW_STEPS = (None, 128, 64)  # rows of the tune data the σ searches read (None: all)
HESSIAN_STEPS = (20, 8, 2, 0)  # Hutchinson probes (0: no Hessian trace; no certified row needs it)
GRIDS = (DEFAULT_SIGMAS, (0.002, 0.005, 0.01, 0.02), (0.005, 0.01), (0.01,))
MORE = 4  # what more draws would buy: the Monte Carlo term at MORE × the draws


def target_seconds() -> float:
    """The time the sized defaults aim at: :data:`TARGET_SECONDS`, or 0.8 of the time budget
    (:func:`boundcalc.limits.time_budget`) when that is smaller."""
    return min(TARGET_SECONDS, 0.8 * time_budget())


def auto(opts: MeasureOptions) -> dict[str, bool]:
    """Which of σ, draws, tune draws, Hessian probes and (with tune data) the rows the σ
    searches read are left to the data side (σ only where there are draws: with ``draws`` 0
    no isotropic σ is measured, so none is chosen)."""
    return {"sigmas": opts.sigmas is None and opts.draws != 0, "draws": opts.draws is None,
            "tune_draws": opts.tune_draws is None, "hessian_probes": opts.hessian_probes is None,
            "search_rows": opts.search_rows is None and opts.tune_data is not None}


def on_tune(opts: MeasureOptions) -> bool:
    """Whether the isotropic σ is chosen on the tune data (one σ measured on S)."""
    return opts.sigmas is None and opts.tune_data is not None


def provisional(opts: MeasureOptions) -> MeasureOptions:
    """Concrete options for the count checks made before the model is loaded
    (:mod:`boundcalc.plan`: lower bounds): the cheapest value of every automatic choice."""
    return MeasureOptions.of(
        opts, sigmas=opts.sigmas if opts.sigmas is not None else GRIDS[-1],
        draws=opts.draws if opts.draws is not None else DRAW_STEPS[-1],
        tune_draws=opts.tune_draws if opts.tune_draws is not None else TUNE_DRAW_STEPS[-1],
        hessian_probes=(opts.hessian_probes if opts.hessian_probes is not None
                        else HESSIAN_STEPS[-1]),
        search_rows=SEARCH_ROW_STEPS[-1] if auto(opts)["search_rows"] else opts.search_rows)


def plan_counts(opts: MeasureOptions) -> Counts:
    """The stages' counts (:func:`.stages.counts`) for these options, every automatic choice
    at its cheapest (:func:`provisional`: lower bounds)."""
    from .stages import counts

    return counts(provisional(opts))


def candidates(opts: MeasureOptions, per_row_draw: bool) -> list[MeasureOptions]:
    """The concrete options to try, most work first (module docstring); cut first: the tune
    draws (the search never sees S), then the Hessian probes (no certified row reads them),
    then the rows of the tune data the searches read (fewer make the choice noisier, never
    less honest), then the draws or σ points."""
    a = auto(opts)
    grids = ([(DEFAULT_SIGMAS[0],)] if on_tune(opts) else list(GRIDS)) if a["sigmas"] \
        else [opts.sigmas]
    draws = list(DRAW_STEPS) if a["draws"] else [opts.draws]
    tune = list(TUNE_DRAW_STEPS) if a["tune_draws"] else [opts.tune_draws]
    probes = list(HESSIAN_STEPS) if a["hessian_probes"] else [opts.hessian_probes]
    rows = list(SEARCH_ROW_STEPS) if a["search_rows"] else [opts.search_rows]
    order = ([(g, d) for g in grids for d in draws] if per_row_draw
             else [(g, d) for d in draws for g in grids])
    return [MeasureOptions.of(opts, sigmas=g, draws=d, tune_draws=t, hessian_probes=h,
                              search_rows=r)
            for g, d in order for r in rows for h in probes for t in tune]


@dataclass
class Sized:
    """The options :func:`size` chose, the plan and its estimate, and the record."""

    options: MeasureOptions
    plan: list[Any]
    seconds: float
    record: dict[str, Any]


def size(opts: MeasureOptions, n: int, tune_rows: int | None, n_groups: int,
         speed: dict[str, Any], per_row_draw: bool, posterior_search: bool,
         listed: Any = None) -> Sized:
    """The first of :func:`candidates` whose plan fits :func:`target_seconds` at ``speed``
    (the cheapest when none does); ``posterior_search``: the isotropic σ is bisected with the
    model's weights on the tune rows (a stage of its own); ``listed``: the stages (default
    :data:`.stages.STAGES`)."""
    from . import work_plan

    target = target_seconds()
    tried = candidates(opts, per_row_draw)
    chosen = None
    for c in tried:
        plan = plan_of(c, n, tune_rows, n_groups, posterior_search, listed)
        seconds = work_plan.estimate(plan, speed)
        chosen = (c, plan, seconds)
        if seconds <= target:
            break
    assert chosen is not None
    c, plan, seconds = chosen
    left = [k for k, v in auto(opts).items() if v]
    record = {"auto": left, "target_seconds": target, "estimate_seconds": seconds,
              "fits": seconds <= target, "tried": len(tried),
              "sigma_points": len(c.sigmas) if c.sigmas else 0, "draws": c.draws,
              "tune_draws": c.tune_draws,
              "hessian_probes": c.hessian_probes, "search_rows": c.search_rows,
              "rule": ("σ chosen on the tune data, one σ measured on S" if on_tune(opts) else
                       "the default σ grid and draws cut until the plan fits the target")}
    return Sized(c, plan, seconds, record)


def plan_of(opts: MeasureOptions, n: int, tune_rows: int | None, n_groups: int,
            posterior_search: bool, listed: Any = None) -> list[Any]:
    """The work of the stages ``listed`` (:func:`.work_plan.stages`) for concrete ``opts``,
    with the isotropic search on the tune rows when ``posterior_search``."""
    from . import work_plan

    return work_plan.stages(opts, n, None, searched_rows(opts, tune_rows), n_groups,
                            posterior_search, listed)


def searched_rows(opts: MeasureOptions, tune_rows: int | None) -> int | None:
    """Rows of the tune data (``tune_rows`` of them; None: none) the σ searches read."""
    if tune_rows is None or opts.search_rows is None:
        return tune_rows
    return min(tune_rows, opts.search_rows)


def search_split(tune: Any, opts: MeasureOptions) -> Any:
    """The :func:`searched_rows` rows of the tune data the σ searches read: a subsample drawn
    with the seed ``opts.seed`` (:func:`subsample_rows`), stratified by label where each row
    has one class label (integers), so that a file sorted by class gives the searches every
    class in its share; ``tune`` itself when they read every row. The rows keep their batches
    (a batch's padding is its own), so the searches run a few smaller batches. Never a less
    honest certificate either way: the searches never see S."""
    from dataclasses import replace

    import torch

    m = searched_rows(opts, tune.n if tune is not None else None)
    if tune is None or m is None or m >= tune.n:
        return tune
    sizes = [_rows(b) for b in tune.batches]
    classes = not any(y is None or y.ndim != 1 or y.is_floating_point()
                      for _, y in tune.batches)  # one class label per row
    labels = torch.cat([y for _, y in tune.batches]).tolist() if classes else None
    keep = subsample_rows(tune.n, m, labels, opts.seed)
    batches, start, merged = [], 0, None
    for (inputs, y), size in zip(tune.batches, sizes):
        rows = [r - start for r in keep if start <= r < start + size]
        start += size
        if not rows:
            continue
        at = torch.tensor(rows)
        piece = ({k: v.index_select(0, at) for k, v in inputs.items()},
                 None if y is None else y.index_select(0, at))
        if merged is not None and _same_width(merged, piece) and \
                _rows(merged) + len(rows) <= max(sizes):
            merged = ({k: torch.cat([merged[0][k], piece[0][k]]) for k in piece[0]},
                      None if y is None else torch.cat([merged[1], piece[1]]))
            batches[-1] = merged
        else:
            merged = piece
            batches.append(piece)
    how = "stratified by label" if labels is not None else "uniform"
    return replace(tune, batches=batches, n=m,
                   description=f"{tune.description}, {m} rows drawn ({how}, seed {opts.seed}) "
                               "for the σ searches")


def subsample_rows(n: int, m: int, labels: list[Any] | None, seed: int) -> list[int]:
    """``m`` of the row indices 0..n−1, sorted, drawn without replacement with ``seed``: with
    ``labels``, each class gets its share m·n_c/n (largest remainders first, ties to the
    smaller label) drawn within it; else uniformly."""
    import numpy as np

    rng = np.random.default_rng([seed, 30_000])
    if labels is None:
        return sorted(int(i) for i in rng.choice(n, size=m, replace=False))
    classes = sorted(set(labels))
    where = {c: [i for i, y in enumerate(labels) if y == c] for c in classes}
    exact = {c: m * len(where[c]) / n for c in classes}
    share = {c: int(math.floor(exact[c])) for c in classes}
    for c in sorted(classes, key=lambda c: -(exact[c] - share[c]))[:m - sum(share.values())]:
        share[c] += 1
    out: list[int] = []
    for c in classes:
        out += [int(i) for i in rng.choice(where[c], size=share[c], replace=False)]
    return sorted(out)


def _rows(batch: Any) -> int:
    """Rows of a ``(inputs, labels)`` batch."""
    return int(next(iter(batch[0].values())).shape[0])


def _same_width(a: Any, b: Any) -> bool:
    """Whether two batches hold the same inputs of the same shape but their rows."""
    return a[0].keys() == b[0].keys() and all(a[0][k].shape[1:] == b[0][k].shape[1:]
                                              for k in a[0])


def sizing_text(sized: Sized) -> str:
    """One line on what was sized and why."""
    r = sized.record
    if not r["auto"]:
        return ""
    what = (f"1 σ chosen on the tune data (measured once on S), {r['draws']} draws"
            if r["rule"].startswith("σ chosen") else
            f"{r['sigma_points']} σ × {r['draws']} draws")
    fits = ("within" if r["fits"] else "the cheapest choice, still over")
    rows = (f", σ searches on {r['search_rows']} tune rows" if r.get("search_rows") else "")
    return (f"defaults sized to this machine: {what}, {r['tune_draws']} tune draw(s) per σ "
            f"vector, {r['hessian_probes']} Hessian probes{rows}; {fits} the target of "
            f"{duration_text(r['target_seconds'])}")


def more_draws(stats: Any) -> dict[str, Any]:
    """For each Monte Carlo curve on S: Ê, N, the δ′ of one point, the confidence term
    kl⁻¹(Ê, ln(2/δ′)/N) − Ê at the N measured and at :data:`MORE`·N."""
    from ...engine.functions import kl_inv_upper

    out: dict[str, Any] = {}
    for name in ("gibbs_risk_mean", "gibbs_risk_groups"):
        c = stats.curves.get(name)
        if c is None or not c.n_samples:
            continue
        delta = (1 - c.confidence) / len(c.at) if c.confidence is not None else 0.01
        N = int(c.n_samples)
        rows = []
        for x, e in zip(c.at, c.value):
            e = float(e)
            now = max(e, kl_inv_upper(e, math.log(2 / delta) / N)) - e
            more = max(e, kl_inv_upper(e, math.log(2 / delta) / (MORE * N))) - e
            rows.append({"at": float(x), "E_hat": e, "term": now, "term_more": more})
        best = min(rows, key=lambda r: r["E_hat"] + r["term"])
        out[name] = {"N": N, "N_more": MORE * N, "delta_mc_point": delta, "points": rows,
                     "best": best}
    return out


def more_draws_text(found: dict[str, Any], seconds_per_draw: dict[str, float]) -> list[str]:
    """One line per curve: the Monte Carlo term now and at :data:`MORE`× the draws, with the
    time those draws would add here."""
    lines = []
    for name, r in found.items():
        b = r["best"]
        extra = seconds_per_draw.get(name)
        cost = f", about {duration_text(extra * (MORE - 1))} more here" if extra else ""
        lines.append(f"{name}: the Monte Carlo term adds {b['term']:.2g} to Ê = "
                     f"{b['E_hat']:.4g} at N = {r['N']:,}; {MORE}× the draws (N = "
                     f"{r['N_more']:,}{cost}) would make it {b['term_more']:.2g}")
    return lines


def say_more_draws(stats: Any, opts: MeasureOptions, n: int, say: Any) -> None:
    """Record :func:`more_draws` in ``provenance.more_draws`` (with its lines) and say them;
    the time of one more draw from the calibration in ``provenance.plan``."""
    found = more_draws(stats)
    if not found:
        return
    speed = (stats.provenance.get("plan") or {}).get("calibration") or {}
    per_row = speed.get("noisy")
    rows = opts.gibbs_samples if opts.gibbs_samples is not None else n
    mean = stats.curves.get("gibbs_risk_mean")
    per_draw = {} if per_row is None else {
        "gibbs_risk_mean": per_row * rows * (len(mean.at) if mean is not None else 0),
        "gibbs_risk_groups": per_row * rows}
    lines = more_draws_text(found, {k: v * _passes(stats, k) for k, v in per_draw.items()})
    stats.provenance["more_draws"] = {**found, "lines": lines}
    for line in lines if say is not None else []:
        say(line)


def _passes(stats: Any, name: str) -> float:
    """Passes over the rows behind one curve point (the draws of :func:`more_draws_text`)."""
    if name == "gibbs_risk_mean":
        q = stats.scalars.get("gibbs_passes")
        return float(q.value) if q is not None else 1.0
    rec = (stats.provenance.get("gibbs_groups") or {}).get("mc") or {}
    return float(rec.get("passes") or 1)
