"""The options of a compression measurement, checked before any model is loaded.

What the caller chooses: which weights (``select``: ``all``, ``delta`` or ``auto``), the
quantizer, the level counts tried, the codebook precision, the prefix and the largest fraction
of predictions the quantizer may change. Contract: every check is cheap and ends in a one-line
:class:`BoundcalcError` naming the option.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import BoundcalcError
from ...words import option
from .codelength import PREFIXES
from .coded import SELECTIONS
from .quantizer import CODEBOOK_BITS, QUANTIZERS

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


def compression_options(select: str, quantizer: str, levels: str | None, codebook_bits: int,
                        prefix: str, max_changed: float | None, data: Any,
                        init: Any = None) -> dict[str, Any]:
    """The compression options as the CLI receives them (``levels`` a text, None:
    :func:`default_levels`), checked (one-line errors), as keywords of
    :func:`.compression.add_compression`."""
    require_data(data)
    grid = parse_levels(levels) if levels is not None else default_levels(select, init)
    check_options(select, quantizer, grid, codebook_bits, prefix, max_changed)
    return {"select": select, "quantizer": quantizer, "levels_grid": grid,
            "codebook_bits": codebook_bits, "prefix": prefix, "max_changed": max_changed}


def check_options(select: str, quantizer: str, levels_grid: Sequence[int], codebook_bits: int,
                  prefix: str, max_changed: float | None) -> None:
    """Cheap checks of the compression options, before any model is loaded (one-line errors
    naming the option)."""
    if select not in OPTION_SELECTIONS:
        raise BoundcalcError(f"{option('select')} must be one of {', '.join(OPTION_SELECTIONS)}, "
                             f"got '{select}'")
    if quantizer not in QUANTIZERS:
        raise BoundcalcError(f"{option('quantizer')} must be one of {', '.join(QUANTIZERS)}, "
                             f"got '{quantizer}'")
    if codebook_bits not in CODEBOOK_BITS:
        raise BoundcalcError(f"{option('codebook_bits')} must be 16 or 32, got {codebook_bits}")
    if prefix not in PREFIXES:
        raise BoundcalcError(f"{option('prefix')} must be 'none' or 'authors', got '{prefix}'")
    if max_changed is not None and not 0 <= max_changed <= 1:
        raise BoundcalcError(f"{option('max_changed')} must lie in [0, 1], got {max_changed}")
    if not levels_grid or max(levels_grid) > MAX_LEVELS:
        raise BoundcalcError(f"{option('levels_grid')}: at most {MAX_LEVELS} levels")


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
