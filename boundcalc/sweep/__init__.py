"""Sweeps over model zoos: manifest → measure + optimise every entry per checkpoint → one table,
then rank correlation of every entry against generalization.

Public API::

    from boundcalc.sweep import run_sweep, correlate
    outcome = run_sweep("zoo.csv", "out/", workers=2)            # or ray=True
    ranking = correlate(outcome.table, target="test_error")

Modules: :mod:`.manifest` (reading, validation), :mod:`.cache` (content hashes),
:mod:`.tasks` (the work of one task), :mod:`.executors` (local processes, Ray),
:mod:`.run` (the sweep), :mod:`.correlate` (Kendall τ, Spearman ρ, granulated τ, bootstrap).
"""

from __future__ import annotations

from .manifest import Manifest, ManifestError, Row, read_manifest
from .run import SweepOutcome, SweepProgress, run_sweep

__all__ = ["Manifest", "ManifestError", "Row", "SweepOutcome", "SweepProgress", "read_manifest",
           "run_sweep"]
