"""What the data side of ``measure`` is asked to do: one typed, frozen, checked options object.

:class:`MeasureOptions` gathers every choice of :func:`.task_measure.measure_task` (how DATA is
read, the Monte Carlo Gibbs risk, the Hessian trace, the per-group σ search, the machine), so
that the front end builds it once and the stages below take it whole instead of a long list of
loose arguments. Its checks live here and nowhere else: constructing it refuses a bad value with
one line naming the option in the caller's words (:func:`boundcalc.words.option`), before any
model or data file is read.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from ...errors import BoundcalcError
from ...words import option
from ..device import check_precision
from .gibbs import MODES
from .sigma_grid import DEFAULT_SIGMAS, snapped_sigmas

# keyword names a caller may use for a field (measure_task's older argument names)
ALIASES = {"alpha": "smoothing"}


@dataclass(frozen=True)
class MeasureOptions:
    """The data side's options (defaults: the CLI's); checked when built.

    Left to the data side (None, the defaults; :mod:`.sizing`, issue 44 item 4): ``sigmas``
    (with ``tune_data``: one σ chosen on the tune split; without: the default grid),
    ``draws``, ``tune_draws`` and ``hessian_probes`` (sized so that the plan fits the time
    target here).

    Reading DATA: ``device`` (auto | cpu | cuda[:i]), ``text_column``, ``label_column``,
    ``max_length`` (tokens per text), ``batch_size`` (rows per batch of every data-side pass;
    None: 32 on a CPU, sized to the card's memory on CUDA, :mod:`.batch_rows`), ``head_init``
    (the centre of tensors
    ``init`` lacks). Isotropic Gibbs risk: ``sigmas`` (each snapped to the Dziugaite–Roy grid),
    ``draws`` passes per σ (0: skip), ``delta_mc`` (δ′ of the Monte Carlo step, split over the
    σ points), ``gibbs_mode`` (auto | sample | whole), ``gibbs_samples`` (m rows drawn per
    pass), ``smoothing`` (α of prediction smoothing for language models), ``seed``. Curvature:
    ``hessian_probes`` (0 or ≥ 2), ``hessian_samples``, ``perturbation_draws`` (P̂; 0: skip).
    Per-group σ (:mod:`.tune`): ``sigma_groups`` (implied by ``tune_data``), ``tune_data`` (a
    split disjoint from DATA), ``tune_draws``, ``tune_slack``, ``group_draws`` (default
    ``draws``), ``allow_overlap``. ``init_data``: the data ``init`` was trained on. The machine:
    ``threads``, ``precision`` (fp32 | tf32 | bf16; default by device).

    Contract: an instance exists only with values that pass every check below; a bad one raises
    :class:`~boundcalc.errors.BoundcalcError` (:class:`~boundcalc.errors.DomainError` for σ)
    naming the option by :func:`boundcalc.words.option`.
    """

    device: str = "auto"
    text_column: str = "text"
    label_column: str = "label"
    max_length: int = 128
    batch_size: int | None = None
    head_init: Any = None
    sigmas: tuple[float, ...] | None = None  # None: sized (.sizing); DEFAULT_SIGMAS at most
    draws: int | None = None  # None: sized (.sizing), 20 at most
    delta_mc: float = 0.01
    gibbs_mode: str = "auto"
    gibbs_samples: int | None = None
    smoothing: float = 0.01
    seed: int = 0
    hessian_probes: int | None = None  # None: sized (.sizing), 20 at most
    hessian_samples: int = 256
    perturbation_draws: int = 0
    sigma_groups: bool = False
    tune_data: str | None = None
    tune_draws: int | None = None  # None: sized (.sizing), 4 at most
    tune_slack: float = 0.05
    group_draws: int | None = None
    allow_overlap: bool = False
    init_data: str | None = None
    threads: int | None = None
    precision: str | None = None

    def __post_init__(self) -> None:
        if self.sigmas is not None:
            object.__setattr__(self, "sigmas", tuple(float(s) for s in self.sigmas))
        if self.precision is not None:
            check_precision(self.precision)
        if self.batch_size is not None and (isinstance(self.batch_size, bool)
                                            or not isinstance(self.batch_size, int)
                                            or self.batch_size < 1):
            raise BoundcalcError(f"{option('batch_size', self.batch_size)}: expected a whole "
                                 "number of rows >= 1")
        probes = self.hessian_probes
        if (self.draws is not None and self.draws < 0) or (probes is not None
                                                           and (probes < 0 or probes == 1)):
            raise BoundcalcError(f"{option('draws')} must be >= 0 and "
                                 f"{option('hessian_probes')} 0 or >= 2")
        if self.gibbs_mode not in MODES:
            raise BoundcalcError(f"{option('gibbs_mode', repr(self.gibbs_mode))}: expected "
                                 "auto, sample or whole")
        if self.gibbs_samples is not None and self.gibbs_samples < 1:
            raise BoundcalcError(f"{option('gibbs_samples')} must be >= 1, got "
                                 f"{self.gibbs_samples}")
        if not 0 < self.delta_mc < 1:
            raise BoundcalcError(f"{option('delta_mc')} must lie in (0, 1), got {self.delta_mc}")
        if 1.0 - self.delta_mc == 1.0:  # the confidence 1 − δ′ would be written as 1
            raise BoundcalcError(f"{option('delta_mc', f'{self.delta_mc:g}')}: too small; its "
                                 "confidence 1 − δ′ rounds to 1 in double precision (use "
                                 "δ′ ≥ 1e-15)")
        if not 0 < self.smoothing < 1:
            raise BoundcalcError(f"{option('smoothing')} must lie in (0, 1), got "
                                 f"{self.smoothing}")
        if self.sigmas is not None:
            snapped_sigmas(self.sigmas)
        if self.tune_draws is not None and self.tune_draws < 1:
            raise BoundcalcError(f"per-group σ: {option('tune_draws')} must be >= 1, got "
                                 f"{self.tune_draws}")
        if not 0 <= self.tune_slack < 1:
            raise BoundcalcError(f"{option('tune_slack')} must lie in [0, 1), got "
                                 f"{self.tune_slack}")
        if self.groups and self.group_passes is not None and self.group_passes < 1:
            raise BoundcalcError(
                f"{option('tune_data')} / {option('sigma_groups')} need "
                f"{option('group_draws')} (default {option('draws')}) >= 1: the Gibbs risk on "
                "DATA at the chosen σ vector")

    @property
    def groups(self) -> bool:
        """Whether the per-group σ posterior is measured (``sigma_groups`` or ``tune_data``)."""
        return self.sigma_groups or self.tune_data is not None

    @property
    def group_passes(self) -> int | None:
        """Passes over DATA at the chosen σ vector: ``group_draws``, else ``draws`` (None
        while ``draws`` is left to the data side)."""
        return self.draws if self.group_draws is None else self.group_draws

    @classmethod
    def of(cls, options: MeasureOptions | None = None, **keywords: Any) -> MeasureOptions:
        """``options`` with ``keywords`` (field names, or an alias of :data:`ALIASES`) in
        place of its values; a fresh one from the defaults when ``options`` is None. An
        unknown keyword is a ``TypeError``, as for any Python call."""
        names = {f.name for f in fields(cls)}
        given: dict[str, Any] = {}
        for key, value in keywords.items():
            name = ALIASES.get(key, key)
            if name not in names:
                raise TypeError(f"unexpected keyword argument {key!r}")
            given[name] = value
        return replace(options, **given) if options is not None else cls(**given)
