"""The language-model example's training loop (issue 51): on CUDA it trains under bf16 autocast
with the fused AdamW; on a CPU it must stay the float32 loop it was. Same seed, same batches:
the weights after eight steps of ``_train`` equal, bit for bit, those of the plain loop written
out here (AdamW without weight decay, linear warm-up over 50 steps times a cosine decay, the
gradient's norm clipped at 1, the loss of the positions the mask keeps)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from studies.language_model import LMConfig, _gpt2, _train
from tests._measure_helpers import single_thread

STEPS = 8


def _batches(seed: int):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(STEPS):
        x = torch.randint(0, 256, (4, 16), generator=gen)
        m = torch.ones_like(x)
        m[0, 12:] = 0
        out.append((x.masked_fill(m == 0, 256), m))
    return out


def _plain(model, batches, steps: int, lr: float) -> None:
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: min(1.0, (i + 1) / 50) * (0.5 * (1 + math.cos(math.pi * i / steps))))
    model.train()
    for i in range(steps):
        x, m = batches[i]
        loss = model(input_ids=x, attention_mask=m, labels=x.masked_fill(m == 0, -100)).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()


def test_cpu_training_is_the_plain_float32_loop_bit_for_bit(capsys):
    torch.manual_seed(0)
    model = _gpt2(LMConfig(chunk=16, n_embd=32, n_layer=2, n_head=2))
    ref = copy.deepcopy(model)
    batches = _batches(1)
    before = [p.detach().clone() for p in model.parameters()]
    with single_thread():
        _train(model, lambda i: batches[i], STEPS, 3e-3, warm=True)
        _plain(ref, batches, STEPS, 3e-3)
    moved = 0
    for a, b, p0 in zip(model.parameters(), ref.parameters(), before):
        assert a.dtype == torch.float32 and torch.equal(a, b)
        moved += int(not torch.equal(a, p0))
    assert moved > 0 and not model.training


def test_card_training_rate_script_runs_its_self_test_on_the_cpu(tmp_path):
    """benchmarks/bench_lm_train.py (run by gpu_check.sh on a card) on tiny models on the CPU:
    it writes a record with a rate, a TFLOP/s figure consistent with the counted FLOPs of a
    training row, and the fraction of the peak (the code path, not a speed)."""
    import importlib.util
    import json
    from pathlib import Path

    from studies.lm_flops import H200_BF16_PEAK

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_lm_train.py"
    spec = importlib.util.spec_from_file_location("bench_lm_train_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with single_thread():
        assert mod.main(["--self-test", "--out", str(tmp_path)]) == 0
    rec = json.loads((tmp_path / "lm_train_gpu.json").read_text())
    assert set(rec["presets"]) == {"--full", "--gpt2"}
    for got in rec["presets"].values():
        assert got["steps"] >= 10 and got["steps_per_s"] > 0
        assert got["fraction_of_peak"] == pytest.approx(got["tflops"] * 1e12 / H200_BF16_PEAK,
                                                        rel=1e-2, abs=1e-4)
