"""The posteriors certify trains after the data side of its measurement, as stages of that
measurement (:mod:`boundcalc.measure.data.stages`; :func:`.pipeline.picked_stages` picks them
from the measure step's settings): the bound-trained posterior (:func:`.bound_posterior.
bound_step`) and the subspace posterior (:func:`.subspace_posterior.subspace_step`), each run
on the run's loaded models and rows (:class:`~.loaded.Loaded`).

Contract: a stage's sub-record is fields of the measure step's settings
(:class:`~.config.MeasureSettings`, the record it is given); its counted work is the
``group_draws`` Monte Carlo passes of its Gibbs risk on S, which the measurement's plan, time
estimate and count check read with the data side's; its training epochs and its held-out
passes are not counted (no calibrated cost of a training step yet).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..measure.data.stages import DataStage
from ..plan import Work

# what both posteriors read of the measure step's settings (MeasureSettings)
SHARED = ("posterior", "group_draws", "seed", "max_length", "batch_size")


class PosteriorStage(DataStage):
    """A posterior certify trains after the data side (module docstring)."""

    inside = False
    precision = False

    def __init__(self, out: Path, m: Any, device: Any, progress: Any = None,
                 loaded: Any = None) -> None:
        self.out, self.m, self.device, self.progress, self.loaded = (out, m, device, progress,
                                                                     loaded)
        self.record = type(m)  # its sub-record: fields of the measure step's settings

    def work(self, c: Any, s: Any) -> Work | None:
        d = self.m.group_draws
        return Work(f"{self.name}, {d} pass(es)", d, max(s.rows, 1), "noisy", 0,
                    f"{self.name}: {d} Monte Carlo pass(es) over S")

    def wanted(self, run: Any) -> bool:
        return True


class BoundPosteriorStage(PosteriorStage):
    """The bound-trained Gibbs posterior (:func:`.bound_posterior.bound_step`)."""

    name = "bound-trained posterior"
    options = SHARED + ("bound_epochs", "bound_lr", "bound_sigma", "bound_init")

    def run(self, loaded: Any, stats: Any) -> None:
        from .bound_posterior import bound_step

        bound_step(stats, self.out, self.m, self.device, self.progress, self.loaded)


class SubspacePosteriorStage(PosteriorStage):
    """The subspace Gibbs posterior (:func:`.subspace_posterior.subspace_step`)."""

    name = "subspace posterior"
    options = SHARED + ("subspace_rank", "subspace_layers", "subspace_sigma",
                        "subspace_epochs", "subspace_lr")

    def run(self, loaded: Any, stats: Any) -> None:
        from .subspace_posterior import subspace_step

        subspace_step(stats, self.out, self.m, self.device, self.progress, self.loaded)
