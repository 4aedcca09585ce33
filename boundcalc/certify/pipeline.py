"""``certify``: from a base model and labelled data to a certificate for the model this
procedure trains (the recipe of ``examples/digits_vit.py``, as one function).

Steps, each writing its output under ``out`` and reused when it is already there for the same
inputs and settings and hashes to what the step wrote (so a killed run resumes where it stopped,
to the uninterrupted run's numbers; the folder is certify's own: :mod:`.run_folder`):

1. ``split``: a seeded permutation of DATA's rows (no label read) into the prior's data
   (``prior.jsonl``) and the bound sample S (``S.jsonl``), the classes from the prior's rows
   alone; ``tune.jsonl`` (rows of the prior's data, for the σ search) and ``test.jsonl`` (the held-out set, if given); ``split.json`` records the
   indices, the classes, the file's SHA-256 and each split's SHA-256.
2. ``prior``: the base fine-tuned on the prior's data (``prior/``, a Hugging Face folder).
   It never sees S, so a PAC-Bayes prior centred at it is legitimate.
3. ``posterior``: the prior fine-tuned on S with a proximal pull toward it (``model/``).
4. ``measure``: ``measure model/ --init prior/ --data S.jsonl --tune-data tune.jsonl``
   (``stats.json``), the library function, not a subprocess.
5. ``compare``: every certified entry on ``stats.json`` with its floor and what dominates,
   their least quoted as ``compare`` quotes it (at δ/k, with its total probability); the
   test-set bound of model/ on the held-out rows and the disagreement route
   (:mod:`.model_rows`: ``stats_model.json``); the prior's test-set bound on S as the
   baseline (shown, not claimed); the held-out errors of model/ and of the Gibbs predictor
   (``report.json``, built by :mod:`boundcalc.certify.claims`).

What is certified, on the distribution S was drawn from (the rows of DATA assumed i.i.d.): by
every PAC-Bayes row, the *Gibbs predictor* of model/ (each input answered by its own draw
w ∼ N(model/, σ²)), a random classifier, not model/; by the test-set row (with held-out rows),
model/ itself. A user who trained their own model gets a certificate for it with
``boundcalc measure`` instead: their pretrained base (or a checkpoint that never saw S) as
``--init``, their own held-out split as ``--tune-data``, and a sample the model was not
selected on as ``--data``.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..files import write_text_atomic
from ..words import option
from . import claims, split as splits
from .callback import loop_record, trained
from .config import CertifyConfig
from .heldout import read_jsonl
from .preflight import preflight
from .run_folder import RunFolder
from .train import Progress, TrainSpec, save_folder

# the settings each step depends on (a change re-runs that step and every later one)
STEP_FIELDS = {
    "split": ("prior_fraction", "seed", "tune_rows", "text_column", "label_column"),
    "prior": ("prior_epochs", "prior_lr", "batch_size", "max_length", "seed"),
    "posterior": ("post_epochs", "post_lr", "proximal", "batch_size", "max_length", "seed"),
    "measure": ("sigmas", "draws", "tune_draws", "group_draws", "max_length", "batch_size",
                "compress", "levels", "seed", "posterior", "bound_epochs", "bound_lr"),
    "compare": (),
}
STEPS = tuple(STEP_FIELDS)
# in the keys of their steps: a folder made by an earlier rule re-runs that step
SPLIT_RULE = "seeded permutation, no label read; classes from the prior's rows"
REPORT_FORM = "minimum at delta/k; test-set rows; baseline; Gibbs held-out error"
CERTIFIES = ("the PAC-Bayes (Gibbs) rows: the Gibbs predictor of model/, a random classifier "
             "that answers each input with its own draw w ∼ N(model/, σ²) (not model/ itself); "
             "the test-set rows (model_rows): model/ itself; the baseline: the prior, not "
             "claimed; on the distribution the rows of DATA were drawn from")


@dataclass
class CertifyResult:
    """What :func:`certify` produced: the output folder, which steps ran or were reused, the
    split sizes, the report (``report.json``) and the certified results (best first)."""

    out: Path
    steps: dict[str, str]
    report: dict[str, Any]
    certified: list[Any] = field(default_factory=list)


def _key(step: str, cfg: CertifyConfig, upstream: str, extra: Any = None) -> str:
    conf = asdict(cfg)
    mine = {k: conf[k] for k in STEP_FIELDS[step]}
    blob = json.dumps([step, mine, upstream, extra], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _rates(cfg: CertifyConfig, pretrained: bool) -> tuple[float, float, int]:
    """(prior lr, posterior lr, prior epochs), the defaults filled in for the base's kind."""
    prior = cfg.prior_lr if cfg.prior_lr is not None else (1e-4 if pretrained else 1e-3)
    post = cfg.post_lr if cfg.post_lr is not None else (3e-5 if pretrained else 3e-4)
    epochs = cfg.prior_epochs if cfg.prior_epochs is not None else (2 if pretrained else 4)
    return prior, post, epochs


def _fingerprint(path: str | Path) -> list[Any]:
    """Name, size and modification time of a file or of a folder's files (cheap: a changed
    base model re-runs the training steps without hashing gigabytes)."""
    p = Path(path)
    files = sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else [p]
    return [[str(f.relative_to(p)) if p.is_dir() else f.name, f.stat().st_size,
             f.stat().st_mtime_ns] for f in files]


def _split_step(data: str | Path, test_data: str | Path | None, out: Path, cfg: CertifyConfig,
                steps: RunFolder, say: Callable[[str], None]) -> tuple[dict[str, Any], str]:
    names = ("prior.jsonl", "S.jsonl", "tune.jsonl", "split.json") + \
        (("test.jsonl",) if test_data is not None else ())
    # the key needs the data's hash: read the file's bytes (cheap) before deciding
    hashes = [splits.file_sha256(data)] + ([splits.file_sha256(test_data)] if test_data
                                           is not None else [])
    key = _key("split", cfg, "", hashes + [SPLIT_RULE])
    if steps.fresh("split", key, [out / n for n in names]):
        return json.loads((out / "split.json").read_text()), key
    train = splits.read_labelled(data, cfg.text_column, cfg.label_column)
    # the split reads no label; the classes come from the prior's rows alone, and S is only
    # checked (no unseen class) and encoded after: no label of S reaches the prior
    prior_idx, bound_idx = splits.seeded_split(len(train.labels), cfg.prior_fraction, cfg.seed)
    classes = splits.class_names([train.labels[i] for i in prior_idx])
    splits.check_no_unseen([train.labels[i] for i in bound_idx], classes,
                           f"the bound sample S ({train.source}, seed {cfg.seed})")
    y = splits.encode(train.labels, classes, train.source)
    rng = np.random.default_rng(cfg.seed + 1)
    tune_idx = np.sort(rng.choice(prior_idx, min(cfg.tune_rows, len(prior_idx)),
                                  replace=False)) if cfg.tune_rows else prior_idx[:0]
    record: dict[str, Any] = {
        "data": train.source, "data_sha256": train.sha256, "rows": len(y),
        "text_column": cfg.text_column, "label_column": cfg.label_column,
        "classes": classes, "seed": cfg.seed, "prior_fraction": cfg.prior_fraction,
        "rule": f"a permutation of the rows seeded by {cfg.seed} (no label read): its first "
                f"round({cfg.prior_fraction}·n) rows to the prior's data, the rest to S; the "
                "classes from the prior's rows alone (S checked for an unseen class); tune: "
                f"rows of the prior's data, seed {cfg.seed + 1}"}
    for name, idx in (("prior", prior_idx), ("S", bound_idx), ("tune", tune_idx)):
        texts = [train.texts[i] for i in idx]
        splits.write_jsonl(out / f"{name}.jsonl", texts, y[idx])
        record[name] = {"n": len(idx), "indices": idx.tolist(),
                        "sha256": splits.rows_sha256(texts, y[idx]),
                        "counts": np.bincount(y[idx], minlength=len(classes)).tolist()}
    if test_data is None:  # an earlier run's held-out rows are not this run's
        for stale in ("test.jsonl", "stats_model.json"):
            (out / stale).unlink(missing_ok=True)
    else:
        test = splits.read_labelled(test_data, cfg.text_column, cfg.label_column)
        splits.check_no_unseen(test.labels, classes, f"the held-out set ({test.source})")
        ty = splits.encode(test.labels, classes, test.source)
        splits.write_jsonl(out / "test.jsonl", test.texts, ty)
        record["test"] = {"data": test.source, "data_sha256": test.sha256, "n": len(ty),
                          "sha256": splits.rows_sha256(test.texts, ty)}
    write_text_atomic(out / "split.json", json.dumps(record, indent=1, default=str))
    steps.finish("split", key)
    return record, key


def certify(base: str | Path, data: str | Path, out: str | Path,
            test_data: str | Path | None = None, config: CertifyConfig | None = None, *,
            train: Callable[..., None] | None = None, progress: Progress | None = None,
            say: Callable[[str], None] | None = None) -> CertifyResult:
    """Run the five steps (module docstring) into ``out`` and return the certified results.

    ``train(model, tokenizer, texts, labels, spec)``: your own training loop for both stages
    (default :func:`~boundcalc.certify.train.train_classifier`); ``spec`` is a
    :class:`~boundcalc.certify.train.TrainSpec` (stage, epochs, lr, batch size, proximal
    weight and the prior's weights as ``anchor`` for the posterior, device, seed). It trains
    the model in place, or returns the trained model or its state dict (:mod:`.callback`;
    ``report.json`` records that a custom loop trained them). Every input is checked before
    anything slow runs (:mod:`.preflight`). ``progress(done, total, what)`` is called during
    training and measurement; ``say(message)`` gets one line per step. ``out``: a new or
    empty folder, or one an earlier certify made, whose files are reused only as they were
    written (:mod:`.run_folder`); any other folder, or an input where certify writes, is
    refused (:class:`~boundcalc.errors.OutputError`) before anything is written."""
    from ..measure.device import resolve_device
    from .train import base_folder, build_classifier, has_weights, train_classifier

    cfg = config or CertifyConfig()
    say = say or (lambda m: None)
    train_fn = train or train_classifier
    custom = train is not None
    device = resolve_device(cfg.device)  # a missing CUDA is refused before anything slow
    preflight(base, data, test_data, cfg)  # files, base, labels, overlaps: before anything slow
    out = Path(out)
    folder, _ = base_folder(base)
    pretrained = has_weights(base) and Path(base).is_dir()
    # the folder is certify's own (run_folder.py): checked and marked before any write
    steps = RunFolder(out, STEPS, {"data": data, "test_data": test_data, "base": base,
                                   "tokenizer": cfg.tokenizer}, say)
    t0 = time.monotonic()

    record, key = _split_step(data, test_data, out, cfg, steps, say)
    sizes = {k: record[k]["n"] for k in ("prior", "S", "tune")}
    say(f"split: {record['rows']} rows of {len(record['classes'])} classes → prior's data "
        f"{sizes['prior']}, bound sample S {sizes['S']} (seeded permutation, seed {cfg.seed}, "
        "no label read); "
        f"σ search on {sizes['tune']} rows of the prior's data"
        + (f"; held-out {record['test']['n']}" if "test" in record else "; no held-out set"))
    prior_lr, post_lr, prior_epochs = _rates(cfg, pretrained)
    base_id = [str(Path(base).resolve()), pretrained, _fingerprint(base),
               cfg.tokenizer and _fingerprint(cfg.tokenizer), "custom" if custom else "default",
               prior_lr, post_lr, prior_epochs]
    from ..measure.data.hf import load_tokenizer

    def tokenizer_from(path: Path) -> Any:
        return load_tokenizer(path)

    prior_key = _key("prior", cfg, key, base_id)
    if not steps.fresh("prior", prior_key, [out / "prior"]):
        tok = tokenizer_from(Path(cfg.tokenizer) if cfg.tokenizer else folder)
        classes = record["classes"]
        model = build_classifier(base, classes, cfg.seed, tok)
        texts, labels = read_jsonl(out / "prior.jsonl")
        start = "the pretrained base" if pretrained else "a random initialisation of the config"
        say(f"prior: fine-tuning {start} on the prior's data ({len(texts)} rows, "
            f"{prior_epochs} epochs, lr {prior_lr:g}) on {device.type}")
        spec = TrainSpec("prior", prior_epochs, prior_lr, cfg.batch_size, cfg.max_length,
                         cfg.seed, device)
        model, how = trained(train_fn, custom, model, tok, texts, labels, spec, progress)
        save_folder(model, tok, out / "prior", {"step": "prior", "key": prior_key,
                                                "training": how})
        steps.finish("prior", prior_key)
    post_key = _key("posterior", cfg, prior_key)
    if not steps.fresh("posterior", post_key, [out / "model"]):
        import torch
        from transformers import AutoModelForSequenceClassification

        tok = tokenizer_from(out / "prior")
        model = AutoModelForSequenceClassification.from_pretrained(
            out / "prior", local_files_only=True, trust_remote_code=False).float()
        anchor = {n: p.detach().clone() for n, p in model.named_parameters()}
        texts, labels = read_jsonl(out / "S.jsonl")
        say(f"posterior: fine-tuning the prior on S ({len(texts)} rows, {cfg.post_epochs} "
            f"epoch(s), lr {post_lr:g}, proximal {cfg.proximal:g}·‖w − w_prior‖²)")
        spec = TrainSpec("posterior", cfg.post_epochs, post_lr, cfg.batch_size,
                         cfg.max_length, cfg.seed + 1, device, cfg.proximal, anchor)
        # the step's own seed (dropout): a resumed run trains as an uninterrupted one did
        torch.manual_seed(spec.seed)
        model, how = trained(train_fn, custom, model, tok, texts, labels, spec, progress)
        save_folder(model, tok, out / "model", {"step": "posterior", "key": post_key,
                                                "training": how})
        steps.finish("posterior", post_key)
    meas_key = _key("measure", cfg, post_key)
    if not steps.fresh("measure", meas_key, [out / "stats.json", out / "posterior_bound"]):
        say(f"measure: model/ with {option('init', 'prior/')} {option('data', 'S.jsonl')} "
            f"{option('tune_data', 'tune.jsonl')} (σ search on the prior's data, Monte Carlo "
            "Gibbs risk on S)")
        _measure(out, cfg, progress)
        steps.finish("measure", meas_key)
    cmp_key = _key("compare", cfg, meas_key, REPORT_FORM)
    if steps.fresh("compare", cmp_key, [out / "report.json", out / "stats_model.json"]):
        report = json.loads((out / "report.json").read_text())
        certified = claims.build(out / "stats.json", claims.Evidence())[0]
    else:
        say("compare: every certified entry on stats.json, with its floor; the test-set "
            "bounds; the Gibbs predictor on the held-out rows")
        from .heldout import measure_evidence

        ev = measure_evidence(out, "test" in record, cfg.max_length, cfg.batch_size, cfg.seed,
                              device, tokenizer_from)
        ev.extra_model_rows = _model_rows(
            out, cfg, device, ev.model_test.rate if ev.model_test else None, progress)
        certified, report = claims.build(out / "stats.json", ev)
        report.update({"sizes": sizes, "n_test": record.get("test", {}).get("n"),
                       "test_error": ev.model_test.rate if ev.model_test else None,
                       "prior_test_error": ev.prior_test.rate if ev.prior_test else None,
                       "prior_error_on_S": ev.prior_on_S.rate if ev.prior_on_S else None,
                       "classes": record["classes"], "settings": asdict(cfg),
                       "learning_rates": {"prior": prior_lr, "posterior": post_lr},
                       "prior_epochs": prior_epochs,
                       "base": str(base), "pretrained": pretrained,
                       "training_loop": loop_record(custom),
                       "certifies": CERTIFIES})
        write_text_atomic(out / "report.json", json.dumps(report, indent=1, default=str))
        steps.finish("compare", cmp_key)
    report["seconds"] = round(time.monotonic() - t0, 1)
    return CertifyResult(out, dict(steps.status), report, certified)


def _measure(out: Path, cfg: CertifyConfig, progress: Progress | None) -> None:
    from ..measure.data.task_measure import measure_task

    stats = measure_task(str(out / "model"), str(out / "S.jsonl"), str(out / "prior"),
                         cfg.measure_options(str(out / "tune.jsonl") if cfg.tune_rows else None),
                         progress=progress)
    if cfg.compress:
        from ..measure.compress.compression import add_compression
        from ..measure.compress.options import parse_levels
        from ..measure.data.batch_rows import DEFAULT_ROWS

        add_compression(stats, str(out / "model"), str(out / "S.jsonl"), str(out / "prior"),
                        select="delta", quantizer="kmeans", levels_grid=parse_levels(cfg.levels),
                        max_length=cfg.max_length, batch_size=cfg.batch_size or DEFAULT_ROWS)
    if cfg.posterior != "proximal":
        from .bound_posterior import bound_step

        bound_step(stats, out, cfg, progress)
    stats.save(out / "stats.json")


def _model_rows(out: Path, cfg: CertifyConfig, device: Any, test_error: float | None,
                progress: Progress | None) -> list[dict[str, Any]]:
    """The rows that certify model/ itself through its Gibbs posterior, with a held-out set
    (its texts only): the Gibbs bound plus the disagreement of model/ with its posterior
    (:mod:`.model_rows`, which writes ``stats_model.json``); ``[]`` without one."""
    from .model_rows import model_rows

    return model_rows(out, device, max_length=cfg.max_length, batch_size=cfg.batch_size,
                      seed=cfg.seed,
                      test_error=test_error, progress=progress)
