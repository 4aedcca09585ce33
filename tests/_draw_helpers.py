"""Seeded random inputs over an entry's declared domains (shared by the property tests)."""

from __future__ import annotations

import math

import numpy as np

import boundcalc as bc
from boundcalc.evaluation import dr_grids


def draw(domain, rng: np.random.Generator, edge: bool) -> float:
    lo, hi, integer = domain.lo, domain.hi, domain.integer
    if integer:
        lo_i = math.ceil(lo + (1 if domain.lo_open and lo == math.ceil(lo) else 0))
        if edge:
            return float(rng.choice([lo_i, lo_i + 1, 10 ** 9 if hi == math.inf else hi]))
        top = 7 if hi == math.inf else math.log10(max(hi - lo_i, 1))
        return float(lo_i + math.floor(10 ** rng.uniform(0, top)) - 1)
    if edge:
        ends = []
        if math.isfinite(lo):
            ends.append(lo + (max(1e-12, abs(lo) * 1e-12) if domain.lo_open else 0.0))
        else:
            ends.append(-1e12)
        if math.isfinite(hi):
            ends.append(hi - (max(1e-12, abs(hi) * 1e-12) if domain.hi_open else 0.0))
        else:
            ends.append(1e12)
        return float(rng.choice(ends))
    if math.isfinite(lo) and math.isfinite(hi):
        return float(rng.uniform(lo, hi))
    if math.isfinite(lo):
        return float(lo + 10 ** rng.uniform(-6, 8))
    if math.isfinite(hi):
        return float(hi - 10 ** rng.uniform(-6, 8))
    return float(rng.choice([-1, 1]) * 10 ** rng.uniform(-6, 6))


def inputs(entry, rng: np.random.Generator, edgy: bool) -> dict:
    sizes = {i: int(rng.integers(1, 5)) for i in entry.indices}
    vals: dict = {}
    for s in entry.symbols.values():
        if s.role == "size":
            continue
        if s.indexed:
            shape = tuple(sizes[i] for i in s.indices)
            vals[s.name] = np.array([draw(s.domain, rng, edgy and rng.random() < 0.5)
                                     for _ in range(int(np.prod(shape)))]).reshape(shape)
        elif s.default is None or rng.random() < 0.7:
            vals[s.name] = draw(s.domain, rng, edgy and rng.random() < 0.5)
    for p in entry.parameters.values():
        if p.choice == "fixed" and p.default is None and p.closed_form is None:
            vals[p.name] = draw(p.domain, rng, edgy and rng.random() < 0.5)
    for name, (c, b) in dr_grids(entry).items():  # a hand-set σ_g must lie on its grid
        if name in vals:
            gc, gb = vals.get(c, entry.symbols[c].default), vals.get(b, entry.symbols[b].default)
            j = rng.integers(1, 3000, size=vals[name].shape)
            vals[name] = np.sqrt(gc * np.exp(-j / gb))
    return vals


def grid_points(prep: bc.Prepared, rng: np.random.Generator) -> dict:
    """A random point of every grid/prior parameter (any point is admissible, its cost paid;
    drawing it also skips the closed forms' fixed-point iterations, which are tested elsewhere)."""
    out = {}
    for p in prep.scalar_params():
        if p.name in prep.raw:
            continue
        if p.choice == "grid":
            out[p.name] = float(rng.choice(prep.grids[p.name]))
        elif p.choice == "prior":
            out[p.name] = float(p.prior.value(int(rng.integers(1, 3000))))
    return out
