"""The GPU acceptance cases of issue 29 as a user meets them: ``boundcalc measure`` run as a
subprocess with the user's defaults, beside a plain loop over the same data.

``--case bert`` (default): a BERT-base classifier (``BertConfig(num_labels=2)``, random
weights, eager attention, saved with ``save_pretrained``; ``--init`` a second random one) on
2048 × 128 random ids and labels in a ``.pt`` file. First one plain ``no_grad`` pass over the
same model read back by measure's loader (batch 256, measure's default precision on the
device), then the user's command, timed end to end as a whole process:

    boundcalc measure MODEL --init INIT --data ids.pt --device cuda --sigma S (×5) --draws 20
        --hessian-probes 20 -o stats.json

Its Monte Carlo throughput is read from its own progress lines (``k/K steps (Gibbs risk σ=…, N
samples per step``, timed as they arrive: :func:`monte_carlo_rate`) and set beside the plain
loop's. Targets: the whole command
≤ 60 s; Monte Carlo ≥ 60 % of the plain loop.

``--case gpt2``: GPT-2 (124 M, ``GPT2Config()``) on 2048 × 256 random ids, the command with
``--precision bf16``, 5 σ × 20 draws, no probes. Target: ≤ 120 s.

``--case weights``: the weights side of the same BERT-base, ``boundcalc measure MODEL --init
INIT`` with ``--device cuda`` and with ``--device cpu``, each a whole process (imports
included), the statistics compared. Target: the card no slower than the host.

The record ``OUT/<case>_gpu.json`` is rewritten after the plain pass and at every progress
line of the command (a run stopped at its limit keeps what it saw). ``--library`` adds, as a
second line, the library-level timing of earlier versions (``gibbs_estimate`` called in
process); it is never the headline.

    python benchmarks/bench_bert_gpu.py --out DIR [--case bert|gpt2|weights] [--device cuda]
        [--limit SECONDS] [--library] [--self-test]

``--self-test`` runs the same code on a tiny model (hidden 32, 2 layers; BERT 64 × 16 ids,
GPT-2 32 × 16 ids; 2 σ × 2 draws, BERT 2 probes), the command on the CPU unless ``--device``
says otherwise: it checks the script, not the speed. Needs only torch, transformers and numpy
besides boundcalc.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import torch  # noqa: E402


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def bert_files(folder: Path, tiny: bool) -> dict:
    """A BERT classifier and a second random one (the init) saved as a user's checkpoints,
    random ids and labels in ``ids.pt``; the plain loop's batch."""
    from transformers import BertConfig, BertForSequenceClassification

    if tiny:
        cfg = BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=2, intermediate_size=64, num_labels=2,
                         attn_implementation="eager")
        n, seq, batch = 64, 16, 16
    else:
        cfg = BertConfig(num_labels=2, attn_implementation="eager")
        n, seq, batch = 2048, 128, 256
    for seed, name in ((0, "model"), (1, "init")):
        torch.manual_seed(seed)
        BertForSequenceClassification(cfg).save_pretrained(folder / name)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(min(1000, cfg.vocab_size // 2), cfg.vocab_size, (n, seq), generator=g)
    y = torch.randint(0, 2, (n,), generator=g)
    torch.save({"input_ids": ids, "labels": y}, folder / "ids.pt")
    return {"model": folder / "model", "init": folder / "init", "data": folder / "ids.pt",
            "ids": ids, "labels": y, "batch": batch}


def gpt2_files(folder: Path, tiny: bool) -> dict:
    """GPT-2 saved with ``save_pretrained`` and random ids in ``ids.pt`` (no init: the case is
    the Monte Carlo alone)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    if tiny:
        cfg = GPT2Config(vocab_size=200, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                         bos_token_id=0, eos_token_id=0)
        n, seq, batch = 32, 16, 8
    else:
        cfg = GPT2Config()
        n, seq, batch = 2048, 256, 32
    torch.manual_seed(0)
    GPT2LMHeadModel(cfg).save_pretrained(folder / "model")
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (n, seq), generator=g)
    torch.save({"input_ids": ids}, folder / "ids.pt")
    return {"model": folder / "model", "init": None, "data": folder / "ids.pt", "ids": ids,
            "labels": None, "batch": batch}


def _plain_errors(tm, x: dict, y, dev: torch.device) -> torch.Tensor:
    """The plain loop's per-batch work: 0-1 errors of a classifier, summed next-token
    cross-entropy of a causal LM (float32 logits, as the model gives them)."""
    out = tm.model(**x).logits
    if tm.is_lm:
        ids = x["input_ids"]
        return torch.nn.functional.cross_entropy(out[:, :-1].reshape(-1, out.shape[-1]),
                                                 ids[:, 1:].reshape(-1), reduction="sum")
    return (out.argmax(-1) != y.to(dev)).sum()


def plain_pass(tm, files: dict, dev: torch.device, prec: str) -> float:
    """Seconds of one plain ``no_grad`` pass (after one warm-up pass) in ``prec``."""
    from boundcalc.measure.device import precision

    ids, y, b = files["ids"], files["labels"], files["batch"]
    with precision(prec, dev), torch.no_grad():
        for _ in range(2):  # one warm-up pass, then the timed one
            _sync(dev)
            t = time.perf_counter()
            acc = torch.zeros((), device=dev)
            for i in range(0, len(ids), b):
                x = {"input_ids": ids[i:i + b].to(dev),
                     "attention_mask": torch.ones_like(ids[i:i + b]).to(dev)}
                acc += _plain_errors(tm, x, None if y is None else y[i:i + b], dev)
            float(acc)
            _sync(dev)
    return time.perf_counter() - t


TARGETS = {"bert": {"command_s_le": 60.0, "mc_fraction_ge": 0.6},
           "gpt2": {"command_s_le": 120.0}, "weights": {"cuda_s_le_cpu_s": True}}
STEP = re.compile(r": (\d+)/(\d+) steps \(([^,)]+)(?:, (\d+) samples per step)?")


def monte_carlo_rate(progress: list) -> dict | None:
    """The Monte Carlo stage's samples/s from the command's progress lines ``[seconds, line]``:
    ``N samples per step`` × (steps done between its first line, ``0/total``, and its end: the
    next stage's first line, else its last line) / the seconds between them."""
    gibbs, end = [], None
    for t, line in progress:
        m = STEP.search(line)
        if not m:
            continue
        done, total, what, rows = int(m.group(1)), int(m.group(2)), m.group(3), m.group(4)
        if rows is not None and "Gibbs risk" in what:
            gibbs.append((t, done, total, int(rows)))
        elif gibbs and end is None:
            end = (t, gibbs[-1][2], gibbs[-1][2], gibbs[-1][3])  # the stage finished by then
    if end is not None:
        gibbs.append(end)
    if len(gibbs) < 2 or gibbs[-1][0] <= gibbs[0][0] or gibbs[-1][1] <= gibbs[0][1]:
        return None
    (t0, d0, total, rows), (t1, d1, _, _) = gibbs[0], gibbs[-1]
    return {"steps": d1 - d0, "of": total, "seconds": t1 - t0, "samples_per_step": rows,
            "samples_per_s": rows * (d1 - d0) / (t1 - t0)}


def user_command(files: dict, dev: torch.device, sigmas, draws: int, probes: int,
                 extra: list[str], stats: Path) -> list[str]:
    """``boundcalc measure`` as the user types it (defaults otherwise)."""
    cmd = [sys.executable, "-m", "boundcalc", "measure", str(files["model"])]
    if files["init"] is not None:
        cmd += ["--init", str(files["init"])]
    cmd += ["--data", str(files["data"]), "--device", dev.type]
    for s in sigmas:
        cmd += ["--sigma", str(s)]
    return cmd + ["--draws", str(draws), "--hessian-probes", str(probes), *extra,
                  "-o", str(stats)]


def run_command(cmd: list[str], rec: dict, write, limit: float) -> None:
    """Run the command, its output lines into ``rec["progress"]`` (seconds since start, line)
    and its Monte Carlo rate (:func:`monte_carlo_rate`) into ``rec["monte_carlo"]``, the
    record rewritten at each progress line; stopped at ``limit`` s."""
    env = {**os.environ, "PYTHONPATH": str(HERE.parent), "BOUNDCALC_PROGRESS_AFTER": "0",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    import threading

    timer = threading.Timer(limit, proc.kill)
    timer.start()
    try:
        for line in proc.stdout:
            now = time.monotonic() - t0
            rec["progress"].append([round(now, 6), line.rstrip()[:300]])
            mc = monte_carlo_rate(rec["progress"])
            if mc:
                mc["fraction_of_plain"] = mc["samples_per_s"] / rec["plain_samples_per_s"]
                rec["monte_carlo"] = mc
            rec["command_s"] = now
            if line.startswith("boundcalc "):  # the progress lines, not the tables
                write(f"{now:.1f} s: {line.strip()[:160]}")
        proc.wait()
    finally:
        timer.cancel()
    rec["command_s"] = time.monotonic() - t0
    rec["first_progress_line_s"] = next((t for t, x in rec["progress"]
                                         if x.startswith("boundcalc ")), None)  # start-up
    rec["command_exit"] = proc.returncode
    rec["command_stopped_at_limit"] = proc.returncode is not None and proc.returncode < 0


def read_stats(path: Path, rec: dict) -> None:
    """What the command's stats file says it did: device, precision, batch, Gibbs mode."""
    if not path.exists():
        return
    doc = json.loads(path.read_text())
    prov = doc.get("provenance", {})
    rec["stats_provenance"] = {k: prov.get(k) for k in ("device", "precision", "batch_size",
                                                         "threads", "gibbs", "hessian")
                               if k in prov}
    rec["stats_scalars"] = sorted(doc.get("scalars", {}))[:40]


def library_line(tm, files: dict, dev: torch.device, prec: str, sigmas, draws: int,
                 rec: dict) -> None:
    """The in-process timing of earlier versions (a second line, never the headline)."""
    from boundcalc.measure.data.dataset_io import Batched
    from boundcalc.measure.data.gibbs import MonteCarlo, gibbs_estimate
    from boundcalc.measure.device import precision

    ids, y, b = files["ids"], files["labels"], files["batch"]
    batches = [({"input_ids": ids[i:i + b], "attention_mask": torch.ones_like(ids[i:i + b])},
                None if y is None else y[i:i + b]) for i in range(0, len(ids), b)]
    data = Batched(batches, len(ids), ids.shape[1], "random ids", "random ids")
    out = []
    for i, s in enumerate(sigmas):
        with precision(prec, dev):
            _sync(dev)
            t = time.perf_counter()
            est = gibbs_estimate(tm, data, dev, [s], MonteCarlo(draws, i, 0.01, mode="auto"))
            _sync(dev)
            dt = time.perf_counter() - t
        rate = draws * len(ids) / dt
        out.append({"sigma": s, "seconds": dt, "mode": est.mode, "samples_per_s": rate,
                    "mc_throughput_fraction": rate / rec["plain_samples_per_s"]})
    rec["library_per_sigma"] = out


def weights_case(files: dict, dev: torch.device, rec: dict, write, limit: float) -> None:
    """The weights side as the user runs it, ``boundcalc measure MODEL --init INIT`` on the
    device and on the host, each a whole process; the statistics compared."""
    out = files["model"].parent
    env = {**os.environ, "PYTHONPATH": str(HERE.parent), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    stats = {}
    for side, where in (("card", dev.type), ("host", "cpu")):
        path = out / f"weights_{side}.json"
        cmd = [sys.executable, "-m", "boundcalc", "measure", str(files["model"]), "--init",
               str(files["init"]), "--device", where, "-o", str(path)]
        t = time.monotonic()
        try:
            res = subprocess.run(cmd, env=env, capture_output=True, text=True,
                                 timeout=limit / 2)
        except subprocess.TimeoutExpired:
            res = subprocess.CompletedProcess(cmd, -9, "", f"stopped at {limit / 2:.0f} s")
        rec[f"{side}_s"], rec[f"{side}_exit"] = time.monotonic() - t, res.returncode
        if res.returncode:
            rec[f"{side}_error"] = res.stderr[-1000:]
        else:
            stats[side] = json.loads(path.read_text())
            prov = stats[side].get("provenance", {})
            rec[f"{side}_provenance"] = {k: v for k, v in prov.items()
                                         if k in ("device", "weights_route", "threads")}
        write(f"weights side, --device {where}: {rec[f'{side}_s']:.1f} s (exit "
              f"{res.returncode})")
    if len(stats) == 2:
        worst = 0.0
        for ma, mb in zip(stats["card"]["matrices"], stats["host"]["matrices"]):
            for k, v in mb.get("stats", {}).items():
                a = ma.get("stats", {}).get(k)
                if isinstance(v, (int, float)) and isinstance(a, (int, float)):
                    worst = max(worst, abs(a - v) / max(abs(v), 1e-12))
        rec["max_rel_diff_stats"] = worst


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("gpu_check_out"))
    ap.add_argument("--case", choices=("bert", "gpt2", "weights"), default="bert")
    ap.add_argument("--device", default=None, help="default: cuda, or cpu with --self-test")
    ap.add_argument("--limit", type=float, default=540.0, help="seconds for the command")
    ap.add_argument("--library", action="store_true", help="also the in-process timing")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args(argv)
    import tempfile

    from transformers.utils import logging as hf_logging

    from boundcalc.measure.data.hf import load_task_model
    hf_logging.disable_progress_bar()
    from boundcalc.measure.device import default_precision, device_name

    dev = torch.device(a.device or ("cpu" if a.self_test else "cuda"))
    sigmas, draws, probes = (((0.001, 0.01), 2, 2) if a.self_test
                             else ((0.0005, 0.001, 0.002, 0.005, 0.01), 20, 20))
    extra: list[str] = []
    prec = default_precision(dev)
    if a.case == "gpt2":
        probes, extra, prec = 0, ["--precision", "bf16"], "bf16"
    certifies = {"gpt2": "the Gibbs risk (smoothed per-token NLL) of the Gaussian posterior "
                         "around the weights, each draw evaluated under bf16 autocast: a "
                         "predictor run in float32 differs by the tokens that rounding flips "
                         "(docs/sources/monte_carlo.md §3a)",
                 "bert": f"the 0-1 Gibbs risk of the posterior evaluated in {prec}"}
    a.out.mkdir(parents=True, exist_ok=True)
    name = f"{a.case}_gpu"
    rec: dict = {"schema": f"boundcalc.benchmarks.{name}", "case": a.case,
                 "self_test": a.self_test, "device": device_name(dev),
                 "torch": torch.__version__, "python": sys.version.split()[0],
                 "precision": prec, "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                              time.gmtime()),
                 "targets": TARGETS[a.case], "sigmas": list(sigmas), "draws": draws,
                 "probes": probes, "certifies": certifies.get(a.case), "progress": [],
                 "complete": False}

    def write(stage: str) -> None:
        rec["stage"] = stage
        (a.out / f"{name}.json").write_text(json.dumps(rec, indent=1) + "\n")
        print(f"[{name} {time.strftime('%H:%M:%S')}] {stage}", flush=True)

    if a.case == "weights":
        with tempfile.TemporaryDirectory(prefix="boundcalc_weights_") as tmp:
            weights_case(bert_files(Path(tmp), a.self_test), dev, rec, write, a.limit)
        ok = rec.get("card_exit") == 0 and rec.get("host_exit") == 0
        rec["met"] = {"cuda_s_le_cpu_s": ok and rec["card_s"] <= rec["host_s"]}
        rec["complete"] = ok
        write("done")
        return 0 if ok else 1
    with tempfile.TemporaryDirectory(prefix=f"boundcalc_{a.case}_") as tmp:
        t0 = time.perf_counter()
        files = (gpt2_files if a.case == "gpt2" else bert_files)(Path(tmp), a.self_test)
        tm = load_task_model(files["model"], dev)
        rec["rows"], rec["seq_len"] = files["ids"].shape
        rec["build_s"] = time.perf_counter() - t0
        plain = plain_pass(tm, files, dev, prec)
        rec["plain_pass_s"], rec["plain_samples_per_s"] = plain, len(files["ids"]) / plain
        write(f"plain pass {plain:.3f} s ({rec['plain_samples_per_s']:,.0f} samples/s, {prec})")
        tm.model.to("cpu")
        del tm  # the card to the command
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        stats = Path(tmp) / "stats.json"
        cmd = user_command(files, dev, sigmas, draws, probes, extra, stats)
        rec["command"] = " ".join(["boundcalc"] + cmd[3:]).replace(tmp, "TMP")
        run_command(cmd, rec, write, a.limit)
        read_stats(stats, rec)
        if a.library:
            library_line(load_task_model(files["model"], dev), files, dev, prec, sigmas, draws,
                         rec)
    frac = rec.get("monte_carlo", {}).get("fraction_of_plain")
    rec["met"] = {"command_s": rec["command_exit"] == 0
                  and rec["command_s"] <= TARGETS[a.case]["command_s_le"]}
    if a.case == "bert":
        rec["met"]["mc_fraction"] = frac is not None and \
            frac >= TARGETS["bert"]["mc_fraction_ge"]
    rec["complete"] = rec["command_exit"] == 0
    rec["loadavg"] = os.getloadavg()
    write(f"the command: {rec['command_s']:.1f} s (exit {rec['command_exit']}); Monte Carlo "
          f"{frac if frac is not None else float('nan'):.0%} of the plain loop; done")
    return 0 if rec["complete"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
