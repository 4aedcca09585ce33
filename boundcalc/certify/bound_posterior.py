"""``certify``'s optional bound-trained Gibbs posterior (``CertifyConfig(posterior="bound")``):
after the measurement of ``model/``, train N(μ, diag σ_Q,g²) around it on the PAC-Bayes bound
(:mod:`boundcalc.measure.data.bound_posterior`), save μ as ``posterior_bound/``, measure its
Gibbs risk on S with fresh draws, and add the record that ``pac_bayes_kl_gaussian_learned_mc``
certifies to ``stats.json``. With a held-out set, the held-out error of μ and a one-pass Monte
Carlo estimate of the posterior's held-out Gibbs error are recorded beside it (never used for
any choice)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

POSTERIORS = ("proximal", "bound", "subspace")
FOLDER = "posterior_bound"


def check_posterior(name: str) -> None:
    """Refuse an unknown posterior recipe in one line naming the option."""
    from ..errors import BoundcalcError
    from ..words import option

    if name not in POSTERIORS:
        raise BoundcalcError(f"{option('posterior', repr(name))}: expected one of "
                             f"{', '.join(POSTERIORS)}")


def bound_step(stats: Any, out: Path, cfg: Any, device: Any, progress: Any = None,
               loaded: Any = None) -> None:
    """Train, save and measure the bound-trained Gibbs posterior into ``stats`` (see the
    module docstring); ``cfg`` is the measure step's
    :class:`~.config.MeasureSettings`; model/, prior/ and the rows come from ``loaded`` (the
    run's :class:`~.loaded.Loaded`; a new one without it), μ is trained on a copy of model/."""
    from ..measure.data.bound_posterior import BoundTraining, add_bound_posterior
    from ..measure.threads import blas_threads, data_threads
    from .loaded import Loaded
    from .train import save_folder

    check_posterior(cfg.posterior)
    if cfg.posterior == "subspace":
        from .subspace_posterior import subspace_step

        return subspace_step(stats, out, cfg, device, progress, loaded)
    loaded = loaded or Loaded(out, device)
    dev = loaded.device
    tm = loaded.copy("model")  # trained into μ below: the shared model/ stays as it was
    prior = loaded.model("prior")

    def read(name: str):
        return loaded.batches(name, max_length=cfg.max_length, batch_size=cfg.batch_size)

    S = read("S.jsonl")
    spec = BoundTraining(epochs=cfg.bound_epochs, lr_mu=cfg.bound_lr, seed=cfg.seed,
                         sigma=cfg.bound_sigma, init=cfg.bound_init)
    with blas_threads(data_threads(tm.model, dev)):
        learned = add_bound_posterior(stats, tm, prior, S, dev, spec, draws=cfg.group_draws,
                                      seed=cfg.seed + 40_000, prior_source=str(out / "prior"),
                                      progress=progress)
        rec = stats.provenance["gibbs_learned"]
        rec["mean_model"] = str(out / FOLDER)
        if (out / "test.jsonl").exists():
            rec["held_out"] = _held_out(tm, read("test.jsonl"), dev, learned,
                                        cfg.seed + 50_000)
    save_folder(tm.model, tm.tokenizer, out / FOLDER, {"step": "measure",
                                                        "posterior": "bound"})


def _held_out(tm: Any, data: Any, dev: Any, learned: Any, seed: int) -> dict[str, Any]:
    """Held-out error of μ and a one-pass Monte Carlo Gibbs error of Q (an estimate, for the
    report only)."""
    from ..measure.data.data_pass import run_pass
    from ..measure.data.gibbs import MonteCarlo, gibbs_estimate
    from ..measure.data.tune import sigma_groups

    groups = sigma_groups(tm.model)
    sig = dict(zip(learned.groups, learned.sigma_post))
    base = run_pass(tm, data, dev, alpha=0.0, norms=False)
    est = gibbs_estimate(tm, data, dev, [{n: sig[g] for n, g in groups.items()}],
                         MonteCarlo(1, seed, 0.0))
    return {"rows": data.n, "mean_error": float(base.err01.mean()),
            "gibbs_error_estimate": float(est.means.mean()),
            "note": "the mean's 0-1 error and one Monte Carlo pass of the posterior's; "
                    "estimates for the report, no choice uses them"}
