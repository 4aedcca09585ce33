"""The operator census of issue 40 (items 3 and 4), run by ``bench_row_noise.py --census``.

Host synchronisations of one Monte Carlo pass (one and two passes), one data pass and one
Hessian trace (2 probes), each at 1 and at 4 batches of 6 rows, on a BERT-shaped and a
ViT-shaped tiny model; aten operators and FLOPs of one per-sample forward against the plain
forward of the same batch of 6 rows, in the same run. Counts, not timings: they do not depend
on the machine's load. With ``--device cuda`` the same runs on a card, where CUDA's own
synchronisation debug mode counts the synchronisations that really happen (``cuda_syncs``).
"""

from __future__ import annotations

import json
import warnings
from contextlib import contextmanager
from pathlib import Path

import torch

from boundcalc.measure.data.census import forward_census, pass_syncs
from boundcalc.measure.data.dataset_io import Batched
from boundcalc.measure.data.hf import TaskModel

ROWS = 6


def models() -> dict:
    """name: (model, task, classes, one batch of 6 rows' inputs): the BERT- and ViT-shaped
    models of tests/measure/test_row_noise_ops.py."""
    from tests.measure.test_row_noise_ops import _bert, _vit

    return {"bert": (*_bert(), "sequence_classification", 2),
            "vit": (*_vit(), "image_classification", 3)}


def batched(inputs: dict, classes: int, n_batches: int) -> Batched:
    """``n_batches`` copies of one batch, with labels."""
    y = torch.arange(ROWS) % classes
    return Batched([(inputs, y)] * n_batches, ROWS * n_batches, 16, "census",
                   f"{n_batches} batches")


@contextmanager
def cuda_syncs(device: torch.device):
    """The warnings of CUDA's synchronisation debug mode inside the block (a list; empty and
    unused off a card)."""
    if device.type != "cuda":
        yield []
        return
    torch.cuda.synchronize(device)
    before = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield seen
        finally:
            torch.cuda.set_sync_debug_mode(before)


def census_record(device: torch.device) -> dict:
    out = {}
    for name, (model, inputs, task, classes) in models().items():
        model.to(device)
        tm = TaskModel(model, task, name, classes)
        rec: dict = {"syncs": {}}
        for b in (1, 4):
            data = batched(inputs, classes, b)
            for stage, passes in (("gibbs", 1), ("gibbs", 2), ("data", 1), ("hessian", 1),
                                  ("hessian_func", 1)):
                key = f"{stage}_{passes}pass" if stage == "gibbs" else stage
                with cuda_syncs(device) as seen:
                    c = pass_syncs(stage, tm, data, device, passes=passes)
                rec["syncs"].setdefault(key, {})[f"{b}_batches"] = {
                    "total": c.n_syncs, "by_op": dict(c.syncs),
                    **({"cuda_syncs": len(seen)} if device.type == "cuda" else {})}
        fwd = forward_census(model, {k: v.to(device) for k, v in inputs.items()}, 0.01)
        fwd["ratio"] = {k: fwd["per_sample"][k] / fwd["plain"][k]
                        for k in ("ops", "kernels", "flops")}
        rec["forward"] = fwd
        out[name] = rec
    return out


def write_census(out: Path, label: str, device: str = "cpu") -> None:
    torch.set_num_threads(1)
    dev = torch.device(device)
    rec = census_record(dev)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"census_{dev.type}.json"
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc["what"] = __doc__.split("\n\n")[1].replace("\n", " ")
    doc["torch"] = torch.__version__
    doc.setdefault("records", {})[label] = rec
    path.write_text(json.dumps(doc, indent=1))
    lines = ["| record | model | syncs: MC 1 pass (1 / 4 batches) | MC 2 passes | data pass | "
             "Hessian trace (autograd; func) | ops per batch: per-sample / plain | non-view ops | "
             "FLOPs: per-sample / plain |", "|---|---|---|---|---|---|---|---|---|"]

    def kernels(f: dict) -> str:
        if "kernels" not in f["plain"]:
            return "-"
        return (f"{f['per_sample']['kernels']} / {f['plain']['kernels']} = "
                f"{f['ratio']['kernels']:.2f}×")

    for lab, recs in doc["records"].items():
        for name, r in recs.items():
            s = r["syncs"]
            def cell(k: str, s=s) -> str:
                one, four = s[k]["1_batches"], s[k]["4_batches"]
                cuda = (f" (CUDA's count {one['cuda_syncs']} / {four['cuda_syncs']})"
                        if "cuda_syncs" in one else "")
                return f"{one['total']} / {four['total']}{cuda}"

            f = r["forward"]
            lines.append(
                f"| {lab} | {name} | {cell('gibbs_1pass')} | {cell('gibbs_2pass')} | "
                f"{cell('data')} | {cell('hessian')}; "
                f"{cell('hessian_func') if 'hessian_func' in s else '-'} | "
                f"{f['per_sample']['ops']} / "
                f"{f['plain']['ops']} = {f['ratio']['ops']:.2f}× | {kernels(f)} | "
                f"{f['per_sample']['flops']:,} / "
                f"{f['plain']['flops']:,} = {f['ratio']['flops']:.2f}× |")
    (out / f"census_{dev.type}.md").write_text(
        f"Operator census (issue 40 items 3, 4), {dev.type}, batches of 6 rows; command: "
        "`python benchmarks/bench_row_noise.py --census --label LABEL`. The record 'before' "
        "ran on main's boundcalc tree at 942e621 (git archive) with this census module.\n\n"
        + "\n".join(lines) + "\n")
    print("\n".join(lines))
