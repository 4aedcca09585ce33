"""Per-group Gaussian posteriors N(w, diag σ_g²) whose σ_g are chosen on data the bound does
not use (docs/sources/pac_bayes.md §6).

σ_g = c·ρ_g for every parameter of group g (the groups of :func:`sigma_groups`), prior
N(w₀, diag σ_g²) with the same σ_g, so KL = Σ_g ‖w_g − w₀,g‖²/(2σ_g²). The two factors are
chosen differently, because the PAC-Bayes prior must not depend on S:

* the **shape** ρ (one Dziugaite–Roy grid point per group) is searched with
  :func:`choose_shape`, which sees only the tune batches and the weights it is given. With the
  prior weights w₀ and a tune split disjoint from S (``measure --tune-data``) nothing in it
  depends on S, so it costs nothing. Chosen on S, or with the posterior weights (which were fit
  on S), each ρ_g pays its Dziugaite–Roy weight 2 ln j_g + ln(π²/6);
* the **scale** c is chosen on the declared grid :data:`SCALE_GRID` with the posterior weights
  and the real distances (both depend on S), so it always pays ln |grid|;
* the Monte Carlo Gibbs risk is then measured on S once, at σ = c·ρ, with fresh draws
  (:func:`final_risk`): where per-sample draws are exact, every sample of every pass gets its
  own draw (gibbs.py's ``sample`` mode), so k passes over n samples give N = k·n independent
  losses; otherwise one draw per equal chunk of S (:func:`unit_risks`). The confidence term
  counts those N losses.

The stats file records all of it under ``provenance.gibbs_groups`` and the curve
``gibbs_risk_groups`` (one point, the chosen c); ``pac_bayes_kl_gaussian_groups_mc`` reads them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ...errors import BoundcalcError
from ...words import keyword, option
from .dataset_io import Batched
from .gibbs import MonteCarlo, gibbs_estimate, gibbs_risk, perturbed, resolve_mode
from .hf import TaskModel
from .options import MeasureOptions
from .sigma_grid import dr_sigma

J_MAX = 1400  # σ ≈ 2.9e-4: below this the search stops refining
SCALE_GRID = tuple(float(x) for x in np.geomspace(0.25, 4.0, 17))  # = the formula's grid
# How finely the three bisections of choose_shape stop, in steps j of the Dziugaite–Roy grid
# (σ_j ∝ e^{−j/200}: 10 steps ≈ 5 % in σ). Each halving costs one pass over the tune rows, and
# nothing here is charged (the search only steers), so the steps are as coarse as the next
# stage allows: the isotropic σ to 5 %, each group's tolerance to 28 % (the joint offset
# refines them together afterwards, to 10 %). Issue 54 item 4: 117 evaluations of 192 rows
# were 7 of the real-text run's minutes on 2 cores; now at most 89 (16 groups).
ISO_TOL, GROUP_TOL, OFFSET_TOL = 10, 50, 20
REACH = 400  # a group alone may take σ up to e^{2} ≈ 7.4 times the isotropic σ
SCALE_STRIDE = 4  # choose_scale: every 4th grid point first, then the neighbours of the best
FREE = "chosen on data disjoint from S: no union-bound cost"
CHARGED = ("chosen with data that depend on S: each ρ_g pays its Dziugaite–Roy weight "
           "2 ln j_g + ln(π²/6)")

Risk = Callable[[Mapping[str, float]], float]


def sigma_groups(model: torch.nn.Module) -> dict[str, str]:
    """``{parameter name: group}``: the stats groups of :func:`param_groups` (embeddings,
    ``layer.i``, head), each split into its matrices (``:matrix``, ndim ≥ 2) and its vectors
    (``:vector``: biases, norms, tokens), which tolerate very different noise."""
    from .curvature import param_groups

    try:
        base = param_groups(model)
    except BoundcalcError:
        base = {}
    return {n: f"{base.get(n, 'other')}:{'matrix' if p.ndim >= 2 else 'vector'}"
            for n, p in model.named_parameters()}


def group_distances(model: torch.nn.Module, prior: torch.nn.Module,
                    groups: Mapping[str, str]) -> dict[str, tuple[int, float]]:
    """``{group: (parameter count, ‖w_g − w₀,g‖²)}`` in float64 over every parameter."""
    ref = dict(prior.named_parameters())
    out: dict[str, list[float]] = {}
    for n, p in model.named_parameters():
        q = ref.get(n)
        if q is None or q.shape != p.shape:
            raise BoundcalcError(f"prior weights: parameter '{n}' is missing or has another "
                                 f"shape ({tuple(p.shape)} expected); {option('init')} must be "
                                 "the same architecture as MODEL")
        d = float((p.detach().double().cpu() - q.detach().double().cpu()).square().sum())
        acc = out.setdefault(groups[n], [0, 0.0])
        acc[0] += p.numel()
        acc[1] += d
    return {g: (int(c), s) for g, (c, s) in out.items()}


def risk_draws(tm: TaskModel, data: Batched, device: torch.device,
               sigma: float | Mapping[str, float], draws: int, seed: int, alpha: float,
               progress: Any = None) -> np.ndarray:
    """``draws`` values of the bounded loss of θ + u over ``data``, u ~ N(0, diag σ²) with a
    σ per parameter name: one posterior draw per pass (gibbs.py's ``whole`` mode)."""
    return np.asarray(gibbs_risk(tm, data, device, [sigma],
                                 MonteCarlo(draws, seed, alpha, mode="whole"), progress))[0]


def search_risk(tm: TaskModel, data: Batched, device: torch.device,
                sigma: Mapping[str, float], mc: MonteCarlo, stop_above: float) -> float:
    """The mean bounded loss of ``mc.passes`` whole-model draws over ``data`` at ``sigma``, as
    a search that asks only "≤ ``stop_above``?" needs it: with one pass, the pass stops once
    its mean is certainly above ``stop_above`` (:func:`~.gibbs.gibbs_estimate`; the answer
    is the full pass's)."""
    return float(gibbs_estimate(tm, data, device, [sigma], mc,
                                stop_above=stop_above).means.mean())


@dataclass
class FinalRisk:
    """The Monte Carlo Gibbs risk on S at the chosen σ vector: N independent [0, 1] losses of
    mean ``mean`` (:func:`final_risk`)."""

    mean: float
    n_losses: int
    passes: int
    mode: str  # "sample" (every row its own draw), "chunk" or "whole"
    rows_per_unit: int  # rows averaged by one loss: 1 in sample mode
    how: str  # the method text


def final_risk(tm: TaskModel, data: Batched, device: torch.device,
               sigma: Mapping[str, float], mc: MonteCarlo, progress: Any = None) -> FinalRisk:
    """The Gibbs risk on ``data`` (S) at ``sigma``, ``mc.passes`` passes drawn as ``mc`` says.

    Where per-sample draws are exact (``mc.mode`` auto or sample, :func:`gibbs.resolve_mode`),
    every row of every pass gets its own posterior draw (:func:`gibbs_estimate`): N = k·n
    (k·m with ``mc.samples`` = m rows drawn with replacement per pass). Otherwise (``whole``
    asked, or auto on a model whose row-wise noise is not exact, e.g. tied weights) S is cut
    into equal chunks with one draw each (:func:`unit_risks`), or, with ``mc.samples``, one draw
    per pass over the m rows. Every loss is in [0, 1], independent given S, of mean the Gibbs
    risk on S, so kl⁻¹(Ê, ln(2/δ′)/N) holds (docs/sources/monte_carlo.md).
    """
    draws, seed, alpha, samples = mc.passes, mc.seed, mc.alpha, mc.samples
    resolved, _ = resolve_mode(tm, mc.mode)
    if resolved == "sample" or samples is not None:
        est = gibbs_estimate(tm, data, device, [sigma],
                             MonteCarlo(draws, seed, alpha, resolved, samples), progress)
        return FinalRisk(float(est.means[0].mean()), est.n_losses, est.passes, est.mode,
                         1 if est.mode == "sample" else est.rows_per_pass, est.describe())
    losses, rows = unit_risks(tm, data, device, sigma, draws, seed, alpha, progress)
    n = len(losses)
    if rows == data.n:
        how = (f"{draws} draws u ∼ N(0, diag σ_g²), each evaluated on all {data.n} rows of S: "
               f"N = {n} independent per-draw means")
        return FinalRisk(float(losses.mean()), n, draws, "whole", rows, how)
    how = (f"{draws} passes over the {data.n} rows of S, cut into chunks of {rows} rows, every "
           f"chunk its own draw u ∼ N(0, diag σ_g²) (per-sample draws are not exact for this "
           f"model or {keyword('gibbs_mode', 'whole')} was asked): N = {n} independent "
           "chunk means")
    return FinalRisk(float(losses.mean()), n, draws, "chunk", rows, how)


def unit_rows(data: Batched, most: int = 64, least: int = 8) -> int:
    """Rows per Monte Carlo unit: the largest divisor ≤ ``most`` of every batch's row count,
    so all units have the same size; 0 when that is below ``least`` (then a unit is a pass)."""
    g = 0
    for inputs, _ in data.batches:
        g = math.gcd(g, int(next(iter(inputs.values())).shape[0]))
    c = max((d for d in range(1, min(g, most) + 1) if g % d == 0), default=0)
    return c if c >= least else 0


def unit_risks(tm: TaskModel, data: Batched, device: torch.device,
               sigma: Mapping[str, float], draws: int, seed: int, alpha: float,
               progress: Any = None) -> tuple[np.ndarray, int]:
    """The bounded loss of independent Monte Carlo *units*: S cut into equal chunks of
    :func:`unit_rows` rows, every chunk with its own posterior draw, ``draws`` times. Returns
    (unit losses, rows per unit). The units are independent given S, each in [0, 1], and their
    mean is an unbiased estimate of the Gibbs risk on S, so kl⁻¹(Ê, ln(2/δ′)/N) holds with
    N = number of units (Chernoff for independent [0, 1] variables; docs/sources/pac_bayes.md
    §3). Without equal chunks a unit is a whole pass (:func:`risk_draws`). The fallback of
    :func:`final_risk` where per-sample draws are not exact."""
    import dataclasses

    from .data_pass import run_pass

    c = unit_rows(data)
    if c == 0:
        return risk_draws(tm, data, device, sigma, draws, seed, alpha, progress), data.n
    chunks = []
    for inputs, y in data.batches:
        rows = int(next(iter(inputs.values())).shape[0])
        for lo in range(0, rows, c):
            part = {k: v[lo:lo + c] for k, v in inputs.items()}
            chunks.append(dataclasses.replace(
                data, batches=[(part, None if y is None else y[lo:lo + c])], n=c))
    gen = torch.Generator().manual_seed(seed)
    out = np.empty(draws * len(chunks))
    for d in range(draws):
        if progress:
            progress(d, draws, "Gibbs risk, per-group σ")
        for i, chunk in enumerate(chunks):
            with perturbed(tm.model, sigma, gen):
                r = run_pass(tm, chunk, device, alpha=alpha, norms=False)
            out[d * len(chunks) + i] = float(r.bounded.mean())
    return out, c


@dataclass
class Shape:
    """The outcome of :func:`choose_shape`: one Dziugaite–Roy index per group."""

    groups: list[str]
    j: list[int]
    j_isotropic: int
    target: float
    base: float
    kind: str  # "per-group" or "isotropic"
    # each evaluation's σ indices and tune risk; where search_groups stopped a pass once it
    # was certain to exceed the target, the lower bound it stopped at (above the target)
    trace: list[dict[str, Any]] = field(default_factory=list)

    @property
    def rho(self) -> list[float]:
        return [dr_sigma(j) for j in self.j]


def _mapping(groups: Mapping[str, str], sig: Mapping[str, float]) -> dict[str, float]:
    return {n: sig[g] for n, g in groups.items()}


def search_evaluations(n_groups: int, per_group: bool = True) -> int:
    """An upper bound on the risk evaluations of :func:`choose_shape` (its three bisections;
    the first alone without ``per_group``) plus :func:`choose_scale`
    (:func:`scale_evaluations`) for ``n_groups`` groups."""
    if not per_group:
        return ISOTROPIC_EVALUATIONS + scale_evaluations()
    return (ISOTROPIC_EVALUATIONS + n_groups * _bisections(REACH, GROUP_TOL)
            + _bisections(REACH, OFFSET_TOL) + scale_evaluations())


def bisect_ok(ok: Callable[[dict[str, int]], bool], lo: int, hi: int,
              at: Callable[[int], dict[str, int]], tol: int) -> int:
    """The smallest j in [lo, hi] (largest σ) with ok(at(j)), by bisection (the risk is taken
    to fall with j); ``hi`` is assumed ok and returned if nothing smaller is."""
    if ok(at(lo)):
        return lo
    while hi - lo > tol:
        mid = (lo + hi) // 2
        if ok(at(mid)):
            hi = mid
        else:
            lo = mid
    return hi


def isotropic_j(ok: Callable[[dict[str, int]], bool], names: list[str]) -> int:
    """The isotropic step of :func:`choose_shape`: the smallest Dziugaite–Roy index j (the
    largest σ) with ``ok`` at σ_j on every group of ``names``, by bisection to within
    :data:`ISO_TOL`;
    :data:`J_MAX` when even that σ is not ok. At most :data:`ISOTROPIC_EVALUATIONS` calls."""
    every = lambda j: dict.fromkeys(names, j)  # noqa: E731
    return J_MAX if not ok(every(J_MAX)) else bisect_ok(ok, 1, J_MAX, every, ISO_TOL)


def _bisections(span: int, tol: int) -> int:
    return 1 + max(0, math.ceil(math.log2(max(span / tol, 1))))


ISOTROPIC_EVALUATIONS = 1 + _bisections(J_MAX, ISO_TOL)


def choose_shape(risk: Risk, groups: Mapping[str, str], sizes: Mapping[str, int], base: float,
                 slack: float, per_group: bool = True) -> Shape:
    """Search ρ on the Dziugaite–Roy grid using only ``risk`` (the tune-data Gibbs risk of
    the weights it closes over; nothing else is seen).

    1. isotropic: the largest grid σ whose risk stays ≤ target = base + slack (bisection on j);
    2. each group alone: its noise tolerance, the largest σ_g ≥ the isotropic σ (up to 7.4×)
       whose risk (only group g perturbed) stays ≤ target, by bisection to within
       :data:`GROUP_TOL` steps;
    3. all tolerances together, shifted down by the smallest common offset in j that brings
       the joint risk to ≤ target, by bisection to within :data:`OFFSET_TOL` (some groups
       may end below the isotropic σ).
    Of (1) and (3) the one with the smaller Σ_g d_g/ρ_g² (the KL if every coordinate moved
    equally far, a guess that needs no distance) is kept. Without ``per_group`` only (1)
    runs: the isotropic shape, in at most :data:`ISOTROPIC_EVALUATIONS` evaluations. Common random numbers (``risk`` is
    called with one seed) make the comparisons between σ vectors smooth.
    """
    names = sorted(sizes, key=lambda g: (-sizes[g], g))
    target = base + slack
    trace: list[dict[str, Any]] = []

    def ok(js: Mapping[str, int]) -> bool:
        r = risk(_mapping(groups, {g: dr_sigma(j) for g, j in js.items()}))
        trace.append({"j": {g: int(j) for g, j in js.items()}, "risk": r})
        return r <= target

    def largest_ok(lo: int, hi: int, at: Callable[[int], dict[str, int]], tol: int) -> int:
        return bisect_ok(ok, lo, hi, at, tol)

    j_iso = isotropic_j(ok, names)
    if not per_group:
        return Shape(groups=names, j=[int(j_iso)] * len(names), j_isotropic=j_iso,
                     target=target, base=base, kind="isotropic", trace=trace)
    tol: dict[str, int] = {}
    for g in names:
        def alone(j: int, g: str = g) -> dict[str, int]:
            out = dict.fromkeys(names, J_MAX * 10)  # σ ≈ 0: only group g is perturbed
            out[g] = j
            return out
        tol[g] = largest_ok(max(1, j_iso - REACH), j_iso, alone, GROUP_TOL)
    # at offset j_iso − min(tol) every σ_g is ≤ the isotropic σ, so that offset is ok
    off = largest_ok(0, max(j_iso - min(tol.values()), 0),
                     lambda o: {g: tol[g] + o for g in names}, OFFSET_TOL)
    joint = {g: tol[g] + off for g in names}

    def proxy(js: Mapping[str, int]) -> float:
        return sum(sizes[g] / dr_sigma(js[g]) ** 2 for g in names)

    iso = dict.fromkeys(names, j_iso)
    per_group = proxy(joint) < proxy(iso)
    chosen = joint if per_group else iso
    return Shape(groups=names, j=[int(chosen[g]) for g in names], j_isotropic=j_iso,
                 target=target, base=base, kind="per-group" if per_group else "isotropic",
                 trace=trace)


def choose_scale(risk: Risk, groups: Mapping[str, str], shape: Shape,
                 dist_sq: Mapping[str, float], n: int, draws: int, delta: float,
                 delta_mc: float) -> tuple[float, list[dict[str, float]]]:
    """The scale c on :data:`SCALE_GRID` minimising the bound one would get with ``risk`` (the
    tune-data Gibbs risk of the posterior weights) in place of the Gibbs risk on S: kl⁻¹ of the
    Monte Carlo upper end at ``draws`` units, with KL = Σ ‖w_g − w₀,g‖²/(2c²ρ_g²) and δ/|grid|.

    The grid is searched coarse to fine (:func:`scale_order`): every :data:`SCALE_STRIDE`-th
    point, then around the best so far at half the stride, down to the neighbours: 9 of the 17
    points, where the bound, falling in c through the KL and rising through the risk, has one
    valley. The choice is among the grid's points either way, so the charge is ln |grid| as
    before; a second valley the coarse points miss only makes the bound looser, never wrong.
    ``rows``: one per point tried, in the order tried."""
    from ...engine.functions import kl_inv_upper

    rows: list[dict[str, float]] = []
    bounds: dict[int, float] = {}

    def bound_at(i: int) -> float:
        c = SCALE_GRID[i]
        sig = {g: c * r for g, r in zip(shape.groups, shape.rho)}
        kl = sum(dist_sq[g] / (2 * sig[g] ** 2) for g in shape.groups)
        r = risk(_mapping(groups, sig))
        up = kl_inv_upper(r, math.log(2 / delta_mc) / draws)
        b = kl_inv_upper(up, (kl + math.log(2 * math.sqrt(n) * len(SCALE_GRID) / delta)) / n)
        rows.append({"scale": c, "tune_risk": r, "KL": kl, "proxy_bound": b})
        return b

    for batch in scale_order(len(SCALE_GRID), SCALE_STRIDE, bounds):
        for i in batch:
            bounds[i] = bound_at(i)
    best = min(bounds, key=lambda i: (bounds[i], i))
    if not math.isfinite(bounds[best]):
        best = len(SCALE_GRID) // 2
    return SCALE_GRID[best], rows


def scale_order(size: int, stride: int, seen: Mapping[int, float]) -> Iterator[list[int]]:
    """The grid indices :func:`choose_scale` tries, batch by batch: every ``stride``-th index
    (and the last), then the untried indices at ± half the stride around the best of
    ``seen`` (filled by the caller between batches), halving down to ± 1."""
    first = sorted(set(range(0, size, stride)) | {size - 1})
    yield first
    step = stride // 2
    while step >= 1:
        best = min(seen, key=lambda i: (seen[i], i))
        yield [i for i in (best - step, best + step) if 0 <= i < size and i not in seen]
        step //= 2


def scale_evaluations(size: int = len(SCALE_GRID), stride: int = SCALE_STRIDE) -> int:
    """An upper bound on the risk evaluations of :func:`choose_scale`."""
    coarse = len(set(range(0, size, stride)) | {size - 1})
    return coarse + 2 * max(0, math.ceil(math.log2(stride))) if stride > 1 else coarse


@dataclass
class Search:
    """What :func:`search_groups` chose before S is read for the Gibbs risk: the groups, their
    sizes and distances, the shape, the scale on :data:`SCALE_GRID` and where they were chosen
    (``free``: the shape was searched on a split disjoint from S with the prior weights)."""

    groups: dict[str, str]
    sizes: dict[str, int]
    dist_sq: dict[str, float]
    shape: Shape
    scale: float
    scale_rows: list[dict[str, float]]
    searched: bool  # on the tune split (else on S)
    free: bool
    where: str
    prior_source: str | None = None  # the prior centre (Tuning.source)
    shared_rows: int = 0  # rows of the tune split that are rows of S (Tuning.shared_rows)

    @property
    def sigma(self) -> dict[str, float]:
        """σ_g = scale·ρ_g by group."""
        return {g: self.scale * r for g, r in zip(self.shape.groups, self.shape.rho)}


@dataclass(frozen=True)
class Tuning:
    """What the per-group σ search reads besides S and the options: the prior as a predictor
    (``prior``, the checkpoint ``source``: the prior centre), the tune rows (``rows``: the
    split ``options.tune_data``; None: the shape is searched on S, charged) and how many of
    them are rows of S (``shared_rows``, measured by content by the caller and allowed with
    ``options.allow_overlap``: the shape then depends on S and is charged)."""

    prior: TaskModel
    source: str | None = None
    rows: Batched | None = None
    shared_rows: int = 0


def measure_groups(stats: Any, tm: TaskModel, data: Batched, device: torch.device,
                   options: MeasureOptions, tuning: Tuning, *, delta: float = 0.05,
                   progress: Any = None) -> None:
    """Choose σ_g = c·ρ_g and measure the Gibbs risk on ``data`` (S) once, into ``stats``:
    :func:`search_groups`, then :func:`finish_groups` (see both)."""
    found = search_groups(tm, data, device, options, tuning, delta=delta, progress=progress)
    finish_groups(stats, tm, data, device, options, found, progress=progress)


def search_groups(tm: TaskModel, data: Batched, device: torch.device, options: MeasureOptions,
                  tuning: Tuning, *, delta: float = 0.05, progress: Any = None) -> Search:
    """Choose σ_g = c·ρ_g (nothing is measured on S here; ``data`` is read for its size only
    when ``tuning.rows`` is given).

    With ``tuning.rows`` (the split ``options.tune_data``, disjoint from S) the shape ρ is
    searched with the **prior** weights on those rows only, and S is read for the first time by
    :func:`finish_groups`. Without them the shape is searched on S with the posterior weights
    and charged (see the module docstring). The search uses ``options.tune_draws`` draws per
    σ vector and keeps the Gibbs risk within ``options.tune_slack`` of the weights' own;
    ``delta`` is the bound's δ with which the scale is chosen.
    """
    prior, tune, prior_source = tuning.prior, tuning.rows, tuning.source
    shared_rows = tuning.shared_rows
    from .data_pass import run_pass

    tune_source = options.tune_data
    draws, tune_draws, slack = options.group_passes, options.tune_draws, options.tune_slack
    delta_mc, alpha, seed = options.delta_mc, options.smoothing, options.seed
    gibbs_mode, samples = options.gibbs_mode, options.gibbs_samples
    groups = sigma_groups(tm.model)
    dist = group_distances(tm.model, prior.model, groups)
    sizes = {g: c for g, (c, _) in dist.items()}
    dist_sq = {g: d for g, (_, d) in dist.items()}
    searched = tune is not None
    # ``shared_rows``: rows of ``tune`` that are rows of S (measured by content by the caller,
    # allowed with options.allow_overlap): the shape then depends on S and is charged
    free = searched and not shared_rows
    s_tm, s_data = (prior, tune) if searched else (tm, data)
    search_seed = seed + 10_000  # never the seed of the final draws on S
    what = "σ search" + (" on the tune data" if free else
                         " on the tune data, sharing rows with S (charged)" if searched else
                         " on S (charged)")
    # evaluations the search makes at most (bisections of choose_shape, then the scale grid):
    # the total of its progress, so that a long search is seen moving
    per_group = options.tune_shape == "per-group"
    planned = search_evaluations(len(set(groups.values())), per_group)
    count = [0]

    def tick() -> None:
        count[0] += 1
        if progress:
            progress(min(count[0], planned), planned, f"{what}, {tune_draws} draw(s) each")

    if progress:
        progress(0, planned, what)
    base = float(run_pass(s_tm, s_data, device, alpha=alpha, norms=False).bounded.mean())

    def shape_risk(sig: Mapping[str, float]) -> float:
        # choose_shape asks only "risk ≤ base + slack?": a pass stops once its loss is above
        # that for sure (the same answer, the rest of the rows unread; issue 54)
        tick()
        return search_risk(s_tm, s_data, device, sig,
                           MonteCarlo(tune_draws, search_seed, alpha, mode="whole"),
                           stop_above=base + slack)

    shape = choose_shape(shape_risk, groups, sizes, base, slack, per_group)
    scale_data = tune if searched else data

    def scale_risk(sig: Mapping[str, float]) -> float:
        tick()
        return float(risk_draws(tm, scale_data, device, sig, tune_draws, search_seed,
                                alpha).mean())

    # the N of the final measurement, known without reading S (it only steers the choice of c)
    if resolve_mode(tm, gibbs_mode)[0] == "sample":
        units_guess = draws * (samples if samples is not None else data.n)
    else:
        units_guess = draws if samples is not None else draws * max(1, data.n // 64)
    c, scale_rows = choose_scale(scale_risk, groups, shape, dist_sq, data.n, units_guess,
                                 delta, delta_mc)
    where = (f"{tune_source} ({tune.n} samples) with the prior weights {prior_source} only"
             if free else
             f"{tune_source} ({tune.n} samples, {shared_rows} of them rows of S) with the prior "
             f"weights {prior_source}: not disjoint from S, charged as if chosen on S"
             if searched else "S itself with the posterior weights")
    return Search(groups, sizes, dist_sq, shape, c, scale_rows, searched, free, where,
                  prior_source, shared_rows)


def finish_groups(stats: Any, tm: TaskModel, data: Batched, device: torch.device,
                  options: MeasureOptions, found: Search, *, progress: Any = None) -> None:
    """The Gibbs risk on ``data`` (S) at the σ vector ``found`` chose, measured once into
    ``stats`` (:func:`final_risk` with ``options.gibbs_mode`` and ``options.gibbs_samples``:
    per-sample draws where exact, ``options.group_passes`` passes), with the record
    ``provenance.gibbs_groups`` (naming ``found.prior_source`` and ``found.shared_rows``)."""
    from ...engine.functions import kl_inv_upper
    from ...stats import Curve, Quantity

    tune_source, searched, free = options.tune_data, found.searched, found.free
    draws, tune_draws, slack = options.group_passes, options.tune_draws, options.tune_slack
    delta_mc, seed = options.delta_mc, options.seed
    shape, c, groups = found.shape, found.scale, found.groups
    sizes, dist_sq, sigma = found.sizes, found.dist_sq, found.sigma
    samples = options.gibbs_samples
    prior_source, shared_rows = found.prior_source, found.shared_rows
    fin = final_risk(tm, data, device, _mapping(groups, sigma), MonteCarlo.of(options, draws),
                     progress)
    units, mean = fin.n_losses, fin.mean
    upper = max(mean, kl_inv_upper(mean, math.log(2 / delta_mc) / units))
    stats.curves["gibbs_risk_groups"] = Curve(
        "scale", np.array([c]), np.array([mean]), ci=np.array([[mean, upper]]),
        confidence=1 - delta_mc, estimated=True, n_samples=units,
        method=(f"Monte Carlo on S at σ_g = scale·ρ_g (provenance.gibbs_groups): {fin.how}; "
                f"seed {seed}; ci = [Ê, kl⁻¹(Ê, ln(2/δ′)/N)], N = {units}, δ′ = {delta_mc}"))
    stats.scalars["gibbs_groups_units"] = Quantity(float(units), method=(
        f"independent [0, 1] Monte Carlo losses at the per-group σ vector: {fin.how}"))
    stats.provenance["gibbs_groups"] = {
        "groups": shape.groups,
        "rule": "param_groups(model) split into matrices (ndim >= 2) and vectors",
        "n_params": [sizes[g] for g in shape.groups],
        "dist_sq": [dist_sq[g] for g in shape.groups],
        "shape_j": shape.j, "shape": shape.rho, "shape_kind": shape.kind,
        "isotropic_j": shape.j_isotropic,
        "shape_chosen_on": found.where, "shape_disjoint_from_S": free,
        "shape_note": FREE if free else CHARGED,
        "shape_target": {"base_risk": shape.base, "slack": slack, "target": shape.target,
                         "draws": tune_draws, "evaluations": len(shape.trace)},
        "scale": c, "scale_grid": list(SCALE_GRID),
        "scale_chosen_on": (f"{tune_source if searched else 'S'} with the posterior weights and "
                            f"the distances ‖w_g − w₀,g‖² (they depend on S): charged "
                            f"ln {len(SCALE_GRID)}"),
        "scale_search": found.scale_rows,
        "sigma": [sigma[g] for g in shape.groups],
        "prior_centre": prior_source, "tune_data": tune_source if searched else None,
        "tune_shared_rows": shared_rows if searched else None,
        "mc": {"mode": fin.mode, "passes": fin.passes, "rows_per_unit": fin.rows_per_unit,
               "units": units, "delta_mc": delta_mc,
               "samples_per_pass": samples if samples is not None else data.n},
    }
