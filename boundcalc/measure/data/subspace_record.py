"""The subspace Gibbs posterior's measurement for a certificate: train it on S
(:mod:`.subspace`), measure its Gibbs risk on S with fresh per-row draws, and write what the
registry entry ``pac_bayes_kl_gaussian_subspace_mc`` reads into a stats object.

Written: the scalars ``gibbs_subspace_mean`` (Ê, with its interval [Ê, kl⁻¹(Ê, ln(2/δ′)/N)]),
``gibbs_subspace_units`` (N = passes × rows of S), ``subspace_dim`` (d), ``subspace_dist_sq``
(‖z‖², summed in float64), ``subspace_sigma_post`` (s_Q), ``subspace_sigma_prior`` (s_P),
``subspace_prior_grid`` (J: 1 when s_P was fixed before S), and the record
``provenance.gibbs_subspace`` that says how each was made. The training draws are never
reused: the Monte Carlo seed is the caller's, distinct from the training seed.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from ...errors import BoundcalcError
from .dataset_io import Batched
from .gibbs import MonteCarlo
from .hf import TaskModel
from .inputs import Progress
from .subspace import (Subspace, SubspaceFit, SubspaceSpec, best_prior, gibbs_errors,
                       gibbs_predictions, sigma_of, sites_summary, train_subspace)

RECORD = "gibbs_subspace"
SCALARS = ("gibbs_subspace_mean", "gibbs_subspace_units", "subspace_dim", "subspace_dist_sq",
           "subspace_sigma_post", "subspace_sigma_prior", "subspace_prior_grid")
PREDICTOR = "the subspace Gibbs posterior"


def add_subspace_posterior(stats: Any, prior: TaskModel, data: Batched, device: torch.device,
                           spec: SubspaceSpec, mc: MonteCarlo, *,
                           prior_source: str | None = None,
                           progress: Progress | None = None) -> tuple[Subspace, SubspaceFit]:
    """Train the subspace Gibbs posterior around ``prior`` (its weights are the centre; the
    model is left unchanged, the posterior lives in the returned :class:`Subspace`'s hooks) on
    ``data`` (S), measure its Gibbs risk on S with ``mc.passes`` passes of fresh per-row draws
    (seed ``mc.seed``, never the training seed; δ′ = ``spec.delta_mc``), and write the scalars
    and record of the module docstring into ``stats``. ``spec`` is checked before anything
    moves."""
    from ...engine.functions import kl_inv_upper
    from ...stats import Quantity

    spec.check()
    draws, seed, delta_mc = mc.passes, mc.seed, spec.delta_mc
    if seed == spec.seed + 60_000:
        raise BoundcalcError("subspace posterior: the Monte Carlo seed is the training seed")
    sub = Subspace(prior, spec, device)
    fit = train_subspace(sub, data, progress)
    dist_sq = float(sub.dist_sq())
    s_prior, search = (best_prior(dist_sq, sub.dim, fit.sigma_post, spec.sigma_grid)
                       if spec.sigma_grid else (spec.sigma_prior, []))
    errs = gibbs_errors(sub, data, draws, seed, progress)
    units, mean = int(errs.size), float(errs.mean())
    upper = max(mean, kl_inv_upper(mean, math.log(2 / delta_mc) / units))
    how = (f"{draws} passes over the {data.n} rows of S, every row of every pass at its own "
           f"draw of the {sub.dim} coordinates from N(z, s_Q² I) (exact in law: the adapted "
           f"modules' outputs at those weights); seed {seed}, fresh draws (never the training "
           f"draws); ci = [Ê, kl⁻¹(Ê, ln(2/δ′)/N)], N = {units}, δ′ = {delta_mc}")
    sc = stats.scalars
    sc["gibbs_subspace_mean"] = Quantity(mean, estimated=True, ci=(mean, upper),
                                         confidence=1 - delta_mc, method=how)
    sc["gibbs_subspace_units"] = Quantity(float(units), method="independent [0, 1] Monte Carlo "
                                          "losses of the subspace Gibbs posterior: " + how)
    sc["subspace_dim"] = Quantity(float(sub.dim), method="coordinates of the subspace")
    sc["subspace_dist_sq"] = Quantity(dist_sq, method="‖z‖² of the trained posterior mean, "
                                                      "float64")
    sc["subspace_sigma_post"] = Quantity(fit.sigma_post, method="trained s_Q")
    sc["subspace_sigma_prior"] = Quantity(float(s_prior), method=sigma_of(spec)["rule"])
    sc["subspace_prior_grid"] = Quantity(float(spec.prior_grid), method=sigma_of(spec)["rule"])
    stats.provenance[RECORD] = {
        "posterior": f"{PREDICTOR}: N(z, s_Q² I_d) on the coordinates of a subspace around "
                     "the prior fixed before S, z and s_Q trained on S on a PAC-Bayes "
                     "objective (docs/sources/pac_bayes.md §8)",
        "spec": {k: (list(v) if isinstance(v, tuple) else v)
                 for k, v in dataclasses.asdict(spec).items()},
        "prior_centre": prior_source, "prior_sigma": {**sigma_of(spec), "chosen": s_prior,
                                                      "search": search},
        "dim": sub.dim, "dist_sq": dist_sq, "sigma_post": fit.sigma_post,
        "sites": sites_summary(sub),
        "training": {"objective_per_epoch": fit.history, "steps": fit.steps,
                     "cross_entropy_fit": {"epochs": spec.fit_epochs, "lr": spec.fit_lr,
                                           "loss_per_epoch": fit.fit_history,
                                           "dist_sq_after": fit.fit_dist_sq},
                     "seconds": round(fit.seconds, 2),
                     "loss": (f"−ln((1−α)p_y + α/V)/ln(V/α) per predicted token, α = "
                              f"{spec.smoothing:g} (the certified loss), every row its own draw"
                              if prior.is_lm else
                              f"−ln max(p_y, {spec.p_min:g}) / ln(1/{spec.p_min:g}), every row "
                              "its own draw")},
        "mc": {"passes": draws, "units": units, "delta_mc": delta_mc, "seed": seed,
               "samples_per_pass": data.n, "mean": mean, "upper": upper},
    }
    return sub, fit


def held_out(sub: Subspace, data: Batched, model_preds: Any, seed: int) -> dict[str, Any]:
    """On held-out rows: the mean's 0-1 error, one Monte Carlo pass of the Gibbs error, and how
    often one Gibbs draw per row disagrees with ``model_preds`` (model/'s classes on the same
    rows; texts only); estimates for the report, no choice uses them."""
    import numpy as np

    y = torch.cat([b[1] for b in data.batches]).numpy()
    gibbs = gibbs_predictions(sub, data, seed)
    with sub.draws(None, noise=False), torch.no_grad():
        mean_pred = gibbs_predictions_mean(sub, data)
    dis = int(np.sum(gibbs != np.asarray(model_preds)))
    return {"rows": data.n, "mean_error": float(np.mean(mean_pred != y)),
            "gibbs_error_estimate": float(np.mean(gibbs != y)),
            "disagreements_with_model": dis, "disagreement_rate": dis / data.n,
            "note": "one Monte Carlo pass (one draw per row); the mean's 0-1 error; how often "
                    "that draw's class differs from model/'s: estimates for the report"}


def gibbs_predictions_mean(sub: Subspace, data: Batched) -> Any:
    """The classes of the posterior mean (inside ``sub.draws(None, noise=False)``)."""
    from .inputs import to_device

    preds = []
    for inputs, _ in data.batches:
        sub.start_pass(int(next(iter(inputs.values())).shape[0]))
        preds.append(sub.tm.model(**to_device(dict(inputs), sub.device)).logits.argmax(-1).cpu())
    return torch.cat(preds).numpy()
