"""``certify``'s subspace Gibbs posterior (``CertifyConfig(posterior="subspace")``): after the
measurement of ``model/``, train N(z, s_Q² I) on the coordinates of a random subspace around
``prior/`` on the PAC-Bayes bound (:mod:`boundcalc.measure.data.subspace`), measure its Gibbs
risk on S with fresh per-row draws, add what ``pac_bayes_kl_gaussian_subspace_mc`` certifies to
``stats.json``, and save the posterior mean as ``posterior_subspace/``. With a held-out set:
the mean's held-out error, one Monte Carlo pass of the posterior's held-out Gibbs error, and how
often that Gibbs predictor disagrees with ``model/`` on the held-out texts (never used for any
choice). The subspace's prior std is fixed before S (``subspace_sigma``), so nothing is
charged for it, or chosen after training on the declared grid ``subspace_sigma_grid`` (ln |grid|
charged); with ``subspace_fit_epochs`` the coordinates are first fitted by cross-entropy; the subspace is the prior's (coordinates 0 = prior/), so ``model/`` is not its
centre: the row certifies the subspace Gibbs posterior, a predictor of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

FOLDER = "posterior_subspace"


def spec_of(cfg: Any) -> Any:
    """The :class:`~boundcalc.measure.data.subspace.SubspaceSpec` of certify's settings ``cfg``
    (every ``subspace_*`` field, and the run's seed)."""
    from ..measure.data.subspace import SubspaceSpec

    return SubspaceSpec(rank=cfg.subspace_rank, layers=cfg.subspace_layers,
                        sigma_prior=cfg.subspace_sigma, epochs=cfg.subspace_epochs,
                        lr=cfg.subspace_lr, seed=cfg.seed,
                        sigma_grid=tuple(cfg.subspace_sigma_grid or ()),
                        fit_epochs=cfg.subspace_fit_epochs, fit_lr=cfg.subspace_fit_lr)


def subspace_step(stats: Any, out: Path, cfg: Any, device: Any, progress: Any = None,
                  loaded: Any = None) -> None:
    """Train, measure and save the subspace Gibbs posterior into ``stats`` (module docstring);
    ``cfg`` is the measure step's :class:`~.config.MeasureSettings`; prior/, model/ and the rows
    come from ``loaded`` (the run's :class:`~.loaded.Loaded`; a new one without it), the
    subspace is trained on a copy of prior/ (merged into it and saved as ``posterior_subspace/``)."""
    import numpy as np

    from ..measure.data.disagreement import predictions
    from ..measure.data.gibbs import MonteCarlo
    from ..measure.data.subspace_record import RECORD, add_subspace_posterior, held_out
    from ..measure.threads import blas_threads, data_threads
    from .loaded import Loaded
    from .train import save_folder

    spec = spec_of(cfg)
    spec.check()  # before any model is read
    loaded = loaded or Loaded(out, device)
    dev = loaded.device
    prior = loaded.copy("prior")  # hooked and merged below: the shared prior/ stays as it was

    def read(name: str) -> Any:
        return loaded.batches(name, max_length=cfg.max_length, batch_size=cfg.batch_size)

    S = read("S.jsonl")
    with blas_threads(data_threads(prior.model, dev)):
        sub, _ = add_subspace_posterior(stats, prior, S, dev, spec,
                                        MonteCarlo(cfg.group_draws, cfg.seed + 80_000),
                                        prior_source=str(out / "prior"), progress=progress)
        rec = stats.provenance[RECORD]
        if (out / "test.jsonl").exists():
            T = read("test.jsonl")
            model_preds = np.concatenate([p.numpy() for p in
                                          predictions(loaded.model("model"), T, dev)])
            rec["held_out"] = held_out(sub, T, model_preds, cfg.seed + 90_000)
        sub.merge()
    rec["mean_model"] = str(out / FOLDER)
    save_folder(prior.model, prior.tokenizer, out / FOLDER, {"step": "measure",
                                                             "posterior": "subspace"})

