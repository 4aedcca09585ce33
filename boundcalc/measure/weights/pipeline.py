"""``measure``: checkpoint (+ init, + data) → :class:`~boundcalc.stats.Stats`.

Work proceeds one layer at a time: the layer's tensors are read (and those of the init), the
raw-matrix, per-head and FFN statistics are computed, and the tensors are dropped. Output is
deterministic: entries are sorted, nothing time-dependent is recorded.
"""

from __future__ import annotations

import contextvars
import functools
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ...errors import BoundcalcError, CheckpointError, ResourceError
from ...stats import MatrixStats, Quantity, Stats
from ..architectures import MATRIX_ROLES, Entry, LayerMap, build_layer_map
from ..samples import (FeatureFn, LossFn, feature_sigma_min, input_stats, load_data, loss_stats,
                   per_sample_losses)
from ..device import DTYPE, device_name, resolve_device
from ..io import TensorSource, open_source
from ..prior import PriorCentre, open_centre
from .spectra import (Parts, finish, matrix_parts, matrix_stats, product_parts, product_stats,
                      schatten_grid, svdvals, svdvals_many, to_host)
from ..threads import blas_threads, layer_workers
from .route import HOST, SharedLayers, host_workers, routed

Progress = Callable[[int, int, str], None]
# Raw types, then the spectrum-adaptive ones; order of matrices within a layer in the output.
RAW_TYPES = ("q", "k", "v", "o", "ffn_gate", "ffn_in", "ffn_out")
SA_TYPES = ("QK", "V", "M_gate", "M_in", "M_out")


def _version() -> str:
    try:
        from ... import __version__  # type: ignore[attr-defined]

        return str(__version__)
    except ImportError:
        return "0.1.0"


def _oriented(src: TensorSource, e: Entry, cache: dict[str, torch.Tensor],
              device: torch.device) -> torch.Tensor:
    """The entry's matrix in torch (out, in) orientation, float64, on ``device``."""
    if e.name not in cache:
        cache[e.name] = src.get(e.name).to(device=device, dtype=DTYPE)
    W = cache[e.name]
    if e.transpose:
        W = W.T
    if e.rows is not None:
        W = W[e.rows[0]:e.rows[1]]
    return W


def _check_init(src: TensorSource, init: Any, lmap: LayerMap, model_obj: Any = None,
                head_init: Any = None) -> PriorCentre:
    """The prior centre under the model's names (``init``: a checkpoint, ``zero`` or
    ``random:SEED``; see :mod:`..prior`): every layer-map tensor matched across the usual
    prefixes and shape-checked, tensors outside the layers that the init lacks (a new task
    head) centred at ``head_init``."""
    centre = open_centre(src, init, head_init,
                         layer_names=[e.name for e in lmap.entries if e.layer is not None],
                         model_obj=model_obj)
    centre.check(lmap.tensor_names())
    return centre


def _heads(W: torch.Tensor, n: int, d: int) -> torch.Tensor:
    """(n·d, N) → (n, d, N)."""
    return W.reshape(n, d, W.shape[-1])


def _batched(W: torch.Tensor) -> bool:
    """Whether a layer takes the batched, one-readback path (:func:`_layer_matrices_batched`):
    on CUDA only. The CPU keeps the per-matrix path (there a readback costs nothing, and LAPACK
    loops over a batch anyway). Tests patch this to run the CUDA layout on the CPU."""
    return W.is_cuda


def _matrix_entry(layer: int, grid: Sequence[float] | None, mtype: str, head: int | None,
                  name: str, shape: tuple[int, int], stats: dict[str, float],
                  sv: torch.Tensor | None) -> MatrixStats:
    """One output row; the Schatten sums of ``grid`` are added when the values are kept."""
    arr = None if sv is None else sv.detach().double().cpu().numpy().copy()
    if grid is not None and arr is not None:
        k = min(shape)
        for p, s in zip(grid, schatten_grid(arr, grid, rank=int(stats["rank"]), k=k)):
            stats[f"schatten_{float(p):.6g}"] = float(s)
    return MatrixStats(mtype, layer, head, name, shape, stats, arr)


HeadPair = tuple[str, torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None,
                 str, str]


def _head_pairs(lmap: LayerMap, W: dict[str, torch.Tensor],
                W0: dict[str, torch.Tensor] | None) -> list[HeadPair]:
    """Per-head factors, heads batched: QK = q_hᵀ k_{h//g},  Ṽ = v_{h//g}ᵀ (oᵀ)_h, as
    (type, A, B, A0, B0, role of A, role of B)."""
    H, Hkv, dh = lmap.n_heads, lmap.n_kv_heads, lmap.head_dim
    kv_index = torch.arange(H, device=W["q"].device) // (H // Hkv)
    q, k = _heads(W["q"], H, dh), _heads(W["k"], Hkv, dh)[kv_index]
    v = _heads(W["v"], Hkv, dh)[kv_index]
    ot = _heads(W["o"].T, H, dh)
    if W0 is not None:
        q0, k0 = _heads(W0["q"], H, dh), _heads(W0["k"], Hkv, dh)[kv_index]
        v0, ot0 = _heads(W0["v"], Hkv, dh)[kv_index], _heads(W0["o"].T, H, dh)
    else:
        q0 = k0 = v0 = ot0 = None
    return [("QK", q, k, q0, k0, "q", "k"), ("V", v, ot, v0, ot0, "v", "o")]


def _head_name(ents: Mapping[str, Entry], an: str, bn: str, h: int, group: int) -> str:
    kv = h // group
    return (f"{ents[an].label}[head {h if an == 'q' else kv}]^T "
            f"{ents[bn].label}[head {kv if bn == 'k' else h}]")


FFN_TYPES = (("M_gate", "ffn_gate"), ("M_in", "ffn_in"), ("M_out", "ffn_out"))


def _layer_matrices(lmap: LayerMap, layer: int, W: dict[str, torch.Tensor],
                    W0: dict[str, torch.Tensor] | None, raw: bool,
                    grid: Sequence[float] | None) -> list[MatrixStats]:
    """A layer's matrices: per matrix, each statistic a float at once (the CPU path), or on
    CUDA the batched path with one host readback (:func:`_batched`)."""
    if _batched(W["q"]):
        return _layer_matrices_batched(lmap, layer, W, W0, raw, grid)
    ents = lmap.layer_entries(layer)
    group, N = lmap.n_heads // lmap.n_kv_heads, lmap.hidden
    out: list[MatrixStats] = []
    svs: dict[str, torch.Tensor] = {}
    ffn_roles = [r for r in ("ffn_gate", "ffn_in", "ffn_out") if r in W]
    for role in [r for r in RAW_TYPES if r in W]:
        if not raw:  # only the FFN spectra are needed (shared with M_gate/M_in/M_out)
            if role in ffn_roles:
                svs[role] = svdvals(W[role])
            continue
        stats, sv = matrix_stats(W[role], W0=W0[role] if W0 is not None else None)
        svs[role] = sv
        out.append(_matrix_entry(layer, grid, role, None, ents[role].label,
                                 tuple(W[role].shape), stats, None))
    for mtype, A, B, A0, B0, an, bn in _head_pairs(lmap, W, W0):
        for h, (stats, sv) in enumerate(product_stats(A, B, A0, B0)):
            out.append(_matrix_entry(layer, grid, mtype, h, _head_name(ents, an, bn, h, group),
                                     (N, N), stats, sv))
    for mtype, role in FFN_TYPES:
        if role in W:
            M = W[role].T
            stats, sv = matrix_stats(M, svs[role], None if W0 is None else W0[role].T)
            out.append(_matrix_entry(layer, grid, mtype, None, f"{ents[role].label}^T",
                                     tuple(M.shape), stats, sv))
    return out


def _layer_matrices_batched(lmap: LayerMap, layer: int, W: dict[str, torch.Tensor],
                            W0: dict[str, torch.Tensor] | None, raw: bool,
                            grid: Sequence[float] | None) -> list[MatrixStats]:
    """:func:`_layer_matrices` laid out for CUDA: same-shaped SVDs share one batched call
    (those of W − W0 too), every statistic stays on the device, and the layer's parts come back
    in one :func:`to_host` copy. Same statistics as the per-matrix path up to rounding (the
    batched SVDs); same rows in the same order."""
    ents = lmap.layer_entries(layer)
    group, N = lmap.n_heads // lmap.n_kv_heads, lmap.hidden
    roles = [r for r in RAW_TYPES if r in W]
    sv_roles = roles if raw else [r for r in ("ffn_gate", "ffn_in", "ffn_out") if r in W]
    svs = dict(zip(sv_roles, svdvals_many([W[r] for r in sv_roles])))
    dist_svs: dict[str, torch.Tensor] = {}
    if W0 is not None:  # the SVD of Dᵀ is that of D: the M_* distances reuse the raw ones
        dist_svs = dict(zip(sv_roles, svdvals_many([W[r].double() - W0[r].double()
                                                    for r in sv_roles])))
    rows: list[tuple[str, int | None, str, tuple[int, int], Parts]] = []
    for role in roles if raw else ():
        rows.append((role, None, ents[role].label, tuple(W[role].shape),
                     matrix_parts(W[role], svs[role], None if W0 is None else W0[role],
                                  dist_svs.get(role))))
    for mtype, A, B, A0, B0, an, bn in _head_pairs(lmap, W, W0):
        for h, parts in enumerate(product_parts(A, B, A0, B0)):
            rows.append((mtype, h, _head_name(ents, an, bn, h, group), (N, N), parts))
    for mtype, role in FFN_TYPES:
        if role in W:
            M = W[role].T
            rows.append((mtype, None, f"{ents[role].label}^T", tuple(M.shape),
                         matrix_parts(M, svs[role], None if W0 is None else W0[role].T,
                                      dist_svs.get(role))))
    out: list[MatrixStats] = []
    for (mtype, head, name, shape, _), parts in zip(rows, to_host([p for *_, p in rows])):
        stats, sv = finish(parts)
        out.append(_matrix_entry(layer, grid, mtype, head, name, shape, stats,
                                 None if mtype in RAW_TYPES else sv))
    return out


def _rich_progress() -> tuple[Progress, Callable[[], None]]:
    """A bar on stderr (stage, done/total, elapsed, ETA) for a ``progress(done, total, what)``
    callback. A new stage (the total changes, or the count goes back) restarts the bar, so its
    ETA is that stage's own."""
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
              TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
              console=Console(stderr=True), transient=True)
    task = bar.add_task("measuring", total=None)
    last = {"done": -1, "total": None}
    bar.start()

    def update(done: int, total: int, what: str) -> None:
        if total != last["total"] or done < last["done"]:
            bar.reset(task, total=total, completed=done, description=what)
        else:
            bar.update(task, completed=done, total=total, description=what)
        last.update(done=done, total=total)

    return update, bar.stop


def _one_line_errors(fn: Callable[..., Stats]) -> Callable[..., Stats]:
    """Last line of defence for hostile checkpoints: an arithmetic, value or torch error while
    measuring becomes one :class:`CheckpointError` line naming the checkpoint (the specific
    checks in :mod:`.safety` catch the known classes earlier, with better messages)."""
    @functools.wraps(fn)
    def wrapper(model_or_path: Any, *args: Any, **kwargs: Any) -> Stats:
        try:
            return fn(model_or_path, *args, **kwargs)
        except BoundcalcError:
            raise
        except MemoryError:
            raise ResourceError(f"{_name(model_or_path)}: out of memory while measuring") \
                from None
        except (ArithmeticError, ValueError, IndexError, KeyError, TypeError,
                RuntimeError) as exc:
            text = (str(exc).strip().splitlines() or [""])[0][:160]
            raise CheckpointError(f"{_name(model_or_path)}: cannot be measured "
                                  f"({exc.__class__.__name__}: {text})") from None
    return wrapper


def _name(obj: Any) -> str:
    return str(obj) if isinstance(obj, (str, os.PathLike)) else f"<{type(obj).__name__}>"


@_one_line_errors
def measure(model_or_path: Any, init: Any = None, data: Any = None, device: str = "auto",
            n_heads: int | None = None, mapping: Mapping[str, str] | None = None,
            grid: Sequence[float] | None = None, seed: int = 0,
            progress: bool | Progress = True, *, raw: bool = True,
            loss: LossFn | None = None, features: FeatureFn | None = None,
            layer_matrices: Mapping[int, list[MatrixStats]] | None = None,
            head_init: Any = None) -> Stats:
    """Measure a Transformer checkpoint: layer map, per-matrix statistics, distances, data stats.

    ``model_or_path``/``init``: a path (HF folder, safetensors file or sharded index, torch
    state_dict), a live ``nn.Module`` or a ``{name: tensor}`` mapping. ``data``: a path or
    ``{"inputs", "targets"}`` (see :mod:`.data`). ``mapping``: ``{role: regex}`` for unknown
    architectures. ``grid``: Schatten indices p whose sums S_p are added as ``schatten_<p>``.
    ``raw``: also report the raw q, k, v, o, ffn matrices. ``loss(model, X, y)`` (per-sample
    losses) and ``features(model, X)`` (pooled B × d_m features) need a live module.
    ``layer_matrices``: ``{layer: matrices}`` already computed by :func:`measure_layer` (a
    per-layer split across workers); those layers' spectra are taken as given, not recomputed.
    ``init`` may also be ``"zero"`` or ``"random:SEED"`` (the model's own initialisation,
    re-drawn); model tensors outside the layers that a checkpoint init lacks (a new task head)
    are centred at ``head_init`` (``"zero"``, the default, or ``"random:SEED"``), listed in
    ``provenance.prior``.
    """
    dev = resolve_device(device)
    src = open_source(model_or_path)
    lmap = build_layer_map(src, n_heads=n_heads, mapping=mapping)
    init_src = (_check_init(src, init, lmap, model_or_path, head_init)
                if init is not None else None)
    sample = load_data(data) if data is not None else None
    live = isinstance(model_or_path, torch.nn.Module)
    if (loss is not None or features is not None) and not live:
        raise BoundcalcError("loss and features need a live nn.Module, not a checkpoint path")
    if loss is not None and sample is None:
        raise BoundcalcError("a loss was given but no data")
    per_layer = len(RAW_TYPES if raw else ()) + 2 * lmap.n_heads + 3
    total = lmap.n_layers * per_layer + 1
    report, stop = (_rich_progress() if progress is True
                    else (progress or (lambda *a: None), lambda: None))
    try:
        workers = layer_workers(lmap.hidden, dev)
        with blas_threads(1 if workers > 1 else None):
            matrices, groups, token_emb, route_record = _walk(
                src, init_src, lmap, dev, raw, grid, report, total, per_layer,
                layer_matrices or {}, workers)
    finally:
        stop()
    scalars: dict[str, Quantity] = {
        "n_layers": Quantity(float(lmap.n_layers)), "n_heads": Quantity(float(lmap.n_heads)),
        "n_kv_heads": Quantity(float(lmap.n_kv_heads)), "hidden": Quantity(float(lmap.hidden)),
        "head_dim": Quantity(float(lmap.head_dim)),
        "intermediate": Quantity(float(lmap.intermediate)),
        "n_params": Quantity(float(sum(groups["n_params"].values())))}
    if init_src is not None:
        scalars["dist_init_total"] = Quantity(float(np.sqrt(sum(groups["dist_init_sq"].values()))),
                                              method="sqrt of summed squared Frobenius distances "
                                                     "over all layer-map tensors")
    if sample is not None:
        scalars.update(input_stats(sample, token_emb, lmap.token_embedding))
        with torch.random.fork_rng():  # user callables may draw (dropout): seeded, no side effect
            torch.manual_seed(seed)
            if loss is not None:
                scalars.update(loss_stats(per_sample_losses(model_or_path, loss, sample)))
            if features is not None:
                scalars["feature_sigma_min"] = feature_sigma_min(model_or_path, features, sample)
                if isinstance(init, torch.nn.Module):
                    scalars["feature_sigma_min_init"] = feature_sigma_min(init, features, sample)
    model = {"architecture": lmap.architecture, "model_type": lmap.model_type,
             "n_layers": lmap.n_layers, "n_heads": lmap.n_heads, "n_kv_heads": lmap.n_kv_heads,
             "hidden": lmap.hidden, "head_dim": lmap.head_dim,
             "intermediate": lmap.intermediate, "n_params": int(sum(groups["n_params"].values())),
             "ffn": "gated" if lmap.gated else "plain", "notes": lmap.notes}
    provenance = {"boundcalc": _version(), "torch": torch.__version__,
                  "device": device_name(dev), "dtype": "float64", "seed": seed,
                  "source": src.source, "init": None if init_src is None else init_src.source,
                  "data": None if sample is None else sample.source}
    if init_src is not None:
        provenance["prior"] = init_src.provenance()
    if route_record is not None:
        provenance["weights_route"] = route_record
    group_names = lmap.group_names()
    stats = {k: [float(groups[k][g]) for g in group_names] for k in groups}
    return Stats(model=model, matrices=matrices, scalars=scalars,
                 groups={"names": group_names, "stats": stats},
                 layer_map=[e.to_json() for e in lmap.entries], excluded=lmap.excluded,
                 provenance=provenance)


def _walk(src: TensorSource, init: TensorSource | None, lmap: LayerMap, dev: torch.device,
          raw: bool, grid: Sequence[float] | None, report: Progress, total: int,
          per_layer: int, given: Mapping[int, list[MatrixStats]],
          workers: int = 1) -> tuple[list[MatrixStats], dict[str, dict[str, float]],
                                     torch.Tensor | None, dict[str, Any] | None]:
    """One pass over the tensors, a layer at a time; returns matrices, group sums, the token
    embedding and, on a card, which layers the card and the host measured (:mod:`.route`:
    on a card the layers are shared between one card worker and the host's workers).

    Layers in ``given`` (computed elsewhere, e.g. by a per-layer split) are taken as they are.
    Tensors are read here, in order; with ``workers`` > 1 each layer's statistics are computed
    in a thread pool while the next layer is read (at most ``workers`` + 1 layers in memory).
    """
    from concurrent.futures import ThreadPoolExecutor

    # torch's thread count is per thread: a pool thread would otherwise run LAPACK on all
    # cores (unless OMP_NUM_THREADS says otherwise, as under Ray), oversubscribing them and
    # making the last bits depend on the environment
    shared = None
    if routed(dev):  # a card: its layers shared with the host's workers (route.py)
        n_host = host_workers(lmap.hidden)
        shared = SharedLayers(dev, n_host, functools.partial(_routed_layer, lmap, raw, grid))
        workers, load = n_host + 1, HOST  # tensors are read to the host, queued for either
    else:
        load = dev
    pool = (ThreadPoolExecutor(workers, initializer=torch.set_num_threads, initargs=(1,))
            if workers > 1 and shared is None else None)
    pending: list = []
    names = lmap.group_names()
    groups: dict[str, dict[str, float]] = {"n_params": dict.fromkeys(names, 0.0),
                                           "norm_sq": dict.fromkeys(names, 0.0)}
    if init is not None:
        groups["dist_init_sq"] = dict.fromkeys(names, 0.0)
    by_layer: dict[int | None, list[Entry]] = {}
    for e in lmap.entries:
        by_layer.setdefault(e.layer, []).append(e)
    matrices: list[MatrixStats] = []
    token_emb = None
    done = 0
    try:
        for layer in [l for l in range(lmap.n_layers)] + [None]:
            report(done, total, f"layer {layer}" if layer is not None else "other tensors")
            cache: dict[str, torch.Tensor] = {}
            cache0: dict[str, torch.Tensor] = {}
            seen: set[str] = set()
            for e in by_layer.get(layer, []):
                if e.name in seen:
                    continue
                seen.add(e.name)
                t = src.get(e.name)
                t0 = init.get(e.name) if init is not None else None
                _accumulate(groups, e, t, t0)
                if e.role in MATRIX_ROLES and layer not in given:
                    cache[e.name] = _own(t, load)
                    if t0 is not None:
                        cache0[e.name] = _own(t0, load)
                if e.name == lmap.token_embedding:
                    token_emb = t
            if layer is None:
                break
            if layer in given:
                pending.append(given[layer])
            else:  # the inputs are read here, before the maps are closed; work may be threaded
                W, W0 = _layer_inputs(src, init, lmap, layer, cache, cache0, load)
                if shared is not None:
                    pending.append(shared.submit(layer, W, W0))
                else:  # a pool worker runs in a copy of this context: the caller's words
                    pending.append(_layer_matrices(lmap, layer, W, W0, raw, grid)
                                   if pool is None else
                                   pool.submit(contextvars.copy_context().run, _layer_matrices,
                                               lmap, layer, W, W0, raw, grid))
            while len(pending) > workers:
                matrices += _done(pending.pop(0))
            done += per_layer
            # Drop the memory maps of the shards read so far (they reopen lazily): mapped pages
            # count in the resident set, which otherwise grows to the checkpoint's size.
            src.close()
            if init is not None:
                init.close()
        for item in pending:
            matrices += _done(item)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        if shared is not None:
            shared.close()
    report(total, total, "done")
    return matrices, groups, token_emb, (shared.record() if shared is not None else None)


def _routed_layer(lmap: LayerMap, raw: bool, grid: Sequence[float] | None, layer: int,
                  W: dict[str, torch.Tensor], W0: dict[str, torch.Tensor] | None
                  ) -> list[MatrixStats]:
    """:func:`_layer_matrices` with the layer first, as :class:`.route.SharedLayers` calls."""
    return _layer_matrices(lmap, layer, W, W0, raw, grid)


def _done(item: Any) -> list[MatrixStats]:
    """A layer's matrices: computed already, or the result of a pool future."""
    return item.result() if hasattr(item, "result") else item


def _layer_inputs(src: TensorSource, init: TensorSource | None, lmap: LayerMap, layer: int,
                  cache: dict[str, torch.Tensor], cache0: dict[str, torch.Tensor],
                  dev: torch.device) -> tuple[dict[str, torch.Tensor],
                                              dict[str, torch.Tensor] | None]:
    ents = lmap.layer_entries(layer)
    W = {r: _oriented(src, e, cache, dev) for r, e in ents.items()}
    W0 = ({r: _oriented(init, e, cache0, dev) for r, e in ents.items()}
          if init is not None else None)
    return W, W0


def _layer_from_cache(src: TensorSource, init: TensorSource | None, lmap: LayerMap, layer: int,
                      cache: dict[str, torch.Tensor], cache0: dict[str, torch.Tensor],
                      dev: torch.device, raw: bool,
                      grid: Sequence[float] | None) -> list[MatrixStats]:
    return _layer_matrices(lmap, layer, *_layer_inputs(src, init, lmap, layer, cache, cache0,
                                                       dev), raw, grid)


def measure_layer(model_or_path: Any, layer: int, init: Any = None, device: str = "auto",
                  n_heads: int | None = None, mapping: Mapping[str, str] | None = None,
                  grid: Sequence[float] | None = None, *, raw: bool = True,
                  head_init: Any = None) -> list[MatrixStats]:
    """The per-matrix statistics of one layer, reading only that layer's tensors: the unit of
    work of a per-layer split; ``measure(..., layer_matrices={layer: ...})`` merges them into
    the stats file that ``measure`` alone would write."""
    dev = resolve_device(device)
    src = open_source(model_or_path)
    init_src = None
    try:
        lmap = build_layer_map(src, n_heads=n_heads, mapping=mapping)
        if not 0 <= layer < lmap.n_layers:
            raise BoundcalcError(f"{src.source}: no layer {layer} (the model has "
                                 f"{lmap.n_layers})")
        if init is not None:
            init_src = _check_init(src, init, lmap, model_or_path, head_init)
        return _layer_from_cache(src, init_src, lmap, layer, {}, {}, dev, raw, grid)
    finally:
        src.close()
        if init_src is not None:
            init_src.close()


def _own(t: torch.Tensor, dev: torch.device) -> torch.Tensor:
    """``t`` as float64 on ``dev``, never sharing memory with a file map closed later."""
    out = t.to(device=dev, dtype=DTYPE)
    return out.clone() if out.data_ptr() == t.data_ptr() else out


def _accumulate(groups: dict[str, dict[str, float]], e: Entry, t: torch.Tensor,
                t0: torch.Tensor | None) -> None:
    """Add a tensor's parameter count, squared norm and squared distance from init (float64)."""
    rows = t.reshape(t.shape[0] if t.ndim else 1, -1)
    rows0 = t0.reshape(rows.shape) if t0 is not None else None
    sq = dist = 0.0
    step = max(1, (1 << 22) // max(1, rows.shape[1]))  # bounded float64 copies for big embeddings
    for lo in range(0, rows.shape[0], step):
        chunk = rows[lo:lo + step]
        # float64 accumulation without a float64 copy of the chunk (2x faster on embeddings)
        sq += float(torch.linalg.vector_norm(chunk, dtype=torch.float64)) ** 2
        if rows0 is not None:
            dist += float((chunk.double() - rows0[lo:lo + step].double()).square().sum())
    if not np.isfinite(sq):
        raise CheckpointError(f"tensor '{e.name}' holds NaN or infinite values")
    if not np.isfinite(dist):
        raise CheckpointError(f"tensor '{e.name}' of the init holds NaN or infinite values")
    groups["n_params"][e.group] += t.numel()
    groups["norm_sq"][e.group] += sq
    if rows0 is not None:
        groups["dist_init_sq"][e.group] += dist
