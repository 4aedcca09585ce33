"""Gaussian weight perturbations and the Monte Carlo Gibbs risk (pac_bayes.md §3,
monte_carlo.md).

* :class:`Perturber`, :func:`perturbed`: set every trainable parameter to θ + u, u ∼ N(0, σ²)
  drawn on the model's device in the parameter dtype, from one saved copy of θ made once per
  call (no copy per draw); restoring copies θ back, bit for bit.
* :func:`monte_carlo_gibbs_risk`: k noisy draws of a closure's loss, mean Ê and the certified
  upper end kl⁻¹(Ê, ln(2/δ′)/k) (Langford & Caruana 2002), for a loss in [0, 1].
* :func:`gibbs_estimate`: the Gibbs risk of a task model on a data set at several σ, in one of
  two modes. ``sample`` (the default where exact): every row of every pass gets its own
  posterior draw (:mod:`.row_noise`), so k passes over n rows give N = k·n independent [0, 1]
  losses; ``whole``: one draw per pass over all rows, N = k. ``samples = m`` evaluates each
  pass on m rows drawn uniformly *with replacement* from the data (N = k·m, resp. k).

Statistics are accumulated in float64 on the device; one host synchronisation per pass.
Reproducible for a given seed, device and memory budget; CPU and CUDA runs agree within Monte
Carlo error, not bitwise (different generators).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ...errors import BoundcalcError, DomainError
from ...words import option
from ...limits import check_allocation
from ...stats import Quantity
from .curvature import Closure, _params
from .dataset_io import Batched
from .hf import TaskModel
from .inputs import Progress, lm_targets, mask_is_full, model_call, on_device, to_device
from .lm_loss import logit_rows, row_mean, scored, smoothed
from ...options import Record, like
from .options import MODES, MeasureOptions  # declared with the options that choose them

Sigma = float | Mapping[str, float]


@dataclass
class GibbsRisk:
    """Monte Carlo estimate of the Gibbs empirical risk under Gaussian weight noise."""

    mean: Quantity
    upper: Quantity
    losses: np.ndarray


def _sigma_for(sigma: Sigma, name: str) -> float:
    s = sigma.get(name) if isinstance(sigma, Mapping) else sigma
    if s is None:
        raise BoundcalcError(f"sigma: no noise level for parameter '{name}'")
    s = float(s)
    if not math.isfinite(s) or s < 0:
        raise DomainError(f"sigma for '{name}': expected a finite number >= 0, got {s}")
    return s


def _device_of(model: torch.nn.Module) -> torch.device:
    p = next(iter(model.parameters()), None)
    return p.device if p is not None else torch.device("cpu")


def device_generator(model: torch.nn.Module, seed: int) -> torch.Generator:
    """A generator on the model's device, seeded with ``seed``."""
    return torch.Generator(device=_device_of(model)).manual_seed(int(seed))


class Perturber:
    """One saved copy of the trainable parameters; :meth:`draw` sets θ + u, :meth:`restore`
    copies θ back exactly."""

    def __init__(self, model: torch.nn.Module, generator: torch.Generator | None = None):
        self.named = _params(model)
        self.gen = generator if generator is not None else device_generator(model, 0)
        with torch.no_grad():
            self.saved = {n: p.detach().clone() for n, p in self.named}

    def draw(self, sigma: Sigma) -> None:
        """Set every trainable parameter to θ + u, u ∼ N(0, σ²) in the parameter dtype."""
        with torch.no_grad():
            for n, p in self.named:
                s = _sigma_for(sigma, n)
                if s == 0:
                    p.copy_(self.saved[n])
                    continue
                if self.gen.device == p.device:
                    p.normal_(0.0, s, generator=self.gen)
                else:  # a generator on another device (e.g. a CPU one for a CUDA model)
                    p.copy_(torch.empty(p.shape, dtype=p.dtype, device=self.gen.device)
                            .normal_(0.0, s, generator=self.gen))
                p.add_(self.saved[n])

    def restore(self) -> None:
        """Copy the saved θ back (bit-identical)."""
        with torch.no_grad():
            for n, p in self.named:
                p.copy_(self.saved[n])


@contextmanager
def perturbed(model: torch.nn.Module, sigma: Sigma,
              generator: torch.Generator | None = None) -> Iterator[Perturber]:
    """Add N(0, σ²) noise to every trainable parameter; restore the originals on exit.

    ``sigma`` is one std for all parameters or a ``{parameter name: std}`` mapping. Noise is
    drawn from ``generator`` (default: a generator on the model's device seeded 0) in the
    parameter dtype. Yields the :class:`Perturber` (``saved`` holds the original values).
    """
    pert = Perturber(model, generator)
    try:
        pert.draw(sigma)
        yield pert
    finally:
        pert.restore()


def monte_carlo_gibbs_risk(model: torch.nn.Module, loss_fn: Closure, sigma: Sigma, *,
                           k: int = 100, delta_prime: float = 0.05, seed: int = 0) -> GibbsRisk:
    """Mean loss over k Gaussian weight draws and its kl upper end at confidence 1 − δ′.

    ``loss_fn`` must return the empirical loss on the sample, a number in [0, 1].
    """
    from ...engine.functions import kl_inv_upper

    if k < 1:
        raise BoundcalcError(f"monte_carlo_gibbs_risk: k must be >= 1, got {k}")
    if not 0 < delta_prime < 1:
        raise DomainError(f"monte_carlo_gibbs_risk: delta_prime must lie in (0, 1), "
                          f"got {delta_prime}")
    pert = Perturber(model, device_generator(model, seed))
    losses = np.empty(k)
    try:
        for i in range(k):
            pert.draw(sigma)
            with torch.no_grad():
                value = float(loss_fn())
            if not (math.isfinite(value) and 0.0 <= value <= 1.0):
                raise DomainError(f"monte_carlo_gibbs_risk: draw {i} gave loss {value}; the kl "
                                  "bound needs a loss in [0, 1] (e.g. the 0-1 error)")
            losses[i] = value
    finally:
        pert.restore()
    mean = float(losses.mean())
    c = math.log(2 / delta_prime) / k
    upper = kl_inv_upper(mean, c)
    sig = sigma if not isinstance(sigma, Mapping) else "per-parameter"
    stderr = float(losses.std(ddof=1) / math.sqrt(k)) if k > 1 else None
    return GibbsRisk(
        mean=Quantity(mean, estimated=True, stderr=stderr,
                      method=f"mean loss over {k} draws of N(0, sigma^2 I) noise, sigma={sig}, "
                             f"seed {seed}, device generator, parameter dtype"),
        upper=Quantity(upper, confidence=1 - delta_prime,
                       method=f"kl^-1(mean, ln(2/delta')/k) with k={k}, delta'={delta_prime} "
                              "(Langford-Caruana)",
                       note="upper bound on the Gibbs empirical risk with probability >= 1-delta'"),
        losses=losses)


# ---- the Gibbs risk of a task model on a data set ----------------------------------------

@dataclass(frozen=True)
class MonteCarlo(Record):
    """How a Monte Carlo Gibbs risk is drawn: ``passes`` per σ (≥ 1), the ``seed`` of every
    draw, ``alpha`` (the prediction smoothing of a language model's bounded loss; 0: none, as
    the 0-1 loss of a classifier reads it), ``mode`` (auto | sample | whole:
    :func:`resolve_mode`) and ``samples`` (rows drawn with replacement per pass, or None: every
    row). A sub-record of :class:`.options.MeasureOptions`, its fields declared by reference to
    that record's (:func:`boundcalc.options.like`) and checked when built; the options record
    gives it (:meth:`of`), so that the estimates below read one small record, not five
    keywords."""

    passes: int = like(MeasureOptions, "draws", 1, low=1, none=False)
    seed: int = like(MeasureOptions, "seed", high=None)  # offset seeds: searches, d̂, …
    alpha: float = like(MeasureOptions, "smoothing", open_low=False)
    mode: str = like(MeasureOptions, "gibbs_mode")
    samples: int | None = like(MeasureOptions, "gibbs_samples")

    @classmethod
    def of(cls, options: Any, passes: int) -> MonteCarlo:
        """``passes`` per σ drawn as the options record (:class:`.options.MeasureOptions`)
        says: its seed, smoothing, Gibbs mode and rows per pass."""
        return cls(passes, options.seed, options.smoothing, options.gibbs_mode,
                   options.gibbs_samples)


@dataclass
class GibbsEstimate:
    """Per-pass mean bounded losses at each σ point and how many independent losses they hold.

    ``means[i, j]`` is the mean loss of pass j at point i; every pass averages
    ``losses_per_pass`` independent [0, 1] losses of mean L̂(Q) (the rows, each with its own
    draw, in ``sample`` mode; 1 in ``whole`` mode, where the rows share the draw), so the Monte
    Carlo count is N = passes · losses_per_pass (:attr:`n_losses`).
    """

    means: np.ndarray
    mode: str
    rows_per_pass: int
    losses_per_pass: int
    subsampled: bool
    engine: str
    note: str | None = None  # why the per-sample hooks were not used (they fail closed)

    @property
    def passes(self) -> int:
        return int(self.means.shape[1])

    @property
    def n_losses(self) -> int:
        return self.passes * self.losses_per_pass

    def upper(self, delta_prime: float) -> np.ndarray:
        """kl⁻¹(Ê, ln(2/δ′)/N) at each point (never below Ê)."""
        from ...engine.functions import kl_inv_upper

        c = math.log(2 / delta_prime) / self.n_losses
        return np.array([max(float(m), kl_inv_upper(float(m), c)) for m in self.means.mean(1)])

    def describe(self) -> str:
        """How the draws were made (for the stats file's method text)."""
        rows = (f"{self.rows_per_pass} rows drawn uniformly with replacement from S"
                if self.subsampled else f"all {self.rows_per_pass} rows of S")
        if self.note:
            rows += f" ({self.note})"
        if self.mode == "sample":
            how = ("every row its own draw u ∼ N(0, σ²I)"
                   + (" (forward hooks: exact law of each module's output, weights untouched)"
                      if self.engine == "hooks" else " (one weight draw per row)"))
            return (f"{self.passes} passes over {rows}, {how}: N = {self.passes}·"
                    f"{self.losses_per_pass} = {self.n_losses} independent [0, 1] losses")
        return (f"{self.passes} draws u ∼ N(0, σ²I), each evaluated on {rows}: N = "
                f"{self.n_losses} independent per-draw means")


def resolve_mode(tm: TaskModel, mode: str) -> tuple[str, str]:
    """``(mode, engine)``: ``auto`` is ``sample`` where the row-wise hooks are exact, else
    ``whole``; ``sample`` without the hooks evaluates one weight draw per row (exact, slow)."""
    from .row_noise import unsupported_reason

    if mode not in MODES:
        raise BoundcalcError(f"{option('gibbs_mode', repr(mode))}: expected one of "
                             f"{', '.join(MODES)}")
    if mode == "whole":
        return "whole", "weights"
    reason = unsupported_reason(tm.model, [n for n, _ in _params(tm.model)])
    if reason is None:
        return "sample", "hooks"
    return ("sample", "loop") if mode == "sample" else ("whole", "weights")


def defers(device: torch.device) -> bool:
    """Whether the row-wise hooks run deferred on ``device`` (:class:`.row_noise.RowNoise`):
    on a card, where reading a count back stalls the queue, a Gram without a factor is
    counted and its batch replayed; on a CPU a host read costs nothing, so such rows are
    repaired on the spot (the same draws and the same losses: the replay is exactly that
    pass). Measured on MiniLM-L6 with 64-token padded rows: 3 of 4 batches replayed, a
    Monte Carlo pass 1.5–2.5× the cost of the pass with rows repaired on the spot (issue 44)."""
    return device.type != "cpu"


def _row_bytes(tm: TaskModel, seq_len: int) -> int:
    """A generous estimate of the transient memory of one row in a forward pass with row-wise
    noise: a few activations of the widest layer and the attention scores."""
    widths = [max(m.in_features, m.out_features) for m in tm.model.modules()
              if isinstance(m, torch.nn.Linear)] or [1]
    heads = int(getattr(tm.model.config, "num_attention_heads", 1) or 1)
    elt = next(iter(tm.model.parameters())).element_size()
    out = tm.n_outputs * (seq_len * elt if tm.is_lm else 8)  # logits (:mod:`.lm_loss`)
    return elt * seq_len * (8 * max(widths) + 3 * heads * seq_len) + 2 * out


def rows_per_chunk(tm: TaskModel, seq_len: int, batch_rows: int) -> int:
    """Rows evaluated at once in ``sample`` mode: as many as the memory budget allows for
    their activations and noise (the weights themselves are not counted, as everywhere in
    :mod:`boundcalc.limits`), at most a data batch; a one-line error when not even one row
    fits."""
    from ..device import work_budget_for

    per_row = _row_bytes(tm, seq_len)
    room = work_budget_for(_device_of(tm.model))  # the machine's free memory unless set
    check_allocation(per_row, "one row of a forward pass with per-sample Gibbs draws", room)
    return max(1, min(batch_rows, room // per_row))


def _bounded_rows(tm: TaskModel, inputs: dict[str, torch.Tensor], y: torch.Tensor | None,
                  alpha: float, full_mask: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row bounded loss (float64, on the device; see :mod:`.data_pass`) and the count of
    non-finite logits, without a host synchronisation. ``full_mask``: the attention mask is
    all ones (:func:`.inputs.mask_is_full`, read on the host) and is left out of the model
    call, where it would only be read back to be skipped."""
    if tm.is_lm:
        inputs, targets, keep = lm_targets(tm, inputs)
    logits = tm.model(**model_call(inputs, full_mask)).logits
    if tm.is_lm:  # the compute-dtype logits read once, float64 a block at a time (lm_loss)
        lp, _, bad = scored(logits, targets, tm.task == "causal_lm")
        loss = row_mean(smoothed(lp, logits.shape[-1], alpha), keep)
    else:
        bad = (~torch.isfinite(logits)).sum()
        loss = (logits.argmax(-1) != y).double()
    return loss.clamp(0.0, 1.0), bad


def _batch_rows(data: Batched) -> int:
    """The rows of ``data``'s largest batch."""
    return max(next(iter(b[0].values())).shape[0] for b in data.batches)


def _take(batch: tuple[dict[str, torch.Tensor], torch.Tensor | None], rows: torch.Tensor):
    inputs, y = batch
    return ({k: v.index_select(0, rows) for k, v in inputs.items()},
            None if y is None else y.index_select(0, rows))


def _pass_batches(data: Batched, m: int | None, rng: np.random.Generator, chunk: int):
    """The row groups of one pass: every batch (cut into ``chunk`` rows), or m rows drawn
    uniformly with replacement, grouped by their batch (the order does not matter)."""
    sizes = [next(iter(b[0].values())).shape[0] for b in data.batches]
    if m is None:
        for b, size in zip(data.batches, sizes):
            for lo in range(0, size, chunk):
                yield b if (lo == 0 and size <= chunk) else _take(b, torch.arange(lo, min(size,
                                                                             lo + chunk)))
        return
    starts = np.cumsum([0] + sizes)
    picks = np.sort(rng.integers(0, data.n, size=m))
    which = np.searchsorted(starts, picks, side="right") - 1
    for i in np.unique(which):
        rows = torch.from_numpy(picks[which == i] - starts[i])
        for lo in range(0, rows.shape[0], chunk):
            yield _take(data.batches[i], rows[lo:lo + chunk])


def gibbs_estimate(tm: TaskModel, data: Batched, device: torch.device,
                   sigmas: Sequence[Sigma], mc: MonteCarlo,
                   progress: Progress | None = None,
                   stop_above: float | None = None) -> GibbsEstimate:
    """The Gibbs risk at every σ in ``sigmas`` (a float or a ``{parameter name: σ}`` mapping
    each), drawn as ``mc`` says; see the module docstring for the modes and ``mc.samples``
    (≥ 1 rows or None, as :class:`.options.MeasureOptions` declares it).

    ``stop_above`` (one pass of whole-model draws only, as a σ search asks): a pass stops as
    soon as its summed loss exceeds ``stop_above``·rows (every loss is ≥ 0, so its mean is then
    certainly above ``stop_above``) and its mean is that partial sum over the rows: a lower
    bound still above ``stop_above``, so a search that only asks "risk ≤ target?" of it gets
    the answer the full pass gives."""
    from .row_noise import RowNoise

    passes, seed, alpha, mode, samples = mc.passes, mc.seed, mc.alpha, mc.mode, mc.samples
    requested = mode
    mode, engine = resolve_mode(tm, mode)
    model = tm.model
    names = [n for n, _ in _params(model)]
    note = None
    if engine == "hooks":  # fail closed: hooks only where provably exact on this forward
        note = _hooks_unproven(tm, data, device, names, alpha)
        if note is not None:
            mode, engine = ("sample", "loop") if requested == "sample" else ("whole", "weights")
            note = f"per-sample hooks not used ({note}): {engine} draws in {mode} mode"
            if progress:
                progress(0, len(sigmas) * passes, note)
    per_row = mode == "sample"
    chunk = min(rows_per_chunk(tm, data.seq_len, _batch_rows(data))
                if engine == "hooks" else (1 if engine == "loop" else 1 << 62),
                logit_rows(tm, data.seq_len, device))
    rows = samples if samples is not None else data.n
    per_batch = f", batches of {min(chunk, _batch_rows(data))} rows"
    means = np.empty((len(sigmas), passes))
    pert = Perturber(model) if engine != "hooks" else None
    total = len(sigmas) * passes
    try:
        for i, s in enumerate(sigmas):
            label = f"{s:.3g}" if not isinstance(s, Mapping) else "per-parameter"
            sig = {n: _sigma_for(s, n) for n in names}
            gen = device_generator(model, seed + i)
            rng = np.random.default_rng([seed, i])
            if pert is not None:
                pert.gen = gen
            hooks = (RowNoise(model, sig, gen, deferred=defers(device)) if engine == "hooks"
                     else None)
            with torch.no_grad(), (hooks if hooks is not None else _null()):
                for j in range(passes):
                    if progress:
                        progress(i * passes + j, total,
                                 f"Gibbs risk σ={label}, {rows} samples per step{per_batch}")
                    if engine == "weights":
                        pert.draw(sig)
                    stop = (stop_above * rows if stop_above is not None and passes == 1
                            and engine == "weights" else None)
                    total_loss, bad = _one_pass(tm, _pass_batches(data, samples, rng, chunk),
                                                device, alpha, hooks,
                                                pert.draw if engine == "loop" else None, sig,
                                                stop)
                    if bad > 0:
                        raise BoundcalcError(f"{tm.source}: the perturbed model produced NaN or "
                                             f"infinite logits at σ={label}")
                    means[i, j] = total_loss / rows
    finally:
        if pert is not None:
            pert.restore()
    return GibbsEstimate(means, mode, rows, rows if per_row else 1, samples is not None,
                         engine, note)


def _one_pass(tm: TaskModel, batches, device: torch.device, alpha: float,
              hooks: Any, draw: Callable | None, sig: dict[str, float],
              stop: float | None = None) -> tuple[float, float]:
    """``(summed bounded loss, count of non-finite logits)`` of one pass over ``batches``, with
    one host synchronisation: the per-batch sums and the hooks' counts of rows whose Gram had no
    factor (:class:`.row_noise.RowNoise`, deferred) are read together at the end; a batch with
    such rows is then run again with :meth:`~.row_noise.RowNoise.replay` (same draws, those
    rows repaired) and its figures replaced. ``draw``: a weight draw before each batch (the
    ``loop`` engine). ``stop`` (no hooks): the pass ends once the summed loss exceeds it (a
    host synchronisation per batch then), its sum so far returned."""
    sums, bads, fails = [], [], []
    running = 0.0
    for batch in batches:
        inputs, y = _on_device(batch, device)
        full = mask_is_full(batch[0])
        if draw is not None:
            draw(sig)
        mark = None
        if hooks is not None:
            mark = hooks.mark()
            hooks.start_pass(next(iter(inputs.values())).shape[0])
        loss, b = _bounded_rows(tm, inputs, y, alpha, full)
        sums.append(loss.sum())
        bads.append(b.double())
        failed = hooks.failures() if hooks is not None else None
        if failed is not None:
            fails.append((len(sums) - 1, failed.double(), mark, batch))
        if stop is not None and hooks is None:
            running += float(sums[-1])
            if running > stop:  # the mean is above stop/rows whatever the other rows give
                break
    got = torch.stack([*sums, *bads, *(f[1] for f in fails)]).tolist()  # the pass's one sync
    n = len(sums)
    for (k, _, mark, batch), count in zip(fails, got[2 * n:]):
        if count > 0:  # rare: rows whose Gram had no factor; the same draws, repaired
            inputs, y = _on_device(batch, device)
            with hooks.replay(mark):
                hooks.start_pass(next(iter(inputs.values())).shape[0])
                loss, b = _bounded_rows(tm, inputs, y, alpha, mask_is_full(batch[0]))
            got[k], got[n + k] = float(loss.sum()), float(b)
    return sum(got[:n]), sum(got[n:2 * n])


def _on_device(batch, device: torch.device):
    inputs, y = batch
    return to_device(inputs, device), None if y is None else on_device(y, device)


def _hooks_unproven(tm: TaskModel, data: Batched, device: torch.device, names: list[str],
                    alpha: float) -> str | None:
    """Why the row-wise hooks are not provably exact on this model's forward, checked on
    the first rows of the first batch without noise (:func:`.row_audit.audit`); None: they are."""
    from .row_audit import audit

    batch = data.batches[0]
    inputs, y = _on_device(batch, device)
    rows = next(iter(inputs.values())).shape[0]

    def run(k: int) -> None:
        part, yk = _take((inputs, y), torch.arange(k, device=device))
        _bounded_rows(tm, part, yk, alpha)

    return audit(tm.model, {n: 1.0 for n in names}, run, rows)


@contextmanager
def _null() -> Iterator[None]:
    yield


def gibbs_risk(tm: TaskModel, data: Batched, device: torch.device, sigmas: Sequence[Sigma],
               mc: MonteCarlo, progress: Progress | None = None) -> np.ndarray:
    """(len(sigmas), mc.passes) array of per-pass mean bounded losses (see
    :func:`gibbs_estimate`; ``whole`` mode gives one posterior draw per pass)."""
    return gibbs_estimate(tm, data, device, sigmas, mc, progress).means
