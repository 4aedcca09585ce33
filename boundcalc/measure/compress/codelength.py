"""The code length of a quantized vector, in bits, part by part.

The code (docs/sources/compression.md §2), for m coded numbers quantized to K levels, K chosen on
a declared grid:

* the index of K in the grid: log2 |grid| bits (the union bound over the grid, as a code);
* the codebook: K values at ``codebook_bits`` (16 or 32) bits each;
* the level counts: K counts of ⌈log2(m + 1)⌉ bits each;
* the symbols: an arithmetic (Shannon–Fano–Elias) code under the empirical level distribution,
  ⌈m·Ĥ⌉ + 1 bits, Ĥ the entropy in bits of the level frequencies;
* optionally the authors' self-delimiting prefix 2·log2 L (``prefix="authors"``).

Levels that coincide after rounding are merged (:mod:`.quantizer`), so the codebook sent has
K′ ≤ K levels and the decoder does not learn K′ from the grid index; the code still satisfies
Kraft's inequality, Σ 2^{−C(h)} ≤ (e − 1)/2 < 1 (K′ sorted distinct levels, counts, an
arithmetic code of length ⌈mĤ⌉ + 1), which is all the Occam bound needs; the authors of the
compression-bound papers add the prefix term anyway.

Contract: :func:`code_length` is a pure function of the codes, the codebook size and the
declared choices; :attr:`CodeLength.total` is the sum of the parts it records.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...errors import BoundcalcError
from .options import PREFIXES  # declared with the option that chooses one


@dataclass
class CodeLength:
    """The parts of a code length, in bits."""

    symbols: int  # number m of coded numbers
    levels: int  # codebook size actually used
    entropy_bits: float  # m·Ĥ
    arithmetic_bits: float  # ⌈m·Ĥ⌉ + 1
    codebook_bits: float
    counts_bits: float
    choice_bits: float
    prefix_bits: float

    @property
    def total(self) -> float:
        return (self.arithmetic_bits + self.codebook_bits + self.counts_bits + self.choice_bits
                + self.prefix_bits)

    def to_json(self) -> dict[str, float]:
        return {"symbols": self.symbols, "levels": self.levels,
                "entropy_bits": self.entropy_bits, "arithmetic_bits": self.arithmetic_bits,
                "codebook_bits": self.codebook_bits, "counts_bits": self.counts_bits,
                "choice_bits": self.choice_bits, "prefix_bits": self.prefix_bits,
                "total_bits": self.total}


def code_length(codes: np.ndarray, n_levels: int, codebook_bits: int = 16, n_choices: int = 1,
                prefix: str = "none") -> CodeLength:
    """Bits of the code described in the module docstring for ``codes`` in [0, n_levels)."""
    if prefix not in PREFIXES:
        raise BoundcalcError(f"prefix must be 'none' or 'authors', got '{prefix}'")
    m = int(codes.size)
    counts = np.bincount(codes, minlength=n_levels).astype(np.float64)
    nz = counts[counts > 0]
    entropy_bits = float(np.sum(nz * np.log2(m / nz)))
    arith = math.ceil(entropy_bits - 1e-9) + 1.0
    cb = float(n_levels * codebook_bits)
    cnt = float(n_levels * math.ceil(math.log2(m + 1)))
    choice = math.log2(n_choices) if n_choices > 1 else 0.0
    raw = arith + cb + cnt + choice
    pre = 2 * math.log2(raw) if prefix == "authors" and raw > 1 else 0.0
    return CodeLength(m, n_levels, entropy_bits, arith, cb, cnt, choice, pre)
