"""Where each stats-file value comes from: the boundcalc command (and option) that writes it.

One table for every hint that tells a user how to get a missing value (``compare``'s "lacks"
column, ``bind``'s missing-value errors). :func:`source_of` returns the command, or None when
no boundcalc command writes the value (then only a value set by hand gives it), in the words of
the front end in use (:mod:`boundcalc.words`). tests/cli/test_hints.py walks
every registry symbol's hint and checks each named command and flag against the CLI, and
each "no command" against the measurement code.
"""

from __future__ import annotations

from .words import command, option

# (stats path, the command that writes it): a path ending in * is a prefix; first match wins.
# Commands are written in words.command()'s neutral notation (options as key=VALUE, by their
# keyword names) and rendered in the caller's words at lookup; "COMMAND | OPTION" adds "(or
# OPTION)", an option that gives the value instead.
_SOURCES: tuple[tuple[str, str], ...] = (
    # measure --compress (boundcalc/measure/compress/compression.py)
    ("scalars.code_bits*", "measure MODEL data=DATA compress=auto"),
    ("scalars.quantized_*", "measure MODEL data=DATA compress=auto"),
    ("curves.quantized_*", "measure MODEL data=DATA compress=auto"),
    ("scalars.vocab_size", "measure MODEL data=DATA compress=auto"),
    # the per-group σ search (boundcalc/measure/data/tune.py)
    ("curves.gibbs_risk_groups", "measure MODEL init=INIT data=DATA tune_data=TUNE | sigma_groups"),
    ("scalars.gibbs_groups_units",
     "measure MODEL init=INIT data=DATA tune_data=TUNE | sigma_groups"),
    # the disagreement of the model with its per-group posterior on held-out rows
    # (boundcalc/measure/data/disagreement.py, run by certify's compare step)
    ("curves.disagreement_groups", "certify BASE data=DATA test_data=TEST"),
    ("scalars.disagreement_rows", "certify BASE data=DATA test_data=TEST"),
    # the bound-trained Gibbs posterior (boundcalc/measure/data/bound_posterior.py)
    ("curves.gibbs_risk_learned", "certify BASE data=DATA posterior=bound"),
    ("scalars.gibbs_learned_units", "certify BASE data=DATA posterior=bound"),
    # the subspace Gibbs posterior (boundcalc/measure/data/subspace_record.py)
    ("scalars.gibbs_subspace_*", "certify BASE data=DATA posterior=subspace"),
    ("scalars.subspace_*", "certify BASE data=DATA posterior=subspace"),
    # the data pass (boundcalc/measure/data/task_measure.py)
    ("curves.gibbs_risk_mean", "measure MODEL data=DATA draws=K"),
    ("scalars.gibbs_draws", "measure MODEL data=DATA draws=K"),
    ("scalars.hessian_trace", "measure MODEL data=DATA hessian_probes=P"),
    ("groups.hessian_trace", "measure MODEL data=DATA hessian_probes=P"),
    ("curves.perturbation_term", "measure MODEL data=DATA perturbation_draws=K"),
    ("scalars.n", "measure MODEL data=DATA"),
    ("scalars.emp_risk", "measure MODEL data=DATA"),
    ("scalars.loss_mean", "measure MODEL data=DATA"),
    ("scalars.cross_entropy", "measure MODEL data=DATA"),
    ("scalars.bounded_loss_mean", "measure MODEL data=DATA"),
    ("scalars.margin_q*", "measure MODEL data=DATA"),
    ("scalars.input_token_norm_max", "measure MODEL data=DATA"),
    ("scalars.input_fro_max", "measure MODEL data=DATA"),
    ("scalars.seq_len", "measure MODEL data=DATA"),
    ("scalars.majority_error", "measure MODEL data=DATA"),
    ("scalars.smoothing_alpha", "measure MODEL data=DATA"),
    ("curves.ramp_risk", "measure MODEL data=DATA"),
    ("curves.margin_below", "measure MODEL data=DATA"),
    # the weights side (boundcalc/measure/weights/pipeline.py)
    ("scalars.dist_init*", "measure MODEL init=INIT"),
    ("groups.dist_init*", "measure MODEL init=INIT"),
    ("groups.n_params", "measure MODEL"),
    ("scalars.n_params", "measure MODEL"),
    ("model.*", "measure MODEL"),
    ("matrix.*", "measure MODEL"),
)

# values only the Python API measures (a callable the CLI cannot take)
_PYTHON_ONLY: tuple[tuple[str, str], ...] = (
    ("scalars.feature_sigma_min*", "the Python API boundcalc.measure.measure(MODEL, init=INIT, "
                                  "data=DATA, features=FN)"),
)

# values a command writes as a curve that an entry takes as one number (one point of it)
_ONE_POINT: dict[str, str] = {
    "scalars.gibbs_risk_mean": "curves.gibbs_risk_mean",
    "scalars.gibbs_risk": "curves.gibbs_risk_mean",
}

NO_COMMAND = "no boundcalc command measures it"


def _matches(stat: str | None, pattern: str) -> bool:
    stat = stat or ""
    return stat.startswith(pattern[:-1]) if pattern.endswith("*") else stat == pattern


def _source(stat: str | None) -> str | None:
    """The neutral command that writes ``stat`` (an entry of :data:`_SOURCES`), or None."""
    return next((cmd for pattern, cmd in _SOURCES if _matches(stat, pattern)), None)


def source_of(stat: str | None) -> str | None:
    """The command that writes the stats path ``stat``, in the caller's words
    (``boundcalc measure MODEL --data DATA`` in the CLI, ``measure(MODEL, data=DATA)`` in the
    API), or None when no boundcalc command writes it."""
    neutral = _source(stat)
    if neutral is None:
        return None
    text, _, instead = neutral.partition(" | ")
    return command(text) + (f" (or {option(instead)})" if instead else "")


def needs_compression(stat: str | None) -> bool:
    """True when only a measurement with compression writes ``stat`` (the quantized model's
    values)."""
    return "compress=" in (_source(stat) or "")


def python_only(stat: str | None) -> str | None:
    """The Python call that measures ``stat`` when the CLI cannot, else None."""
    return next((how for pattern, how in _PYTHON_ONLY if _matches(stat, pattern)), None)


def one_point_of(stat: str | None) -> tuple[str, str] | None:
    """(curve path, its command) when ``stat`` is one value of a curve a command writes."""
    curve = _ONE_POINT.get(stat or "")
    if curve is None:
        return None
    writer = source_of(curve)
    return (curve, writer) if writer else None


def set_only_note(stat: str | None) -> str:
    """Why a value with no command must be set by hand: a curve to pick a point of, the
    Python API, or no command at all (the text after :func:`boundcalc.words.set_value`)."""
    point = one_point_of(stat)
    if point:
        return f"one point of the curve {point[0].split('.', 1)[1]} from {point[1]}"
    how = python_only(stat)
    if how:
        return f"measured only by {how}"
    return NO_COMMAND
