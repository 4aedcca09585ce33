"""A causal language model you already trained, certified on your own held-out text: the
test-set bound on its smoothed log-loss in bits per token (``boundcalc holdout MODEL
--test-data HELDOUT`` when MODEL is a causal LM; issue 54 item 2).

The loss is the one ``boundcalc measure`` bounds for a language model: each predicted token's
prediction-smoothed log-loss −ln p_α / ln(V/α), p_α = (1 − α)p + α/V (``--smoothing`` α, V the
vocabulary), a value in [0, 1]; a unit's loss is its mean over the unit's predicted tokens. The
units are the **rows of the held-out file**, each cut to its first ``--max-length`` tokens
(:data:`UNIT`); the first token of a row has no context and is not scored. The model runs
through measure's own data pass (:func:`boundcalc.measure.data.data_pass.run_pass`: logits in
chunks of rows, the float64 log-sum-exp in blocks, :mod:`boundcalc.measure.data.lm_loss`), in
batches on the device (the card when there is one). The bound is the registry's
``test_set_smoothed_kl`` at the mean loss, evaluated through the code path of ``boundcalc
optimize test_set_smoothed_kl --set test_loss=L,m=m,alpha=α,V=V`` (no second formula):
log2(V/α)·kl⁻¹(L, ln(1/δ)/m) bits, a bound on the α-smoothed model's expected loss per
predicted token (per byte when the tokenizer maps each byte to one token), unit-averaged.

A row whose text is missing or not text, or that has fewer than two tokens (nothing to
predict), could not be read: it counts at the largest loss, 1 (never dropped), so the bound
covers every row of the file. Every input is checked before the model is loaded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from ..errors import CheckpointError
from ..words import option
from .config import HoldoutConfig

ENTRY_ID = "test_set_smoothed_kl"
UNIT = ("one row of the held-out file, its first {max_length} tokens (the first token has no "
        "context and is not scored); the rows must be i.i.d. draws of the units the claim is "
        "about: a file of one long document is one unit")
CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")


def is_causal_lm(raw: Mapping[str, Any]) -> bool:
    """Does the config's ``architectures`` name a causal language model (``...ForCausalLM``,
    GPT-2's ``...LMHeadModel``)?"""
    return any(str(a).endswith(CAUSAL_SUFFIXES) for a in raw.get("architectures") or [])


@dataclass
class LMHoldoutResult:
    """What :func:`lm_holdout` measured and certified (:meth:`record` is ``--json``)."""

    model: str
    data: str
    m: int
    unreadable: list[int]
    tokens: int
    loss: float  # mean unit loss in [0, 1] (unreadable rows at 1)
    nll_bits: float  # mean unit NLL of the unsmoothed model in bits, readable rows only
    top1_error: float  # mean unit top-1 error, readable rows only
    alpha: float
    vocab: int
    per: str  # "token" or "byte"
    max_length: int
    delta: float
    result: Any  # the registry's Result for test_set_smoothed_kl
    latex: str

    @property
    def bits_range(self) -> float:
        return math.log2(self.vocab / self.alpha)

    @property
    def held_out_bits(self) -> float:
        """The held-out smoothed log-loss in bits per predicted token (unit-averaged)."""
        return self.loss * self.bits_range

    def record(self) -> dict[str, Any]:
        r = self.result
        return {"id": r.id, "certifies": f"the language model {self.model} itself, its "
                f"predictions smoothed with α = {self.alpha:g}: p_α = (1 − α)p + α/V",
                "value": r.value, "unit": f"bits per predicted {self.per}",
                "delta": r.delta, "is_bound": r.is_bound, "m": self.m,
                "iid_unit": UNIT.format(max_length=self.max_length),
                "tokens_scored": self.tokens, "held_out_loss": self.loss,
                "held_out_bits": self.held_out_bits, "held_out_nll_bits": self.nll_bits,
                "held_out_top1_error": self.top1_error, "alpha": self.alpha,
                "vocab_size": self.vocab, "random_guess_bits": math.log2(self.vocab),
                "unreadable_rows": len(self.unreadable),
                "unreadable_first": self.unreadable[:20],
                "unreadable_counted_as": "the largest loss (1, log2(V/α) bits)",
                "data": self.data, "latex": self.latex, "source": r.source,
                "how": f"test-set bound on the mean smoothed loss {self.loss:.6g} of {self.m} "
                       f"held-out units ({len(self.unreadable)} unreadable, at loss 1): "
                       "log2(V/α)·kl⁻¹(L, ln(1/δ)/m)"}


def smoothed_result(loss: float, m: int, delta: float, alpha: float, vocab: int) -> Any:
    """The registry's ``test_set_smoothed_kl`` at the mean loss, evaluated as ``boundcalc
    optimize test_set_smoothed_kl --set test_loss=L,m=m,alpha=α,V=V`` evaluates it."""
    from ..optimize import optimize
    from ..registry import load_registry

    reg = load_registry()
    return optimize(reg.get(ENTRY_ID), None, {"test_loss": loss, "m": m, "delta": delta,
                                              "alpha": alpha, "V": vocab},
                    registry=reg, what_if=False)


def read_texts(test_data: str | Path, cfg: HoldoutConfig) -> tuple[Any, list[int], list[int]]:
    """``(read, readable row indices, unreadable rows)``: the held-out file read with measure's
    reader, its text column only (refused, naming ``--text-column``, when it has none), the
    readable rows' texts in ``read``'s columns; a missing, empty or non-text value marks its
    row unreadable."""
    from ..files import input_files
    from ..measure.data.dataset_io import Columns, DataError, _pick, read_columns

    input_files(test_data, DataError, f"{option('test_data')} file")
    cols, kind, source = read_columns(test_data, {cfg.text_column})
    try:
        texts = list(_pick(cols, (cfg.text_column,), "text", source))
    except DataError as e:
        raise DataError(f"{option('test_data', source)}: no text column '{cfg.text_column}' "
                        f"(columns: {', '.join(map(str, cols.names[:8]))}); name the column "
                        f"of the text ({option('text_column')})") from e
    if not texts:
        raise DataError(f"{option('test_data', source)}: no rows")
    good = [i for i, t in enumerate(texts) if isinstance(t, str) and t.strip()]
    bad = [i for i in range(len(texts)) if i not in set(good)]
    if not good:
        raise DataError(f"{option('test_data', source)}: none of its {len(texts)} rows holds "
                        f"text in '{cfg.text_column}'")
    # under "text": the name measure's batching reads (read_sized passes no column name)
    kept = Columns({"text": [texts[i] for i in good]}, cols.names)
    return (kept, kind, source), good, bad


def per_byte(tokenizer: Any) -> bool:
    """Does the tokenizer map each UTF-8 byte to one token (a byte-level model: bits per
    byte)? Checked on a probe with multi-byte characters."""
    probe = "héllo wörld ∑ 字\n"
    try:
        ids = tokenizer(probe, add_special_tokens=False)["input_ids"]
    except Exception:  # noqa: BLE001 - a tokenizer that cannot say is not byte-level
        return False
    return len(ids) == len(probe.encode("utf-8"))


def lm_holdout(model: str | Path, folder: Path, test_data: str | Path, cfg: HoldoutConfig,
               say: Callable[[str], None] | None = None) -> LMHoldoutResult:
    """The test-set bound of the causal language model in ``folder`` (its config already
    read and found causal, :func:`is_causal_lm`) on the held-out text ``test_data`` (module
    docstring). The file is read and checked before the model is loaded."""
    import numpy as np

    from ..measure.data.batch_rows import read_sized
    from ..measure.data.data_pass import run_pass
    from ..measure.data.hf import load_task_model, load_tokenizer
    from ..measure.device import default_precision, precision, resolve_device
    from ..measure.threads import blas_threads, data_threads
    from ..registry import load_registry
    from ..report.latex_formula import instantiated_latex
    from ..rounding import upper_text

    device = resolve_device(cfg.device)
    read, good, bad = read_texts(test_data, cfg)
    source = read[2]
    m = len(good) + len(bad)
    if say is not None:
        say(f"evaluating the language model {model} on the {m} rows of {source} on "
            f"{device.type} (units: rows, at most {cfg.max_length} tokens; α = "
            f"{cfg.smoothing:g}, δ = {cfg.delta:g} fixed before)")
    tm = load_task_model(folder, device)
    if tm.task != "causal_lm":  # the config said causal; transformers disagrees
        raise CheckpointError(f"{folder}: loaded as a {tm.task} model, not a causal LM")
    if tm.tokenizer is None:
        tm.tokenizer = load_tokenizer(folder)
    data = read_sized(None, tm, device, max_length=cfg.max_length, given=cfg.batch_size,
                      per_sample=False, columns=read)
    with blas_threads(data_threads(tm.model, device)), \
            precision(default_precision(device), device):
        res = run_pass(tm, data, device, alpha=cfg.smoothing, norms=False)
    scored = np.concatenate([y["attention_mask"][:, 1:].sum(1).numpy()
                             for y, _ in data.batches])
    empty = [good[i] for i in np.flatnonzero(scored == 0)]
    ok = scored > 0
    unreadable = sorted(bad + empty)
    loss = (float(np.sum(res.bounded[ok])) + len(unreadable)) / m
    vocab = int(tm.n_outputs)
    result = smoothed_result(loss, m, cfg.delta, cfg.smoothing, vocab)
    values = {"test_loss": f"{loss:.6g}", "m": str(m), "delta": f"{cfg.delta:g}",
              "alpha": f"{cfg.smoothing:g}", "V": str(vocab)}
    latex = instantiated_latex(load_registry().get(ENTRY_ID), values,
                               upper_text(result.value, 4))
    return LMHoldoutResult(
        str(model), source, m, unreadable, int(scored.sum()), loss,
        float(np.mean(res.ce[ok]) / math.log(2)) if ok.any() else float("nan"),
        float(np.mean(res.err01[ok])) if ok.any() else float("nan"), cfg.smoothing, vocab,
        "byte" if per_byte(tm.tokenizer) else "token", cfg.max_length, cfg.delta, result,
        latex)
