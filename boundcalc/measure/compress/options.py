"""The options of a compression measurement, checked before any model is loaded.

What the caller chooses: which weights (``select``: ``all``, ``delta`` or ``auto``), the
quantizer, the level counts tried, the codebook precision, the prefix and the largest fraction
of predictions the quantizer may change. Contract: every check is cheap and ends in a one-line
:class:`BoundcalcError` naming the option.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import BoundcalcError
from ...options import Record, Spec, refusal, spec
from ...words import option

# the choices of the options below, declared here (quantizer.py, codelength.py and coded.py
# read them from here), so that the declarations load neither numpy nor torch
QUANTIZERS = ("uniform", "kmeans")
CODEBOOK_BITS = (16, 32)  # the stored precisions of a level
PREFIXES = ("none", "authors")
SELECTIONS = ("all", "delta")

LEVELS_GRID = (2, 4, 8, 16, 32, 64)
# the default for a delta from an init (a fine-tuned model): 1 level (the init itself, plus one
# shared shift) or 16; 2..64 levels of a fine-tuned delta cost ~10^5 bits and give 1
DELTA_LEVELS_GRID = (1, 16)
MAX_LEVELS = 1 << 16
OPTION_SELECTIONS = SELECTIONS + ("auto",)  # auto: delta when there is an init, else all


def resolve_select(select: str, init: Any) -> str:
    """``auto`` → ``delta`` when a prior centre is given, else ``all``."""
    if select == "auto":
        return "delta" if init is not None else "all"
    return select


def require_data(data: Any) -> None:
    """A code length needs data to measure the quantized risk on: a one-line error when
    ``data`` is None."""
    if data is None:
        raise BoundcalcError(f"{option('select')} needs {option('data')}: a code length is only "
                             "usable with the quantized model's risk, measured on the same data")


def default_levels(select: str, init: Any) -> tuple[int, ...]:
    """The level counts tried when none are given: :data:`DELTA_LEVELS_GRID` for a delta from
    an init (``delta``, or ``auto`` with an init), else :data:`LEVELS_GRID`."""
    return DELTA_LEVELS_GRID if resolve_select(select, init) == "delta" else LEVELS_GRID


@dataclass(frozen=True)
class CompressOptions(Record):
    """The options of a compression measurement (:func:`.compression.add_compression`),
    declared (:mod:`boundcalc.options`) and checked when built. ``levels_grid`` None: the
    default of :func:`default_levels` for the selection and the init."""

    select: str = spec("auto", Spec(str, choices=OPTION_SELECTIONS, help=(
        "code length for compression bounds: 'all' weights, the 'delta' from {init}, or "
        "'auto' (delta with {init}, else all), quantized; needs {data} and an HF folder with "
        "a task head")))
    quantizer: str = spec("uniform", Spec(str, choices=QUANTIZERS,
                                          help="uniform | kmeans levels"))
    levels_grid: tuple[int, ...] | None = spec(None, Spec(
        int, low=1, high=MAX_LEVELS, many=True, none=True, unit="levels", sep=",", help=(
            "level counts to try; the choice costs log2(count) bits inside the code (default: "
            "1,16 for a delta from {init}, which a fine-tuned model can use; 2,4,8,16,32,64 "
            "for all weights)")))
    codebook_bits: int = spec(16, Spec(int, choices=CODEBOOK_BITS, unit="bits",
                                       help="bits per codebook level (16 or 32)"))
    prefix: str = spec("none", Spec(str, choices=PREFIXES,
                                    help="none | authors (add 2·log2 L bits)"))
    max_changed: float | None = spec(None, Spec(float, low=0, high=1, none=True, help=(
        "refuse a quantizer changing more than this fraction of predictions")))

    def check(self) -> None:
        """Level counts are distinct (the choice among them is paid once each)."""
        grid = self.levels_grid
        if grid is not None and len(set(grid)) != len(grid):
            raise refusal("levels_grid", ",".join(map(str, grid)), "distinct level counts")


def parse_levels(text: str) -> tuple[int, ...]:
    """``"2,4,8"`` → (2, 4, 8); one-line error naming the option otherwise."""
    try:
        out = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise BoundcalcError(f"{option('levels')}: comma-separated integers expected, got "
                             f"'{text}'") from None
    if not out or min(out) < 1 or len(set(out)) != len(out) or max(out) > MAX_LEVELS:
        raise BoundcalcError(f"{option('levels')}: distinct integers in [1, {MAX_LEVELS}] "
                             f"expected, got '{text}'")
    return out
