"""The GPU acceptance cases of issue 29, BERT-base first, writing a partial record after every σ.

``--case bert`` (default): a BERT-base classifier (``BertConfig(num_labels=2)``, random
weights, eager attention) on 2048 × 128 random ids: one plain ``no_grad`` pass (the baseline,
same precision), then the Monte Carlo Gibbs risk at 5 σ × 20 draws in measure's default mode
(auto: a draw per sample where exact), one σ at a time, then 20 Hutchinson probes of the
Hessian trace. Targets: data side ≤ 60 s, Monte Carlo throughput ≥ 60 % of the plain loop's.

``--case gpt2``: GPT-2 (124 M, ``GPT2Config()``, random weights saved with ``save_pretrained``
and read back by measure's own loader, as a user's checkpoint is) on 2048 × 256 random ids:
the plain pass (next-token cross-entropy), then 5 σ × 20 draws of the Gibbs risk of the
smoothed per-token NLL; no Hessian probes. Target: ≤ 120 s.

After the baseline and after every σ the record so far is written to ``OUT/<case>_gpu.json``
(so a run stopped at its time limit keeps what it measured), with samples/s and the Monte
Carlo throughput as a fraction of the plain loop's.

    python benchmarks/bench_bert_gpu.py --out DIR [--case bert|gpt2] [--device cuda] [--self-test]

``--self-test`` runs the same code on a tiny model (hidden 32, 2 layers; BERT 64 × 16 ids,
GPT-2 32 × 16 ids; 2 σ × 2 draws, BERT 2 probes), on the CPU unless ``--device`` says
otherwise: it checks the script, not the speed. Needs only torch, transformers and numpy
besides boundcalc.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import torch  # noqa: E402


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def task(dev: torch.device, tiny: bool):
    from transformers import BertConfig, BertForSequenceClassification

    from boundcalc.measure.data.dataset_io import Batched
    from boundcalc.measure.data.hf import TaskModel

    torch.manual_seed(0)
    if tiny:
        cfg = BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=2, intermediate_size=64, num_labels=2,
                         attn_implementation="eager")
        n, seq, batch = 64, 16, 16
    else:
        cfg = BertConfig(num_labels=2, attn_implementation="eager")
        n, seq, batch = 2048, 128, 256
    model = BertForSequenceClassification(cfg).eval().to(dev)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(min(1000, cfg.vocab_size // 2), cfg.vocab_size, (n, seq), generator=g)
    y = torch.randint(0, 2, (n,), generator=g)
    batches = [({"input_ids": ids[i:i + batch],
                 "attention_mask": torch.ones_like(ids[i:i + batch])}, y[i:i + batch])
               for i in range(0, n, batch)]
    tm = TaskModel(model, "sequence_classification", "BertForSequenceClassification", 2)
    return tm, Batched(batches, n, seq, "random ids", f"{n} x {seq} random ids")


def gpt2_task(dev: torch.device, tiny: bool, folder: Path):
    """GPT-2 saved with ``save_pretrained`` into ``folder`` and loaded back as measure loads
    a checkpoint (:func:`boundcalc.measure.data.hf.load_task_model`), with random ids."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from boundcalc.measure.data.dataset_io import Batched
    from boundcalc.measure.data.hf import load_task_model

    torch.manual_seed(0)
    if tiny:
        cfg = GPT2Config(vocab_size=200, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                         bos_token_id=0, eos_token_id=0)
        n, seq, batch = 32, 16, 8
    else:
        cfg = GPT2Config()
        n, seq, batch = 2048, 256, 32
    GPT2LMHeadModel(cfg).save_pretrained(folder)
    tm = load_task_model(folder, dev)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (n, seq), generator=g)
    batches = [({"input_ids": ids[i:i + batch],
                 "attention_mask": torch.ones_like(ids[i:i + batch])}, None)
               for i in range(0, n, batch)]
    return tm, Batched(batches, n, seq, "random ids", f"{n} x {seq} random ids")


def _plain_errors(tm, x: dict, y, dev: torch.device) -> torch.Tensor:
    """The plain loop's per-batch work: 0-1 errors of a classifier, summed next-token
    cross-entropy of a causal LM (float32 logits, as the model gives them)."""
    out = tm.model(**x).logits
    if tm.is_lm:
        ids = x["input_ids"]
        return torch.nn.functional.cross_entropy(out[:, :-1].reshape(-1, out.shape[-1]),
                                                 ids[:, 1:].reshape(-1), reduction="sum")
    return (out.argmax(-1) != y.to(dev)).sum()


TARGETS = {"bert": "data side <= 60 s; Monte Carlo throughput >= 60 % of the plain loop",
           "gpt2": "plain pass + 5 sigma x 20 draws <= 120 s"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("gpu_check_out"))
    ap.add_argument("--case", choices=("bert", "gpt2"), default="bert")
    ap.add_argument("--device", default=None, help="default: cuda, or cpu with --self-test")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args(argv)
    import tempfile

    from boundcalc.measure.data.curvature import hutchinson_trace, param_groups
    from boundcalc.measure.data.data_pass import hessian_terms
    from boundcalc.measure.data.gibbs import gibbs_estimate
    from boundcalc.measure.device import default_precision, device_name, precision

    dev = torch.device(a.device or ("cpu" if a.self_test else "cuda"))
    sigmas, draws, probes = (((0.001, 0.01), 2, 2) if a.self_test
                             else ((0.0005, 0.001, 0.002, 0.005, 0.01), 20, 20))
    if a.case == "gpt2":
        probes = 0  # the GPT-2 case is the Monte Carlo alone
    prec = default_precision(dev)
    a.out.mkdir(parents=True, exist_ok=True)
    name = f"{a.case}_gpu"
    rec: dict = {"schema": f"boundcalc.benchmarks.{name}", "case": a.case,
                 "self_test": a.self_test,
                 "device": device_name(dev), "torch": torch.__version__,
                 "python": sys.version.split()[0], "precision": prec,
                 "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "targets": TARGETS[a.case],
                 "sigmas_planned": list(sigmas), "draws": draws, "probes": probes,
                 "per_sigma": [], "complete": False}

    def write(stage: str) -> None:
        rec["stage"] = stage
        (a.out / f"{name}.json").write_text(json.dumps(rec, indent=1) + "\n")
        print(f"[{name} {time.strftime('%H:%M:%S')}] {stage}", flush=True)

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="boundcalc_gpt2_") as tmp:
        tm, data = (gpt2_task(dev, a.self_test, Path(tmp)) if a.case == "gpt2"
                    else task(dev, a.self_test))
    rec["rows"], rec["seq_len"] = data.n, data.seq_len
    rec["build_s"] = time.perf_counter() - t0
    write(f"model and {data.n} × {data.seq_len} ids on {rec['device']}")
    with precision(prec, dev), torch.no_grad():
        for timed in (False, True):  # one warm-up pass, then the timed one
            _sync(dev)
            t = time.perf_counter()
            acc = torch.zeros((), device=dev)
            for x, y in data.batches:
                acc += _plain_errors(tm, {k: v.to(dev) for k, v in x.items()}, y, dev)
            float(acc)
            _sync(dev)
        plain = time.perf_counter() - t
    rec["plain_pass_s"] = plain
    rec["plain_samples_per_s"] = data.n / plain
    write(f"plain pass {plain:.3f} s ({data.n / plain:,.0f} samples/s, {prec})")
    data_side = 0.0
    for i, s in enumerate(sigmas):
        with precision(prec, dev):
            _sync(dev)
            t = time.perf_counter()
            est = gibbs_estimate(tm, data, dev, [s], draws, i, 0.01, mode="auto")
            _sync(dev)
            dt = time.perf_counter() - t
        data_side += dt
        rate = draws * data.n / dt
        left = (len(sigmas) - i - 1) * dt
        rec["per_sigma"].append({"sigma": s, "seconds": dt, "mode": est.mode,
                                 "engine": est.engine, "note": est.note,
                                 "samples_per_s": rate, "mean_loss": float(est.means.mean()),
                                 "mc_throughput_fraction": rate / rec["plain_samples_per_s"]})
        rec["monte_carlo_s"] = data_side
        write(f"σ {s}: {dt:.1f} s, {rate:,.0f} samples/s ({rate / rec['plain_samples_per_s']:.0%} "
              f"of the plain loop, {est.mode} mode), ETA of the other σ {left:.0f} s")
    rec["hessian_s"] = 0.0
    if probes:
        for p in tm.model.parameters():
            p.requires_grad_(True)
        _sync(dev)
        t = time.perf_counter()
        terms, _ = hessian_terms(tm, data, dev, 256)
        try:
            groups = param_groups(tm.model)
        except Exception:  # noqa: BLE001 - as measure: no layer map, no groups
            groups = None
        tr = hutchinson_trace(tm.model, terms, n_probes=probes, groups=groups, seed=0)
        _sync(dev)
        rec["hessian_s"] = time.perf_counter() - t
        rec["hessian_trace"] = float(tr.total.value)
        rec["hessian_route"] = tr.route
    rec["data_side_s"] = plain + data_side + rec["hessian_s"]
    fr = [r["mc_throughput_fraction"] for r in rec["per_sigma"]]
    rec["met"] = ({"data_side_le_60s": rec["data_side_s"] <= 60,
                   "mc_throughput_ge_60pct": min(fr) >= 0.6} if a.case == "bert"
                  else {"plain_and_monte_carlo_le_120s": rec["data_side_s"] <= 120,
                        "mc_throughput_fraction_min": min(fr)})
    rec["complete"] = True
    rec["loadavg"] = os.getloadavg()
    write(f"Hessian {probes} probes {rec['hessian_s']:.1f} s; data side {rec['data_side_s']:.1f} "
          f"s; done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
