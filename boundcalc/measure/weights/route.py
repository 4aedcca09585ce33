"""Where the weights side runs when a card is asked for: never slower than the host alone.

Exact float64 SVDs of a Transformer's matrices are latency-bound on a card (a 768 × 768 gesvd
takes tens of milliseconds whatever the card, plus a host synchronisation per layer), while the
host measures one layer per core at once (:func:`~boundcalc.measure.threads.layer_workers`).
On an H100 with 16 cores, BERT-base's weights side took 4.3 s on the card alone and 2.6 s on
the host. So on CUDA the layers are **shared**: the walk reads each layer's tensors to the host
and queues them; the host's workers and one card worker each take the next queued layer when
they are free, and measure it whole (the card worker copies its tensors to the card first).
A slow card then takes few layers and a fast one many; the host never waits for the card
except for a layer the card already holds (at most one), so the wall time is at most the host's
own plus one card layer, and less whenever the card helps.

The card worker takes no layer before it is warm (:func:`warm_up`: the CUDA context, the
solver library, a float64 SVD read back): on an H100 the cold card took layer 0, the first one
queued, and the host's workers finished layers 1–11 and then waited for it (whole process 13.6 s
on the card against 11.9 s on the host alone). Warming overlaps the host's work; a card still
warming when the host has measured every layer is not waited for.

Both sides compute exact SVDs in float64 (the card's gesvd, the host's LAPACK); their
statistics agree to about 1e-14 relative (6.8e-15 measured on an H100), far inside the 1e-12
the tests ask. Which layers each side measured depends on timing, so it is recorded in
``provenance.weights_route``; a layer is never split between the two. No Gram-matrix
eigenvalues (squaring the condition number loses the small singular values). A layer that
fails on the card (e.g. out of its memory) is measured on the host instead.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any

import torch

from ..threads import layer_workers

HOST = torch.device("cpu")
CARD_THREAD = "boundcalc-weights-card"
Tensors = dict[str, torch.Tensor]
LayerFn = Callable[[int, Tensors, Tensors | None], Any]


def routed(device: torch.device) -> bool:
    """Whether the weights side on ``device`` shares its layers with the host (CUDA). Tests
    patch this to run the sharing with a stand-in card on the CPU."""
    return device.type == "cuda"


def warm_up(card: torch.device) -> None:
    """Load what a card layer uses before the card takes one: the context, cuSOLVER's float64
    SVD, a matmul and a read back to the host. Tests patch this to hold a stand-in card."""
    if card.type != "cuda":
        return
    a = torch.linspace(1.0, 2.0, 64, dtype=torch.float64, device=card).reshape(8, 8)
    float(torch.linalg.svdvals(a @ a.T).sum())


def host_workers(hidden: int) -> int:
    """Host workers beside the card: as many as the host alone would use. Benchmarks patch
    this to 0 to measure the card alone."""
    return layer_workers(hidden, HOST)


class _Ticket:
    """A queued layer's result, as a pool future gives it (``.result()``)."""

    def __init__(self, shared: SharedLayers, layer: int):
        self.shared, self.layer = shared, layer

    def result(self) -> Any:
        return self.shared.wait(self.layer)


class SharedLayers:
    """Layers measured by one card worker and ``n_host`` host workers, each taking the next
    queued layer when free. ``compute(layer, W, W0)`` measures one layer on the device its
    tensors are on. :meth:`record` says which side measured which layer."""

    def __init__(self, card: torch.device, n_host: int, compute: LayerFn):
        self.card, self.compute = card, compute
        self.warm = threading.Event()  # set once the card worker may take layers (or gave up)
        self.warm_s: float | None = None
        self.warm_error: str | None = None
        self.jobs: queue.Queue = queue.Queue()
        self.done: dict[int, tuple[str, Any, BaseException | None]] = {}
        self.cond = threading.Condition()
        # each worker runs in its own copy of the caller's context, so what it says names
        # options in the caller's words (boundcalc.words: the CLI's flags inside a command)
        self.threads = [threading.Thread(target=contextvars.copy_context().run,
                                         args=(self._card,), name=CARD_THREAD, daemon=True)]
        self.threads += [threading.Thread(target=contextvars.copy_context().run,
                                          args=(self._host, n_host), daemon=True,
                                          name=f"boundcalc-weights-host-{i}")
                         for i in range(n_host)]
        self.n_host = n_host
        for t in self.threads:
            t.start()

    def submit(self, layer: int, W: Tensors, W0: Tensors | None) -> _Ticket:
        self.jobs.put((layer, W, W0))
        return _Ticket(self, layer)

    def wait(self, layer: int) -> Any:
        with self.cond:
            self.cond.wait_for(lambda: layer in self.done)
            _, out, exc = self.done[layer]
        if exc is not None:
            raise exc
        return out

    def close(self) -> None:
        for _ in self.threads:
            self.jobs.put(None)
        for t in self.threads[1:]:
            t.join()
        if self.warm.is_set() or not self.n_host:  # a card still warming holds no layer:
            self.threads[0].join()  # it takes its None when warm, and ends

    def _finish(self, layer: int, side: str, out: Any, exc: BaseException | None) -> None:
        with self.cond:
            self.done[layer] = (side, out, exc)
            self.cond.notify_all()

    def _host(self, n_host: int) -> None:
        if n_host > 1:  # as a pool worker of the host's own walk: one torch thread each
            torch.set_num_threads(1)
        while (job := self.jobs.get()) is not None:
            layer, W, W0 = job
            try:
                self._finish(layer, "host", self.compute(layer, W, W0), None)
            except BaseException as exc:  # noqa: BLE001 - raised by wait() in the walk
                self._finish(layer, "host", None, exc)

    def _card(self) -> None:
        import time

        t0 = time.monotonic()
        try:
            if self.card.type == "cuda" and self.card.index is not None:
                torch.cuda.set_device(self.card)  # this thread's default card, for new tensors
            warm_up(self.card)
            self.warm_s = time.monotonic() - t0
        except BaseException as exc:  # noqa: BLE001 - no card after all: a host worker
            self.warm_error = f"{type(exc).__name__}: {exc}"[:200]
        finally:
            self.warm.set()
        if self.warm_error is not None:
            self._host(1)
            return
        while (job := self.jobs.get()) is not None:
            layer, W, W0 = job
            try:
                move = (lambda d: None if d is None else {r: t.to(self.card) for r, t in
                                                          d.items()})
                self._finish(layer, "card", self.compute(layer, move(W), move(W0)), None)
            except BaseException:  # noqa: BLE001 - the card failed (memory): the host's turn
                if self.card.type == "cuda":
                    torch.cuda.empty_cache()
                try:
                    self._finish(layer, "host", self.compute(layer, W, W0), None)
                except BaseException as exc:  # noqa: BLE001 - raised by wait() in the walk
                    self._finish(layer, "host", None, exc)

    def record(self) -> dict[str, Any]:
        """``provenance.weights_route``: the card, the layers each side measured, the rule."""
        sides = {"card": [], "host": []}
        for layer, (side, _, _) in sorted(self.done.items()):
            sides[side].append(layer)
        return {"card": str(self.card), "card_layers": sides["card"],
                "host_layers": sides["host"],
                "card_warm_s": None if self.warm_s is None else round(self.warm_s, 2),
                **({"card_error": self.warm_error} if self.warm_error else {}),
                "rule": (f"layers shared between {self.card} and {self.n_host} host "
                         "worker(s), each layer measured whole (exact float64 SVDs) by the "
                         "side that was free first; the card from when it was warm")}
