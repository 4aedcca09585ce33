"""Code length of a quantized model and the risk of that quantized model (``measure`` with
compression).

The measurement, in memory (:func:`compress`) and into a stats file (:func:`add_compression`, on
the model and batches ``measure --data`` loaded; :class:`CompressionStage` runs it as a stage
after that measurement's data side): the coded vector (:mod:`.coded`) is quantized to K levels
(:mod:`.quantizer`: uniform between its minimum and maximum, or 1-D k-means), K chosen on a
declared grid, and coded (:mod:`.codelength`); the decoded model's risk is measured
(:mod:`.risk`) and recorded (:mod:`.record`). The decoded model is θ₀ + codebook[codes] with the
codebook rounded to its stored precision, so the risk measured here is that of exactly the
model the code describes. The options are a checked record (:mod:`.options`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any

import numpy as np
import torch

from ...codecheck import check_compression_scalars
from ...errors import BoundcalcError, CheckpointError
from ...plan import Work
from ...words import option
from ..data.stages import DataStage
from ..samples import load_data
from .codelength import code_length
from .coded import (code_fingerprint, coded_vector, decoded_state, model_fingerprint,
                    require_init, with_state)
from .options import CompressOptions, default_levels, require_data, resolve_select
from .quantizer import quantize
from .record import Compression
from .risk import ALPHA_GRID, Forward, Risk, batched_risk, default_forward, model_risk


def _occam_kl(err: float, bits: float, n: int, delta: float = 0.05) -> float:
    from ...engine.functions import kl_inv_upper

    return kl_inv_upper(min(max(err, 0.0), 1.0), (bits * math.log(2) + math.log(1 / delta)) / n)


def compress(model: torch.nn.Module, data: Any, options: CompressOptions | None = None, *,
             init: Any = None, coded: Mapping[str, torch.Tensor] | None = None,
             rebuild: Callable[[dict[str, torch.Tensor]], torch.nn.Module] | None = None,
             forward: Forward = default_forward, causal: bool = False,
             risk: Callable[[torch.nn.Module], Risk] | None = None) -> Compression:
    """Quantize, code and evaluate at every level count of ``options.levels_grid`` (None:
    :func:`.options.default_levels`); keep the level count with the smallest Occam-kl bound on
    the 0-1 error, ties to the highest agreement with the trained model's predictions, then the
    shorter code (any rule is valid: the choice is paid inside the code by log2 |grid| bits).

    ``options`` (:class:`.options.CompressOptions`, checked when built; default: its
    defaults): which weights (``select``, ``auto`` resolved by ``init``: the prior centre's
    tensors under the model's names, or None), the quantizer, the codebook precision, the
    prefix and ``max_changed`` (refuse a quantizer that changes more than this fraction of
    predictions). ``coded`` + ``rebuild``: code only these tensors (a LoRA adapter, a subspace
    vector) and evaluate ``rebuild(decoded tensors)``; everything else must be fixed before
    the data. ``risk``: a function model → :class:`Risk` used instead of ``data`` (e.g.
    :func:`batched_risk` on the batches of ``measure --data``).
    """
    o = options or CompressOptions()
    select, quantizer, codebook_bits, prefix = (resolve_select(o.select, init), o.quantizer,
                                                o.codebook_bits, o.prefix)
    max_changed = o.max_changed
    if risk is None:
        sample = load_data(data)

        def risk(m: torch.nn.Module) -> Risk:
            return model_risk(m, sample, forward, ALPHA_GRID, causal=causal)
    grid = tuple(o.levels_grid or default_levels(o.select, init))
    if (coded is None) != (rebuild is None):
        raise BoundcalcError("coded tensors and a rebuild function go together")
    if coded is not None and not coded:
        raise BoundcalcError("coded: no tensors to code")
    if coded is not None:
        layout = [(k, tuple(v.shape)) for k, v in sorted(coded.items())]
        vec = torch.cat([coded[k].detach().double().reshape(-1) for k, _ in layout]).numpy()
        base = rebuild({k: v.detach() for k, v in coded.items()})
        sel = "given"
    else:
        vec, layout = coded_vector(model, init, select)
        base, sel = model, select
    ref = risk(base)
    best = None
    per_level = []
    for k in grid:
        codes, cb = quantize(vec, k, quantizer, codebook_bits)
        code = code_length(codes, cb.size, codebook_bits, len(grid), prefix)
        dec = cb[codes]
        if coded is not None:
            qmodel = rebuild(decoded_state(dec, layout))
        else:
            qmodel = with_state(model, decoded_state(dec, layout, init, select))
        q_risk = risk(qmodel)
        err = float(q_risk.errors.mean())
        crit = _occam_kl(err, code.total, len(q_risk.errors))
        agree = 1.0 - q_risk.changed(ref)
        per_level.append({"levels": k, "code_bits": code.total, "error": err, "occam_kl": crit,
                          "agreement": agree})
        # ties (several vacuous codes at 1) go to the model closest to the trained one
        key = (crit, -agree, code.total)
        if best is None or key < best[0]:
            best = (key, k, codes, cb, code, q_risk)
    _, k, codes, cb, code, q_risk = best
    changed = q_risk.changed(ref)
    if max_changed is not None and changed > max_changed:
        raise BoundcalcError(f"quantizer: {changed:.3%} of the predictions change at {k} levels, "
                             f"more than the allowed {max_changed:.3%}")
    n = len(q_risk.errors)
    smoothed = {a: float(v.mean()) for a, v in q_risk.smoothed.items()}
    dec = cb[codes]
    # the coded vector is the model minus the prior centre (0 for 'all' and given tensors)
    state = decoded_state(dec, layout) if coded is not None else \
        decoded_state(dec, layout, init, select)
    return Compression(sel, quantizer, grid, k, code, float(q_risk.errors.mean()),
                       float(ref.errors.mean()), changed, smoothed, q_risk.vocab, n,
                       code_fingerprint(codes, cb, sel), per_level, codebook_bits, prefix,
                       distance_from_prior=float(np.linalg.norm(dec)),
                       measured_distance_from_prior=float(np.linalg.norm(vec)),
                       decoded_fingerprint=model_fingerprint(state))


def centre_state(module: torch.nn.Module, init: Any, head_init: Any = None) -> tuple[
        dict[str, torch.Tensor], Any]:
    """The prior centre under the names of ``module``'s float tensors (``init``: a
    checkpoint, ``zero`` or ``random:SEED``; matched across the usual prefixes, a new head
    centred at ``head_init``; see :mod:`boundcalc.measure.prior`) and the centre itself."""
    from ..architectures import build_layer_map
    from ..io import open_source
    from ..prior import open_centre

    src = open_source(module)
    try:
        layer_names = [e.name for e in build_layer_map(src).entries if e.layer is not None]
    except CheckpointError:  # not a recognised transformer: every missing tensor is refused
        layer_names = list(src.names())
    centre = open_centre(src, init, head_init, layer_names, model_obj=module)
    names = [n for n in src.names() if src.is_float(n)]
    centre.check(names)
    try:
        return {n: centre.get(n).detach().clone() for n in names}, centre
    finally:
        centre.close()


class CompressionStage(DataStage):
    """The compression as a stage run after the data side of ``measure --data``
    (:func:`~boundcalc.measure.data.task_measure.measure_task`'s ``stages``):
    :func:`add_compression` on the model and the batches it loaded. Its work: one plain pass over S for the trained
    model's predictions and one per level count tried (the k-means fits are not counted);
    ``warn(line)`` gets its warning when the compression bounds are not about the trained
    model (None: not said; the stats file records it); ``after()`` is called once it has run
    (certify drops model/ from its loaded models: the compression moved it to the CPU in
    float32)."""

    name = "compression"
    record = CompressOptions
    options = tuple(f.name for f in fields(CompressOptions))
    precision = False
    inside = False

    def __init__(self, options: CompressOptions, data: str | None, init: str | None = None,
                 head_init: Any = None, warn: Callable[[str], None] | None = None,
                 after: Callable[[], Any] | None = None) -> None:
        self.opts, self.data, self.init, self.head_init = options, data, init, head_init
        self.warn, self.after = warn, after

    def work(self, c: Any, s: Any) -> Work | None:
        k = len(self.opts.levels_grid or default_levels(self.opts.select, self.init))
        return Work(f"compression, {k} level count(s)", 1 + k, max(s.rows, 1), "plain", 0,
                    f"{option('compress')} ({k} level counts: {1 + k} passes over DATA)")

    def wanted(self, run: Any) -> bool:
        return True

    def run(self, loaded: Any, stats: Any) -> None:
        result = add_compression(stats, loaded.tm, loaded.batched, self.opts, data=self.data,
                                 init=self.init, head_init=self.head_init)
        if self.warn is not None and result.warning():
            self.warn(result.warning())
        if self.after is not None:
            self.after()


def add_compression(stats: Any, tm: Any, batched: Any, options: CompressOptions, *,
                    data: str | None, init: str | None = None,
                    head_init: Any = None) -> Compression:
    """``measure --compress``: code length + quantized risk into ``stats`` (scalars, curves and
    ``provenance.compression``), given the task model ``tm`` and the batches ``batched`` of
    DATA that ``measure --data`` already loaded and read (:func:`boundcalc.measure.data.
    task_measure.measure_task`; no second load, no second read): the risks are those of
    ``measure --data`` (``dataset_io.read_batches``: every data format, its columns,
    ``--max-length``, ``--batch-size``), computed on the CPU, where the batches are (the model
    is moved there). ``data``: DATA's name, recorded; a code length without data to measure
    its risk on is refused. ``options.select`` ``auto`` (the default) codes the change from
    ``init`` when one is given (``delta``), else all weights; ``init`` is matched to the model
    as ``measure --init`` matches it (prefixes, a new head at ``head_init``)."""
    from dataclasses import replace

    require_data(data)
    select = resolve_select(options.select, init)
    opts = replace(options, select=select,
                   levels_grid=options.levels_grid or default_levels(options.select, init))
    module = tm.model.float().to("cpu").eval()

    def risk(m: torch.nn.Module) -> Risk:
        return batched_risk(m, tm, batched)

    causal = tm.task == "causal_lm"
    centre = None
    if select == "delta":
        require_init(init)
        init_state, centre = centre_state(module, init, head_init)
    else:
        init_state = None
    result = compress(module, data, opts, init=init_state, causal=causal, risk=risk)
    stats.scalars.update(result.scalars())
    stats.curves.update(result.curves())
    stats.provenance["compression"] = {"method": result.method, "code": result.code.to_json(),
                                       "per_level": result.per_level,
                                       "fingerprint": result.fingerprint,
                                       "data": str(data), "select": result.select,
                                       "agreement": result.agreement,
                                       "decoded": result.decoded(),
                                       "warning": result.warning(stored=True)}
    if centre is not None:
        stats.provenance["compression"]["prior"] = centre.provenance()
    check_compression_scalars(stats.scalars, curves=stats.curves,
                              curve_risks=tuple(result.curves()))
    return result
