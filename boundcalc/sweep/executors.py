"""Executors: run a list of tasks with one function, return the results in task order.

Both executors call the same task function (:mod:`.tasks`) on the same picklable task dicts and
hand back results by position, so the table they produce is the same bit for bit.

* :class:`LocalExecutor`: a pool of local processes (spawned: no server, works on a laptop).
  A process that dies mid-task (killed, out of memory) breaks the pool; the pool is rebuilt and
  the unfinished tasks are resubmitted, each at most ``max_retries`` more times.
* :class:`RayExecutor`: one Ray task per task, ``max_retries`` per Ray's policy (a dead worker is
  retried; an exception inside the task is not, since the task function returns failures as
  values). Connects to ``address`` (an existing cluster) or starts a local Ray.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import re
import socket
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ..errors import BoundcalcError, shown
from ..limits import time_limit
from ..words import option

Done = Callable[[int, dict[str, Any]], None]  # (task position, result) as each finishes


def _died(attempts: int, detail: str) -> dict[str, Any]:
    return {"ok": False, "error": f"worker died {attempts} times ({detail}); giving up",
            "seconds": 0.0}


class LocalExecutor:
    """A pool of ``workers`` local processes."""

    name = "local"

    def __init__(self, workers: int = 1, max_retries: int = 3) -> None:
        if workers < 1:
            raise BoundcalcError(f"{option('workers')} must be at least 1, got {workers}")
        self.workers = workers
        self.max_retries = max_retries
        self._pool: ProcessPoolExecutor | None = None

    def _get_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.workers,
                                             mp_context=mp.get_context("spawn"))
        return self._pool

    def map(self, fn: Callable[[dict[str, Any]], dict[str, Any]],
            tasks: Sequence[dict[str, Any]], done: Done | None = None) -> list[dict[str, Any]]:
        results: list[dict[str, Any] | None] = [None] * len(tasks)
        attempts = [0] * len(tasks)
        todo = list(range(len(tasks)))
        while todo:
            pool = self._get_pool()
            futures = {pool.submit(fn, tasks[i]): i for i in todo}
            for i in todo:
                attempts[i] += 1
            pending = set(futures)
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                broken = False
                for f in finished:
                    i = futures[f]
                    try:
                        results[i] = f.result()
                    except BrokenProcessPool:
                        broken = True
                        continue
                    if done is not None:
                        done(i, results[i])
                if broken:  # a worker died: every unfinished task goes round again
                    self.close()
                    break
            todo = [i for i in todo if results[i] is None]
            for i in [i for i in todo if attempts[i] > self.max_retries]:
                results[i] = _died(attempts[i], "the process exited abruptly")
                if done is not None:
                    done(i, results[i])
            todo = [i for i in todo if results[i] is None]
        return [r for r in results if r is not None]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


CONNECT_SECONDS = 30.0  # a reachable port that is not a Ray head: ray.init retries for minutes
PROBE_SECONDS = 3.0
_ADDRESS = re.compile(r"^(?:ray://)?\[?([^\]/]+?)\]?:(\d{1,5})/?$")


@contextlib.contextmanager
def _stderr_silenced() -> Iterator[None]:
    """File descriptor 2 sent to /dev/null inside the block: Ray's C++ client writes a line per
    failed connection attempt straight to it, ahead of the one-line error."""
    try:
        saved = os.dup(2)
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        yield
        return
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def check_reachable(address: str) -> None:
    """Refuse, within seconds, a Ray address where nothing listens: one TCP connection attempt
    to HOST:PORT (``ray://HOST:PORT`` too) with a short timeout. ``auto`` and other forms are
    left to Ray (under the connection time limit)."""
    m = _ADDRESS.match(address.strip())
    if not m:
        if address.strip() in ("auto", "local"):
            return
        raise BoundcalcError(f"{option('ray_address', shown(address))}: expected HOST:PORT, "
                             "ray://HOST:PORT or auto")
    host, port = m.group(1), int(m.group(2))
    if not 0 < port < 65536:
        raise BoundcalcError(f"{option('ray_address', shown(address))}: port {port} is out "
                             "of range")
    try:
        with socket.create_connection((host, port), timeout=PROBE_SECONDS):
            pass
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (
            exc.strerror or type(exc).__name__)
        raise BoundcalcError(f"cannot reach Ray at {shown(address)}: nothing answers on "
                             f"{host}:{port} ({reason})") from None


class RayExecutor:
    """Ray tasks, on a local Ray (``num_cpus=workers``) or the cluster at ``address``."""

    name = "ray"

    def __init__(self, workers: int | None = None, address: str | None = None,
                 max_retries: int = 3) -> None:
        try:
            import ray
        except ImportError:
            raise BoundcalcError(f"{option('ray')} needs Ray: pip install 'boundcalc[ray]'"
                                 ) from None
        self.ray = ray
        self.max_retries = max_retries
        self.started = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"log_to_driver": False, "include_dashboard": False,
                                      "logging_level": logging.ERROR}
            if address:
                check_reachable(address)
            try:
                if address:
                    with time_limit(CONNECT_SECONDS, f"connecting to Ray at {shown(address)}",
                                    BoundcalcError), _stderr_silenced():
                        ray.init(address=address, **kwargs)
                else:
                    ray.init(num_cpus=workers, **kwargs)
            except BoundcalcError:
                raise
            except Exception as exc:  # noqa: BLE001 - connection errors come in many types
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise BoundcalcError(f"cannot start or reach Ray"
                                     f"{' at ' + address if address else ''}: {first}") from None
            self.started = True

    def map(self, fn: Callable[[dict[str, Any]], dict[str, Any]],
            tasks: Sequence[dict[str, Any]], done: Done | None = None) -> list[dict[str, Any]]:
        ray = self.ray
        remote = ray.remote(num_cpus=1, max_retries=self.max_retries,
                            retry_exceptions=False)(fn)
        refs = [remote.remote(t) for t in tasks]
        where = {ref: i for i, ref in enumerate(refs)}
        results: list[dict[str, Any] | None] = [None] * len(tasks)
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                i = where[ref]
                try:
                    results[i] = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - worker crash after Ray's retries
                    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                    results[i] = _died(self.max_retries + 1, f"{type(exc).__name__}: "
                                                             f"{first[:160]}")
                if done is not None:
                    done(i, results[i])
        return [r for r in results if r is not None]

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()
