"""Where the weights side runs when a card is asked for: never slower than the host.

Exact float64 SVDs of a Transformer's matrices are latency-bound on a card (a 768 × 768 gesvd
is tens of milliseconds whatever the card, plus a host synchronisation per layer), while the
host runs one layer per core at once (:func:`~boundcalc.measure.threads.layer_workers`). On an
H100 with 16 cores, BERT-base's weights side took 4.3 s on the card and 2.6 s on the host. So on
CUDA the first layer is measured on **both** at once (the card from the main thread, the host in
a thread), and the remaining layers go where the expected time is smaller:

    card: n_left · t_card        host: ⌈n_left / workers⌉ · t_host

(``workers`` layers run side by side on the host). Every layer's statistics, the first
included, then come from the chosen device, so a stats file never mixes the two. Both are
exact SVDs in float64 (the card's gesvd, the host's LAPACK): their statistics agree to about
1e-14 relative (6.8e-15 measured on an H100), far inside the 1e-12 the tests ask of the two
layouts. No Gram-matrix eigenvalues: squaring the condition number loses the small singular
values. The choice and both timings are recorded in ``provenance.weights_route``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..threads import layer_workers

HOST = torch.device("cpu")
LayerFn = Callable[[dict[str, torch.Tensor], dict[str, torch.Tensor] | None], Any]


def routed(device: torch.device) -> bool:
    """Whether the weights side on ``device`` takes the timed route (CUDA). Tests patch this
    to run the route with a stand-in card on the CPU."""
    return device.type == "cuda"


def choose(t_card: float, t_host: float, n_left: int, workers: int) -> str:
    """``"card"`` or ``"host"``: the smaller expected time for the ``n_left`` layers after the
    first (ties go to the host, whose numbers are the CPU's)."""
    card = n_left * t_card
    host = math.ceil(n_left / max(1, workers)) * t_host
    return "card" if card < host else "host"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Route:
    """The weights side's device: ``card`` until the first layer is measured, then the chosen
    one. ``device``/``workers``: where the next layers' tensors go and how many run at once."""

    card: torch.device
    hidden: int
    device: torch.device = HOST  # the first layer's tensors are read to the host
    workers: int = 1
    decided: bool = False
    record: dict[str, Any] | None = None

    def first(self, compute: LayerFn, W: dict[str, torch.Tensor],
              W0: dict[str, torch.Tensor] | None, layer: int, n_left: int) -> Any:
        """``compute(W, W0)`` (host tensors) on the card and on the host at once; returns the
        chosen device's result and fixes :attr:`device` and :attr:`workers`."""
        host_workers = layer_workers(self.hidden, HOST)
        out: dict[str, Any] = {}

        def on_host() -> None:
            try:
                if host_workers > 1:  # as a pool worker of _walk runs it
                    torch.set_num_threads(1)
                t0 = time.perf_counter()
                out["host"] = compute(W, W0)
                out["t_host"] = time.perf_counter() - t0
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                out["error"] = exc

        thread = threading.Thread(target=on_host, name="boundcalc-weights-host")
        thread.start()
        try:
            _warm(self.card)
            t0 = time.perf_counter()
            move = (lambda d: None if d is None else
                    {r: t.to(self.card, non_blocking=False) for r, t in d.items()})
            out["card"] = compute(move(W), move(W0))
            _sync(self.card)
            t_card = time.perf_counter() - t0
        finally:
            thread.join()
        if "error" in out:
            raise out["error"]
        where = choose(t_card, out["t_host"], n_left, host_workers)
        self.device, self.workers = ((self.card, 1) if where == "card"
                                     else (HOST, host_workers))
        self.decided = True
        self.record = {
            "device": str(self.device),
            "rule": (f"layer {layer} measured on both: {self.card} {t_card:.3g} s, host "
                     f"{out['t_host']:.3g} s ({host_workers} layer(s) at once on the host); "
                     f"the {n_left} other layer(s) expected {n_left * t_card:.3g} s on "
                     f"{self.card}, {math.ceil(n_left / host_workers) * out['t_host']:.3g} s "
                     f"on the host; every layer's statistics from {self.device}")}
        return out[where]


def _warm(card: torch.device) -> None:
    """One tiny float64 SVD on the card, so the first layer's time is not the solver's
    start-up (paid once per process, not per layer)."""
    if card.type == "cuda":
        torch.linalg.svdvals(torch.eye(4, dtype=torch.float64, device=card), driver="gesvd")
        _sync(card)
