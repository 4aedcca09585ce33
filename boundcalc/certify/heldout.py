"""What the compare step of ``certify`` measures on rows the certificates' predictors never saw:
error counts of model/ and of the prior (on the held-out set, and the prior's on S), and the
held-out error of the Gibbs predictor at a row's σ, with the per-row draws of the certificate
(:func:`boundcalc.measure.data.tune.final_risk`: each row of each pass its own posterior draw
where that is exact, in the precision the measurement used)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Mapping

from ..errors import OutputError
from ..files import read_json_lines
from .claims import Count, Evidence
from .loaded import Loaded


def read_jsonl(path: Path) -> tuple[list[str], list[int]]:
    """Texts and class indices of a split written by :func:`.split.write_jsonl`, read through
    :func:`boundcalc.files.read_json_lines`."""
    rows = read_json_lines(path, OutputError, "split")
    return [r["text"] for r in rows], [int(r["label"]) for r in rows]


def _count(model: Any, tok: Any, rows: tuple[list[str], list[int]], max_length: int,
           batch_size: int, device: Any) -> Count:
    from .train import error_rate

    texts, labels = rows
    rate = error_rate(model, tok, texts, labels, max_length, batch_size, device)
    return Count(int(round(rate * len(texts))), len(texts))


def gibbs_on(out: Path, data: Path, max_length: int, batch_size: int | None, seed: int,
             device: Any, loaded: Loaded | None = None) -> Callable[[Any, int],
                                                                   tuple[float, int, str]]:
    """``f(sigma, passes)``: the Gibbs predictor of ``out/model`` on ``data`` at ``sigma`` (a
    float, or ``{group: σ_g}`` over :func:`~boundcalc.measure.data.tune.sigma_groups`), as
    ``(mean 0-1 error, N independent losses, how)``. The model and rows come from ``loaded``
    (the run's :class:`~.loaded.Loaded`; a new one without it): loaded once."""
    loaded = loaded or Loaded(out, device)

    def f(sigma: Any, passes: int) -> tuple[float, int, str]:
        from ..measure.device import default_precision, precision
        from ..measure.threads import blas_threads, data_threads
        from ..measure.data.gibbs import MonteCarlo
        from ..measure.data.options import MeasureOptions
        from ..measure.data.tune import _mapping, final_risk, sigma_groups

        tm = loaded.model("model")
        rows = loaded.batches(os.path.relpath(Path(data).resolve(), Path(out).resolve()),
                              max_length=max_length, batch_size=batch_size)
        names = [n for n, _ in tm.model.named_parameters()]
        sig = _mapping(sigma_groups(tm.model), sigma) if isinstance(sigma, Mapping) else \
            dict.fromkeys(names, float(sigma))
        with blas_threads(data_threads(tm.model, device)), \
                precision(default_precision(device), device):
            fin = final_risk(tm, rows, device, sig,
                             MonteCarlo(passes, seed, MeasureOptions().smoothing, mode="auto"))
        how = (f"{fin.passes} pass(es) over the {rows.n} held-out rows, "
               + ("every row its own draw" if fin.mode == "sample" else
                  f"one draw per {fin.rows_per_unit} row(s)")
               + f": N = {fin.n_losses} independent [0, 1] losses")
        return fin.mean, fin.n_losses, how

    return f


def measure_evidence(out: Path, has_test: bool, max_length: int, batch_size: int | None,
                     seed: int, device: Any, loaded: Loaded | None = None) -> Evidence:
    """model/ and the prior on ``test.jsonl`` (when ``has_test``), the prior on ``S.jsonl``,
    and the Gibbs predictor's held-out error as a function (see :class:`.claims.Evidence`).
    ``batch_size`` None: the sizes chosen per device (32 rows on a CPU; the Gibbs measurement
    reads the held-out rows in batches sized to a card,
    :func:`~boundcalc.measure.data.batch_rows.read_sized`).
    Both models and both splits come from ``loaded`` (the run's :class:`~.loaded.Loaded`;
    a new one without it)."""
    loaded = loaded or Loaded(out, device)
    ev = Evidence()
    test = loaded.rows("test.jsonl") if has_test else None
    for name in ("model", "prior"):
        m, tok = loaded.model(name).model, loaded.tokenizer(name)
        if test is not None:
            c = _count(m, tok, test, max_length, batch_size, device)
            if name == "model":
                ev.model_test = c
            else:
                ev.prior_test = c
        if name == "prior":  # S is a held-out set for the prior: it never saw S
            ev.prior_on_S = _count(m, tok, loaded.rows("S.jsonl"), max_length, batch_size,
                                   device)
    if test is not None:
        ev.gibbs = gibbs_on(out, out / "test.jsonl", max_length, batch_size, seed, device,
                            loaded)
    return ev
