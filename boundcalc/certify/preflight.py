"""Pre-flight of ``certify``: every input read and checked before anything slow runs (before
DATA is hashed, the output folder is written or a model trains), each refusal one line naming
the culprit, with an exit code of :mod:`boundcalc.errors`.

:func:`preflight` checks, in this order:

1. **file types**: DATA and the held-out set are regular files or folders of them
   (:func:`boundcalc.files.input_files`, the check ``measure`` makes): a FIFO, a device
   (``/dev/zero``) or a link to one is refused, never read or hashed (it would never end);
2. **the base** (:func:`check_base`): its config names a model type transformers knows that
   has a sequence-classification model, and builds one (on the meta device: no memory, no
   weights: a width not divisible by the heads is refused here); the tokenizer (the base's, or
   the ``tokenizer`` option's) gives no id beyond the base's vocabulary; the base takes at
   least ``max_length`` positions; its weights, when it has any, are readable (a truncated
   safetensors file, a pickle that needs code: refused, nothing executed; safetensors read
   first when both are there) and finite (a NaN names the base's file, not model/);
3. **the size of S** (:func:`check_bound_sample`): a split whose S cannot give a
   non-vacuous number at any complexity is refused (with ``duplicates drop``, S of the
   distinct rows the split keeps);
4. **labels**: every label of DATA and of the held-out set is one class by the rule
   ``measure`` reads by (:func:`boundcalc.measure.data.labels.check_class_labels`);
5. **overlaps**, by content as the model reads a row (its token ids within the first
   ``max_length`` and its label; :func:`row_keys`): a row of DATA repeated (its copies could
   land in both the prior's data and S, so the prior would have seen rows of S) and a row of
   the held-out set that is a row of DATA (its error would be measured on a training row) are
   refused, each refusal naming the ``duplicates`` option; with ``duplicates`` ``drop`` they
   are not refused here: the split drops them (:mod:`.duplicates`).
6. **one text under two labels** (:func:`check_label_conflicts`, after the same-label copies
   of item 5): the same tokens with another label in DATA, or in the held-out set and DATA,
   are refused as copies are (the prior's data or model/'s training would hold the text of a
   row it is measured on).

DATA is tokenized once (:class:`RowsRead`: each row's digests and token count) for items 3, 5
and 6 and the plan rule's facts.

Contract: :func:`preflight` returns only when every check passed; it writes nothing.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from ..errors import CheckpointError
from ..words import option

ROWS_PER_CALL = 1024  # texts per tokenizer call when rows are keyed


def preflight(base: str | Path, data: str | Path, test_data: str | Path | None,
              cfg: Any) -> Any:
    """Run the checks of the module docstring on certify's inputs (``cfg`` a
    :class:`~boundcalc.certify.CertifyConfig`); return what the plan rule reads of them
    (:class:`~boundcalc.certify.plan_rule.Facts`: the base's classifier, DATA's texts)."""
    from ..files import input_files
    from ..measure.data.dataset_io import DataError
    from ..measure.data.hf import load_tokenizer
    from .split import read_labelled
    from .train import base_folder

    for name, path in (("data", data), ("test_data", test_data)):
        if path is not None:  # before anything opens or hashes it
            input_files(path, DataError, f"{option(name)} file")
    folder, raw = base_folder(base)
    tok_path = Path(cfg.tokenizer) if cfg.tokenizer else folder
    tok = load_tokenizer(tok_path)
    model = check_base(base, folder, raw, tok, tok_path if cfg.tokenizer else None,
                       cfg.max_length)
    train = read_labelled(data, cfg.text_column, cfg.label_column)
    test = (read_labelled(test_data, cfg.text_column, cfg.label_column)
            if test_data is not None else None)
    read = RowsRead.of(train.texts, train.labels, tok, cfg.max_length)  # DATA tokenized once
    check_bound_sample(train.labels, cfg, read.distinct if cfg.duplicates == "drop" else None)
    check_rows(train.texts, train.labels, train.source, tok, cfg.max_length,
               test and (test.texts, test.labels, test.source), cfg.duplicates, read.row_keys)
    check_label_conflicts(train, test, tok, cfg.max_length, read.text_keys)
    from .plan_rule import facts

    return facts(model, read.lengths)


@dataclass(frozen=True)
class RowsRead:
    """DATA's rows as the model reads them, from one tokenization (:func:`token_ids`), kept as
    digests and lengths only (a row's ids are dropped once hashed: memory per row does not grow
    with its tokens): per row its :func:`row_keys` digest (tokens and class), its
    :func:`text_keys` digest (tokens) and its token count; ``distinct``: the rows
    ``duplicates drop`` keeps (one per row key, :func:`.duplicates.keep_distinct`)."""

    row_keys: list[bytes]
    text_keys: list[bytes]
    lengths: list[int]

    @property
    def distinct(self) -> int:
        return len(set(self.row_keys))

    @classmethod
    def of(cls, texts: Sequence[str], labels: Sequence[Any], tokenizer: Any,
           max_length: int) -> "RowsRead":
        rows, txt, lengths = [], [], []
        for ids, y in zip(token_ids(texts, tokenizer, max_length), labels):
            h = hashlib.sha256(np.asarray(ids, dtype=np.int64).tobytes())
            txt.append(h.digest())
            rows.append(_with_label(h, y).digest())
            lengths.append(len(ids))
        return cls(rows, txt, lengths)


# the entry whose confidence term and δ the floor of S is read from (certify's PAC-Bayes rows)
FLOOR_ENTRY = "pac_bayes_kl_gaussian_mc"


def check_bound_sample(labels: Sequence[Any], cfg: Any, rows: int | None = None) -> None:
    """Refuse a split whose bound sample S cannot give a non-vacuous number at any complexity:
    its zero-complexity floor kl⁻¹(0, ln(2√n/δ)/n) (the PAC-Bayes-kl budget of
    ``formulas/pac_bayes.toml`` at zero KL and zero empirical error, at the entry's δ, before
    any grid or Monte Carlo cost, so the least it could ever certify) at or above the vacuity
    level of guessing among DATA's K classes, 1 − 1/K (no lower than the level a run reports,
    the least trivial error), naming ``prior_fraction`` and the size of S. ``rows``: the rows
    of DATA the split divides when that is fewer than the labels (``duplicates drop``: the
    distinct rows, :attr:`RowsRead.distinct`); default every row."""
    import math

    from ..engine.kernels import kl_inv_upper
    from ..measure.data.dataset_io import DataError
    from ..registry import load_registry
    from .split import _canon, seeded_split

    split = len(labels) if rows is None else int(rows)
    n = len(seeded_split(split, cfg.prior_fraction, cfg.seed)[1])
    k = max(len({repr(_canon(y)) for y in labels}), 2)
    delta = float(load_registry().get(FLOOR_ENTRY).symbols["delta"].default)
    floor, level = kl_inv_upper(0.0, math.log(2 * math.sqrt(n) / delta) / n), 1 - 1 / k
    if floor >= level:
        dropped = (f" (its {len(labels)} less {len(labels) - split} repeats "
                   f"{option('duplicates', 'drop')} drops)" if split < len(labels) else "")
        raise DataError(
            f"{option('prior_fraction', cfg.prior_fraction)} leaves the bound sample S "
            f"{n} of DATA's {split} rows{dropped}: at n = {n} no PAC-Bayes bound can be "
            f"non-vacuous (its floor at zero error and zero complexity, kl⁻¹(0, ln(2√n/δ)/n) = "
            f"{floor:.3g} at δ = {delta:g}, is at or above {level:.3g}, the error of guessing "
            f"among {k} classes); lower {option('prior_fraction')} or give more rows")


def check_base(base: str | Path, folder: Path, raw: dict[str, Any], tokenizer: Any,
               tokenizer_option: Path | None, max_length: int) -> Any:
    """The base's config, tokenizer, positions and weights (module docstring, item 2).
    ``tokenizer_option``: the tokenizer's folder when the option gave it (None: the base's
    own). Returns the classifier the config builds, on the meta device (shapes only)."""
    from ..measure.offline import check_folder, transformers_module

    check_folder(folder)  # regular files only; no code named by a config
    where = Path(base) if Path(base).is_file() else Path(base) / "config.json"
    tf = transformers_module()
    model_type = raw["model_type"]
    if model_type not in tf.CONFIG_MAPPING:
        raise CheckpointError(f"{where}: model_type {str(model_type)[:60]!r} is not a model "
                              f"type transformers {tf.__version__} knows; the base must be a "
                              "Hugging Face text model (bert, roberta, distilbert, ...)")
    model = _meta_classifier(where, raw, tokenizer, tf)
    _check_vocabulary(base, model, tokenizer, tokenizer_option)
    from ..measure.data.hf import position_limit

    limit = position_limit(model)
    if limit is not None and max_length > limit:
        raise CheckpointError(f"{where}: the base takes at most {limit} positions, fewer than "
                              f"{option('max_length', max_length)}: give "
                              f"{option('max_length', limit)} or less")
    from .train import has_weights

    if has_weights(folder) and Path(base).is_dir():
        _check_weights(folder)
    return model


def _meta_classifier(where: Path, raw: dict[str, Any], tokenizer: Any, tf: Any) -> Any:
    """The classifier of the base's config (two classes), built on the meta device: shapes
    without memory, so a config transformers cannot build is refused in a second."""
    import torch

    from .train import classifier_config

    kind = str(raw["model_type"])[:60]
    try:
        cfg = classifier_config(raw, ("0", "1"), tokenizer)
    except Exception as exc:  # noqa: BLE001 - any field transformers refuses
        raise CheckpointError(f"{where}: not a valid {kind} config ({_first(exc)})") from None
    if type(cfg) not in tf.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING:
        raise CheckpointError(f"{where}: model_type {kind!r} has no sequence-classification "
                              "model in transformers; certify trains a text classifier from a "
                              "text model (bert, roberta, distilbert, ...)")
    verbosity = tf.utils.logging.get_verbosity()
    tf.utils.logging.set_verbosity_error()
    try:
        with torch.device("meta"):
            return tf.AutoModelForSequenceClassification.from_config(cfg)
    except Exception as exc:  # noqa: BLE001 - e.g. a width not divisible by the heads
        raise CheckpointError(f"{where}: the config does not build a {kind} model "
                              f"({_first(exc)})") from None
    finally:
        tf.utils.logging.set_verbosity(verbosity)


def _check_vocabulary(base: str | Path, model: Any, tokenizer: Any,
                      tokenizer_option: Path | None) -> None:
    """Every id the tokenizer can give has a row in the base's input embedding."""
    emb = model.get_input_embeddings()
    rows = getattr(emb, "num_embeddings", None)
    try:
        top = max(tokenizer.get_vocab().values())
    except Exception:  # noqa: BLE001 - load_tokenizer already refused an unreadable one
        return
    if isinstance(rows, int) and top >= rows:
        whose = (f"the tokenizer of {option('tokenizer', tokenizer_option)}"
                 if tokenizer_option is not None else "the base's tokenizer")
        raise CheckpointError(f"{base}: {whose} gives token ids up to {top}, beyond the base's "
                              f"vocabulary of {rows} ids (0..{rows - 1}): a text would reach "
                              "an embedding row that does not exist; give the tokenizer the "
                              "base was made with")


def _check_weights(folder: Path) -> None:
    """Every tensor of the base's weights read (safetensors first, a pickle through the
    weights-only unpickler: code is never executed) and checked finite, one at a time."""
    from ..measure.io import open_source

    with open_source(folder) as src:
        for _ in src.iter_tensors():  # each one checked (finite, dense) as it is read
            pass


def row_keys(texts: Sequence[str], labels: Sequence[Any], tokenizer: Any,
             max_length: int) -> list[bytes]:
    """One digest per row as the model reads it: its token ids within the first
    ``max_length`` (truncated as training truncates) and its class (an integer-valued float
    is that integer; ``1`` and ``"1"`` are different classes)."""
    return [_with_label(hashlib.sha256(np.asarray(row, dtype=np.int64).tobytes()), y).digest()
            for row, y in zip(token_ids(texts, tokenizer, max_length), labels)]


def _with_label(h: Any, y: Any) -> Any:
    """A copy of the token digest ``h`` with the class ``y`` added (:func:`row_keys`' rule)."""
    from .split import _canon

    y = _canon(y)
    h = h.copy()
    h.update(f"|{type(y).__name__}:{y}".encode())
    return h


def check_rows(texts: Sequence[str], labels: Sequence[Any], source: str, tokenizer: Any,
               max_length: int, test: tuple[Sequence[str], Sequence[Any], str] | None,
               duplicates: str = "refuse", keys: Sequence[bytes] | None = None) -> None:
    """Refuse a row of DATA that repeats an earlier one, and a row of the held-out set
    ``test`` (texts, labels, source) that is a row of DATA, by :func:`row_keys` (``keys``:
    DATA's, already computed); each refusal names the ``duplicates`` option. With
    ``duplicates`` ``"drop"`` neither is refused (the split drops them, :mod:`.duplicates`)."""
    from ..measure.data.dataset_io import DataError

    if duplicates == "drop":
        return
    drop = (f"; or give {option('duplicates', 'drop')} to drop them before the split (seeded, "
            "counted in report.json)")

    same = (f"the same tokens within the first {option('max_length', max_length)} and the "
            "same label")
    first: dict[bytes, int] = {}
    repeats = []
    for i, k in enumerate(row_keys(texts, labels, tokenizer, max_length)
                          if keys is None else keys):
        j = first.setdefault(k, i)
        if j != i:
            repeats.append((i, j))
    if repeats:
        i, j = repeats[0]
        raise DataError(f"{option('data', source)}: {len(repeats)} of its {len(texts)} rows "
                        f"repeat an earlier row ({same}; row {i} repeats row {j}): certify "
                        "splits DATA's rows between the prior's data and the bound sample S, "
                        "and a row with copies on both sides would let the prior see rows of "
                        "S (it would be no PAC-Bayes prior); keep one copy of each row" + drop)
    if test is None:
        return
    t_texts, t_labels, t_source = test
    shared = [(i, first[k]) for i, k in
              enumerate(row_keys(t_texts, t_labels, tokenizer, max_length)) if k in first]
    if shared:
        i, j = shared[0]
        raise DataError(f"{option('test_data', t_source)}: {len(shared)} of its {len(t_texts)} "
                        f"rows are rows of DATA {source} ({same}; its row {i} is DATA's row "
                        f"{j}): the held-out set must share no row with DATA, whose rows train "
                        "the prior and model/, else its errors are measured on training rows; "
                        "give rows held out from DATA" + drop)


def _first(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]


def text_keys(texts: Sequence[str], tokenizer: Any, max_length: int) -> list[bytes]:
    """One digest per text as the model reads it (its token ids within the first
    ``max_length``), whatever its label."""
    return [hashlib.sha256(np.asarray(r, dtype=np.int64).tobytes()).digest()
            for r in token_ids(texts, tokenizer, max_length)]


def token_ids(texts: Sequence[str], tokenizer: Any, max_length: int) -> Iterator[list[int]]:
    """Each text's token ids within the first ``max_length`` (truncated as training
    truncates), tokenized :data:`ROWS_PER_CALL` texts per call."""
    for lo in range(0, len(texts), ROWS_PER_CALL):
        yield from tokenizer(list(texts[lo:lo + ROWS_PER_CALL]), truncation=True,
                             max_length=max_length)["input_ids"]


def check_label_conflicts(train: Any, test: Any, tokenizer: Any, max_length: int,
                          keys: Sequence[bytes] | None = None) -> None:
    """Refuse a text of DATA that an earlier row of DATA has under another label, and a text of
    the held-out set ``test`` (None: none) that DATA has under another label (module
    docstring, item 6); ``train``/``test``: ``texts``, ``labels``, ``source``; ``keys``:
    DATA's :func:`text_keys`, already computed."""
    from ..measure.data.dataset_io import DataError
    from .split import _canon

    same = f"the same tokens within the first {option('max_length', max_length)}"
    first: dict[bytes, int] = {}
    for i, k in enumerate(text_keys(train.texts, tokenizer, max_length)
                          if keys is None else keys):
        j = first.setdefault(k, i)
        if j != i and _canon(train.labels[i]) != _canon(train.labels[j]):
            raise DataError(
                f"{option('data', train.source)}: row {i} is row {j}'s text ({same}) under "
                f"another label ({shown_label(train.labels[i])}, not "
                f"{shown_label(train.labels[j])}): the split could give one copy to the prior's "
                "data and the other to S, so the prior would have seen a text of S; keep one "
                "row per text, with the label you trust")
    if test is None:
        return
    for i, k in enumerate(text_keys(test.texts, tokenizer, max_length)):
        j = first.get(k)
        # the same label is check_rows' (refused, or dropped by the split with duplicates drop)
        if j is not None and _canon(test.labels[i]) != _canon(train.labels[j]):
            raise DataError(
                f"{option('test_data', test.source)}: its row {i} is DATA's row {j} text "
                f"({same}) under another label ({shown_label(test.labels[i])}, not "
                f"{shown_label(train.labels[j])}): the held-out set must share no text with "
                "DATA, whose rows train the prior and model/; give texts held out from DATA")


def shown_label(y: Any) -> str:
    """A label as a message shows it (text quoted, at most 40 characters)."""
    return repr(y)[:40]

