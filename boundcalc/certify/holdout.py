"""A classifier you already trained, certified on your own held-out rows: the test-set bound
(``boundcalc holdout MODEL --test-data HELDOUT``); a causal language model's held-out bits by
the same argument with a bounded loss (:mod:`.holdout_lm`).

:func:`holdout` reads the held-out rows with certify's reader
(:func:`boundcalc.measure.data.dataset_io.read_columns`), maps each label to one of the model's
classes (:func:`class_indices`: the model's label names from its ``config.json``, or class
indices), evaluates the model in batches on the device (:func:`.train.error_rate`, certify's
own held-out count: on the card when there is one) and evaluates the registry's ``test_set_kl``
at the count through the code path of ``boundcalc optimize test_set_kl --set
test_errors=k,m=m`` (:func:`boundcalc.optimize.optimize`): no second formula.

What is certified: the 0-1 risk of **this model**, on the distribution the held-out rows are
i.i.d. draws of, with probability ≥ 1 − δ, provided that nothing about the model (its
training, its selection, its settings) used those rows. A row whose text is missing or not
text, or whose label is empty or not one class, could not be read: it is counted as an
**error** (never dropped), so the bound covers every row of the file. A label that is none of
the model's classes is refused (the model cannot answer it; usually the wrong column or
label names), naming the row.

Every input is checked before the model is loaded (the file's type and columns, the model's
config, the labels); each refusal is one line naming the culprit (exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..errors import BoundcalcError, CheckpointError
from ..words import option
from .config import HoldoutConfig

DISAGREEMENT_NOTE = (
    "with a certified Gibbs posterior around this model (certify's model/ and its stats.json) "
    "and unlabelled rows, the disagreement route (disagreement_gibbs_groups_mc: the Gibbs bound "
    "plus how often the model and a posterior draw disagree) would also certify it without "
    "held-out labels: docs/sources/disagreement.md")


@dataclass
class HoldoutResult:
    """What :func:`holdout` measured and certified (:meth:`record` is ``--json``)."""

    model: str
    data: str
    m: int
    errors: int
    unreadable: list[int]
    delta: float
    result: Any  # the registry's Result for test_set_kl
    latex: str

    @property
    def error_rate(self) -> float:
        return self.errors / self.m

    def record(self) -> dict[str, Any]:
        r = self.result
        return {"id": r.id, "certifies": f"the classifier {self.model} itself",
                "value": r.value, "delta": r.delta, "is_bound": r.is_bound,
                "vacuous": r.vacuous, "errors": self.errors, "m": self.m,
                "held_out_error": self.error_rate, "unreadable_rows": len(self.unreadable),
                "unreadable_first": self.unreadable[:20],
                "unreadable_counted_as": "errors", "data": self.data, "latex": self.latex,
                "source": r.source, "note": DISAGREEMENT_NOTE,
                "how": f"test-set bound: {self.errors} errors (of which "
                       f"{len(self.unreadable)} unreadable rows) of the model on {self.m} "
                       "held-out rows, kl⁻¹(k/m, ln(1/δ)/m)"}


def model_classes(raw: Mapping[str, Any], where: Path) -> list[str]:
    """The model's class names in index order (``id2label`` of its config); refused when the
    config is not a sequence classifier's."""
    arch = [str(a) for a in raw.get("architectures") or []]
    if not any(a.endswith("ForSequenceClassification") for a in arch):
        raise CheckpointError(f"{where}: architectures {arch or 'not given'} names neither a "
                              "...ForSequenceClassification model nor a causal language model "
                              "(...ForCausalLM, ...LMHeadModel); holdout evaluates a trained "
                              "sequence classifier or causal LM (saved with save_pretrained)")
    id2label = raw.get("id2label") or {}
    n = raw.get("num_labels") or len(id2label)
    try:
        names = [str(id2label.get(str(i), id2label.get(i, f"LABEL_{i}"))) for i in range(n)]
    except TypeError:
        raise CheckpointError(f"{where}: id2label is not a mapping of class indices") from None
    if len(names) < 2:
        raise CheckpointError(f"{where}: the classifier has {len(names)} class(es); a "
                              "classifier has at least 2")
    return names


def class_indices(labels: Sequence[Any], classes: Sequence[str], source: str,
                  column: str) -> tuple[list[int], list[int]]:
    """``(index per row, unreadable rows)``: a label that is one of the model's class names is
    that class; an integer label (an integer-valued float too) is a class index; an empty or
    malformed label is unreadable (index -1: counted as an error); any other label is refused,
    naming the row."""
    from ..measure.data.dataset_io import DataError
    from ..measure.data.labels import label_problem

    by_name = {c: i for i, c in enumerate(classes)}
    out, bad = [], []
    for i, y in enumerate(labels):
        if label_problem(y) is not None:
            out.append(-1)
            bad.append(i)
        elif isinstance(y, str) and y in by_name:
            out.append(by_name[y])
        elif not isinstance(y, str) and 0 <= int(y) < len(classes):
            out.append(int(y))
        else:
            raise DataError(f"{option('test_data', source)}: labels '{column}' row {i} is "
                            f"{y!r}, none of the model's {len(classes)} classes "
                            f"({', '.join(classes[:8])}{', ...' if len(classes) > 8 else ''}; "
                            "names from its config.json id2label, or indices 0.."
                            f"{len(classes) - 1}): give the label column the model was "
                            f"trained on ({option('label_column')})")
    return out, bad


def read_rows(test_data: str | Path, cfg: HoldoutConfig,
              classes: Sequence[str]) -> tuple[list[str], list[int], list[int], str]:
    """``(texts, class indices, unreadable rows, source)`` of the held-out file, read with
    certify's reader; a missing text or a malformed label marks its row unreadable."""
    from ..files import input_files
    from ..measure.data.dataset_io import DataError, _pick, read_columns

    input_files(test_data, DataError, f"{option('test_data')} file")
    cols, _, source = read_columns(test_data, {cfg.text_column, cfg.label_column})
    texts = list(_pick(cols, (cfg.text_column,), "text", source))
    raw = _pick(cols, (cfg.label_column,), "label", source)
    labels = list(raw.tolist() if hasattr(raw, "tolist") else raw)
    if not texts:
        raise DataError(f"{option('test_data', source)}: no rows")
    y, bad = class_indices(labels, classes, source, cfg.label_column)
    bad = sorted(set(bad) | {i for i, t in enumerate(texts) if not isinstance(t, str)})
    return texts, y, bad, source


def instantiated_latex(entry: Any, errors: int, m: int, delta: float, value: float) -> str:
    """The registry's ``test_set_kl`` with k, m and δ written in, and its value (rounded up):
    an ``align*`` environment (:mod:`boundcalc.report.latex_formula`)."""
    return latex_of(entry, {"test_errors": str(errors), "m": str(m), "delta": f"{delta:g}"},
                    value)


def latex_of(entry: Any, values: Mapping[str, str], value: float) -> str:
    """A registry entry with its symbols' ``values`` (as written) put in, and its value
    rounded up (:func:`boundcalc.report.latex_formula.instantiated_latex`)."""
    from ..report.latex_formula import instantiated_latex as latex
    from ..rounding import upper_text

    return latex(entry, dict(values), upper_text(value, 4))


def test_set_result(errors: int, m: int, delta: float) -> Any:
    """The registry's ``test_set_kl`` at k = ``errors``, m, δ, evaluated as ``boundcalc
    optimize test_set_kl --set test_errors=k,m=m`` evaluates it."""
    from ..optimize import optimize
    from ..registry import load_registry
    from .claims import TEST_SET_ID

    reg = load_registry()
    return optimize(reg.get(TEST_SET_ID), None, {"test_errors": errors, "m": m,
                                                 "delta": delta},
                    registry=reg, what_if=False)


def holdout(model: str | Path, test_data: str | Path, config: HoldoutConfig | None = None,
            say: Callable[[str], None] | None = None) -> Any:
    """The test-set bound of the sequence classifier in ``model`` (a Hugging Face folder) on
    the held-out rows ``test_data`` (module docstring), a :class:`HoldoutResult`; of a causal
    language model, the bound on its held-out bits (:func:`.holdout_lm.lm_holdout`, a
    :class:`~.holdout_lm.LMHoldoutResult`). Checks every input before the model is loaded;
    ``say(line)`` hears when the evaluation starts."""
    from ..measure.device import resolve_device
    from ..registry import load_registry
    from .claims import TEST_SET_ID
    from .holdout_lm import is_causal_lm, lm_holdout
    from .train import base_folder, error_rate, has_weights, load_trained

    cfg = config or HoldoutConfig()
    device = resolve_device(cfg.device)
    folder, raw = base_folder(model)
    if not (Path(model).is_dir() and has_weights(folder)):
        raise CheckpointError(f"{model}: no weights (a trained model is a folder with "
                              "config.json and model.safetensors or pytorch_model.bin)")
    if is_causal_lm(raw):
        return lm_holdout(model, folder, test_data, cfg, say)
    classes = model_classes(raw, folder / "config.json")
    if cfg.smoothing != HoldoutConfig().smoothing:  # set: the rule of options.refuse_unused
        raise BoundcalcError(f"{option('smoothing', cfg.smoothing)}: applies to a causal "
                             f"language model; {model} is a sequence classifier (its 0-1 "
                             "error needs no smoothing)")
    texts, y, bad, source = read_rows(test_data, cfg, classes)
    if say is not None:
        say(f"evaluating {model} on the {len(texts)} rows of {source} on {device.type}, δ = "
            f"{cfg.delta:g} fixed before")
    net, tok = load_trained(folder)
    good = [i for i in range(len(texts)) if i not in set(bad)]
    rate = error_rate(net, tok, [texts[i] for i in good], [y[i] for i in good],
                      cfg.max_length, cfg.batch_size, device) if good else 0.0
    errors = int(round(rate * len(good))) + len(bad)
    res = test_set_result(errors, len(texts), cfg.delta)
    latex = instantiated_latex(load_registry().get(TEST_SET_ID), errors, len(texts),
                               cfg.delta, res.value)
    return HoldoutResult(str(model), source, len(texts), errors, bad, cfg.delta, res, latex)
