"""The work of one task, the same whichever executor runs it (a local process or a Ray worker).

Tasks are plain dicts in, plain dicts out (picklable, no open handles). A task never raises for
bad input: it returns ``{"ok": False, "error": one line}``; only a dying process escapes, and the
executor retries that.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any


from ..result import jsonable


def _one_thread() -> None:
    """One BLAS/torch thread per task: executors parallelise across tasks, and a fixed thread
    count keeps LAPACK's results identical between executors."""
    import torch

    torch.set_num_threads(1)
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:
        pass


def _mark_started(task: dict[str, Any]) -> None:
    """Append a start line (pid, host) to ``DIR/tasks/<key>.log`` when DIR is reachable: shows
    what is running where, and counts attempts."""
    folder = task.get("marker_dir")
    if not folder:
        return
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        with open(Path(folder) / f"{task['key']}.log", "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "path": task.get("path"),
                                 "what": task.get("what", "checkpoint")}) + "\n")
    except OSError:
        pass


def _error_line(exc: BaseException) -> str:
    from ..errors import one_line

    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return one_line(f"{type(exc).__name__}: {first}" if not _is_ours(exc) else first, 300)


def _is_ours(exc: BaseException) -> bool:
    from ..errors import BoundcalcError

    return isinstance(exc, BoundcalcError)


def result_row(r: Any) -> dict[str, Any]:
    """The results-table fields of one optimised entry."""
    return {"id": r.id, "kind": r.kind, "label": r.label, "value": float(r.value),
            "log10_value": float(r.log10_value),
            "delta": None if r.delta is None else float(r.delta),
            "delta_effective": None if r.delta_effective is None else float(r.delta_effective),
            "union_cost": float(sum(r.union_bound_cost.values())),
            "parameters": json.dumps(jsonable(r.parameters), sort_keys=True),
            "estimated": bool(r.estimated),
            "vacuous": None if r.vacuous is None else bool(r.vacuous),
            "status": "ok", "error": None}


def run_layer(task: dict[str, Any]) -> dict[str, Any]:
    """One layer of a split checkpoint: its per-matrix statistics."""
    start = time.perf_counter()
    _one_thread()
    _mark_started(task)
    try:
        from ..measure.weights.pipeline import measure_layer

        mats = measure_layer(task["path"], task["layer"], init=task.get("init"), device="cpu",
                             n_heads=task.get("n_heads"))
        return {"ok": True, "matrices": mats, "seconds": time.perf_counter() - start}
    except Exception as exc:  # noqa: BLE001 - recorded as the task's one-line failure
        return {"ok": False, "error": _error_line(exc), "seconds": time.perf_counter() - start}


def run_checkpoint(task: dict[str, Any]) -> dict[str, Any]:
    """Measure one checkpoint (merging given per-layer parts, if any), then optimise every
    applicable entry. Returns the stats file's JSON and one row per entry."""
    start = time.perf_counter()
    _one_thread()
    _mark_started(task)
    try:
        from ..measure import measure
        from ..optimize.compare import compare_entries
        from ..registry import load_registry
        from ..stats import stats_from_json

        kwargs: dict[str, Any] = {}
        if task.get("layer_matrices"):
            kwargs["layer_matrices"] = task["layer_matrices"]
        stats = measure(task["path"], init=task.get("init"), data=task.get("data"),
                        device="cpu", n_heads=task.get("n_heads"), progress=False, **kwargs)
        stats_json = stats.to_json()
        # Entries are optimised on the stats as a reader of the stats file sees them.
        stats = stats_from_json(json.loads(json.dumps(stats_json)), task["path"])
        reg = load_registry(task.get("formulas"))
        comparison = compare_entries(stats, task.get("values") or {}, reg)
        rows = [result_row(r) for r in comparison.results]
        rows += [{"id": f["id"], "kind": f["kind"], "status": "failed", "error": f["error"]}
                 for f in comparison.failed]
        return {"ok": True, "stats": stats_json, "rows": rows,
                "seconds": time.perf_counter() - start}
    except Exception as exc:  # noqa: BLE001 - recorded as the task's one-line failure
        return {"ok": False, "error": _error_line(exc), "seconds": time.perf_counter() - start}
