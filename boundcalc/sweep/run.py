"""``run_sweep``: manifest → tasks → executor → ``DIR/results.csv`` and ``DIR/results.parquet``.

Layout of DIR::

    results.csv, results.parquet   one row per checkpoint × entry (failed checkpoints: one row)
    stats/<key>.json               the stats file of each checkpoint
    done/<key>.json                a finished task's rows (what a resumed sweep reuses)
    tasks/<key>.log                one line per attempt (pid, host)
    hashes.json                    file digests by path, size and mtime
    sweep.json                     counts, timings, failures of the last run

Only the driver writes these files: workers return values, so a cluster needs shared storage
for the checkpoints, not for DIR.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import BoundcalcError, OutputError
from ..files import as_finite_float, check_regular_file, read_json, read_limited
from ..words import option
from .cache import Hasher, formulas_digest, task_key
from .manifest import RESULT_COLUMNS, Manifest, read_manifest, registry_symbols
from .tasks import run_checkpoint, run_layer

Progress = Callable[["SweepProgress"], None]
MAX_STATE_BYTES = 256 << 20  # one stored result or task log of DIR


@dataclass
class SweepProgress:
    """Where a sweep stands: rows done of total, throughput and ETA."""

    total: int
    done: int = 0
    cached: int = 0
    failed: int = 0
    started: float = field(default_factory=time.perf_counter)
    stage: str = "checkpoints"

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    @property
    def per_minute(self) -> float | None:
        """Computed checkpoints per minute (cached ones excluded)."""
        n = self.done - self.cached
        return 60.0 * n / self.elapsed if n > 0 and self.elapsed > 0 else None

    @property
    def eta(self) -> float | None:
        rate = self.per_minute
        return None if rate is None else 60.0 * (self.total - self.done) / rate

    def line(self) -> str:
        rate, eta = self.per_minute, self.eta
        return (f"sweep: {self.done}/{self.total} {self.stage}"
                + (f" ({self.cached} cached)" if self.cached else "")
                + (f", {self.failed} failed" if self.failed else "")
                + (f", {rate:.3g}/min" if rate else "")
                + (f", ETA {eta:.0f} s" if eta is not None and self.done < self.total else ""))


@dataclass
class SweepOutcome:
    """What a sweep did: the table, where it went, and what was computed, reused or failed."""

    table: Any  # pandas DataFrame
    out: Path
    computed: int
    cached: int
    failed: list[dict[str, Any]]
    seconds: float
    executor: str


def _executor(ray: bool, address: str | None, workers: int):
    from .executors import LocalExecutor, RayExecutor

    if ray or address:
        return RayExecutor(workers=workers, address=address)
    return LocalExecutor(workers=workers)


def run_sweep(manifest: str | Path | Manifest, out: str | Path, *, ray: bool = False,
              ray_address: str | None = None, workers: int = 1, split_layers: bool = False,
              formulas: list[str] | None = None, target: str | None = None,
              progress: Progress | None = None, executor: Any = None) -> SweepOutcome:
    """Measure and optimise every checkpoint of a manifest; write the results table to ``out``.

    ``split_layers``: each checkpoint's layers become separate tasks (spread over workers),
    merged into the stats file ``measure`` alone would write. ``executor``: an object with
    ``map(fn, tasks, done)`` (default: local processes, or Ray with ``ray``/``ray_address``).
    Rows whose key (checkpoint, init and data bytes, formula files, options) has a stored result
    in ``out`` are reused, not recomputed.
    """
    from ..registry import load_registry

    start = time.perf_counter()
    if ray_address and executor is None:  # fail in seconds, before any checkpoint is hashed
        from .executors import check_reachable

        check_reachable(ray_address)
    reg = load_registry(formulas)
    if not isinstance(manifest, Manifest):
        manifest = read_manifest(manifest, target=target, known_symbols=registry_symbols(reg))
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise OutputError(f"{option('out', out)}: exists and is not a folder")
    for sub in ("stats", "done", "tasks"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    hasher = Hasher(out / "hashes.json")
    fdigest = formulas_digest(formulas)
    keys = []
    for row in manifest.rows:
        keys.append(task_key({
            "checkpoint": hasher.checkpoint(row.path), "init": hasher.checkpoint(row.init),
            "data": hasher.checkpoint(row.data), "formulas": fdigest,
            "options": {"values": row.values, "n_heads": row.n_heads}}))
    hasher.save()
    state = SweepProgress(total=len(manifest.rows))
    results: dict[int, dict[str, Any]] = {}
    for i, key in enumerate(keys):
        stored = _stored_result(out, key)
        if stored is not None:
            results[i] = stored
            state.done += 1
            state.cached += 1
    todo = sorted(set(range(len(keys))) - set(results))
    if progress is not None:
        progress(state)
    own = executor is None
    ex = executor if not own else (_executor(ray, ray_address, workers) if todo else None)
    try:
        layer_parts = (_split_layers(ex, manifest, keys, todo, out, progress, state)
                       if split_layers and todo else {})
        def finished(i: int, res: dict[str, Any]) -> None:
            results[i] = {k: v for k, v in res.items() if k != "stats"}
            _store(out, keys[i], res)
            state.done += 1
            state.failed += 0 if res.get("ok") else 1
            state.stage = "checkpoints"
            if progress is not None:
                progress(state)

        for i in [i for i in todo if isinstance(layer_parts.get(i), str)]:
            finished(i, {"ok": False, "error": layer_parts[i], "seconds": 0.0})
        run_idx = [i for i in todo if i not in results]
        tasks = [{"key": keys[i], "path": manifest.rows[i].path, "init": manifest.rows[i].init,
                  "data": manifest.rows[i].data, "n_heads": manifest.rows[i].n_heads,
                  "values": manifest.rows[i].values, "formulas": formulas,
                  "marker_dir": str(out / "tasks"), "what": "checkpoint",
                  **({"layer_matrices": layer_parts[i]} if i in layer_parts else {})}
                 for i in run_idx]
        if tasks:
            ex.map(run_checkpoint, tasks, lambda k, r: finished(run_idx[k], r))
    finally:
        if own and ex is not None and hasattr(ex, "close"):
            ex.close()
    table = _table(manifest, keys, results)
    from ..files.atomic_write import write_bytes_atomic

    write_bytes_atomic(out / "results.csv", table.to_csv(index=False).encode("utf-8"))
    try:
        table.to_parquet(out / "results.parquet", index=False)
    except ImportError:  # no pyarrow: the CSV alone (pip install 'boundcalc[ray]' adds it)
        (out / "results.parquet").unlink(missing_ok=True)
    else:
        import pandas as pd

        table = pd.read_parquet(out / "results.parquet")  # the table as any reader sees it
    failed = [{"row": i + 1, "path": manifest.rows[i].path, "error": results[i]["error"]}
              for i in sorted(results) if not results[i].get("ok")]
    outcome = SweepOutcome(table=table, out=out, computed=len(todo), cached=state.cached,
                           failed=failed, seconds=time.perf_counter() - start,
                           executor="none (all cached)" if ex is None
                           else getattr(ex, "name", type(ex).__name__))
    from ..stats import write_json_atomic

    write_json_atomic(out / "sweep.json", {
        "manifest": manifest.source, "rows": len(manifest.rows), "computed": outcome.computed,
        "cached": outcome.cached, "failed": failed, "executor": outcome.executor,
        "seconds": round(outcome.seconds, 3),
        "attempts": {keys[i]: _attempts(out, keys[i]) for i in todo}})
    return outcome


def _attempts(out: Path, key: str) -> int:
    try:
        text = read_limited(out / "tasks" / f"{key}.log", MAX_STATE_BYTES, BoundcalcError,
                            "task log")
    except BoundcalcError:
        return 0
    return len(text.splitlines())


def _cell(value: Any) -> bool:
    """What :func:`_store` writes in a row: text, a flag, nothing, or a finite number (JSON
    integers are unbounded; 10**400 is no number a row holds)."""
    return isinstance(value, (str, bool, type(None))) or as_finite_float(value) is not None


def _stored_result(out: Path, key: str) -> dict[str, Any] | None:
    """A finished task's stored rows (``done/<key>.json``, beside its stats file), validated
    as read back; None — recompute — when either is missing, unreadable, not a regular file or
    not of the shape :func:`_store` writes (a damaged or hand-edited sweep folder)."""
    stats = out / "stats" / f"{key}.json"
    try:
        check_regular_file(stats, BoundcalcError, "stats file")
        doc = read_json(out / "done" / f"{key}.json", MAX_STATE_BYTES, BoundcalcError,
                        "stored result")
    except BoundcalcError:
        return None
    if not isinstance(doc, dict) or doc.get("ok") is not True:
        return None
    rows = doc.get("rows")
    if not isinstance(rows, list) or not all(
            isinstance(r, dict) and all(isinstance(k, str) and _cell(v) for k, v in r.items())
            and all(isinstance(r.get(b), (bool, type(None))) for b in ("estimated", "vacuous"))
            for r in rows):
        return None
    if as_finite_float(doc.get("seconds", 0.0)) is None:
        return None
    return doc


def _store(out: Path, key: str, res: dict[str, Any]) -> None:
    """Write a finished task: its stats file, then its rows (the marker a resume trusts).
    Failures are not stored: a rerun tries them again."""
    from ..stats import write_json_atomic

    if not res.get("ok"):
        return
    for target, doc in ((out / "stats" / f"{key}.json", res["stats"]),
                        (out / "done" / f"{key}.json", {k: v for k, v in res.items()
                                                        if k != "stats"})):
        _clear_damaged(target)
        write_json_atomic(target, doc)


def _clear_damaged(path: Path) -> None:
    """Remove what stands in DIR where a state file belongs but is not a regular file (a FIFO,
    a device link, a folder left empty): DIR is the sweep's own, and writing into a special
    file in place would fail or block."""
    import os
    import shutil
    import stat as stat_

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat_.S_ISREG(st.st_mode):
        return
    if stat_.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    else:
        path.unlink()


def _split_layers(ex: Any, manifest: Manifest, keys: list[str], todo: list[int], out: Path,
                  progress: Progress | None, state: SweepProgress) -> dict[int, Any]:
    """Run one task per layer of every checkpoint to compute; ``{row: {layer: matrices}}`` or
    ``{row: error line}`` when a layer failed."""
    from ..measure import build_layer_map, open_source

    tasks, owner = [], []
    for i in todo:
        row = manifest.rows[i]
        try:
            with open_source(row.path) as src:
                n_layers = build_layer_map(src, n_heads=row.n_heads).n_layers
        except BoundcalcError:
            continue  # the checkpoint task reports the error
        for layer in range(n_layers):
            tasks.append({"key": f"{keys[i]}.layer{layer}", "path": row.path, "init": row.init,
                          "n_heads": row.n_heads, "layer": layer, "what": f"layer {layer}",
                          "marker_dir": str(out / "tasks")})
            owner.append((i, layer))
    layer_state = SweepProgress(total=len(tasks), stage="layers")

    def finished(pos: int, res: dict[str, Any]) -> None:
        layer_state.done += 1
        layer_state.failed += 0 if res.get("ok") else 1
        if progress is not None:
            progress(layer_state)

    got = ex.map(run_layer, tasks, finished)
    parts: dict[int, Any] = {}
    for (i, layer), res in zip(owner, got):
        if isinstance(parts.get(i), str):
            continue
        if not res.get("ok"):
            parts[i] = f"layer {layer}: {res['error']}"
            continue
        parts.setdefault(i, {})[layer] = res["matrices"]
    return parts


def _table(manifest: Manifest, keys: list[str], results: dict[int, dict[str, Any]]):
    """One row per checkpoint × entry, manifest order then registry order."""
    import pandas as pd

    fields = [c for c in RESULT_COLUMNS if c != "row"]
    records = []
    for i, row in enumerate(manifest.rows):
        res = results[i]
        base = {"row": i + 1, "path": row.path, "init": row.init, "data": row.data}
        extra = {c: v for c, v in row.columns.items() if c not in base}
        stats = f"stats/{keys[i]}.json" if res.get("ok") else None
        entries = res.get("rows") if res.get("ok") else [{"status": "failed",
                                                          "error": res["error"]}]
        if res.get("ok") and not entries:
            entries = [{"status": "no entry applies", "error": None}]
        for e in entries:
            rec = dict(base)
            rec.update({f: e.get(f) for f in fields})
            rec["stats"] = stats
            rec.update(extra)
            records.append(rec)
    cols = ["row", "path", "init", "data"] + fields + [c for c in manifest.columns
                                                       if c not in ("path", "init", "data")]
    df = pd.DataFrame.from_records(records, columns=cols)
    for c in ("value", "log10_value", "delta", "delta_effective", "union_cost"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
    for c in ("estimated", "vacuous"):
        df[c] = df[c].astype("boolean")
    return df
