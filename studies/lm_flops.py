"""FLOP arithmetic of the language-model example's presets (issue 51): how long ``--full`` and
``--gpt2`` take on one card, planned from counted FLOPs, not guessed.

The FLOPs of one row (``cfg.chunk`` bytes) through the model, forward and forward + backward,
are counted by ``torch.utils.flop_counter.FlopCounterMode`` on a CPU copy of the preset's
model (one row; every matmul and attention product is linear in the rows). The plan multiplies
them by the work of each stage of :func:`studies.language_model.run`:

* the prior's training, ``train_steps`` steps of ``batch`` rows (forward + backward), and the
  fine-tuning on S, ``post_steps`` such steps;
* measure's passes over S: the data pass, ``draws`` Monte Carlo passes per σ, and as many
  again for the per-group σ search on the prior split (``tune``; an upper count);
* the bound-trained posterior: ``bound_epochs`` passes over S (forward + backward) and
  ``bound_draws`` Monte Carlo passes over S and over the held-out chunks;
* the held-out, pool and S bits (one forward each).

Seconds are FLOPs divided by :data:`PLAN_FRACTION` of the card's dense bf16 peak
(:data:`H200_BF16_PEAK`, NVIDIA's H200 datasheet figure): the fraction is an assumption of the
plan, stated beside every figure, and the card check (``benchmarks/gpu_check.sh``) measures the
real one. Measure's passes run in float32/TF32 unless ``--precision bf16`` is given; the plan
counts them at the same fraction, so it is optimistic there (a stated limitation).
"""

from __future__ import annotations

from typing import Any

import torch

H200_BF16_PEAK = 989e12  # FLOP/s, dense bf16 (NVIDIA H200 datasheet)
# the plan's assumed fraction of that peak: the plain bf16 GPT-2 124M pass reached ≈ 10 % on
# the H200 (issue 51, gpu_h200_2026-11-28); bf16 autocast training of a model this size is
# taken to reach the same
PLAN_FRACTION = 0.10


def row_flops(cfg: Any) -> tuple[float, float, int]:
    """``(forward, forward + backward)`` FLOPs of one row of ``cfg.chunk`` bytes through the
    preset's model, counted on a CPU (float32; the count does not depend on the dtype), and
    the model's weights."""
    from torch.utils.flop_counter import FlopCounterMode

    from .language_model import _gpt2

    torch.manual_seed(0)
    model = _gpt2(cfg)
    x = torch.randint(0, 256, (1, cfg.chunk))
    with FlopCounterMode(display=False) as fwd, torch.no_grad():
        model(input_ids=x)
    with FlopCounterMode(display=False) as both:
        model(input_ids=x, labels=x).loss.backward()
    return (float(fwd.get_total_flops()), float(both.get_total_flops()),
            sum(p.numel() for p in model.parameters()))


def plan(cfg: Any, fraction: float = PLAN_FRACTION, peak: float = H200_BF16_PEAK
         ) -> dict[str, Any]:
    """Per stage and in total: FLOPs and seconds at ``fraction`` of ``peak`` (see the module
    docstring); ``n_params`` the preset's weights."""
    fwd, both, n_params = row_flops(cfg)
    passes = 1 + len(cfg.sigmas) * cfg.draws * (2 if cfg.tune else 1)
    stages = {
        "prior training": cfg.train_steps * cfg.batch * both,
        "fine-tuning on S": cfg.post_steps * cfg.batch * both,
        "measure: data pass, Monte Carlo (and σ search)": passes * cfg.n_bound * fwd,
        "bound-trained posterior": (cfg.bound_epochs * cfg.n_bound * both
                                    + cfg.bound_draws * (cfg.n_bound + cfg.n_test) * fwd)
        if cfg.bound else 0.0,
        "held-out, pool and S bits (the pool counted as |S|)":
            (cfg.n_test + 2 * cfg.n_bound) * fwd,
    }
    rate = fraction * peak
    return {"n_params": int(n_params), "row_forward_flops": fwd, "row_train_flops": both,
            "assumed_fraction_of_peak": fraction, "peak_flops": peak,
            "stages": {k: {"flops": v, "seconds": v / rate} for k, v in stages.items()},
            "total_flops": sum(stages.values()),
            "total_seconds": sum(stages.values()) / rate}
