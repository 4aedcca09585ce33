"""The subspace posterior's Monte Carlo pass against today's per-row noise over every weight,
on the same rows: operators, FLOPs and new memory per batch (counts, independent of the load)
and CPU time per batch (one torch thread, minimum over interleaved repeats, ratios within the
run).

    python benchmarks/bench_subspace_mc.py [--repeats 5] [--rank 4]

Three forwards of one batch (16 rows of 64 tokens, a 4-layer BERT of widths 256 / 1024, the
model of ``bench_mc_ops.py``'s timing): ``plain`` (no draw), ``per_row_all_weights``
(:class:`boundcalc.measure.data.row_noise.RowNoise`, deferred, σ on every parameter: what the
Gibbs rows of ``certify`` draw today) and ``subspace`` (:class:`~boundcalc.measure.data.subspace.Subspace`:
every adapted Linear and the head, rank ``--rank``, each row its own draw of the coordinates).
Also the counts on a 2-layer model of BERT-base's widths (2 rows of 128 tokens). Writes
``benchmarks/results/subspace_mc_cpu.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from bench_mc_ops import _bert  # noqa: E402
from common import interleaved  # noqa: E402


def _forwards(model, inputs, rank: int) -> dict:
    """The three forwards of one batch, as callables."""
    from boundcalc.measure.data.gibbs import device_generator
    from boundcalc.measure.data.hf import TaskModel
    from boundcalc.measure.data.row_noise import RowNoise
    from boundcalc.measure.data.subspace import Subspace, SubspaceSpec

    rows = int(inputs["input_ids"].shape[0])
    sig = {n: 0.01 for n, _ in model.named_parameters()}
    hooks = RowNoise(model, sig, device_generator(model, 0), deferred=True)
    sub = Subspace(TaskModel(model, "sequence_classification", "bench", 2),
                   SubspaceSpec(rank=rank), torch.device("cpu"))
    gen = torch.Generator().manual_seed(0)

    def plain():
        with torch.no_grad():
            return model(**inputs).logits

    def per_row_all_weights():
        with torch.no_grad(), hooks:
            hooks.start_pass(rows)
            return model(**inputs).logits

    def subspace():
        with torch.no_grad(), sub.draws(gen):
            sub.start_pass(rows)
            return model(**inputs).logits

    return {"plain": plain, "per_row_all_weights": per_row_all_weights,
            "subspace": subspace}, sub.dim


def counts(model, inputs, rank: int) -> dict:
    """Operators (non-view kernels), FLOPs, new bytes and host syncs of each forward (the
    per-row one counted on its second pass, after its one-time checks)."""
    from boundcalc.measure.data.census import Census, _counts, flop_counter

    fns, dim = _forwards(model, inputs, rank)
    out = {"subspace_dim": dim}
    for name, fn in fns.items():
        fn()
        with Census() as c, flop_counter() as f:
            fn()
        out[name] = _counts(c, f)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rank", type=int, default=4)
    args = ap.parse_args()
    torch.set_num_threads(1)
    load0 = os.getloadavg()
    model, inputs = _bert(256, 4, 1024, 16, 64)
    big_model, big_inputs = _bert(768, 2, 3072, 2, 128)
    result = {"command": "python benchmarks/bench_subspace_mc.py " + " ".join(sys.argv[1:]),
              "counts": {"bert_256x4_16x64": counts(model, inputs, args.rank),
                         "bert_base_widths_2_layers_2x128": counts(big_model, big_inputs,
                                                                    args.rank)}}
    fns, dim = _forwards(model, inputs, args.rank)
    t, _ = interleaved(fns, args.repeats)
    cpu = {k: v.best for k, v in t.items()}
    result["cpu_s_per_batch"] = {k: round(v, 5) for k, v in cpu.items()}
    result["ratios"] = {
        "per_row_all_weights / plain": round(cpu["per_row_all_weights"] / cpu["plain"], 3),
        "subspace / plain": round(cpu["subspace"] / cpu["plain"], 3),
        "per_row_all_weights / subspace": round(cpu["per_row_all_weights"] / cpu["subspace"],
                                                3)}
    result.update(load_before=load0, load_after=os.getloadavg(), cores=os.cpu_count(),
                  threads=1, batch="16 rows × 64 tokens, BERT 256/1024, 4 layers",
                  rank=args.rank, subspace_dim=dim, repeats=args.repeats)
    path = ROOT / "benchmarks" / "results" / "subspace_mc_cpu.json"
    path.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
