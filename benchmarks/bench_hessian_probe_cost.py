"""Issue 51 item 4 on a CPU: one Hutchinson probe's cost as a multiple of one forward + backward.

A small BERT classifier (width 128, 2 layers, 4 heads, FFN 512, eager attention, no dropout,
vocabulary 1,000), 32 rows of 64 random ids, cross-entropy, one thread. Timed (median of 3,
interleaved): a no-grad forward, a forward + backward, and ``hutchinson_trace`` with 2 and with
10 probes by each route (``autograd``: double backward through the retained graph, one probe at
a time; ``func``: ``torch.func`` forward-over-reverse, probes stacked under vmap). Per probe =
(t₁₀ − t₂)/8; fixed = t₂ − 2·per probe (the forward and the create-graph backward of the term).
A Hessian-vector product by either route should cost about two forward + backward passes.
Writes ``benchmarks/results/hessian_probe_cost_cpu.json``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from boundcalc.measure.data.curvature import hutchinson_trace  # noqa: E402


def main() -> None:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    torch.set_num_threads(1)
    cfg = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=512, max_position_embeddings=64,
                     attn_implementation="eager", hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0)
    model = BertForSequenceClassification(cfg).eval()
    x, y = torch.randint(0, 1000, (32, 64)), torch.randint(0, 2, (32,))

    def loss():
        return torch.nn.functional.cross_entropy(model(input_ids=x).logits, y)

    def fwd():
        with torch.no_grad():
            loss()

    def fb():
        model.zero_grad()
        loss().backward()

    def trace(k: int, method: str):
        return hutchinson_trace(model, [loss], n_probes=k, groups=None, seed=0, method=method)

    runs = {"forward": fwd, "forward+backward": fb}
    for method in ("autograd", "func"):
        runs[f"{method} 2 probes"] = lambda m=method: trace(2, m)
        runs[f"{method} 10 probes"] = lambda m=method: trace(10, m)
    for f in runs.values():
        f()  # warm-up
    times: dict[str, list[float]] = {k: [] for k in runs}
    load = os.getloadavg()
    for _ in range(3):
        for k, f in runs.items():
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {"case": "BERT width 128, 2 layers, 32 x 64 ids, 1 thread", "median_s": med,
           "load_before": load, "load_after": os.getloadavg()}
    for method in ("autograd", "func"):
        per = (med[f"{method} 10 probes"] - med[f"{method} 2 probes"]) / 8
        out[method] = {"per_probe_s": per, "per_probe_x_forward_backward":
                       per / med["forward+backward"],
                       "fixed_s": med[f"{method} 2 probes"] - 2 * per,
                       "route": trace(2, method).route}
        print(f"{method:8s} per probe {per:.3f} s = {per / med['forward+backward']:.2f}× a "
              f"forward+backward ({med['forward+backward']:.3f} s); fixed "
              f"{out[method]['fixed_s']:.3f} s")
    (HERE / "results" / "hessian_probe_cost_cpu.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
