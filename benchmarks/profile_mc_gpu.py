"""Where the per-sample Monte Carlo's time goes on a card: torch.profiler over one σ of
``gibbs_estimate`` (2 passes) on a random BERT-base classifier, 1024 × 128 ids in one
card-sized batch, TF32 (the CLI's default on CUDA), beside a plain ``no_grad`` pass of the same
batch. Writes ``prof_mc.txt`` (operators by self CUDA time, and by self CPU time) and
``prof_mc.json`` (wall vs summed kernel time: how idle the card is).

    python benchmarks/profile_mc_gpu.py --out DIR      # on a CUDA machine
    python benchmarks/profile_mc_gpu.py --out DIR --self-test   # tiny, on the CPU
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("prof_out"))
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    from transformers import BertConfig, BertForSequenceClassification

    from boundcalc.measure.data.dataset_io import Batched
    from boundcalc.measure.data.gibbs import MonteCarlo, gibbs_estimate
    from boundcalc.measure.data.hf import TaskModel
    from boundcalc.measure.device import precision

    tiny = args.self_test or not torch.cuda.is_available()
    dev = torch.device("cpu" if tiny else "cuda")
    cfg = (BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64, num_labels=2, attn_implementation="eager") if tiny
           else BertConfig(num_labels=2, attn_implementation="eager"))
    n, seq = (32, 16) if tiny else (1024, 128)
    torch.manual_seed(0)
    model = BertForSequenceClassification(cfg).eval().to(dev)
    tm = TaskModel(model, "sequence_classification", "bert", 2)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (n, seq), generator=g)
    y = torch.randint(0, 2, (n,), generator=g)
    data = Batched([({"input_ids": ids, "attention_mask": torch.ones_like(ids)}, y)], n, seq,
                   "random ids", "random ids")
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    prec = "fp32" if tiny else "tf32"

    def plain():
        with torch.no_grad():
            x = {k: v.to(dev) for k, v in data.batches[0][0].items()}
            return (model(**x).logits.argmax(-1).cpu() != y).sum()

    def mc(passes):
        return gibbs_estimate(tm, data, dev, [1e-3], MonteCarlo(passes, 0, 0.01, mode="auto"))

    rec = {"device": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu",
           "torch": torch.__version__, "rows": n, "seq_len": seq, "precision": prec}
    with precision(prec, dev):
        plain(), mc(1)  # warm-up
        sync()
        t = time.perf_counter()
        plain()
        sync()
        rec["plain_pass_s"] = time.perf_counter() - t
        t = time.perf_counter()
        est = mc(2)
        sync()
        rec["mc_pass_s"] = (time.perf_counter() - t) / 2
        rec["mode"] = est.mode
        acts = [torch.profiler.ProfilerActivity.CPU]
        if dev.type == "cuda":
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=acts) as prof:
            t = time.perf_counter()
            mc(2)
            sync()
            wall = time.perf_counter() - t
    ka = prof.key_averages()
    dev_key = "self_device_time_total" if hasattr(ka[0], "self_device_time_total") else \
        "self_cuda_time_total"
    kernel_us = sum(getattr(e, dev_key, 0) for e in ka)
    rec.update({"profiled_wall_s": wall, "kernel_s_summed": kernel_us / 1e6,
                "card_busy_fraction": kernel_us / 1e6 / wall if wall else None,
                "mc_fraction_of_plain": rec["plain_pass_s"] / rec["mc_pass_s"]})
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "prof_mc.txt", "w") as f:
        if dev.type == "cuda":
            f.write(ka.table(sort_by=dev_key, row_limit=35, max_name_column_width=60))
        f.write("\n\n")
        f.write(ka.table(sort_by="self_cpu_time_total", row_limit=35, max_name_column_width=60))
    (args.out / "prof_mc.json").write_text(json.dumps(rec, indent=1))
    print(json.dumps(rec, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
