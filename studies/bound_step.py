"""The examples' bound-trained posterior step and their yardstick, on a folder that
``boundcalc measure`` finished (``model/``, ``prior/``, ``S.jsonl``, a held-out file and
``stats.json`` with the per-group σ search).

* :func:`yardstick`: the prior's test-set bound on S (``test_set_kl`` of the prior's errors on
  S, which the prior never saw): what holding S out certifies without PAC-Bayes. Shown beside
  the certified rows, never claimed (the same baseline as ``certify``'s report).
* :func:`bound_posterior`: trains the bound-trained Gibbs posterior around ``model/``
  (:func:`boundcalc.measure.data.bound_posterior.add_bound_posterior`, settings fixed before S
  is read), measures its Gibbs risk on S with fresh draws, writes the record that
  ``pac_bayes_kl_gaussian_learned_mc`` certifies into ``stats.json`` and saves its mean as
  ``posterior_bound/``; the held-out error of that Gibbs predictor (per-row draws, as in the
  certificate) and of its mean are recorded beside it, for the report only.
* :func:`subspace_posterior`: the same for the subspace Gibbs posterior around ``prior/``
  (:func:`boundcalc.measure.data.subspace_record.add_subspace_posterior`, as ``certify
  --posterior subspace`` trains it), certified by ``pac_bayes_kl_gaussian_subspace_mc``; its
  mean saved as ``posterior_subspace/``, with the held-out error of the mean, one Monte Carlo
  pass of its Gibbs predictor and that predictor's disagreement with ``model/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def yardstick(prior: str | Path, S: str | Path, max_length: int,
              batch: int = 64) -> dict[str, Any]:
    """The prior's test-set bound on S, with its errors and δ (see the module docstring)."""
    import torch

    from boundcalc.certify.claims import Count, Evidence, baseline
    from boundcalc.measure.data.data_pass import run_pass
    from boundcalc.measure.data.dataset_io import read_batches
    from boundcalc.measure.data.hf import load_task_model

    dev = torch.device("cpu")
    tm = load_task_model(prior, dev)
    data = read_batches(str(S), tm, max_length=max_length, batch_size=batch)
    errors = int(round(float(run_pass(tm, data, dev, alpha=0.0, norms=False).err01.sum())))
    return baseline(Evidence(prior_on_S=Count(errors, data.n)))  # as certify's report has it


def bound_posterior(out: str | Path, heldout: str | Path, spec: Any, *, draws: int, seed: int,
                    max_length: int, batch: int = 64,
                    stats: str | Path | None = None) -> dict[str, Any]:
    """Train and certify-measure the bound-trained posterior of ``out`` (see the module
    docstring) into the stats file ``stats`` (default ``out/stats.json``); ``spec`` is a
    :class:`~boundcalc.measure.data.bound_posterior.BoundTraining`. Returns
    ``provenance.gibbs_learned`` as written (with ``held_out``)."""
    import torch

    from boundcalc.certify.bound_posterior import FOLDER, _held_out
    from boundcalc.certify.train import save_folder
    from boundcalc.measure.data.bound_posterior import add_bound_posterior
    from boundcalc.measure.data.dataset_io import read_batches
    from boundcalc.measure.data.hf import load_task_model
    from boundcalc.measure.threads import blas_threads, data_threads
    from boundcalc.stats import load_stats

    out = Path(out)
    dev = torch.device("cpu")
    path = Path(stats) if stats is not None else out / "stats.json"
    stats = load_stats(path)
    tm = load_task_model(out / "model", dev)
    prior = load_task_model(out / "prior", dev)
    S = read_batches(str(out / "S.jsonl"), tm, max_length=max_length, batch_size=batch)
    T = read_batches(str(heldout), tm, max_length=max_length, batch_size=batch)
    with blas_threads(data_threads(tm.model, dev)):
        learned = add_bound_posterior(stats, tm, prior, S, dev, spec, draws=draws, seed=seed,
                                      prior_source=str(out / "prior"))
        rec = stats.provenance["gibbs_learned"]
        rec["held_out"] = _held_out(tm, T, dev, learned, seed + 10_000)
    rec["mean_model"] = str(out / FOLDER)
    save_folder(tm.model, tm.tokenizer, out / FOLDER, {"step": "bound-trained posterior",
                                                        "posterior": "bound"})
    stats.save(path)
    return rec


def subspace_posterior(out: str | Path, heldout: str | Path, spec: Any, *, draws: int,
                       seed: int, max_length: int, batch: int = 64,
                       stats: str | Path | None = None) -> dict[str, Any]:
    """Train and certify-measure the subspace Gibbs posterior around ``out/prior`` (see the
    module docstring) into the stats file ``stats`` (default ``out/stats.json``); ``spec`` is
    a :class:`~boundcalc.measure.data.subspace.SubspaceSpec` (checked before any model is
    read), ``draws`` the Monte Carlo passes over S (seed ``seed``, never the training seed).
    Returns ``provenance.gibbs_subspace`` as written (with ``held_out``)."""
    import numpy as np
    import torch

    from boundcalc.certify.subspace_posterior import FOLDER
    from boundcalc.certify.train import save_folder
    from boundcalc.measure.data.dataset_io import read_batches
    from boundcalc.measure.data.disagreement import predictions
    from boundcalc.measure.data.gibbs import MonteCarlo
    from boundcalc.measure.data.hf import load_task_model
    from boundcalc.measure.data.subspace_record import RECORD, add_subspace_posterior, held_out
    from boundcalc.measure.threads import blas_threads, data_threads
    from boundcalc.stats import load_stats

    spec.check()
    out = Path(out)
    dev = torch.device("cpu")
    path = Path(stats) if stats is not None else out / "stats.json"
    stats = load_stats(path)
    prior = load_task_model(out / "prior", dev)  # the subspace's centre (hooked, then merged)
    model = load_task_model(out / "model", dev)  # only for the held-out disagreement
    S = read_batches(str(out / "S.jsonl"), prior, max_length=max_length, batch_size=batch)
    T = read_batches(str(heldout), prior, max_length=max_length, batch_size=batch)
    with blas_threads(data_threads(prior.model, dev)):
        sub, _ = add_subspace_posterior(stats, prior, S, dev, spec, MonteCarlo(draws, seed),
                                        prior_source=str(out / "prior"))
        rec = stats.provenance[RECORD]
        model_preds = np.concatenate([p.numpy() for p in predictions(model, T, dev)])
        rec["held_out"] = held_out(sub, T, model_preds, seed + 10_000)
        sub.merge()
    rec["mean_model"] = str(out / FOLDER)
    save_folder(prior.model, prior.tokenizer, out / FOLDER, {"step": "subspace posterior",
                                                             "posterior": "subspace"})
    stats.save(path)
    return rec
