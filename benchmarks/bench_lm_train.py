"""The language-model example's training rate on a card (issue 51): the ``--full`` and
``--gpt2`` presets' models trained by the example's own loop (``studies.language_model._train``:
bf16 autocast, fused AdamW on CUDA) on random byte batches of the preset's shape for a fixed
number of seconds each, after a warm-up. Printed and recorded per preset: steps/s, TFLOP/s by
the counted FLOPs of a training row (``studies.lm_flops.row_flops``), the fraction of the H200's
bf16 peak beside the fraction the preset's plan assumes, and the plan's whole-run seconds at the
measured fraction (targets: ``--full`` ≤ 600 s, ``--gpt2`` ≤ 900 s).

``--self-test``: tiny models on the CPU for a second each (the code path, not a figure).
Writes ``OUT/lm_train_gpu.json`` (``--out``, default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from studies.language_model import FULL, GPT2, LMConfig, _gpt2, _train  # noqa: E402
from studies.lm_flops import H200_BF16_PEAK, PLAN_FRACTION, plan, row_flops  # noqa: E402

TARGETS = {"--full": 600.0, "--gpt2": 900.0}


def rate(cfg: LMConfig, seconds: float, device: torch.device) -> dict:
    """Steps per second of the example's loop on ``cfg``'s model over ``seconds`` (after a
    warm-up of 5 steps), on random byte batches of ``cfg.batch`` × ``cfg.chunk``."""
    torch.manual_seed(0)
    model = _gpt2(cfg).to(device)
    gen = torch.Generator().manual_seed(1)

    def batch(_: int):
        x = torch.randint(0, 256, (cfg.batch, cfg.chunk), generator=gen)
        return x.pin_memory() if device.type == "cuda" else x, torch.ones_like(x)

    _train(model, batch, 5, 1e-4, warm=False)
    steps = 10
    while True:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        _train(model, batch, steps, 1e-4, warm=False)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        took = time.perf_counter() - t0
        if took >= seconds or steps >= 1 << 20:
            return {"steps": steps, "seconds": round(took, 3), "steps_per_s": steps / took}
        steps = int(steps * max(2.0, 1.2 * seconds / max(took, 1e-3)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="timed seconds per preset")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() and not args.self_test else "cpu")
    presets = {"--full": LMConfig(**FULL), "--gpt2": LMConfig(**GPT2)}
    if args.self_test:
        presets = {k: replace(c, n_embd=32, n_layer=1, n_head=2, chunk=16, batch=4)
                   for k, c in presets.items()}
        args.seconds = 1.0
    record = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "peak_flops": H200_BF16_PEAK, "plan_fraction": PLAN_FRACTION, "presets": {}}
    for name, cfg in presets.items():
        got = rate(cfg, args.seconds, device)
        _, train_row, _ = row_flops(cfg)
        flops = got["steps_per_s"] * cfg.batch * train_row
        fraction = flops / H200_BF16_PEAK
        whole = plan(cfg, fraction=max(fraction, 1e-9))
        got.update(tflops=round(flops / 1e12, 2), fraction_of_peak=round(fraction, 4),
                   prior_training_s=round(cfg.train_steps / got["steps_per_s"], 1),
                   plan_seconds_at_measured_fraction=round(whole["total_seconds"], 1),
                   target_s=TARGETS[name])
        record["presets"][name] = got
        print(f"{name:7s} {got['steps_per_s']:8.2f} steps/s of {cfg.batch}×{cfg.chunk} bytes, "
              f"{got['tflops']:7.2f} TFLOP/s = {fraction:.1%} of the bf16 peak (plan assumes "
              f"{PLAN_FRACTION:.0%}); prior training {got['prior_training_s']:.0f} s, whole run "
              f"by the plan {got['plan_seconds_at_measured_fraction']:.0f} s (target "
              f"{TARGETS[name]:.0f} s)")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "lm_train_gpu.json").write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
