"""What the data side of ``measure`` is asked to do: one typed, frozen, checked options object.

:class:`MeasureOptions` gathers every choice of :func:`.task_measure.measure_task` (how DATA is
read, the Monte Carlo Gibbs risk, the Hessian trace, the per-group σ search, the machine), so
that the front end builds it once and the stages below take it whole instead of a long list of
loose arguments. Its checks live here and nowhere else: constructing it refuses a bad value with
one line naming the option in the caller's words (:func:`boundcalc.words.option`), before any
model or data file is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import BoundcalcError, DomainError
from ...options import Record, Spec, spec
from ...words import option
from .sigma_grid import snapped_sigmas

# the Gibbs risk's ways of drawing (gibbs.py) and the data side's arithmetic (device.py):
# declared here, with the options that choose them, so that reading them loads no torch
MODES = ("auto", "sample", "whole")
PRECISIONS = ("fp32", "tf32", "bf16")
# the bound-trained posterior's choices (bound_posterior.BoundTraining; certify's --bound-*)
BOUND_SIGMAS = ("groups", "scale")  # what is learned of σ: σ_Q,g per group, or the prior's scale
BOUND_INITS = ("model", "prior")  # where μ starts
BOUND_MEANS = ("all", "moved")  # whose means are trained: every group's, or those model ≠ prior
# the subspace posterior's adapted modules (subspace.SubspaceSpec; certify's --subspace-layers)
SUBSPACE_LAYERS = ("all", "attention", "head")
OBJECTIVES = ("quad", "classic")  # the bound-trained posterior's training objectives

# keyword names a caller may use for a field (measure_task's older argument names)
ALIASES = {"alpha": "smoothing"}


TUNE_SHAPES = ("per-group", "isotropic")  # the σ shapes the search tries (tune.choose_shape)

@dataclass(frozen=True)
class MeasureOptions(Record):
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
    split disjoint from DATA), ``tune_draws``, ``tune_slack``, ``tune_shape``, ``group_draws`` (default
    ``draws``), ``allow_overlap``. ``init_data``: the data ``init`` was trained on. The machine:
    ``threads``, ``precision`` (fp32 | tf32 | bf16; default by device).

    Contract: an instance exists only with values that pass every field's declaration
    (:mod:`boundcalc.options`: one wording) and the rules between fields (:meth:`check`); a
    bad one raises :class:`~boundcalc.errors.BoundcalcError`
    (:class:`~boundcalc.errors.DomainError` for a σ off the grid) naming the option by
    :func:`boundcalc.words.option`.
    """

    device: str = spec("auto", Spec(str, help="auto | cpu | cuda[:i]"))
    text_column: str = spec("text", Spec(str, help="text column of DATA"))
    label_column: str = spec("label", Spec(str, help="label column of DATA"))
    max_length: int = spec(128, Spec(int, low=2, unit="tokens",
                                     help="tokens per text (truncate)"))
    batch_size: int | None = spec(None, Spec(
        int, low=1, none=True, unit="rows",
        help="samples per batch (default: 32 on a CPU, sized to the card's memory on CUDA)"))
    head_init: Any = None  # checked where it is parsed (prior_spec.parse_head_init)
    sigmas: tuple[float, ...] | None = spec(None, Spec(
        float, low=0, open_low=True, many=True, none=True, error=DomainError,
        help="posterior σ for the Monte Carlo Gibbs risk (repeatable; snapped to the "
             "Dziugaite–Roy grid); default: with {tune_data} one σ chosen there (free), else up to "
             "seven σ, 0.001 … 0.1, as many as fit the time target here"))
    draws: int | None = spec(None, Spec(int, low=0, none=True, unit="passes", help=(
        "Monte Carlo passes per σ (0: skip): posterior draws in whole mode, passes with a "
        "fresh draw per sample in sample mode (default: up to 20, as many as fit the time "
        "target here)")))
    delta_mc: float = spec(0.01, Spec(float, low=0, high=1, open_low=True, open_high=True,
                                      help="confidence δ′ of the Monte Carlo step, split over "
                                           "the σ points"))
    gibbs_mode: str = spec("auto", Spec(str, choices=MODES, help=(
        "auto | sample | whole: a fresh posterior draw per sample (N = draws·n losses in the "
        "kl term; auto where exact) or one draw per pass (N = draws)")))
    gibbs_samples: int | None = spec(None, Spec(int, low=1, none=True, unit="rows", help=(
        "evaluate each pass on m samples drawn uniformly with replacement from DATA")))
    smoothing: float = spec(0.01, Spec(float, low=0, high=1, open_low=True, open_high=True,
                                       help="α of prediction smoothing for language models "
                                            "(bounded per-token loss)"))
    seed: int = spec(0, Spec(int, low=0, high=2**32 - 2, help="seed of every random draw"))
    hessian_probes: int | None = spec(None, Spec(int, low=0, but_not=(1,), none=True, help=(
        "Hutchinson probes, each a Hessian-vector product on {hessian_samples} samples (0: "
        "skip the Hessian trace; default: up to 20, as many as fit the time target here)")))
    hessian_samples: int = spec(256, Spec(int, low=1, unit="rows", help=(
        "samples in the loss whose Hessian trace is estimated")))
    perturbation_draws: int = spec(0, Spec(int, low=0, help=(
        "noise draws per σ of the Lintilhac–Shaikh mesh for P̂ (0: skip; 20 × draws "
        "Hutchinson estimates)")))
    sigma_groups: bool = spec(False, Spec(bool, help=(
        "per-group σ_g (implied by {tune_data}); without {tune_data} searched on DATA and "
        "charged per group")))
    tune_data: str | None = spec(None, Spec(str, none=True, help=(
        "a split disjoint from DATA (e.g. the one {init} was trained on): search per-group "
        "σ_g there with the {init} weights, at no union-bound cost; then the Gibbs risk on "
        "DATA once")))
    tune_draws: int | None = spec(None, Spec(int, low=1, none=True, help=(
        "Monte Carlo draws per σ vector tried by the search (default: up to 4, as many as fit "
        "the time target here)")))
    search_rows: int | None = spec(None, Spec(int, low=1, none=True, unit="rows", help=(
        "rows of {tune_data} the σ searches read (default: every row, fewer when the plan "
        "needs it to fit the time target here; the search never sees S, so fewer rows make "
        "the choice noisier, never less honest)")))
    tune_slack: float = spec(0.05, Spec(float, low=0, high=1, open_high=True, help=(
        "the search keeps the searched weights' Gibbs risk ≤ their error + this")))
    tune_shape: str = spec("per-group", Spec(str, choices=TUNE_SHAPES, help=(
        "the σ shapes the search tries: per-group (the isotropic σ, then each group's noise "
        "tolerance and a joint offset: about 4 more evaluations per group) or isotropic (the "
        "isotropic σ only, then the scale)")))
    group_draws: int | None = spec(None, Spec(int, low=0, none=True, help=(
        "Monte Carlo passes over DATA at the chosen per-group σ vector, drawn as {gibbs_mode} "
        "says (default: {draws})")))
    allow_overlap: bool = spec(False, Spec(bool, help=(
        "accept {tune_data} rows that are rows of DATA (compared by content: inputs and "
        "label); the σ shape is then charged as if chosen on DATA, and the shared rows are "
        "counted in the stats file")))
    init_data: str | None = spec(None, Spec(str, none=True, help=(
        "the data {init} was trained on: refused if it shares a row (inputs and label) with "
        "DATA")))
    threads: int | None = spec(None, Spec(int, low=1, none=True, help=(
        "torch threads for the data side with {data} (default: one for a model no wider than "
        "512 on a CPU, where a thread pool costs more than it gives; a language model that "
        "narrow but for its vocabulary head: one thread or every core, whichever runs its "
        "first rows faster here now; else torch's default); sums may differ in the last bits "
        "with it")))
    precision: str | None = spec(None, Spec(str, choices=PRECISIONS, none=True, help=(
        "fp32 | tf32 | bf16: the arithmetic of the data pass and the Monte Carlo passes "
        "(default fp32 on a CPU, tf32 on CUDA; recorded in the stats file)")))

    aliases = ALIASES

    def check(self) -> None:
        """The rules between fields (each field's own rule is its declaration)."""
        if self.sigmas is not None:
            object.__setattr__(self, "sigmas", tuple(float(s) for s in self.sigmas))
        if 1.0 - self.delta_mc == 1.0:  # the confidence 1 − δ′ would be written as 1
            raise BoundcalcError(f"{option('delta_mc', f'{self.delta_mc:g}')}: too small; its "
                                 "confidence 1 − δ′ rounds to 1 in double precision (use "
                                 "δ′ ≥ 1e-15)")
        if self.sigmas is not None:
            snapped_sigmas(self.sigmas)
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


@dataclass(frozen=True)
class BoundTraining(Record):
    """Settings of :func:`.bound_posterior.train_bound_posterior`, fixed before S is read;
    declared once here (torch-free): certify's ``--bound-*`` options are these fields by
    reference (:func:`~boundcalc.options.like`), with the same defaults.

    ``objective``: ``quad`` (f_quad) or ``classic`` (f_classic) of
    :func:`.bound_posterior.objective`; ``epochs`` passes over S; ``lr_mu`` the SGD step of the
    means (momentum ``momentum``); ``lr_sigma`` (0: σ is not trained and no gradient flows
    through the draws' noise); ``sigma``: ``groups`` learns one σ_Q,g per group against the
    fixed prior σ_P,g (Adam steps of ln σ_Q,g of ``lr_sigma``/√d_g: the KL's curvature in
    ln σ_Q,g grows like d_g, so on a large group σ_Q,g stays near σ_P,g); ``scale`` learns one
    factor t of the prior's scale with σ_Q,g = σ_P,g = t·c·ρ_g (no variance term in the KL;
    Adam steps of ln t of ``lr_sigma``), snapped afterwards to the declared grid, whose cost
    the formula already charges; ``init``: μ starts at the trained model (``model``) or at the
    prior's weights (``prior``); ``means``: the means of every group are trained (``all``) or
    only those of the groups where the trained model differs from the prior (``moved``; the
    others stay at ``init``); ``p_min`` the probability floor of the bounded cross-entropy;
    ``delta`` the δ of the objective's confidence term; ``seed`` of the draws; ``smoothing``
    the prediction smoothing α of a language model's loss (required for one;
    :func:`.bound_posterior.add_bound_posterior` sets it from the stats it measures into).

    The defaults ``sigma="scale"``, ``init="prior"`` are the tighter pair on every data set
    measured (bert2 0.0659 against 0.115 for groups/model; the real-text task 0.1768 against
    0.2256; text_classifier 0.5578 against 0.5742: README)."""

    objective: str = spec("quad", Spec(str, choices=OBJECTIVES, help=(
        "the PAC-Bayes training objective: quad (f_quad) or classic (f_classic)")))
    epochs: int = spec(1, Spec(int, low=1, help="epochs of the bound-trained posterior's "
                                                 "means"))
    lr_mu: float = spec(1e-3, Spec(float, low=0, help=(
        "SGD step of the bound-trained posterior's means (momentum 0.9)")))
    momentum: float = spec(0.9, Spec(float, low=0, high=1, open_high=True,
                                     help="momentum of the means' SGD"))
    lr_sigma: float = spec(0.05, Spec(float, low=0, help=(
        "Adam step of ln σ_Q,g (or ln t of the scale); 0: σ not trained")))
    p_min: float = spec(1e-4, Spec(float, low=0, high=1, open_low=True, open_high=True,
                                   help="probability floor of the bounded cross-entropy"))
    delta: float = spec(0.05, Spec(float, low=0, high=1, open_low=True, open_high=True,
                                   help="δ of the training objective's confidence term"))
    seed: int = spec(0, Spec(int, low=0, help="seed of the training draws"))
    sigma: str = spec("scale", Spec(str, choices=BOUND_SIGMAS, help=(
        "what the bound training learns of σ: scale (one factor of the prior's σ, snapped to "
        "its declared grid) or groups (one σ_Q per group)")))
    init: str = spec("prior", Spec(str, choices=BOUND_INITS, help=(
        "where the bound-trained posterior's means start: the prior or model/")))
    smoothing: float | None = spec(None, Spec(float, low=0, high=1, open_low=True,
                                              open_high=True, none=True, help=(
        "prediction smoothing α of a language model's loss; None: not a language model "
        "(set from the stats measured into)")))
    means: str = spec("all", Spec(str, choices=BOUND_MEANS, help=(
        "whose means are trained: all groups', or only those where model/ differs from the "
        "prior (moved)")))

    def check(self) -> None:
        """Nothing beyond the declarations (kept: callers check a record they were given)."""

