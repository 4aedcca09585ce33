"""The record of one compression measurement and how it enters a stats file.

:class:`Compression` holds the chosen level count, its code, the quantized and the float risk,
and what the code decodes to. Contract: :meth:`Compression.scalars` and
:meth:`Compression.curves` carry the quantized model's fingerprint in every note (what
``codecheck.check_compression_scalars`` relies on); :meth:`Compression.decoded` and
:meth:`Compression.warning` say which model the compression bounds certify
(:mod:`boundcalc.which_model`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...stats import Curve, Quantity
from ...words import keyword, option
from .codelength import CodeLength

DISAGREE = 0.5  # warn when the quantized model changes at least this fraction of predictions


@dataclass
class Compression:
    """Result of :func:`compress`: the chosen level count, its code, and the risks."""

    select: str
    quantizer: str
    levels_grid: tuple[int, ...]
    levels: int
    code: CodeLength
    error: float  # 0-1 error of the quantized model
    float_error: float
    changed: float  # fraction of predictions the quantizer changed
    smoothed: dict[float, float]  # α → smoothed log-loss (bits) of the quantized model
    vocab: int
    n: int
    fingerprint: str
    per_level: list[dict[str, float]] = field(default_factory=list)
    codebook_bits: int = 16
    prefix: str = "none"
    # the decoded model: Euclidean distances from the prior centre over the coded weights (the
    # decoded and the measured model's), and a hash of its weights (:func:`model_fingerprint`)
    distance_from_prior: float | None = None
    measured_distance_from_prior: float | None = None
    decoded_fingerprint: str | None = None

    @property
    def agreement(self) -> float:
        """Mean over units of the fraction of predictions the quantized model shares with the
        trained one (1 − ``changed``)."""
        return 1.0 - self.changed

    def decoded(self) -> dict[str, Any]:
        """The record of the model the code decodes to (``provenance.compression.decoded``):
        fingerprint, agreement with the measured model on S, distances from the prior, and
        what :func:`boundcalc.which_model.classify` makes of them (``about``)."""
        from ...which_model import classify

        rec = {"fingerprint": self.decoded_fingerprint or self.fingerprint,
               "agreement": self.agreement, "distance_from_prior": self.distance_from_prior,
               "measured_distance_from_prior": self.measured_distance_from_prior,
               "distance": "Euclidean norm over the coded weights of (model − prior centre)"}
        rec["about"] = classify({"decoded": rec})["about"]
        return rec

    def warning(self, stored: bool = False) -> str | None:
        """One line when the compression bounds are not about the trained model: its code
        decodes to the prior, or the decoded model disagrees with the trained one on more
        than 1 − MIN_AGREEMENT of the samples (:mod:`boundcalc.which_model`). Its hint names
        options in the caller's words (:func:`boundcalc.words.option`), or with ``stored``
        (the text kept in a stats file) in the API's words whatever the front end."""
        from ...which_model import MIN_AGREEMENT

        about = self.decoded()["about"]
        if about == "measured" or (about == "unknown" and self.changed < DISAGREE):
            return None
        say = keyword if stored else option
        hint = (f"code the change from the prior checkpoint ({say('select', 'delta')} "
                f"{say('init', 'CKPT')})" if self.select == "all"
                else f"allow more levels ({say('levels_grid')})")
        if about == "prior":
            return (f"the quantized model ({self.levels} level(s)) decodes to the prior "
                    f"(distance {self.distance_from_prior:.3g} from it, the trained model's "
                    f"{self.measured_distance_from_prior:.3g}; agreement "
                    f"{self.agreement:.1%}): its bounds certify the prior, not the trained "
                    f"model; {hint}")
        return (f"the quantized model ({self.levels} levels) disagrees with the trained model on "
                f"{self.changed:.1%} of the samples (agreement {self.agreement:.1%} < "
                f"{MIN_AGREEMENT:.0%}): its bounds certify another model; {hint}")

    @property
    def method(self) -> str:
        what = {"all": "all float weights (prior 0)", "delta": "weights minus the prior centre",
                "given": "the given tensors (adapter / subspace)"}[self.select]
        return (f"{self.quantizer} quantizer on {what}, {self.levels} of levels "
                f"{list(self.levels_grid)} (log2 {len(self.levels_grid)} bits for the choice), "
                f"float{self.codebook_bits} codebook, counts, arithmetic code ⌈mĤ⌉+1"
                + (", authors' 2·log2 L prefix" if self.prefix == "authors" else ""))

    def scalars(self) -> dict[str, Quantity]:
        """Stats-file scalars; each carries the quantized model's fingerprint in its note."""
        note = f"quantized model {self.fingerprint}"
        m = self.method
        c = self.code
        q = {
            "code_bits": Quantity(c.total, method=m, note=note),
            "code_bits_symbols": Quantity(c.arithmetic_bits, method=m, note=note),
            "code_bits_codebook": Quantity(c.codebook_bits, method=m, note=note),
            "code_bits_counts": Quantity(c.counts_bits, method=m, note=note),
            "code_bits_choice": Quantity(c.choice_bits, method=m, note=note),
            "code_bits_prefix": Quantity(c.prefix_bits, method=m, note=note),
            "coded_params": Quantity(float(c.symbols), method=m, note=note),
            "quant_levels": Quantity(float(self.levels), method=m, note=note),
            "quantized_error": Quantity(self.error, method=f"0-1 error of the quantized model "
                                        f"on {self.n} units", note=note),
            "float_error": Quantity(self.float_error, method=f"0-1 error of the unquantized "
                                    f"model on {self.n} units", note=note),
            "quantized_changed": Quantity(self.changed, method="mean over units of the fraction "
                                          "of predictions the quantizer changed", note=note),
            "vocab_size": Quantity(float(self.vocab), method="logit dimension", note=note),
            "n": Quantity(float(self.n), method="units the quantized risk was measured on"),
        }
        return q

    def curves(self) -> dict[str, Curve]:
        """The smoothed log-loss at every α of the grid: the formulas choose α only among these
        points (``measured = true``) and pay ln |α grid|; it carries the same fingerprint as
        ``code_bits``."""
        a = np.array(sorted(self.smoothed))
        return {"quantized_smoothed_nll": Curve(
            "alpha", a, np.array([self.smoothed[x] for x in a]), n_samples=self.n,
            method=(f"smoothed log-loss −log2((1−α)p + α/V) (bits) of the quantized model, "
                    f"exact, on {self.n} units; {self.method}"),
            note=f"quantized model {self.fingerprint}")}
