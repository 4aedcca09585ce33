"""The settings of ``certify`` (:class:`CertifyConfig`): one declared record
(:mod:`boundcalc.options`), importable without torch so that the CLI builds its options from
it and checks every value before anything slow is loaded; and the sub-record each step of
:mod:`.pipeline` reads (:class:`StepSettings`: :class:`SplitSettings`, :class:`PriorSettings`,
:class:`PosteriorSettings`, :class:`MeasureSettings`, :class:`CompareSettings`)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ..measure.compress.options import DELTA_LEVELS_GRID, CompressOptions
from ..errors import BoundcalcError
from ..measure.data.options import (BOUND_INITS, BOUND_SIGMAS,  # noqa: F401 - re-exported
                                     SUBSPACE_LAYERS, BoundTraining, MeasureOptions)
from ..options import Needs, Record, Spec, like, refusal, spec
from ..words import option
from .bound_posterior import POSTERIORS
from .claims import TEST_SET_DELTA
from .duplicates import POLICIES

# the longest training a run may ask for (an epoch count beyond it is a typo, not a plan)
MAX_EPOCHS = 1000
# the options of the per-group σ (its search and the passes at the chosen vector), which runs
# only with rows of the prior's data to search on; and those of the bound-trained posterior
SEARCH = Needs("tune_rows", positive=True, why=" (no σ search)")
BOUND = Needs("posterior", ("bound",))
SUBSPACE = Needs("posterior", ("subspace",))


@dataclass(frozen=True)
class CertifyConfig(Record):
    """Settings of :func:`certify`, declared (:mod:`boundcalc.options`: each field's type,
    range and help are data, checked when built, in one wording); the defaults run in
    minutes on 2 CPU cores for a small BERT or MiniLM and a few thousand short texts. The
    data-side fields are the ones :class:`~boundcalc.measure.data.options.MeasureOptions`
    declares (:func:`~boundcalc.options.like`), with certify's defaults;
    :meth:`measure_options` is that record. ``prior_epochs`` / ``prior_lr`` / ``post_lr``
    None: 4 epochs, 1e-3 and 3e-4 for a base without weights (a config: random
    initialisation), 2 epochs, 1e-4 and 3e-5 for a pretrained one."""

    prior_fraction: float = spec(0.5, Spec(float, low=0, high=1, open_low=True,
                                           open_high=True, help=(
        "share of DATA's rows that trains the prior (a seeded permutation that reads no "
        "label); the rest is S")))
    seed: int = like(MeasureOptions, "seed", 0, help="seed of the split, the new head and "
                                                       "training")
    prior_epochs: int | None = spec(None, Spec(int, low=0, high=MAX_EPOCHS, none=True, help=(
        "prior training epochs (default 2 for a pretrained base, 4 for a config)")))
    prior_lr: float | None = spec(None, Spec(float, low=0, high=1, open_low=True, none=True,
                                             help="prior learning rate (default 1e-4 for a "
                                                  "pretrained base, 1e-3 for a config)"))
    post_epochs: int = spec(1, Spec(int, low=0, high=MAX_EPOCHS,
                                    help="posterior epochs on S"))
    post_lr: float | None = spec(None, Spec(float, low=0, high=1, open_low=True, none=True,
                                            help="posterior learning rate (default 3e-5 "
                                                 "pretrained, 3e-4 config)"))
    proximal: float = spec(1.0, Spec(float, low=0, high=1_000_000, help=(
        "posterior loss: cross-entropy + PROXIMAL·‖w − w_prior‖²")))
    batch_size: int | None = like(MeasureOptions, "batch_size", help=(
        "rows per batch (default 32 on a CPU, sized to the card on CUDA)"))
    max_length: int = like(MeasureOptions, "max_length", 64, help="tokens per text")
    text_column: str = like(MeasureOptions, "text_column")
    label_column: str = like(MeasureOptions, "label_column", help=(
        "label column of DATA (integers or names; each distinct value is a class)"))
    device: str = like(MeasureOptions, "device", help="auto | cpu | cuda (training and "
                                                       "measuring)")
    # measure (fixed before S is read). None: by the declared plan rule (plan_rule.py: the
    # richest of full / reduced / lean whose work, weight·token products, fits its budget;
    # issue 54 item 4), resolved by resolve() before the first step
    sigmas: tuple[float, ...] | None = like(MeasureOptions, "sigmas", None, help=(
        "isotropic posterior σ (repeatable): the isotropic Gibbs rows, {draws} passes over S "
        "each (default: by the plan rule: 0.003 and 0.01 in the full plan, 0.01 in the "
        "reduced one, none in the lean one; the per-group search weighs the isotropic shape)"))
    draws: int = like(MeasureOptions, "draws", 3, low=1, none=False,
                      help="Monte Carlo passes over S per isotropic σ")
    tune_rows: int | None = spec(None, Spec(int, low=0, none=True, unit="rows", help=(
        "rows of the prior's data on which the per-group σ is searched (0: none; default: by "
        "the plan rule: 192 full, 128 reduced, 64 lean)")))
    tune_draws: int = like(MeasureOptions, "tune_draws", 1, none=False, needs=SEARCH, help=(
        "Monte Carlo passes per σ vector tried by the search (free: it never sees S)"))
    group_draws: int | None = like(MeasureOptions, "group_draws", None, low=1, needs=SEARCH,
                                   help=(
        "Monte Carlo passes over S at the per-group σ (default: by the plan rule: 6 full, 4 "
        "reduced, 2 lean)"))
    tune_shape: str | None = like(MeasureOptions, "tune_shape", None, none=True, needs=SEARCH,
                                  help=(
        "the σ shapes the search tries: per-group or isotropic (default: by the plan rule: "
        "per-group full and reduced, isotropic lean)"))
    compress: bool = spec(False, Spec(bool, help=(
        "also the compression bounds (k-means code of w − w_prior on levels 1 and 16)")))
    # measure's --levels, by reference (one type: comma-separated level counts)
    levels: tuple[int, ...] = like(CompressOptions, "levels_grid", DELTA_LEVELS_GRID,
                                   none=False, help="level counts the compression tries")
    tokenizer: str | None = spec(None, Spec(str, none=True, help=(
        "a folder with the tokenizer, when BASE has none")))
    # "bound": also train N(μ, diag σ_Q,g²) around model/ on the PAC-Bayes bound itself and
    # certify it (bound_posterior.py; row pac_bayes_kl_gaussian_learned_mc); "proximal": not
    posterior: str = spec("proximal", Spec(str, choices=POSTERIORS, help=(
        "proximal: certify the Gibbs posteriors around model/ (σ searched); bound: also train "
        "a Gaussian posterior (its means and σ's scale) on the PAC-Bayes bound itself and "
        "certify it (posterior_bound/); subspace: also train a Gaussian posterior on a few "
        "coordinates of a random subspace around the prior (adapters and head) on the bound "
        "and certify it (posterior_subspace/ holds its mean)")))
    # the bound-trained posterior's training: BoundTraining's declarations, by reference
    bound_epochs: int = like(BoundTraining, "epochs", high=MAX_EPOCHS, needs=BOUND)
    bound_lr: float = like(BoundTraining, "lr_mu", high=1, open_low=True, needs=BOUND)
    bound_sigma: str = like(BoundTraining, "sigma", needs=BOUND)
    bound_init: str = like(BoundTraining, "init", needs=BOUND)
    # what a repeated row does (the same tokens within max_length and the same label):
    # duplicates.py; docs/guide/repeated-rows.md
    duplicates: str = spec("refuse", Spec(str, choices=POLICIES, help=(
        "rows of DATA that repeat an earlier row, and held-out rows that are rows of DATA: "
        "refuse (stop, naming them) or drop (keep one copy of each row of DATA, chosen by "
        "{seed}, and drop the held-out rows that are rows of DATA, before the split; counted "
        "in report.json; the certificate is then about the distribution of distinct rows)")))
    # the held-out error of each certified row's Gibbs predictor is shown beside it, never in a
    # certificate: one pass (N = m per-row draws) instead of the certificate's own passes
    # (3 or 6) took the compare step of the real-text run from 3½ min to about 1 (issue 54)
    heldout_draws: int = spec(1, Spec(int, low=1, high=MAX_EPOCHS, help=(
        "passes over the held-out rows (each row its own posterior draw) for the held-out "
        "error shown beside each certified row's Gibbs predictor; shown, never certified")))

    # the subspace posterior (measure/data/subspace.py; row pac_bayes_kl_gaussian_subspace_mc)
    subspace_rank: int = spec(4, Spec(
        int, needs=SUBSPACE, low=1, high=4096, help=(
        "rank r of each encoder adapter of the subspace posterior (r·d_in coordinates each)")))
    subspace_layers: str = spec("all", Spec(
        str, needs=SUBSPACE, choices=SUBSPACE_LAYERS, help=(
        "which encoder Linears the subspace posterior adapts: all, attention, or head (none: "
        "the head's weights alone)")))
    subspace_sigma: float = spec(0.05, Spec(
        float, needs=SUBSPACE, low=0, high=10, open_low=True, help=(
        "prior std s_P of every subspace coordinate, in units of each module's weight scale "
        "(fixed before S: free)")))
    subspace_epochs: int = spec(3, Spec(
        int, needs=SUBSPACE, low=0, high=MAX_EPOCHS, help=(
        "epochs of the subspace posterior's training on the bound")))
    subspace_lr: float = spec(1e-3, Spec(
        float, needs=SUBSPACE, low=0, high=1, open_low=True, help=(
        "Adam step of the subspace posterior's coordinates")))
    subspace_sigma_grid: tuple[float, ...] | None = spec(None, Spec(
        float, needs=SUBSPACE, low=0, high=10, open_low=True, many=True, none=True, help=(
        "a declared grid of prior stds s_P (repeatable): s_P chosen after training, the least "
        "KL, and ln |grid| charged in the certificate; default: {subspace_sigma}, fixed "
        "before S")))
    subspace_fit_epochs: int = spec(0, Spec(
        int, needs=SUBSPACE, low=0, high=MAX_EPOCHS, help=(
        "epochs of a plain cross-entropy fit of the subspace coordinates at the mean (noise "
        "off) before the training on the bound, which starts there (0: it starts at the "
        "prior)")))
    subspace_fit_lr: float = spec(1e-3, Spec(
        float, needs=SUBSPACE, low=0, high=1, open_low=True, help=(
        "Adam step of the subspace coordinates' cross-entropy fit")))

    def check(self) -> None:
        """The rules between fields: the bound-trained posterior's σ starts from the per-group
        σ search (rows to search on), the σ grid (as measure reads it) and the level counts
        (as a compression reads them)."""
        if self.posterior == "bound" and self.tune_rows == 0:
            raise BoundcalcError(
                f"{option('posterior', 'bound')} trains σ from the per-group σ search, which "
                f"{option('tune_rows', self.tune_rows)} leaves out; give {option('tune_rows')} "
                "> 0 (rows of the prior's data to search on)")
        if None not in (self.tune_rows, self.group_draws):
            self.measure_options(tune=None)
        if len(set(self.levels)) != len(self.levels):  # in measure's words (CompressOptions)
            raise refusal("levels", ",".join(map(str, self.levels)), "distinct level counts")

    def resolve(self, facts: Any) -> tuple["CertifyConfig", dict[str, Any]]:
        """This config with the fields left None (:data:`.plan_rule.RULED`) filled by the
        declared plan rule for ``facts`` (:class:`.plan_rule.Facts`), and the rule's record
        for report.json. A given ``draws`` with no isotropic σ in the result does nothing
        and is refused in one line."""
        from dataclasses import replace

        from .plan_rule import RULED, choose, record

        level, works = choose(facts, self.draws, self.prior_fraction)
        kept = [f for f in RULED if getattr(self, f) is not None]
        fill = {f: getattr(level, f) for f in RULED if getattr(self, f) is None
                and not (f in ("group_draws", "tune_shape") and self.tune_rows == 0)}
        out = replace(self, **fill)
        if out.sigmas is None and self.draws != _default("draws"):
            raise BoundcalcError(
                f"{option('draws')} does nothing without {option('sigmas')}: the {level.name} "
                f"plan measures no isotropic σ here; give {option('sigmas')} or leave "
                f"{option('draws')} out")
        return out, record(level, works, facts, kept)

    def measure_options(self, tune: str | None) -> MeasureOptions:
        """The data side's options of the measure step (``tune``: the σ search's rows; the
        config resolved by :meth:`resolve`)."""
        return MeasureOptions(device=self.device, max_length=self.max_length,
                              batch_size=self.batch_size, sigmas=self.sigmas,
                              draws=self.draws if self.sigmas else 0, hessian_probes=0,
                              seed=self.seed,
                              tune_data=tune, tune_draws=self.tune_draws,
                              group_draws=self.group_draws,
                              tune_shape=self.tune_shape or "per-group",
                              # every tune row: certify sizes nothing by this machine's speed
                              search_rows=self.tune_rows if tune else None)


def _default(name: str) -> Any:
    return next(f.default for f in fields(CertifyConfig) if f.name == name)


@dataclass(frozen=True)
class StepSettings:
    """The fields of :class:`CertifyConfig` one step of :mod:`.pipeline` reads, and no other:
    each field of a sub-record is the config's field of the same name and type (checked by
    ``tests/certify/test_steps.py``). A step's cache key is hashed from its sub-record
    (:meth:`~.steps.Step.key`), so a setting it does not read never re-runs it."""

    @classmethod
    def of(cls, cfg: CertifyConfig) -> Any:
        """This step's sub-record of ``cfg``."""
        return cls(**{f.name: getattr(cfg, f.name) for f in fields(cls)})


@dataclass(frozen=True)
class SplitSettings(StepSettings):
    """What the split reads: the share, the seed, the σ search's rows, the columns, the
    duplicate-row policy and the token length by which rows are the same."""

    prior_fraction: float
    seed: int
    tune_rows: int | None
    text_column: str
    label_column: str
    duplicates: str
    max_length: int


@dataclass(frozen=True)
class PriorSettings(StepSettings):
    """What the prior's training reads (None: the default for the base's kind)."""

    prior_epochs: int | None
    prior_lr: float | None
    batch_size: int | None
    max_length: int
    seed: int


@dataclass(frozen=True)
class PosteriorSettings(StepSettings):
    """What the posterior's training on S reads."""

    post_epochs: int
    post_lr: float | None
    proximal: float
    batch_size: int | None
    max_length: int
    seed: int


@dataclass(frozen=True)
class MeasureSettings(StepSettings):
    """What the measurement of model/ reads (fixed before S is read)."""

    sigmas: tuple[float, ...] | None
    draws: int
    tune_draws: int
    group_draws: int | None
    tune_shape: str | None
    max_length: int
    batch_size: int | None
    compress: bool
    levels: tuple[int, ...]
    seed: int
    posterior: str
    bound_epochs: int
    bound_lr: float
    bound_sigma: str
    bound_init: str
    subspace_rank: int
    subspace_layers: str
    subspace_sigma: float
    subspace_epochs: int
    subspace_lr: float
    subspace_sigma_grid: tuple[float, ...] | None
    subspace_fit_epochs: int
    subspace_fit_lr: float


@dataclass(frozen=True)
class CompareSettings(StepSettings):
    """compare reads one setting of its own, the passes of the held-out Gibbs error it shows;
    the rest of what it reports follows from the earlier steps' outputs (its key changes with
    theirs)."""

    heldout_draws: int


@dataclass(frozen=True)
class HoldoutConfig(Record):
    """Settings of :func:`boundcalc.certify.holdout.holdout` (``boundcalc holdout``): the
    test-set bound of a classifier (or, in bits per token, a causal language model) you
    trained yourself on your held-out rows. The reading of the rows is
    :class:`CertifyConfig`'s (:func:`~boundcalc.options.like`); a language model's α is
    measure's (:class:`MeasureOptions`)."""

    delta: float = spec(TEST_SET_DELTA, Spec(float, low=0, high=1, open_low=True,
                                             open_high=True, help=(
        "confidence of the test-set bound: it holds with probability ≥ 1 − DELTA (fix it "
        "before reading the rows)")))
    max_length: int = like(CertifyConfig, "max_length", help="tokens per text (truncated as "
                                                               "the model was trained)")
    batch_size: int | None = like(CertifyConfig, "batch_size", help=(
        "rows per batch (default: sized to the device: the card when there is one)"))
    text_column: str = like(CertifyConfig, "text_column")
    label_column: str = like(CertifyConfig, "label_column", help=(
        "label column (the model's label names, or class indices)"))
    device: str = like(CertifyConfig, "device", help="auto | cpu | cuda")
    smoothing: float = like(MeasureOptions, "smoothing", help=(
        "α of prediction smoothing of a causal language model's per-token loss, p_α = "
        "(1 − α)p + α/V (fix it before reading the rows; refused for a classifier)"))
