"""What the per-sample Monte Carlo costs beside a plain forward, counted and timed on the CPU.

Counts (they do not depend on the machine's load): per call of each kind of hooked module,
the aten operators, the bytes of new memory, the output-sized allocations, the elementwise
passes over an output-sized tensor (adds and copies apart), the host synchronisations
(:func:`boundcalc.measure.data.census.hook_census`); per batch, the operators, bytes and
FLOPs of one per-sample forward and of the plain forward of the same batch
(:func:`~boundcalc.measure.data.census.forward_census`). On the tiny BERT and ViT of
tests/measure/test_row_noise_ops.py (6 rows of 16 tokens / 16 patches) and on a 2-layer model
of BERT-base's widths (768 / 3072, 2 rows of 128 tokens).

Timings (process CPU time, one torch thread, minimum over interleaved repeats): on a 4-layer
BERT of widths 256 / 1024, 16 rows of 64 tokens, the forward with a draw per row (the hooks,
deferred, as the Monte Carlo runs them) against the plain forward of the same batch; and one
pass of :func:`~boundcalc.measure.data.gibbs.gibbs_estimate` (``auto``: per-sample hooks)
over 4 such batches against the plain forwards of the same 4 batches. Ratios are within the
run; ``plain / per-sample`` is the Monte Carlo's share of a plain loop's throughput.
``--against REV``: also the hooks of ``boundcalc/measure/data/row_noise.py`` at git revision
REV (loaded from ``git show``, nothing written) interleaved with the current ones and the plain
forward in the same run, on that model and on a 2-layer model of BERT-base's widths (4 rows of
128 tokens): before and after under the same load.

    python benchmarks/bench_mc_ops.py --label before|after [--repeats 5] [--no-timing]
    python benchmarks/bench_mc_ops.py --label after --against d4c4e55
    git show d4c4e55:boundcalc/measure/data/row_noise.py > old_row_noise.py   # then, on a card:
    python benchmarks/bench_mc_ops.py --label after --device cuda --against old_row_noise.py \
        --out DIR        # BERT-base, 512 × 128, TF32, wall time: mc_ops_cuda.json

Writes ``benchmarks/results/mc_ops_cpu.json`` (one record per label, kept across runs; on a
card ``mc_ops_cuda.json``, the comparison alone).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from common import interleaved  # noqa: E402


def _bert(hidden: int, layers: int, inter: int, rows: int, seq: int, seed: int = 0):
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=500, hidden_size=hidden, num_hidden_layers=layers,
                     num_attention_heads=max(hidden // 64, 1), intermediate_size=inter,
                     max_position_embeddings=max(seq, 32), num_labels=2,
                     attn_implementation="eager")
    model = BertForSequenceClassification(cfg).eval()
    ids = torch.randint(0, 500, (rows, seq))
    return model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def counts() -> dict:
    from boundcalc.measure.data.census import forward_census, hook_census
    from tests.measure.test_row_noise_ops import _bert as tiny_bert
    from tests.measure.test_row_noise_ops import _vit as tiny_vit

    out = {}
    for name, build in (("tiny_bert", tiny_bert), ("tiny_vit", tiny_vit),
                        ("bert_base_widths_2_layers", lambda: _bert(768, 2, 3072, 2, 128))):
        model, inputs = build()
        fwd = forward_census(model, inputs, 0.01)
        out[name] = {"per_call": hook_census(model, inputs, 0.01), "per_batch": fwd,
                     "rows": int(next(iter(inputs.values())).shape[0])}
        print(name, {k: {m: round(v.get(m, 0), 2) for m in
                         ("ops", "bytes", "full_allocs", "passes", "adds_copies", "syncs")}
                     for k, v in out[name]["per_call"].items()}, flush=True)
        print("  per batch:", fwd, flush=True)
    return out


def timing(repeats: int) -> dict:
    from boundcalc.measure.data.dataset_io import Batched
    from boundcalc.measure.data.gibbs import MonteCarlo, device_generator, gibbs_estimate
    from boundcalc.measure.data.hf import TaskModel
    from boundcalc.measure.data.row_noise import RowNoise

    rows, seq, batches = 16, 64, 4
    model, inputs = _bert(256, 4, 1024, rows, seq)
    sig = {n: 0.01 for n, _ in model.named_parameters()}
    hooks = RowNoise(model, sig, device_generator(model, 0), deferred=True)
    tm = TaskModel(model, "sequence_classification", "bench", 2)
    g = torch.Generator().manual_seed(1)
    data = []
    for _ in range(batches):
        ids = torch.randint(0, 500, (rows, seq), generator=g)
        data.append(({"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                     torch.randint(0, 2, (rows,), generator=g)))
    bat = Batched(data, rows * batches, seq, "random ids", "random ids")

    def plain():
        with torch.no_grad():
            return model(**inputs).logits

    def noisy():
        with torch.no_grad(), hooks:
            hooks.start_pass(rows)
            return model(**inputs).logits

    def plain_loop():
        with torch.no_grad():
            return [model(**b).logits for b, _ in data]

    def mc_pass():
        return gibbs_estimate(tm, bat, torch.device("cpu"), [0.01],
                              MonteCarlo(1, 0, 0.01, mode="auto"))

    t, res = interleaved({"plain": plain, "per_sample": noisy, "plain_loop": plain_loop,
                          "mc_pass": mc_pass}, repeats)
    assert res["mc_pass"].engine == "hooks", res["mc_pass"].engine
    best = {k: v.best for k, v in t.items()}
    return {"model": "BERT 4 layers, 256 / 1024, eager attention", "rows": rows, "seq": seq,
            "batches_per_pass": batches, "repeats": repeats,
            "timings": {k: v.to_json() for k, v in t.items()},
            "forward_per_sample_over_plain": best["per_sample"] / best["plain"],
            "mc_share_of_plain_forward": best["plain"] / best["per_sample"],
            "mc_pass_over_plain_loop": best["mc_pass"] / best["plain_loop"],
            "mc_share_of_plain_loop": best["plain_loop"] / best["mc_pass"]}


def _old_row_noise(rev: str):
    """The module ``row_noise`` as it was at git revision ``rev``, or as the file ``rev`` holds
    it (a copy made with ``git show`` where the repository's history is not at hand, e.g. on
    a lent card); its relative imports resolve in the current package."""
    import importlib.util

    if Path(rev).is_file():
        src = Path(rev).read_text()
    else:
        src = subprocess.run(["git", "-C", str(ROOT), "show",
                              f"{rev}:boundcalc/measure/data/row_noise.py"],
                             capture_output=True, text=True, check=True).stdout
    name = "boundcalc.measure.data._row_noise_at_rev"
    spec = importlib.util.spec_from_loader(name, loader=None)
    mod = importlib.util.module_from_spec(spec)
    mod.__package__ = "boundcalc.measure.data"
    sys.modules[name] = mod
    exec(compile(src, f"{rev}:row_noise.py", "exec"), mod.__dict__)  # noqa: S102
    return mod


SHAPES = {"cpu": {"bert_256x4_16x64": (256, 4, 1024, 16, 64),
                  "bert_768x2_4x128": (768, 2, 3072, 4, 128)},
          "cuda": {"bert_base_512x128": (768, 12, 3072, 512, 128)}}


def against(rev: str, repeats: int, device: torch.device) -> dict:
    """Plain forward, the hooks at ``rev`` and the current hooks, interleaved (see above); on
    a card: BERT-base, 512 rows of 128 tokens, TF32 as the CLI runs it, wall time."""
    import common

    from boundcalc.measure.data.gibbs import device_generator
    from boundcalc.measure.data.row_noise import RowNoise

    cuda = device.type == "cuda"
    common.PRIMARY = "wall" if cuda else "cpu"
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
    Old = _old_row_noise(rev).RowNoise
    tag = Path(rev).stem if Path(rev).is_file() else rev
    out = {}
    for name, shape in SHAPES[device.type].items():
        model, inputs = _bert(*shape)
        model.to(device)
        inputs = {k: v.to(device) for k, v in inputs.items()}
        rows = shape[3]
        sig = {n: 0.01 for n, _ in model.named_parameters()}

        def plain():
            with torch.no_grad():
                out = model(**inputs).logits
            sync()
            return out

        def run(hooks):
            def forward():
                with torch.no_grad(), hooks:
                    hooks.start_pass(rows)
                    out = model(**inputs).logits
                sync()
                return out
            return forward

        load = os.getloadavg()[0]
        t, _ = interleaved({"plain": plain,
                            tag: run(Old(model, sig, device_generator(model, 0), deferred=True)),
                            "current": run(RowNoise(model, sig, device_generator(model, 0),
                                                    deferred=True))}, repeats)
        b = {k: v.best for k, v in t.items()}
        out[name] = {"metric": common.metric_name(), "min_s": b,
                     f"{tag}_over_plain": b[tag] / b["plain"],
                     "current_over_plain": b["current"] / b["plain"],
                     f"current_over_{tag}": b["current"] / b[tag],
                     "load_1min_before_after": [load, os.getloadavg()[0]]}
        print(name, json.dumps(out[name]), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", required=True)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--against", help="git revision (or file) of row_noise.py to time beside")
    ap.add_argument("--device", default="cpu", help="cuda: only --against, on BERT-base")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    a = ap.parse_args()
    torch.set_num_threads(1)
    dev = torch.device(a.device)
    load = [os.getloadavg()[0]]
    rec: dict = {"counts": counts()} if dev.type == "cpu" else {
        "device": torch.cuda.get_device_name(dev)}
    if not a.no_timing and dev.type == "cpu":
        rec["timing"] = timing(a.repeats)
        print(json.dumps({k: v for k, v in rec["timing"].items() if k != "timings"}, indent=1))
    if a.against:
        rec["against"] = {"rev": a.against, "forward": against(a.against, a.repeats + 2, dev)}
    load.append(os.getloadavg()[0])
    rec["load_1min_before_after"] = load
    rec["commit"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                   capture_output=True, text=True).stdout.strip()
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"mc_ops_{dev.type}.json"
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc["what"] = __doc__.split("\n\n")[0]
    doc["metric"] = "process CPU time (user+sys), minimum over repeats, 1 torch thread"
    doc["torch"] = torch.__version__
    doc.setdefault("records", {})[a.label] = rec
    path.write_text(json.dumps(doc, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
