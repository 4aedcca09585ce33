"""Code length of a quantized model and the risk of that quantized model (``measure --compress``).

The coded vector is what differs from a prior fixed before the data: every float weight
(``select="all"``, prior 0), the difference from the prior centre (``"delta"``: the
checkpoint of ``--init`` matched to the model's names, ``zero`` or ``random:SEED``; ``"auto"``,
the default of ``add_compression``, is ``delta`` whenever there is an init), or tensors
given by the caller (a LoRA adapter, a subspace vector; ``coded=``, with a ``rebuild`` that
turns the decoded tensors into a model). It is quantized to K levels (uniform between its
minimum and maximum, or 1-D k-means), K chosen on a declared grid, and coded as:

* the index of K in the grid: log2 |grid| bits (the union bound over the grid, as a code);
* the codebook: K values at ``codebook_bits`` (16 or 32) bits each;
* the level counts: K counts of ⌈log2(m + 1)⌉ bits each (m = number of coded numbers);
* the symbols: an arithmetic (Shannon–Fano–Elias) code under the empirical level distribution,
  ⌈m·Ĥ⌉ + 1 bits, Ĥ the entropy in bits of the level frequencies;
* optionally the authors' self-delimiting prefix 2·log2 L (``prefix="authors"``).

Levels that coincide after rounding are merged, so the codebook sent has K′ ≤ K levels and the
decoder does not learn K′ from the grid index; the code still satisfies Kraft's inequality,
Σ 2^{−C(h)} ≤ (e − 1)/2 < 1 (docs/sources/compression.md §2: K′ sorted distinct levels, counts,
an arithmetic code of length ⌈mĤ⌉ + 1), which is all the Occam bound needs; the authors of
the compression-bound papers add the prefix term anyway. The decoded model is θ₀ + codebook[codes] with the codebook rounded to its stored
precision, so the risk measured here is that of exactly the model the code describes.
"""

from __future__ import annotations

import copy
import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ...codecheck import check_compression_scalars  # noqa: F401  (re-exported)
from ...errors import BoundcalcError
from ...stats import Curve, Quantity
from ..samples import DataSample, load_data

ALPHA_GRID = (0.0001, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5)  # formulas/compression.toml
LEVELS_GRID = (2, 4, 8, 16, 32, 64)
# the default for a delta from an init (a fine-tuned model): 1 level (the init itself, plus one
# shared shift) or 16; 2..64 levels of a fine-tuned delta cost ~10^5 bits and give 1
DELTA_LEVELS_GRID = (1, 16)
MAX_LEVELS = 1 << 16
QUANTIZERS = ("uniform", "kmeans")
SELECTIONS = ("all", "delta")
OPTION_SELECTIONS = SELECTIONS + ("auto",)  # auto: delta when there is an init, else all
DISAGREE = 0.5  # warn when the quantized model changes at least this fraction of predictions

Forward = Callable[[torch.nn.Module, torch.Tensor], torch.Tensor]


# ---------------------------------------------------------------------------------------------
# quantizers and code length
# ---------------------------------------------------------------------------------------------

def _round_codebook(values: np.ndarray, codebook_bits: int) -> np.ndarray:
    if codebook_bits == 16:
        out = values.astype(np.float16)
        if not np.all(np.isfinite(out)):
            raise BoundcalcError("quantizer: a level does not fit in float16; use "
                                 "--codebook-bits 32")
        return out.astype(np.float64)
    if codebook_bits == 32:
        return values.astype(np.float32).astype(np.float64)
    raise BoundcalcError(f"codebook precision must be 16 or 32 bits, got {codebook_bits}")


def _assign(x: np.ndarray, codebook: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest level for each value; returns (codes into the sorted codebook, sorted codebook)."""
    cb = np.unique(codebook)
    if cb.size == 1:
        return np.zeros(x.size, dtype=np.int64), cb
    mids = (cb[1:] + cb[:-1]) / 2
    return np.searchsorted(mids, x), cb


def quantize(x: np.ndarray, levels: int, kind: str = "uniform", codebook_bits: int = 16,
             iters: int = 25) -> tuple[np.ndarray, np.ndarray]:
    """Quantize a 1-D float array to at most ``levels`` values.

    Returns ``(codes, codebook)``: integer codes into a sorted codebook already rounded to
    ``codebook_bits``; ``codebook[codes]`` is the decoded vector. Levels that end up equal after
    rounding are merged (the codebook may be shorter than ``levels``).
    """
    x = np.asarray(x, dtype=np.float64).ravel()
    if x.size == 0:
        raise BoundcalcError("quantizer: nothing to code (no selected weights)")
    if not np.all(np.isfinite(x)):
        raise BoundcalcError("quantizer: the coded weights contain NaN or infinite values")
    if int(levels) != levels or levels < 1:
        raise BoundcalcError(f"quantizer: levels must be a positive integer, got {levels}")
    if kind not in QUANTIZERS:
        raise BoundcalcError(f"quantizer must be one of {', '.join(QUANTIZERS)}, got '{kind}'")
    lo, hi = float(x.min()), float(x.max())
    distinct = np.unique(x)
    if distinct.size <= levels:  # already quantized (e.g. after codebook fine-tuning): lossless
        centres = distinct
    elif kind == "uniform" or levels == 1 or lo == hi:
        centres = np.linspace(lo, hi, int(levels)) if levels > 1 else np.array([x.mean()])
    else:
        centres = np.quantile(x, (np.arange(levels) + 0.5) / levels)
        for _ in range(iters):  # Lloyd's algorithm in 1-D
            codes, cb = _assign(x, centres)
            sums = np.bincount(codes, weights=x, minlength=cb.size)
            counts = np.bincount(codes, minlength=cb.size)
            new = np.where(counts > 0, sums / np.maximum(counts, 1), cb)
            if new.size == centres.size and np.allclose(new, centres, rtol=0, atol=0):
                break
            centres = new
    codes, cb = _assign(x, _round_codebook(np.asarray(centres), codebook_bits))
    return codes, cb


@dataclass
class CodeLength:
    """The parts of a code length, in bits."""

    symbols: int  # number m of coded numbers
    levels: int  # codebook size actually used
    entropy_bits: float  # m·Ĥ
    arithmetic_bits: float  # ⌈m·Ĥ⌉ + 1
    codebook_bits: float
    counts_bits: float
    choice_bits: float
    prefix_bits: float

    @property
    def total(self) -> float:
        return (self.arithmetic_bits + self.codebook_bits + self.counts_bits + self.choice_bits
                + self.prefix_bits)

    def to_json(self) -> dict[str, float]:
        return {"symbols": self.symbols, "levels": self.levels,
                "entropy_bits": self.entropy_bits, "arithmetic_bits": self.arithmetic_bits,
                "codebook_bits": self.codebook_bits, "counts_bits": self.counts_bits,
                "choice_bits": self.choice_bits, "prefix_bits": self.prefix_bits,
                "total_bits": self.total}


def code_length(codes: np.ndarray, n_levels: int, codebook_bits: int = 16, n_choices: int = 1,
                prefix: str = "none") -> CodeLength:
    """Bits of the code described in the module docstring for ``codes`` in [0, n_levels)."""
    if prefix not in ("none", "authors"):
        raise BoundcalcError(f"prefix must be 'none' or 'authors', got '{prefix}'")
    m = int(codes.size)
    counts = np.bincount(codes, minlength=n_levels).astype(np.float64)
    nz = counts[counts > 0]
    entropy_bits = float(np.sum(nz * np.log2(m / nz)))
    arith = math.ceil(entropy_bits - 1e-9) + 1.0
    cb = float(n_levels * codebook_bits)
    cnt = float(n_levels * math.ceil(math.log2(m + 1)))
    choice = math.log2(n_choices) if n_choices > 1 else 0.0
    raw = arith + cb + cnt + choice
    pre = 2 * math.log2(raw) if prefix == "authors" and raw > 1 else 0.0
    return CodeLength(m, n_levels, entropy_bits, arith, cb, cnt, choice, pre)


# ---------------------------------------------------------------------------------------------
# which weights are coded
# ---------------------------------------------------------------------------------------------

def _float_tensors(obj: Any, what: str) -> dict[str, torch.Tensor]:
    if isinstance(obj, torch.nn.Module):
        obj = obj.state_dict()
    if not isinstance(obj, Mapping):
        raise BoundcalcError(f"{what}: expected an nn.Module or a mapping of tensors")
    return {k: v.detach() for k, v in obj.items()
            if isinstance(v, torch.Tensor) and v.is_floating_point()}


def coded_vector(model: Any, init: Any = None, select: str = "all") -> tuple[np.ndarray,
                                                                            list[tuple[str, tuple]]]:
    """The vector to code (float64) and its layout ``[(name, shape), ...]``."""
    if select not in SELECTIONS:
        raise BoundcalcError(f"--compress must be one of {', '.join(SELECTIONS)}, got '{select}'")
    W = _float_tensors(model, "model")
    if select == "delta":
        if init is None:
            raise BoundcalcError("--compress delta needs --init (the weights the delta is from)")
        W0 = _float_tensors(init, "init")
        for k, v in W.items():
            if k not in W0 or tuple(W0[k].shape) != tuple(v.shape):
                raise BoundcalcError(f"init: tensor '{k}' is missing or has another shape")
    layout = [(k, tuple(v.shape)) for k, v in sorted(W.items())]
    parts = [(W[k].double() - (W0[k].double() if select == "delta" else 0.0)).reshape(-1)
             for k, _ in layout]
    if not parts:
        raise BoundcalcError("model: no float tensors to code")
    return torch.cat(parts).cpu().numpy(), layout


def decoded_state(vec: np.ndarray, layout: Sequence[tuple[str, tuple]], init: Any = None,
                  select: str = "all") -> dict[str, torch.Tensor]:
    """Tensors θ₀ + decoded vector (θ₀ = 0 for ``select="all"``)."""
    W0 = _float_tensors(init, "init") if select == "delta" else {}
    out, pos = {}, 0
    for name, shape in layout:
        size = int(np.prod(shape)) if shape else 1
        t = torch.from_numpy(vec[pos:pos + size].copy()).reshape(shape)
        if select == "delta":
            t = W0[name].double() + t
        out[name] = t
        pos += size
    return out


def _with_state(model: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> torch.nn.Module:
    q = copy.deepcopy(model)
    own = q.state_dict()
    q.load_state_dict({k: (state[k].to(own[k].dtype) if k in state else v)
                       for k, v in own.items()})
    return q.eval()


# ---------------------------------------------------------------------------------------------
# risk of a model on a data sample
# ---------------------------------------------------------------------------------------------

@dataclass
class Risk:
    """0-1 error and smoothed log-loss (bits) per unit, and the predictions."""

    errors: np.ndarray  # per unit, in [0, 1]
    smoothed: dict[float, np.ndarray]  # α → per-unit smoothed log-loss in bits
    predictions: np.ndarray  # flat argmax predictions
    vocab: int
    units: np.ndarray | None = None  # unit of each prediction, when units differ in length

    def changed(self, ref: "Risk") -> float:
        """Mean over units of the fraction of predictions that differ from ``ref``'s: it bounds
        the change of the mean 0-1 error (what ``check_compression_scalars`` checks)."""
        diff = (self.predictions != ref.predictions).astype(np.float64)
        if self.units is None:
            return float(diff.mean())
        n = len(self.errors)
        per = np.bincount(self.units, weights=diff, minlength=n)
        return float(np.mean(per / np.maximum(np.bincount(self.units, minlength=n), 1)))


def default_forward(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``model(x)``, or its ``.logits`` for Hugging Face outputs."""
    out = model(x)
    logits = getattr(out, "logits", out)
    if isinstance(logits, (tuple, list)):
        logits = logits[0]
    return logits


def model_risk(model: torch.nn.Module, sample: DataSample, forward: Forward = default_forward,
               alphas: Sequence[float] = ALPHA_GRID, batch_size: int = 256,
               causal: bool = False) -> Risk:
    """Per-unit 0-1 error and prediction-smoothed log-loss of ``model`` on ``sample``.

    Logits (B, V) with targets (B,): one unit per example. Logits (B, T, V) with targets
    (B, T) — or, with ``causal``, next-token targets from the token-id inputs — one unit per
    sequence, losses averaged over its tokens (the document-level convention of Lotfi et al.).
    Smoothed probability p_α = (1 − α)·softmax + α/V.
    """
    if sample.targets is None and not causal:
        raise BoundcalcError(f"{sample.source}: the quantized model's risk needs targets; the "
                             "data has none")
    errs, preds = [], []
    smooth: dict[float, list[np.ndarray]] = {float(a): [] for a in alphas}
    vocab = 0
    model.eval()
    with torch.no_grad():
        for lo in range(0, sample.n, batch_size):
            x = sample.inputs[lo:lo + batch_size]
            logits = forward(model, x)
            if causal:
                logits, y = logits[:, :-1], x[:, 1:].long()
            else:
                y = sample.targets[lo:lo + batch_size].long()
            if not isinstance(logits, torch.Tensor) or logits.shape[:-1] != y.shape:
                raise BoundcalcError(f"forward: logits of shape "
                                     f"{list(getattr(logits, 'shape', []))} do not match targets "
                                     f"of shape {list(y.shape)}")
            logits = logits.double()
            if not bool(torch.isfinite(logits).all()):
                raise BoundcalcError("forward: the model produced NaN or infinite logits")
            vocab = int(logits.shape[-1])
            if int(y.min()) < 0 or int(y.max()) >= vocab:
                raise BoundcalcError(f"{sample.source}: targets must lie in [0, {vocab})")
            p = torch.softmax(logits, -1).gather(-1, y.unsqueeze(-1)).squeeze(-1)
            pred = logits.argmax(-1)
            wrong = (pred != y).double()
            red = (lambda t: t.reshape(t.shape[0], -1).mean(1))
            errs.append(red(wrong).numpy())
            preds.append(pred.reshape(-1).numpy())
            for a in smooth:
                pa = (1 - a) * p + a / vocab
                smooth[a].append(red(-torch.log2(pa)).numpy())
    return Risk(np.concatenate(errs), {a: np.concatenate(v) for a, v in smooth.items()},
                np.concatenate(preds), vocab)


def batched_risk(model: torch.nn.Module, tm: Any, batched: Any,
                 alphas: Sequence[float] = ALPHA_GRID) -> Risk:
    """:func:`model_risk` on the batches of ``measure --data`` (``dataset_io.read_batches``: CSV,
    JSON Lines, Parquet, a datasets folder, tensors), with the units of the data pass
    (``data_pass.run_pass``): one per example for a classifier; one per sequence for a language
    model, its losses averaged over the positions that count (causal: every next token; masked:
    the masked positions). ``tm`` is the loaded task model (its task and tokenizer); ``model``
    is evaluated in its place (the quantized copy)."""
    from ..data.inputs import lm_targets

    errs, preds, units = [], [], []
    smooth: dict[float, list[np.ndarray]] = {float(a): [] for a in alphas}
    vocab = 0
    done = 0
    model.eval()
    with torch.no_grad():
        for inputs, y in batched.batches:
            keep = None
            if tm.is_lm:
                inputs, y, keep = lm_targets(tm, inputs)
            logits = model(**inputs).logits.double()
            if tm.task == "causal_lm":
                logits = logits[:, :-1]
            if not bool(torch.isfinite(logits).all()):
                raise BoundcalcError(f"{tm.source}: the model produced NaN or infinite logits")
            vocab = int(logits.shape[-1])
            y = y.long()
            p = torch.softmax(logits, -1).gather(-1, y.unsqueeze(-1)).squeeze(-1)
            pred = logits.argmax(-1)
            wrong = (pred != y).double()
            if keep is None:
                red = (lambda t: t)
                preds.append(pred.numpy())
                units.append(done + np.arange(len(y)))
            else:
                w = keep.double()
                red = (lambda t, w=w: (t * w).sum(1) / w.sum(1).clamp(min=1))
                preds.append(pred[keep].numpy())
                units.append(done + keep.nonzero()[:, 0].numpy())
            done += int(y.shape[0])
            errs.append(red(wrong).numpy())
            for a in smooth:
                smooth[a].append(red(-torch.log2((1 - a) * p + a / vocab)).numpy())
    if not errs:
        raise BoundcalcError(f"{batched.source}: no data to measure the quantized risk on")
    return Risk(np.concatenate(errs), {a: np.concatenate(v) for a, v in smooth.items()},
                np.concatenate(preds), vocab, np.concatenate(units))


# ---------------------------------------------------------------------------------------------
# the whole measurement
# ---------------------------------------------------------------------------------------------

@dataclass
class Compression:
    """Result of :func:`compress`: the chosen level count, its code, and the risks."""

    select: str
    quantizer: str
    levels_grid: tuple[int, ...]
    levels: int
    code: CodeLength
    error: float  # 0-1 error of the quantized model
    float_error: float
    changed: float  # fraction of predictions the quantizer changed
    smoothed: dict[float, float]  # α → smoothed log-loss (bits) of the quantized model
    vocab: int
    n: int
    fingerprint: str
    per_level: list[dict[str, float]] = field(default_factory=list)
    codebook_bits: int = 16
    prefix: str = "none"
    # the decoded model: Euclidean distances from the prior centre over the coded weights (the
    # decoded and the measured model's), and a hash of its weights (:func:`model_fingerprint`)
    distance_from_prior: float | None = None
    measured_distance_from_prior: float | None = None
    decoded_fingerprint: str | None = None

    @property
    def agreement(self) -> float:
        """Mean over units of the fraction of predictions the quantized model shares with the
        trained one (1 − ``changed``)."""
        return 1.0 - self.changed

    def decoded(self) -> dict[str, Any]:
        """The record of the model the code decodes to (``provenance.compression.decoded``):
        fingerprint, agreement with the measured model on S, distances from the prior, and
        what :func:`boundcalc.certifies.classify` makes of them (``about``)."""
        from ...certifies import classify

        rec = {"fingerprint": self.decoded_fingerprint or self.fingerprint,
               "agreement": self.agreement, "distance_from_prior": self.distance_from_prior,
               "measured_distance_from_prior": self.measured_distance_from_prior,
               "distance": "Euclidean norm over the coded weights of (model − prior centre)"}
        rec["about"] = classify({"decoded": rec})["about"]
        return rec

    def warning(self) -> str | None:
        """One line when the compression bounds are not about the trained model: its code
        decodes to the prior, or the decoded model disagrees with the trained one on more
        than 1 − MIN_AGREEMENT of the samples (:mod:`boundcalc.certifies`)."""
        from ...certifies import MIN_AGREEMENT

        about = self.decoded()["about"]
        if about == "measured" or (about == "unknown" and self.changed < DISAGREE):
            return None
        hint = ("code the change from the prior checkpoint (--compress delta --init CKPT)"
                if self.select == "all" else "allow more levels (--levels)")
        if about == "prior":
            return (f"the quantized model ({self.levels} level(s)) decodes to the prior "
                    f"(distance {self.distance_from_prior:.3g} from it, the trained model's "
                    f"{self.measured_distance_from_prior:.3g}; agreement "
                    f"{self.agreement:.1%}): its bounds certify the prior, not the trained "
                    f"model; {hint}")
        return (f"the quantized model ({self.levels} levels) disagrees with the trained model on "
                f"{self.changed:.1%} of the samples (agreement {self.agreement:.1%} < "
                f"{MIN_AGREEMENT:.0%}): its bounds certify another model; {hint}")

    @property
    def method(self) -> str:
        what = {"all": "all float weights (prior 0)", "delta": "weights minus the prior centre",
                "given": "the given tensors (adapter / subspace)"}[self.select]
        return (f"{self.quantizer} quantizer on {what}, {self.levels} of levels "
                f"{list(self.levels_grid)} (log2 {len(self.levels_grid)} bits for the choice), "
                f"float{self.codebook_bits} codebook, counts, arithmetic code ⌈mĤ⌉+1"
                + (", authors' 2·log2 L prefix" if self.prefix == "authors" else ""))

    def scalars(self) -> dict[str, Quantity]:
        """Stats-file scalars; each carries the quantized model's fingerprint in its note."""
        note = f"quantized model {self.fingerprint}"
        m = self.method
        c = self.code
        q = {
            "code_bits": Quantity(c.total, method=m, note=note),
            "code_bits_symbols": Quantity(c.arithmetic_bits, method=m, note=note),
            "code_bits_codebook": Quantity(c.codebook_bits, method=m, note=note),
            "code_bits_counts": Quantity(c.counts_bits, method=m, note=note),
            "code_bits_choice": Quantity(c.choice_bits, method=m, note=note),
            "code_bits_prefix": Quantity(c.prefix_bits, method=m, note=note),
            "coded_params": Quantity(float(c.symbols), method=m, note=note),
            "quant_levels": Quantity(float(self.levels), method=m, note=note),
            "quantized_error": Quantity(self.error, method=f"0-1 error of the quantized model "
                                        f"on {self.n} units", note=note),
            "float_error": Quantity(self.float_error, method=f"0-1 error of the unquantized "
                                    f"model on {self.n} units", note=note),
            "quantized_changed": Quantity(self.changed, method="mean over units of the fraction "
                                          "of predictions the quantizer changed", note=note),
            "vocab_size": Quantity(float(self.vocab), method="logit dimension", note=note),
            "n": Quantity(float(self.n), method="units the quantized risk was measured on"),
        }
        return q

    def curves(self) -> dict[str, Curve]:
        """The smoothed log-loss at every α of the grid: the formulas choose α only among these
        points (``measured = true``) and pay ln |α grid|; it carries the same fingerprint as
        ``code_bits``."""
        a = np.array(sorted(self.smoothed))
        return {"quantized_smoothed_nll": Curve(
            "alpha", a, np.array([self.smoothed[x] for x in a]), n_samples=self.n,
            method=(f"smoothed log-loss −log2((1−α)p + α/V) (bits) of the quantized model, "
                    f"exact, on {self.n} units; {self.method}"),
            note=f"quantized model {self.fingerprint}")}


def _fingerprint(codes: np.ndarray, codebook: np.ndarray, select: str) -> str:
    h = hashlib.sha256()
    h.update(select.encode())
    h.update(np.ascontiguousarray(codes.astype(np.int64)).tobytes())
    h.update(np.ascontiguousarray(codebook.astype(np.float64)).tobytes())
    return "sha256:" + h.hexdigest()[:16]


def model_fingerprint(state: Mapping[str, torch.Tensor]) -> str:
    """'sha256:…' of a model's weights: each tensor's name, shape and float32 bytes, in name
    order (the decoded model as it is loaded; equal weights give equal fingerprints)."""
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().to(torch.float32).contiguous().cpu()
        h.update(name.encode())
        h.update(repr(tuple(t.shape)).encode())
        h.update(t.numpy().tobytes())
    return "sha256:" + h.hexdigest()[:16]


def _occam_kl(err: float, bits: float, n: int, delta: float = 0.05) -> float:
    from ...engine.functions import kl_inv_upper

    return kl_inv_upper(min(max(err, 0.0), 1.0), (bits * math.log(2) + math.log(1 / delta)) / n)


def compress(model: torch.nn.Module, data: Any, init: Any = None, select: str = "all",
             quantizer: str = "uniform", levels_grid: Sequence[int] = LEVELS_GRID,
             codebook_bits: int = 16, prefix: str = "none",
             coded: Mapping[str, torch.Tensor] | None = None,
             rebuild: Callable[[dict[str, torch.Tensor]], torch.nn.Module] | None = None,
             forward: Forward = default_forward, alphas: Sequence[float] = ALPHA_GRID,
             causal: bool = False, max_changed: float | None = None,
             risk: Callable[[torch.nn.Module], Risk] | None = None) -> Compression:
    """Quantize, code and evaluate at every level count of ``levels_grid``; keep the level
    count with the smallest Occam-kl bound on the 0-1 error, ties to the highest agreement
    with the trained model's predictions, then the shorter code (any rule is valid: the choice
    is paid inside the code by log2 |grid| bits).

    ``coded`` + ``rebuild``: code only these tensors (a LoRA adapter, a subspace vector) and
    evaluate ``rebuild(decoded tensors)``; everything else must be fixed before the data.
    ``max_changed``: refuse a quantizer that changes more than this fraction of predictions.
    ``risk``: a function model → :class:`Risk` used instead of ``data`` (e.g.
    :func:`batched_risk` on the batches of ``measure --data``).
    """
    if risk is None:
        sample = load_data(data)

        def risk(m: torch.nn.Module) -> Risk:
            return model_risk(m, sample, forward, alphas, causal=causal)
    grid = tuple(int(k) for k in levels_grid)
    if not grid or len(set(grid)) != len(grid) or min(grid) < 1 or max(grid) > MAX_LEVELS:
        raise BoundcalcError(f"--levels: distinct integers in [1, {MAX_LEVELS}], got {list(grid)}")
    if (coded is None) != (rebuild is None):
        raise BoundcalcError("coded tensors and a rebuild function go together")
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
            qmodel = _with_state(model, decoded_state(dec, layout, init, select))
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
                       _fingerprint(codes, cb, sel), per_level, codebook_bits, prefix,
                       distance_from_prior=float(np.linalg.norm(dec)),
                       measured_distance_from_prior=float(np.linalg.norm(vec)),
                       decoded_fingerprint=model_fingerprint(state))


# ---------------------------------------------------------------------------------------------
# from a checkpoint on disk (the CLI)
# ---------------------------------------------------------------------------------------------

def centre_state(module: torch.nn.Module, init: Any, head_init: Any = None) -> tuple[
        dict[str, torch.Tensor], Any]:
    """The prior centre under the names of ``module``'s float tensors (``init``: a
    checkpoint, ``zero`` or ``random:SEED``; matched across the usual prefixes, a new head
    centred at ``head_init``; see :mod:`boundcalc.measure.prior`) and the centre itself."""
    from ...errors import CheckpointError
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


def resolve_select(select: str, init: Any) -> str:
    """``auto`` → ``delta`` when a prior centre is given, else ``all``."""
    if select == "auto":
        return "delta" if init is not None else "all"
    return select


def add_compression(stats: Any, model: str, data: str | None, init: str | None = None,
                    select: str = "auto", quantizer: str = "uniform",
                    levels_grid: Sequence[int] = LEVELS_GRID, codebook_bits: int = 16,
                    prefix: str = "none", max_changed: float | None = None,
                    text_column: str = "text", label_column: str = "label",
                    max_length: int = 128, batch_size: int = 32,
                    head_init: Any = None) -> Compression:
    """``measure --compress``: code length + quantized risk into ``stats`` (scalars, curves and
    ``provenance.compression``). Refuses a code length without data to measure its risk on.

    DATA in every format (CSV, JSON Lines, Parquet, a ``datasets`` folder, ``.pt/.npz/
    .safetensors`` tensors with ``inputs`` or ``input_ids`` and ``targets`` or ``labels``) is
    read, tokenized and batched exactly as ``measure --data`` reads it
    (``dataset_io.read_batches``; columns, ``--max-length``, ``--batch-size``).
    ``select="auto"`` (the default) codes the change from ``init`` when one is given
    (``delta``), else all weights; ``init`` is matched to the model as ``measure --init``
    matches it (prefixes, a new head at ``head_init``)."""
    select = resolve_select(select, init)
    if data is None:
        raise BoundcalcError("--compress needs --data: a code length is only usable with the "
                             "quantized model's risk, measured on the same data")
    check_options(select, quantizer, levels_grid, codebook_bits, prefix, max_changed)
    from ..data import hf
    from ..data.dataset_io import read_batches

    # one reader for every data format (tables, datasets folders, tensor files), the same as
    # measure --data: a file accepted there is accepted here
    tm = hf.load_task_model(model)
    batched = read_batches(data, tm, text_column=text_column, label_column=label_column,
                           max_length=max_length, batch_size=batch_size)
    module = tm.model.float().eval()

    def risk(m: torch.nn.Module) -> Risk:
        return batched_risk(m, tm, batched)

    causal = tm.task == "causal_lm"
    centre = None
    if select == "delta":
        if init is None:
            raise BoundcalcError("--compress delta needs --init (the weights the delta is from)")
        init_state, centre = centre_state(module, init, head_init)
    else:
        init_state = None
    result = compress(module, data, init=init_state, select=select, quantizer=quantizer,
                      levels_grid=levels_grid, codebook_bits=codebook_bits, prefix=prefix,
                      causal=causal, max_changed=max_changed, risk=risk)
    stats.scalars.update(result.scalars())
    stats.curves.update(result.curves())
    stats.provenance["compression"] = {"method": result.method, "code": result.code.to_json(),
                                       "per_level": result.per_level,
                                       "fingerprint": result.fingerprint,
                                       "data": str(data), "select": result.select,
                                       "agreement": result.agreement,
                                       "decoded": result.decoded(),
                                       "warning": result.warning()}
    if centre is not None:
        stats.provenance["compression"]["prior"] = centre.provenance()
    check_compression_scalars(stats.scalars, curves=stats.curves,
                              curve_risks=tuple(result.curves()))
    return result


def default_levels(select: str, init: Any) -> tuple[int, ...]:
    """The level counts tried when none are given: :data:`DELTA_LEVELS_GRID` for a delta from
    an init (``delta``, or ``auto`` with an init), else :data:`LEVELS_GRID`."""
    return DELTA_LEVELS_GRID if resolve_select(select, init) == "delta" else LEVELS_GRID


def compression_options(select: str, quantizer: str, levels: str | None, codebook_bits: int,
                        prefix: str, max_changed: float | None, data: Any,
                        init: Any = None) -> dict[str, Any]:
    """The CLI's --compress options, checked (one-line errors), as keywords of
    :func:`add_compression`; ``levels`` None: :func:`default_levels`."""
    if data is None:
        raise BoundcalcError("--compress needs --data: a code length is only usable with the "
                             "quantized model's risk, measured on the same data")
    grid = parse_levels(levels) if levels is not None else default_levels(select, init)
    check_options(select, quantizer, grid, codebook_bits, prefix, max_changed)
    return {"select": select, "quantizer": quantizer, "levels_grid": grid,
            "codebook_bits": codebook_bits, "prefix": prefix, "max_changed": max_changed}


def check_options(select: str, quantizer: str, levels_grid: Sequence[int], codebook_bits: int,
                  prefix: str, max_changed: float | None) -> None:
    """Cheap checks of the --compress options, before any model is loaded (one-line errors)."""
    if select not in OPTION_SELECTIONS:
        raise BoundcalcError(f"--compress must be one of {', '.join(OPTION_SELECTIONS)}, got "
                             f"'{select}'")
    if quantizer not in QUANTIZERS:
        raise BoundcalcError(f"--quantizer must be one of {', '.join(QUANTIZERS)}, "
                             f"got '{quantizer}'")
    if codebook_bits not in (16, 32):
        raise BoundcalcError(f"--codebook-bits must be 16 or 32, got {codebook_bits}")
    if prefix not in ("none", "authors"):
        raise BoundcalcError(f"--prefix must be 'none' or 'authors', got '{prefix}'")
    if max_changed is not None and not 0 <= max_changed <= 1:
        raise BoundcalcError(f"--max-changed must lie in [0, 1], got {max_changed}")
    if not levels_grid or max(levels_grid) > MAX_LEVELS:
        raise BoundcalcError(f"--levels: at most {MAX_LEVELS} levels")


def parse_levels(text: str) -> tuple[int, ...]:
    """``"2,4,8"`` → (2, 4, 8); one-line error naming the option otherwise."""
    try:
        out = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise BoundcalcError(f"--levels: comma-separated integers expected, got '{text}'") from None
    if not out or min(out) < 1 or len(set(out)) != len(out) or max(out) > MAX_LEVELS:
        raise BoundcalcError(f"--levels: distinct integers in [1, {MAX_LEVELS}] expected, got "
                             f"'{text}'")
    return out
