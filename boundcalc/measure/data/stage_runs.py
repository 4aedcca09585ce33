"""The runs of the data side's stages (:mod:`.stages`): what each measures into the stats,
on the one loaded model, data and choices of the call (:class:`.stages.DataRun`).

scalars  ``n``, ``emp_risk``, ``loss_mean``, ``cross_entropy``, ``loss_min``/``loss_max``,
         ``margin_q{01,05,10,25,50}``, ``input_token_norm_max``, ``input_fro_max``,
         ``seq_len``, ``majority_error``, ``smoothing_alpha``/``bounded_loss_mean`` (LMs):
         :func:`data_pass`; ``gibbs_draws``, ``gibbs_passes``: :func:`monte_carlo`;
         ``hessian_trace``: :func:`hessian`;
curves   ``ramp_risk``, ``margin_below`` (:func:`data_pass`), ``gibbs_risk_mean``
         (:func:`monte_carlo`), ``gibbs_risk_groups`` (:func:`group_passes`),
         ``perturbation_term`` (:func:`perturbation`).

Contract: each function reads the options of its stage's sub-record from ``run.opts`` and
writes only its own scalars, curves and provenance keys; the seed is set once, by the data
pass, before the Monte Carlo (whose draws come from their own seeded generators).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ...errors import BoundcalcError
from ...stats import Curve, Quantity, Stats
from ..device import device_name, precision as data_precision
from .batch_rows import DEFAULT_ROWS
from .data_pass import GAMMA_GRID, LS_MESH, hessian_terms, perturbation_term, ramp_risk, run_pass
from .gibbs import MonteCarlo, gibbs_estimate
from .options import MeasureOptions
from .sigma_grid import dr_point, dr_sigma

FREE_NOTE = ("chosen on data disjoint from S with the prior weights only: fixed before S is "
             "read, no union-bound cost")
CHARGED_NOTE = ("chosen with weights or rows that depend on S: the Dziugaite–Roy weight "
                "2 ln j + ln(π²/6) of the chosen point is charged")


def _loss_name(tm: Any) -> str:
    """The bounded loss of the data side: a language model's smoothed per-token NLL, else
    the 0-1 error."""
    return "smoothed per-token NLL / ln(V/α)" if tm.is_lm else "0-1 error"


def data_pass(stats: Stats, run: Any) -> None:
    """The data pass's scalars and curves on S (module docstring), and the provenance of the
    data side (device, data, task, prior centre); sets the seed of the call first."""
    tm, batched, dev, data, init, opts = (run.tm, run.batched, run.device, run.data, run.init,
                                          run.opts)
    alpha, seed, report = opts.smoothing, opts.seed, run.report
    torch.manual_seed(seed)
    base = run_pass(tm, batched, dev, alpha=alpha, progress=report)
    n = batched.n
    loss_name = _loss_name(tm)
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
    if not tm.is_lm:  # the trivial predictor a 0-1 bound must beat
        counts = np.bincount(torch.cat([y.reshape(-1) for _, y in batched.batches]).cpu().numpy(),
                             minlength=tm.n_outputs)
        sc["majority_error"] = Quantity(1 - float(counts.max()) / n, method=(
            f"0-1 error of always answering the majority label {int(counts.argmax())} of the "
            f"{n} samples; with K = {tm.n_outputs} classes guessing errs 1 − 1/K"))
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
    stats.provenance.update({
        "device": device_name(dev), "data": str(data), "data_rows": n, "task": tm.task,
        "architecture_class": tm.architecture, "data_columns": batched.columns,
        **({"labels": batched.labels} if batched.labels else {}),
        **({} if tm.is_lm else {"n_classes": int(tm.n_outputs)}),
        "prior_centre": init if init is not None else None,
        "prior_note": _prior_note(stats, init),
        "bounded_loss": loss_name})


def monte_carlo(stats: Stats, run: Any) -> None:
    """The curve ``gibbs_risk_mean`` and the scalars ``gibbs_draws``, ``gibbs_passes``: the
    Monte Carlo Gibbs risk on S at each σ point of ``run.opts``."""
    tm, batched, dev, opts, report = run.tm, run.batched, run.device, run.opts, run.report
    sigmas, draws, delta_mc, seed = opts.sigmas, opts.draws, opts.delta_mc, opts.seed
    loss_name, sc = _loss_name(tm), stats.scalars
    points = sorted({dr_point(s) for s in sigmas}, key=lambda t: t[1])
    sig = [p[1] for p in points]
    est = gibbs_estimate(tm, batched, dev, sig, MonteCarlo.of(opts, draws), report)
    means = est.means.mean(1)
    uppers = est.upper(delta_mc / len(sig))
    N = est.n_losses
    stats.curves["gibbs_risk_mean"] = Curve(
        "sigma", np.array(sig), means, ci=np.array([[mu, u] for mu, u in zip(means, uppers)]),
        confidence=1 - delta_mc, estimated=True, n_samples=N,
        method=(f"Monte Carlo ({est.mode} mode): mean {loss_name} of {est.describe()}; "
                f"seed {seed}, noise drawn on {device_name(dev)} by a device generator in "
                f"the parameter dtype ({next(iter(tm.model.parameters())).dtype}), sums in "
                f"float64 (reproducible for this seed, device and memory budget; CPU and "
                f"CUDA agree within Monte Carlo error, not bitwise); σ on the "
                f"Dziugaite–Roy grid (j = {', '.join(str(p[0]) for p in points)}); ci = "
                f"[Ê, kl⁻¹(Ê, ln(2·{len(sig)}/δ′)/N)] with N = {N}, δ′ = {delta_mc} split "
                "over the points"))
    sc["gibbs_draws"] = Quantity(float(N), method=(
        f"N: independent [0, 1] Monte Carlo losses averaged into Ê at each σ ({est.mode} "
        f"mode: {est.describe()}); the k of kl⁻¹(Ê, ln(2/δ′)/k)"))
    sc["gibbs_passes"] = Quantity(float(est.passes), method=(
        "passes over the data per σ" if est.mode == "sample" else "posterior draws per σ"))
    stats.provenance["gibbs_mode"] = est.mode
    if est.note:
        stats.provenance["gibbs_mode_note"] = est.note


def hessian(stats: Stats, run: Any) -> None:
    """The Hessian trace in fp32, whatever the data side's precision."""
    opts = run.opts
    with data_precision("fp32", run.device):  # curvature ignores the precision option
        _hessian(stats, run.tm, run.batched, run.device, opts.hessian_probes,
                 opts.hessian_samples, opts.seed, run.report,
                 rows=opts.batch_size or DEFAULT_ROWS)


def group_passes(stats: Stats, run: Any) -> None:
    """The per-group passes on S at the chosen σ vector (:func:`.tune.finish_groups`), the
    prior as a predictor in ``provenance.prior_predictor`` and, with a headless prior, where
    the distance to its centre comes from."""
    from .tune import finish_groups

    stats.provenance["prior_predictor"] = run.prior_record
    finish_groups(stats, run.tm, run.batched, run.device, run.opts, run.found,
                  progress=run.report)
    _say_head_share(stats, run.tm, run.prior, run.prior_record, run.say)


def perturbation(stats: Stats, run: Any) -> None:
    """The curve ``perturbation_term``: P̂ of Lintilhac–Shaikh at each σ of their mesh."""
    tm, batched, dev, opts, report = run.tm, run.batched, run.device, run.opts, run.report
    draws, samples, seed = opts.perturbation_draws, opts.hessian_samples, opts.seed
    probes = max(opts.hessian_probes, 2)
    routes: list[str] = []
    values = perturbation_term(tm, batched, dev, LS_MESH, draws, probes, samples, seed, report,
                               routes=routes, rows=opts.batch_size or DEFAULT_ROWS)
    stats.provenance["perturbation_term_hvp"] = "; ".join(routes)
    stats.curves["perturbation_term"] = Curve(
        "sigma", np.array(LS_MESH), values, estimated=True, n_samples=draws,
        method=(f"P̂(σ) = 90th percentile over {draws} draws u ~ "
                f"N(0, σ²I) of |tr H(θ+u) − tr H(θ)|, Hutchinson with {probes} "
                f"common probes on the first {min(samples, batched.n)} "
                "samples; σ is the std, on the Lintilhac–Shaikh mesh "
                "linspace(0.01, 1e-5, 20)"))


def _say_head_share(stats: Stats, tm, prior, prior_record, say) -> None:
    """With a headless prior: where the distance to the prior centre comes from, head or body
    (:func:`.prior_model.head_share`), in ``provenance.prior_predictor.kl_share`` and said."""
    from .prior_model import head_share

    share = head_share(tm, prior, prior_record or {}) if prior is not None else None
    if share is not None:
        stats.provenance["prior_predictor"]["kl_share"] = share
        if say is not None:
            say(share["text"])


def _prior_note(stats: Stats, init: Any) -> str:
    """One line on the prior centre (kind, head tensors), or which centre to choose."""
    from ...prior_spec import hint

    prior = stats.provenance.get("prior")
    if init is None or not prior:
        return hint(stored=True)
    kind = prior.get("kind")
    if kind == "zero":
        return ("PAC-Bayes prior centred at zero (the origin; data-independent), also the "
                "distance reference")
    if kind == "random":
        return (f"PAC-Bayes prior centred at the model's own initialisation re-drawn with seed "
                f"{prior.get('seed')} (data-independent), also the distance reference")
    note = (f"PAC-Bayes prior centred on the weights of {init} (also the distance reference); "
            "it must not have been fit on DATA")
    head = prior.get("head_tensors") or []
    if head:
        note += (f"; {len(head)} tensor(s) it lacks centred at {prior.get('head_init')}: "
                 + ", ".join(head[:4]) + (", …" if len(head) > 4 else ""))
    return note


def _hessian(stats: Stats, tm, batched, dev, probes: int, samples: int, seed: int,
             report=None, rows: int | None = None) -> None:
    """The Hessian trace on the first ``samples`` rows, in terms of at most ``rows`` rows (a
    gradient pass holds far more per row than the forward the batches were sized on; the
    probes stacked per pass are sized from its measured peak instead, on a card)."""
    from .curvature import attach_hessian_trace, hutchinson_trace, param_groups

    terms, used = hessian_terms(tm, batched, dev, samples, rows)
    try:
        groups = param_groups(tm.model)
    except BoundcalcError:
        groups = None
    for p in tm.model.parameters():
        p.requires_grad_(True)
    tr = hutchinson_trace(tm.model, terms, n_probes=probes, groups=groups, seed=seed,
                          progress=report)
    tr.total.method = (tr.total.method or "") + f", mean training loss on the first {used} samples"
    stats.provenance["hessian_hvp"] = tr.route
    try:
        attach_hessian_trace(stats, tr)
    except BoundcalcError:
        stats.scalars["hessian_trace"] = tr.total


def isotropic_sigma(tm: Any, tune: Any, device: Any, opts: MeasureOptions, found: Any,
                    prior_record: dict[str, Any], shared_rows: int,
                    progress: Any = None) -> tuple[float, dict[str, Any]]:
    """The isotropic σ chosen on the tune rows, and its record ``provenance.gibbs_sigma``
    (:mod:`.sizing`, its docstring). ``found``: the per-group search
    (:func:`.tune.search_groups`), whose isotropic step with the prior weights is taken where
    the prior predicts."""
    from .tune import ISOTROPIC_EVALUATIONS, isotropic_j, risk_draws

    prior_predicts = prior_record.get("kind") == "checkpoint with a task head"
    free = prior_predicts and found.free and not shared_rows
    rows = f"{opts.tune_data} ({tune.n} rows)"
    if prior_predicts:
        j = int(found.shape.j_isotropic)
        how = (f"{rows} with the prior weights {prior_record.get('init')}: the isotropic step "
               "of the per-group σ search (the largest σ whose tune Gibbs risk stays within "
               f"{opts.tune_slack} of the prior's own error)")
        evaluations = None
    else:
        names = [n for n, _ in tm.model.named_parameters()]
        base = float(run_pass(tm, tune, device, alpha=opts.smoothing, norms=False)
                     .bounded.mean())
        target = base + opts.tune_slack
        trace: list[float] = []

        def ok(js: dict[str, int]) -> bool:
            if progress:
                progress(min(len(trace), ISOTROPIC_EVALUATIONS), ISOTROPIC_EVALUATIONS,
                         "isotropic σ search on the tune data")
            sigma = dr_sigma(next(iter(js.values())))
            r = float(risk_draws(tm, tune, device, dict.fromkeys(names, sigma),
                                 opts.tune_draws, opts.seed + 20_000, opts.smoothing).mean())
            trace.append(r)
            return r <= target

        j = isotropic_j(ok, ["all"])
        evaluations = len(trace)
        how = (f"{rows} with the model's weights (the prior "
               f"{prior_record.get('init')} has no task head of its own, so its noise "
               "tolerance says nothing): the largest σ whose tune Gibbs risk stays within "
               f"{opts.tune_slack} of the model's own tune error {base:.4g}")
    sigma = dr_sigma(j)
    record = {"sigma": sigma, "j": j, "chosen_on": how, "disjoint_from_S": free,
              "note": FREE_NOTE if free else CHARGED_NOTE, "tune_data": opts.tune_data,
              "tune_shared_rows": shared_rows, "tune_draws": opts.tune_draws,
              "evaluations": evaluations}
    return sigma, record
