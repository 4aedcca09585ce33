"""The data pass of ``measure --data`` against a plain transformers evaluation loop.

Both compute the same per-sample losses of a ViTForImageClassification on the 1797 digits
(0-1 error, cross-entropy, logit margin) under ``torch.no_grad``, batch 256, one thread:

* boundcalc: :func:`boundcalc.measure.data.data_pass.run_pass` (float64 loss arithmetic, plus the
  embedding-output norms for B_X: one extra ``output_hidden_states``);
* baseline: ``model(pixel_values=x).logits`` per batch, ``cross_entropy(reduction="none")``,
  argmax and margins in float32, what a user would write.

Samples/s is reported from the minimum over interleaved repeats (process CPU time on a CPU,
wall time on CUDA). Results: ``benchmarks/results/data_pass.{json,md}``.

    python benchmarks/bench_data_pass.py [--repeats 5] [--device auto]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402


def _setup(device: torch.device):
    from sklearn.datasets import load_digits
    from transformers import ViTConfig, ViTForImageClassification

    from boundcalc.measure.data.dataset_io import Batched
    from boundcalc.measure.data.hf import TaskModel

    d = load_digits()
    x = torch.from_numpy(((d.images.astype(np.float32) / 16 - 0.5) / 0.5)[:, None])
    y = torch.from_numpy(d.target.astype(np.int64))
    torch.manual_seed(0)
    cfg = ViTConfig(image_size=8, patch_size=2, num_channels=1, hidden_size=64,
                    num_hidden_layers=4, num_attention_heads=4, intermediate_size=128,
                    num_labels=10, attn_implementation="eager")
    model = ViTForImageClassification(cfg).eval().to(device)
    bs = 256
    batches = [({"pixel_values": x[i:i + bs]}, y[i:i + bs]) for i in range(0, len(y), bs)]
    tm = TaskModel(model, "image_classification", "ViTForImageClassification", 10)
    return tm, Batched(batches, len(y), 17, "digits", "digits"), model, batches


def _clock(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
        return time.perf_counter()
    return time.process_time()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args(argv)
    from boundcalc.measure.data.data_pass import run_pass
    from boundcalc.measure.device import device_name, resolve_device

    torch.set_num_threads(1)
    dev = resolve_device(args.device)
    tm, data, model, batches = _setup(dev)

    def ours():
        return run_pass(tm, data, dev)

    def plain():
        errs, ces, margins = [], [], []
        with torch.no_grad():
            for inputs, y in batches:
                x, y = inputs["pixel_values"].to(dev), y.to(dev)
                logits = model(pixel_values=x).logits
                ces.append(torch.nn.functional.cross_entropy(logits, y, reduction="none"))
                errs.append((logits.argmax(-1) != y).float())
                fy = logits.gather(1, y[:, None]).squeeze(1)
                margins.append(fy - logits.scatter(1, y[:, None], -math.inf).max(1).values)
        return torch.cat(errs), torch.cat(ces), torch.cat(margins)

    a, b = ours(), plain()  # warm-up, and the same numbers
    assert np.allclose(a.err01, b[0].cpu().numpy()) and np.allclose(a.ce, b[1].cpu().numpy(),
                                                                    rtol=1e-4, atol=1e-5)
    times = {"boundcalc": [], "plain": []}
    for _ in range(args.repeats):
        for name, fn in (("boundcalc", ours), ("plain", plain)):
            t0 = _clock(dev)
            fn()
            times[name].append(_clock(dev) - t0)
    n = data.n
    res = {"benchmark": "data_pass_vs_plain_transformers_loop", "device": device_name(dev),
           "metric": "CPU time" if dev.type == "cpu" else "wall time (CUDA synchronised)",
           "samples": n, "model": "ViTForImageClassification 4x64, 8x8 digits, batch 256",
           "seconds_min": {k: min(v) for k, v in times.items()},
           "samples_per_s": {k: n / min(v) for k, v in times.items()},
           "ratio_plain_over_boundcalc": min(times["plain"]) / min(times["boundcalc"]),
           "torch": torch.__version__, "threads": torch.get_num_threads(),
           "date": time.strftime("%Y-%m-%d")}
    args.out.mkdir(parents=True, exist_ok=True)
    tag = "cpu" if dev.type == "cpu" else "cuda"
    (args.out / f"data_pass_{tag}.json").write_text(json.dumps(res, indent=1) + "\n")
    md = (f"# data pass ({res['device']}, {res['date']})\n\n| | samples/s |\n|---|---|\n"
          f"| boundcalc run_pass | {res['samples_per_s']['boundcalc']:.0f} |\n"
          f"| plain transformers loop | {res['samples_per_s']['plain']:.0f} |\n\n"
          f"boundcalc / plain time ratio: {1 / res['ratio_plain_over_boundcalc']:.2f} "
          f"({res['metric']}, minimum of {args.repeats} interleaved repeats)\n")
    (args.out / f"data_pass_{tag}.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
