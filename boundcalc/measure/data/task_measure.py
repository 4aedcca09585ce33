"""``measure MODEL --data DATA`` for a task-head checkpoint: weights side + data side.

The weights side is :func:`.pipeline.measure` (layer map, norms, distances from ``init``). The
data side adds, on the sample DATA (the training sample the bounds are about):

scalars  ``n``, ``emp_risk`` (0-1 error of the trained weights), ``loss_mean`` (mean
         cross-entropy / per-token NLL), ``cross_entropy``, ``margin_q{01,05,10,25,50}``,
         ``input_token_norm_max`` (B_X: max token norm of the embedding output, i.e. the input
         of layer 0, positions included), ``input_fro_max``, ``seq_len`` (T), ``gibbs_draws``,
         ``hessian_trace`` (Hutchinson, with its t interval), ``smoothing_alpha`` (LMs);
curves   ``ramp_risk`` and ``margin_below`` over Bartlett's γ grid 2^k (k = −20…20);
         ``gibbs_risk_mean`` over σ on the Dziugaite–Roy grid σ² = 0.1·e^{−j/100}, each point
         with its draw count and the one-sided kl interval [Ê, kl⁻¹(Ê, ln(2|points|/δ′)/k)];
         ``perturbation_term`` (P̂ of Lintilhac–Shaikh) at each σ of their 20-point mesh, when
         ``perturbation_draws`` > 0 (expensive: 20 × draws Hutchinson estimates);
groups   ``hessian_trace`` per stats group (estimated).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ...errors import BoundcalcError
from ...stats import Curve, Quantity, Stats
from .data_pass import (GAMMA_GRID, LS_MESH, hessian_terms, perturbation_term, ramp_risk,
                        run_pass)
from .dataset_io import read_batches
from .gibbs import gibbs_risk
from ..device import device_name, resolve_device
from .hf import load_task_model

DR_C, DR_B = 0.1, 100.0  # the Dziugaite–Roy grid of pac_bayes.toml: σ_j² = c·e^{−j/b}
DEFAULT_SIGMAS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1)


def dr_point(sigma: float) -> tuple[int, float]:
    """The Dziugaite–Roy grid point nearest to ``sigma``: (j, σ_j)."""
    j = max(1, round(-DR_B * (2 * math.log(sigma) - math.log(DR_C))))
    return j, math.sqrt(DR_C) * math.exp(-j / (2 * DR_B))


def measure_task(model: str, data: str, init: str | None = None, *, device: str = "auto",
                 text_column: str = "text", label_column: str = "label", max_length: int = 128,
                 batch_size: int = 32, sigmas: Sequence[float] = DEFAULT_SIGMAS,
                 draws: int = 20, delta_mc: float = 0.01, hessian_probes: int = 20,
                 hessian_samples: int = 256, alpha: float = 0.01, seed: int = 0,
                 perturbation_draws: int = 0, progress: Any = None) -> Stats:
    """Measure a task-head Hugging Face folder on a data set (see the module docstring)."""
    from ..weights.pipeline import measure

    if draws < 0 or hessian_probes < 0 or hessian_probes == 1:
        raise BoundcalcError("--draws must be >= 0 and --hessian-probes 0 or >= 2")
    if not 0 < delta_mc < 1:
        raise BoundcalcError(f"--delta-mc must lie in (0, 1), got {delta_mc}")
    if not 0 < alpha < 1:
        raise BoundcalcError(f"--smoothing must lie in (0, 1), got {alpha}")
    bad = [s for s in sigmas if not (math.isfinite(s) and s > 0)]
    if bad:
        raise BoundcalcError(f"--sigma {bad[0]}: expected a positive number")
    dev = resolve_device(device)
    tm = load_task_model(model, dev)
    if tm.is_lm:
        from .hf import load_tokenizer

        tm.tokenizer = load_tokenizer(model)
    batched = read_batches(data, tm, text_column=text_column, label_column=label_column,
                           max_length=max_length, batch_size=batch_size)
    stats = measure(model, init=init, device=device, progress=progress or False)
    if progress is True:
        from ..weights.pipeline import _rich_progress

        report, stop = _rich_progress()
    else:
        report, stop = (progress if callable(progress) else None), (lambda: None)
    try:
        _data_side(stats, tm, batched, dev, data, init, sigmas, draws, delta_mc,
                   hessian_probes, hessian_samples, alpha, seed, report)
        if perturbation_draws > 0:
            probes = max(hessian_probes, 2)
            values = perturbation_term(tm, batched, dev, LS_MESH, perturbation_draws, probes,
                                       hessian_samples, seed, report)
            stats.curves["perturbation_term"] = Curve(
                "sigma", np.array(LS_MESH), values, estimated=True,
                n_samples=perturbation_draws,
                method=(f"P̂(σ) = 90th percentile over {perturbation_draws} draws u ~ N(0, σ²I) "
                        f"of |tr H(θ+u) − tr H(θ)|, Hutchinson with {probes} common probes on "
                        f"the first {min(hessian_samples, batched.n)} samples; σ is the std, on "
                        "the Lintilhac–Shaikh mesh linspace(0.01, 1e-5, 20)"))
    finally:
        stop()
    return stats


def _data_side(stats: Stats, tm, batched, dev, data, init, sigmas, draws: int,
               delta_mc: float, hessian_probes: int, hessian_samples: int, alpha: float,
               seed: int, report) -> None:
    torch.manual_seed(seed)
    base = run_pass(tm, batched, dev, alpha=alpha, progress=report)
    n = batched.n
    loss_name = "smoothed per-token NLL / ln(V/α)" if tm.is_lm else "0-1 error"
    how = f"one pass over {batched.description} ({data})"
    sc = stats.scalars
    sc["n"] = Quantity(float(n), method=how)
    sc["emp_risk"] = Quantity(float(base.err01.mean()), method=(
        "mean top-1 next-token error" if tm.is_lm else "0-1 training error of the trained weights")
        + f", {how}")
    sc["loss_mean"] = Quantity(float(base.ce.mean()), method=(
        "mean per-token NLL (nats)" if tm.is_lm else "mean cross-entropy (nats)") + f", {how}")
    sc["cross_entropy"] = Quantity(float(base.ce.mean()), method=sc["loss_mean"].method)
    sc["loss_min"] = Quantity(float(base.ce.min()), method=how)
    sc["loss_max"] = Quantity(float(base.ce.max()), method=how)
    if tm.is_lm:
        V = tm.n_outputs
        sc["smoothing_alpha"] = Quantity(alpha, method="prediction smoothing p̃ = (1−α)p + α/V "
                                                       "(Lotfi et al. 2023)")
        sc["bounded_loss_mean"] = Quantity(float(base.bounded.mean()), method=(
            f"mean of −ln((1−α)p_y + α/V)/ln(V/α) with α={alpha}, V={V}: a loss in [0, 1]"))
    sc["seq_len"] = Quantity(float(batched.seq_len), method=(
        "patches + [CLS]" if tm.task == "image_classification" else
        "longest tokenized sequence (after truncation)"))
    emb = "embedding output (hidden_states[0], the input of layer 0, positions included)"
    sc["input_token_norm_max"] = Quantity(base.token_norm_max, method=f"max token l2 norm of the "
                                          f"{emb} over all samples")
    sc["input_fro_max"] = Quantity(base.fro_max, method=f"max over samples of ‖X‖_F of the {emb}")
    if base.margin is not None:
        m = base.margin
        for q in (1, 5, 10, 25, 50):
            sc[f"margin_q{q:02d}"] = Quantity(float(np.percentile(m, q)), method=(
                f"{q}th percentile of the logit margin f_y − max_(j≠y) f_j over {n} samples"))
        gam = np.array(GAMMA_GRID)
        stats.curves["ramp_risk"] = Curve(
            "gamma", gam, np.array([ramp_risk(m, g) for g in gam]), n_samples=n,
            method="mean ramp loss min(1, max(0, 1 − m/γ)) of the logit margins, exact")
        stats.curves["margin_below"] = Curve(
            "gamma", gam, np.array([float(np.mean(m <= g)) for g in gam]), n_samples=n,
            method="fraction of samples with logit margin ≤ γ, exact")
    if draws > 0 and sigmas:
        points = sorted({dr_point(s) for s in sigmas}, key=lambda t: t[1])
        sig = [p[1] for p in points]
        losses = gibbs_risk(tm, batched, dev, sig, draws, seed, alpha, report)
        from ...engine.functions import kl_inv_upper

        means = losses.mean(1)
        c = math.log(2 * len(sig) / delta_mc) / draws
        uppers = [max(float(mu), kl_inv_upper(float(mu), c)) for mu in means]
        stats.curves["gibbs_risk_mean"] = Curve(
            "sigma", np.array(sig), means, ci=np.array([[mu, u] for mu, u in zip(means, uppers)]),
            confidence=1 - delta_mc, estimated=True, n_samples=draws,
            method=(f"Monte Carlo: mean {loss_name} over {n} samples of {draws} draws "
                    f"θ + u, u ~ N(0, σ²I), seed {seed}; σ on the Dziugaite–Roy grid (j = "
                    f"{', '.join(str(p[0]) for p in points)}); ci = [Ê, kl⁻¹(Ê, "
                    f"ln(2·{len(sig)}/δ′)/k)], δ′ = {delta_mc} split over the points"))
        sc["gibbs_draws"] = Quantity(float(draws), method="Monte Carlo draws per σ")
    if hessian_probes >= 2:
        _hessian(stats, tm, batched, dev, hessian_probes, hessian_samples, seed, report)
    stats.provenance.update({
        "device": device_name(dev), "data": str(data), "data_rows": n, "task": tm.task,
        "architecture_class": tm.architecture, "data_columns": batched.columns,
        "prior_centre": init if init is not None else None,
        "prior_note": (f"PAC-Bayes prior centred on the weights of {init} (also the distance "
                       "reference); it must not have been fit on DATA" if init is not None else
                       "no --init: no prior centre, entries needing a distance are skipped"),
        "bounded_loss": loss_name})


def _hessian(stats: Stats, tm, batched, dev, probes: int, samples: int, seed: int,
             report=None) -> None:
    from .curvature import attach_hessian_trace, hutchinson_trace, param_groups

    terms, used = hessian_terms(tm, batched, dev, samples)
    try:
        groups = param_groups(tm.model)
    except BoundcalcError:
        groups = None
    for p in tm.model.parameters():
        p.requires_grad_(True)
    tr = hutchinson_trace(tm.model, terms, n_probes=probes, groups=groups, seed=seed,
                          progress=report)
    tr.total.method = (tr.total.method or "") + f", mean training loss on the first {used} samples"
    try:
        attach_hessian_trace(stats, tr)
    except BoundcalcError:
        stats.scalars["hessian_trace"] = tr.total
