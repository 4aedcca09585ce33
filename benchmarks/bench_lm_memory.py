"""Issue 51's CPU acceptance: a tiny GPT-2 over GPT-2's whole vocabulary, measured as a user
types it, peak memory and wall time of the whole process.

The case: a GPT-2 of width 64 and 2 layers with the GPT-2 vocabulary (50,257 tokens, 3.5 M
weights), random initialisation (seed 0; the trained model is the initialisation plus a small
seeded move, so that ``--init`` differs from it), 64 rows of 128 token ids drawn uniformly
(seed 1) in a ``.pt`` file with ``input_ids``. The command is

    boundcalc measure m --init i --data d.pt --sigma 0.01 --draws 2 --hessian-probes 0 --device cpu

under ``/usr/bin/time -v`` (its "Maximum resident set size" is the peak RSS; issue 51's target
≤ 1.5 GB, 7.7 GB before), and its wall time divided by the wall time of one plain forward pass
over the same 64 rows with a chunked loss (rows in chunks of 8, the per-row mean NLL by
boundcalc's blocked float64 log-sum-exp, ``lm_loss.scored``), timed in this process in the
same run (median of 3, on torch's threads and on one thread, the faster of the two: measure's
data side runs a model this narrow on one thread; target ≤ 6×, 19.4× before). The yardstick of
before (each row widened to float64 in turn, ``torch.logsumexp``) is timed once beside it.
``--repeat N`` runs the whole comparison N times (each ratio recorded).

``--code PATH``: run the command with ``PYTHONPATH=PATH`` (e.g. ``/work/main`` for the before
figure); default: this checkout. Writes ``benchmarks/results/lm_memory_cpu.json`` (or ``--out``);
each run is appended under its code path, so one file holds before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VOCAB, WIDTH, LAYERS, HEADS, ROWS, TOKENS = 50257, 64, 2, 4, 64, 128
COMMAND = ["--sigma", "0.01", "--draws", "2", "--hessian-probes", "0", "--device", "cpu"]


def build(tmp: Path) -> tuple[Path, Path, Path]:
    """The model folder, the initialisation folder and the token-id file."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=VOCAB, n_embd=WIDTH, n_layer=LAYERS, n_head=HEADS,
                     n_positions=TOKENS)
    torch.manual_seed(0)
    init = GPT2LMHeadModel(cfg)
    init.save_pretrained(tmp / "i")
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in init.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=gen))
    init.save_pretrained(tmp / "m")
    ids = torch.randint(0, VOCAB, (ROWS, TOKENS), generator=torch.Generator().manual_seed(1))
    torch.save({"input_ids": ids}, tmp / "d.pt")
    return tmp / "m", tmp / "i", tmp / "d.pt"


def plain_forward(model_dir: Path, data: Path, chunk: int = 8, threads: int | None = None,
                  rowwise: bool = False) -> float:
    """Seconds of one forward pass over every row, in chunks of ``chunk`` rows, with the
    per-row mean token log-loss (float64, :func:`_plain_forward`; ``rowwise``: the yardstick of
    before, :func:`_rowwise_forward`), on ``threads`` threads (default: torch's)."""
    from transformers import GPT2LMHeadModel

    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:
        run = _rowwise_forward if rowwise else _plain_forward
        return run(GPT2LMHeadModel.from_pretrained(model_dir).eval(), data, chunk)
    finally:
        torch.set_num_threads(before)


def _plain_forward(model, data: Path, chunk: int) -> float:
    """The forward in chunks of rows and the per-row mean NLL by boundcalc's own blocked
    float64 log-sum-exp (``lm_loss.scored``: the cheapest exact loss this project has, so the
    ratio counts measure's passes and fixed costs, not a slower loss)."""
    from boundcalc.measure.data.lm_loss import scored

    ids = torch.load(data)["input_ids"]
    t0 = time.perf_counter()
    with torch.no_grad():
        out = []
        for lo in range(0, ids.shape[0], chunk):
            x = ids[lo:lo + chunk]
            lp, _, bad = scored(model(input_ids=x).logits, x[:, 1:], causal=True)
            out.append(-lp.mean(1))
        assert int(bad) == 0
    return time.perf_counter() - t0


def _rowwise_forward(model, data: Path, chunk: int) -> float:
    """The yardstick of before (issue 51's first pass): the same forward with
    ``torch.logsumexp`` on each row widened to float64 in turn."""
    ids = torch.load(data)["input_ids"]
    t0 = time.perf_counter()
    with torch.no_grad():
        for lo in range(0, ids.shape[0], chunk):
            x = ids[lo:lo + chunk]
            logits = model(input_ids=x).logits[:, :-1]
            for r in range(x.shape[0]):
                row = logits[r]
                lse = torch.logsumexp(row.double(), -1)
                row.gather(-1, x[r, 1:, None]).squeeze(-1).double() - lse
    return time.perf_counter() - t0


def run_command(code: Path, m: Path, i: Path, d: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "boundcalc", "measure", str(m),
           "--init", str(i), "--data", str(d), *COMMAND, "-o", str(d.parent / "s.json")]
    t0 = time.perf_counter()
    # cwd = the code: ``python -m`` puts the working directory before PYTHONPATH
    res = subprocess.run(cmd, env=env, cwd=code, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"measure failed (exit {res.returncode}): {res.stderr[-2000:]}")
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", res.stderr).group(1))
    stats = json.loads((d.parent / "s.json").read_text())
    return {"wall_s": round(wall, 2), "peak_rss_gb": round(rss_kb / 1e6, 3),
            "batch_size": (stats.get("provenance") or {}).get("batch_size"),
            "stats": stats.get("scalars", {})}


def one_run(code: Path, m: Path, i: Path, d: Path) -> dict:
    """The command once, between yardsticks timed in the same run (see the module docstring);
    the yardstick of before (row-wise ``torch.logsumexp``) once per thread count, for
    comparison."""
    # the yardstick on torch's threads and on one (what measure's data side takes for a
    # model this narrow, boundcalc.measure.threads.data_threads): the faster counts
    plain = {n: [plain_forward(m, d, threads=n) for _ in range(2)] for n in (None, 1)}
    load_before = os.getloadavg()
    got = run_command(code, m, i, d)
    load_after = os.getloadavg()
    for n in plain:
        plain[n].append(plain_forward(m, d, threads=n))
    rowwise = {str(n or torch.get_num_threads()): round(plain_forward(m, d, threads=n,
                                                                      rowwise=True), 3)
               for n in (None, 1)}
    medians = {str(n or torch.get_num_threads()): statistics.median(v) for n, v in plain.items()}
    base = min(medians.values())
    scal = got.pop("stats")
    loss = scal.get("loss_mean")
    return {**got, "plain_forward_s": round(base, 3),
            "plain_forward_s_by_threads": {k: round(v, 3) for k, v in medians.items()},
            "plain_forward_runs_s": {str(n or torch.get_num_threads()): [round(x, 3) for x in v]
                                     for n, v in plain.items()},
            "rowwise_forward_s_by_threads": rowwise,
            "ratio": round(got["wall_s"] / base, 2),
            "loss_mean": loss.get("value") if isinstance(loss, dict) else loss,
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in load_after]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--code", default=str(ROOT))
    ap.add_argument("--out", default=str(HERE / "results" / "lm_memory_cpu.json"))
    ap.add_argument("--repeat", type=int, default=1, help="runs of the whole comparison")
    args = ap.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as t:
        m, i, d = build(Path(t))
        for _ in range(args.repeat):
            runs.append(one_run(Path(args.code), m, i, d))
            print(json.dumps(runs[-1]), flush=True)
    record = {"command": "boundcalc measure m --init i --data d.pt " + " ".join(COMMAND),
              "case": f"GPT-2 width {WIDTH}, {LAYERS} layers, vocabulary {VOCAB}; {ROWS} rows x "
                      f"{TOKENS} tokens",
              "yardstick": "forward in chunks of 8 rows + per-row mean NLL by "
                           "boundcalc.measure.data.lm_loss.scored (blocked float64 "
                           "log-sum-exp), median of 3, the faster of torch's threads and one",
              "ratios": [r["ratio"] for r in runs],
              "peak_rss_gb": max(r["peak_rss_gb"] for r in runs),
              "targets": {"peak_rss_gb": 1.5, "ratio": 6.0}, "runs": runs,
              "torch": torch.__version__, "threads": torch.get_num_threads(),
              "cores": os.cpu_count()}
    out = Path(args.out)
    data = json.loads(out.read_text()) if out.exists() else {}
    data[str(Path(args.code).resolve())] = record
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps({k: v for k, v in record.items() if k != "runs"}, indent=1))


if __name__ == "__main__":
    main()
