"""``certify``: from a base model and labelled data to a certificate for the model this
procedure trains (the recipe of ``examples/digits_vit.py``, as one function).

Steps, each an object with its contract (:mod:`.steps`: its name, the sub-record of the settings
it reads — :class:`~.config.SplitSettings` and its kin —, its key, ``run(context) → outputs``),
run in order by one chain (:data:`CHAIN`), sharing one loaded model/, prior/ and each split
(:class:`~.loaded.Loaded`, on the context; dropped when a step rewrites them), each writing its
output under ``out`` through
:mod:`boundcalc.files` and reused when it is already there for the same inputs and settings and
hashes to what the step wrote (so a killed run resumes where it stopped, to the uninterrupted
run's numbers; the folder is certify's own: :mod:`.run_folder`):

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

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..errors import OutputError
from ..files import read_json, write_json_record
from ..words import option
from . import claims, split as splits
from .callback import loop_record, trained
from .config import (CertifyConfig, CompareSettings, MeasureSettings, PosteriorSettings,
                     PriorSettings, SplitSettings)
from .preflight import preflight
from .run_folder import RunFolder, remove_written
from .steps import Chain, Context, Step
from .train import Progress, TrainSpec, save_folder

# in the keys of their steps: a folder made by an earlier rule re-runs that step
SPLIT_RULE = "seeded permutation, no label read; classes from the prior's rows"
REPORT_FORM = ("minimum at delta/k; test-set rows; baseline; Gibbs held-out error; every row "
               "a claim naming its predictor")
CERTIFIES = ("the PAC-Bayes (Gibbs) rows: the Gibbs predictor of model/, a random classifier "
             "that answers each input with its own draw w ∼ N(model/, σ²) (not model/ itself); "
             "the bound-trained posterior's rows: that posterior; the compression rows: the "
             "model their code decodes to; the test-set rows (model_rows): model/ itself; the "
             "baseline: the prior, not claimed; each row names its own (certifies, "
             "predictor); on the distribution the rows of DATA were drawn from")
MAX_RECORD_BYTES = 1 << 30  # split.json holds every row's index: large, never unbounded


@dataclass
class CertifyResult:
    """What :func:`certify` produced: the output folder, which steps ran or were reused, the
    split sizes, the report (``report.json``) and the certified results (best first)."""

    out: Path
    steps: dict[str, str]
    report: dict[str, Any]
    certified: list[Any] = field(default_factory=list)


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


def _record(path: Path, what: str) -> Any:
    """A JSON record certify wrote (``split.json``, ``report.json``), read back on reuse."""
    return read_json(path, MAX_RECORD_BYTES, OutputError, what, finite=False)


class SplitStep(Step):
    """1. DATA's rows into the prior's data, S and the σ search's rows (module docstring);
    returns ``split``: the record of ``split.json``."""

    name, settings = "split", SplitSettings

    def outputs(self, ctx: Context) -> tuple[str, ...]:
        return ("prior.jsonl", "S.jsonl", "tune.jsonl", "split.json") + \
            (("test.jsonl",) if ctx.test_data is not None else ())

    def inputs(self, ctx: Context) -> list[str]:
        # the data's hash: the file's bytes are read (cheap) before deciding
        return [splits.file_sha256(ctx.data)] + ([splits.file_sha256(ctx.test_data)]
                                                 if ctx.test_data is not None else []) \
            + [SPLIT_RULE] + ([_fingerprint(ctx.cfg.tokenizer or ctx.base_dir)]
                              if ctx.cfg.duplicates == "drop" else [])

    def reuse(self, ctx: Context) -> dict[str, Any]:
        return self._said(ctx, _record(ctx.out / "split.json", "split record"))

    def run(self, ctx: Context) -> dict[str, Any]:
        s, out = ctx.settings(SplitSettings), ctx.out
        train = splits.read_labelled(ctx.data, s.text_column, s.label_column)
        test = (splits.read_labelled(ctx.test_data, s.text_column, s.label_column)
                if ctx.test_data is not None else None)
        # the duplicate-row policy (duplicates.py), before anything else reads the rows
        train, test, dup, rows_of_file = _distinct(ctx, s, train, test)
        # the split reads no label; the classes come from the prior's rows alone, and S is
        # only checked (no unseen class) and encoded after: no label of S reaches the prior
        prior_idx, bound_idx = splits.seeded_split(len(train.labels), s.prior_fraction, s.seed)
        classes = splits.class_names([train.labels[i] for i in prior_idx])
        splits.check_no_unseen([train.labels[i] for i in bound_idx], classes,
                               f"the bound sample S ({train.source}, seed {s.seed})")
        y = splits.encode(train.labels, classes, train.source)
        rng = np.random.default_rng(s.seed + 1)
        tune_idx = np.sort(rng.choice(prior_idx, min(s.tune_rows, len(prior_idx)),
                                      replace=False)) if s.tune_rows else prior_idx[:0]
        record: dict[str, Any] = {
            "data": train.source, "data_sha256": train.sha256, "rows": len(y),
            "duplicates": dup, "indices_are": "row numbers of DATA's file",
            "text_column": s.text_column, "label_column": s.label_column,
            "classes": classes, "seed": s.seed, "prior_fraction": s.prior_fraction,
            "rule": f"a permutation of the rows seeded by {s.seed} (no label read): its first "
                    f"round({s.prior_fraction}·n) rows to the prior's data, the rest to S; the "
                    "classes from the prior's rows alone (S checked for an unseen class); "
                    f"tune: rows of the prior's data, seed {s.seed + 1}"}
        for name, idx in (("prior", prior_idx), ("S", bound_idx), ("tune", tune_idx)):
            texts = [train.texts[i] for i in idx]
            splits.write_jsonl(out / f"{name}.jsonl", texts, y[idx])
            record[name] = {"n": len(idx), "indices": rows_of_file[idx].tolist(),
                            "sha256": splits.rows_sha256(texts, y[idx]),
                            "counts": np.bincount(y[idx], minlength=len(classes)).tolist()}
        if ctx.test_data is None:  # an earlier run's held-out rows are not this run's
            for stale in ("test.jsonl", "stats_model.json"):
                (out / stale).unlink(missing_ok=True)
        else:
            splits.check_no_unseen(test.labels, classes, f"the held-out set ({test.source})")
            ty = splits.encode(test.labels, classes, test.source)
            splits.write_jsonl(out / "test.jsonl", test.texts, ty)
            record["test"] = {"data": test.source, "data_sha256": test.sha256, "n": len(ty),
                              "sha256": splits.rows_sha256(test.texts, ty)}
        write_json_record(out / "split.json", record)
        return self._said(ctx, record)

    @staticmethod
    def _said(ctx: Context, record: dict[str, Any]) -> dict[str, Any]:
        sizes = {k: record[k]["n"] for k in ("prior", "S", "tune")}
        dup = record.get("duplicates") or {}
        if dup.get("policy") == "drop":
            t = dup.get("test")
            ctx.say(f"duplicates: dropped {dup['data']['dropped']} of DATA's "
                    f"{dup['data']['rows']} rows (copies of an earlier row; one copy of each "
                    "kept, chosen by the seed)" + (
                        f" and {t['dropped']} of the {t['rows']} held-out rows (rows of DATA)"
                        if t else "") + f", {option('duplicates', 'drop')}")
        ctx.say(f"split: {record['rows']} rows of {len(record['classes'])} classes → prior's "
                f"data {sizes['prior']}, bound sample S {sizes['S']} (seeded permutation, seed "
                f"{record['seed']}, no label read); σ search on {sizes['tune']} rows of the "
                "prior's data" + (f"; held-out {record['test']['n']}" if "test" in record
                                  else "; no held-out set"))
        from .run_plan import plan_text  # the plan, before anything slow

        ctx.say(plan_text(ctx.cfg, sizes, record.get("test", {}).get("n"), ctx.pretrained,
                          ctx.rates, ctx.rule))
        return {"split": record, "sizes": sizes}


def _distinct(ctx: Context, s: SplitSettings, train: splits.Labelled,
              test: splits.Labelled | None) -> tuple[Any, Any, dict[str, Any], np.ndarray]:
    """``(train, test, record, rows_of_file)``: the rows the split reads under the duplicate
    policy (:mod:`.duplicates`; ``refuse``: all of them, the pre-flight having refused any
    repeat), the policy's record (counts, rule, what is certified) and, for each row kept,
    its row number in DATA's file."""
    from .duplicates import keep_distinct, keep_unseen, record

    n, m = len(train.texts), (len(test.texts) if test is not None else None)
    if s.duplicates != "drop":
        return train, test, record(s.duplicates, n, n, m, m), np.arange(n)
    from ..measure.data.dataset_io import DataError
    from ..measure.data.hf import load_tokenizer
    from .preflight import row_keys

    tok = load_tokenizer(Path(ctx.cfg.tokenizer) if ctx.cfg.tokenizer else ctx.base_dir)
    keys = row_keys(train.texts, train.labels, tok, s.max_length)
    keep = keep_distinct(keys, s.seed)
    train = splits.subset(train, keep)
    if test is not None:
        test_keep = keep_unseen(row_keys(test.texts, test.labels, tok, s.max_length), keys)
        if not len(test_keep):
            raise DataError(
                f"{option('test_data', test.source)}: each of its {m} rows is a row of DATA "
                f"{train.source}; with {option('duplicates', 'drop')} no held-out row is "
                "left: give rows held out from DATA")
        test = splits.subset(test, test_keep)
    return train, test, record("drop", n, len(keep), m, test and len(test.texts)), keep


class PriorStep(Step):
    """2. The base fine-tuned on the prior's data (``prior/``); it never sees S."""

    name, settings = "prior", PriorSettings

    def outputs(self, ctx: Context) -> tuple[str, ...]:
        return ("prior",)

    def inputs(self, ctx: Context) -> list[Any]:
        """The base (its path, kind and files' fingerprint), the tokenizer folder's, the
        training loop, and the learning rates and epochs as filled in for the base's kind."""
        return [str(Path(ctx.base).resolve()), ctx.pretrained, _fingerprint(ctx.base),
                ctx.cfg.tokenizer and _fingerprint(ctx.cfg.tokenizer),
                "custom" if ctx.custom else "default", *ctx.rates]

    def run(self, ctx: Context) -> dict[str, Any]:
        from ..measure.data.hf import load_tokenizer
        from .heldout import read_jsonl
        from .train import build_classifier

        s = ctx.settings(PriorSettings)
        prior_lr, _, prior_epochs = ctx.rates
        tok = load_tokenizer(Path(ctx.cfg.tokenizer) if ctx.cfg.tokenizer else ctx.base_dir)
        model = build_classifier(ctx.base, ctx.found["split"]["classes"], s.seed, tok)
        texts, labels = read_jsonl(ctx.out / "prior.jsonl")
        start = "the pretrained base" if ctx.pretrained else \
            "a random initialisation of the config"
        ctx.say(f"prior: fine-tuning {start} on the prior's data ({len(texts)} rows, "
                f"{prior_epochs} epochs, lr {prior_lr:g}) on {ctx.device.type}")
        spec = TrainSpec("prior", prior_epochs, prior_lr, s.batch_size, s.max_length, s.seed,
                         ctx.device)
        model, how = trained(ctx.train_fn, ctx.custom, model, tok, texts, labels, spec,
                             ctx.progress)
        save_folder(model, tok, ctx.out / "prior", {"step": "prior", "key": ctx.keys[self.name],
                                                    "training": how})
        return {}


class PosteriorStep(Step):
    """3. The prior fine-tuned on S with a proximal pull toward it (``model/``)."""

    name, settings = "posterior", PosteriorSettings

    def outputs(self, ctx: Context) -> tuple[str, ...]:
        return ("model",)

    def run(self, ctx: Context) -> dict[str, Any]:
        import torch

        from .heldout import read_jsonl
        from .train import load_trained

        s = ctx.settings(PosteriorSettings)
        post_lr = ctx.rates[1]
        model, tok = load_trained(ctx.out / "prior")
        anchor = {n: p.detach().clone() for n, p in model.named_parameters()}
        texts, labels = read_jsonl(ctx.out / "S.jsonl")
        ctx.say(f"posterior: fine-tuning the prior on S ({len(texts)} rows, {s.post_epochs} "
                f"epoch(s), lr {post_lr:g}, proximal {s.proximal:g}·‖w − w_prior‖²)")
        spec = TrainSpec("posterior", s.post_epochs, post_lr, s.batch_size, s.max_length,
                         s.seed + 1, ctx.device, s.proximal, anchor)
        # the step's own seed (dropout): a resumed run trains as an uninterrupted one did
        torch.manual_seed(spec.seed)
        model, how = trained(ctx.train_fn, ctx.custom, model, tok, texts, labels, spec,
                             ctx.progress)
        save_folder(model, tok, ctx.out / "model", {"step": "posterior",
                                                    "key": ctx.keys[self.name],
                                                    "training": how})
        return {}


class MeasureStep(Step):
    """4. ``measure model/ --init prior/ --data S.jsonl --tune-data tune.jsonl``
    (``stats.json``; with the bound-trained posterior, ``posterior_bound/``). Besides its
    sub-record it reads the device and whether the split wrote σ-search rows (``tune_rows``,
    in the split's key, so in this one's through it)."""

    name, settings = "measure", MeasureSettings

    def outputs(self, ctx: Context) -> tuple[str, ...]:
        return ("stats.json", "posterior_bound", "posterior_subspace")

    def run(self, ctx: Context) -> dict[str, Any]:
        ctx.say(f"measure: model/ with {option('init', 'prior/')} {option('data', 'S.jsonl')} "
                f"{option('tune_data', 'tune.jsonl')} (σ search on the prior's data, Monte "
                "Carlo Gibbs risk on S)")
        for route, folder in (("bound", "posterior_bound"), ("subspace", "posterior_subspace")):
            if ctx.cfg.posterior != route:  # an earlier run's is not this one's
                remove_written(ctx.out / folder, ctx.say)
        m = ctx.settings(MeasureSettings)
        _measure(ctx.out, m, ctx.cfg.measure_options(
            str(ctx.out / "tune.jsonl") if ctx.cfg.tune_rows else None), ctx)
        return {}


class CompareStep(Step):
    """5. The certified rows, the test-set rows, the baseline and the held-out errors
    (``report.json``, ``stats_model.json``); returns ``report`` and ``certified``. It reads
    the measurement's ``max_length``, ``batch_size`` and ``seed``, which are in the measure
    step's key (so in this one's, through it)."""

    name, settings = "compare", CompareSettings

    def outputs(self, ctx: Context) -> tuple[str, ...]:
        return ("report.json", "stats_model.json")

    def inputs(self, ctx: Context) -> str:
        return REPORT_FORM

    def reuse(self, ctx: Context) -> dict[str, Any]:
        return {"report": _record(ctx.out / "report.json", "report"),
                "certified": claims.build(ctx.out / "stats.json", claims.Evidence())[0]}

    def run(self, ctx: Context) -> dict[str, Any]:
        from .heldout import measure_evidence

        ctx.say("compare: every certified entry on stats.json, with its floor; the test-set "
                "bounds; the Gibbs predictor on the held-out rows")
        m, out, record = ctx.settings(MeasureSettings), ctx.out, ctx.found["split"]
        ev = measure_evidence(out, "test" in record, m.max_length, m.batch_size, m.seed,
                              ctx.device, ctx.loaded)
        ev.disagreement = lambda test_error: _model_rows(out, m, ctx.device, test_error, ctx)
        ev.heldout_passes = ctx.settings(CompareSettings).heldout_draws
        certified, report = claims.build(out / "stats.json", ev)
        prior_lr, post_lr, prior_epochs = ctx.rates
        report.update({"sizes": ctx.found["sizes"], "n_test": record.get("test", {}).get("n"),
                       "test_error": ev.model_test.rate if ev.model_test else None,
                       "prior_test_error": ev.prior_test.rate if ev.prior_test else None,
                       "prior_error_on_S": ev.prior_on_S.rate if ev.prior_on_S else None,
                       "classes": record["classes"], "settings": asdict(ctx.cfg),
                       "learning_rates": {"prior": prior_lr, "posterior": post_lr},
                       "prior_epochs": prior_epochs,
                       "base": str(ctx.base), "pretrained": ctx.pretrained,
                       "training_loop": loop_record(ctx.custom),
                       "duplicates": record.get("duplicates"),
                       "plan_rule": ctx.rule,
                       "certifies": CERTIFIES})
        write_json_record(out / "report.json", report)
        return {"report": report, "certified": certified}


CHAIN = Chain((SplitStep(), PriorStep(), PosteriorStep(), MeasureStep(), CompareStep()))
STEPS = CHAIN.names


def certify(base: str | Path, data: str | Path, out: str | Path,
            test_data: str | Path | None = None, config: CertifyConfig | None = None, *,
            train: Callable[..., None] | None = None, progress: Progress | None = None,
            say: Callable[[str], None] | None = None) -> CertifyResult:
    """Run the five steps (module docstring; :data:`CHAIN`) into ``out`` and return the
    certified results.

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
    from .train import base_folder, has_weights, train_classifier

    cfg = config or CertifyConfig()
    say = say or (lambda m: None)
    device = resolve_device(cfg.device)  # a missing CUDA is refused before anything slow
    facts = preflight(base, data, test_data, cfg)  # files, base, labels, overlaps: first
    cfg, rule = cfg.resolve(facts)  # the counts left to the plan rule (plan_rule.py)
    ctx = Context(base, data, test_data, Path(out), cfg, device, say, progress,
                  train or train_classifier, train is not None)
    ctx.rule = rule
    ctx.base_dir, _ = base_folder(base)
    ctx.pretrained = has_weights(base) and Path(base).is_dir()
    ctx.rates = _rates(cfg, ctx.pretrained)
    # the folder is certify's own (run_folder.py): checked and marked before any write
    folder = RunFolder(ctx.out, STEPS, {"data": data, "test_data": test_data, "base": base,
                                        "tokenizer": cfg.tokenizer}, say)
    t0 = time.monotonic()
    CHAIN.run(ctx, folder)
    report = ctx.found["report"]
    report["seconds"] = round(time.monotonic() - t0, 1)
    return CertifyResult(ctx.out, dict(folder.status), report, ctx.found["certified"])


def _measure(out: Path, m: MeasureSettings, options: Any, ctx: Context) -> None:
    """Measure model/ on S (``options``: the data side's) with the stages the settings ``m``
    pick after the data side (:func:`picked_stages`: the compression, the bound-trained or
    the subspace posterior), model/ and prior/ from ``ctx.loaded``."""
    from ..measure.data.task_measure import measure_task

    stats = measure_task(str(out / "model"), str(out / "S.jsonl"), str(out / "prior"),
                         options, progress=ctx.progress, load=ctx.loaded.load,
                         stages=picked_stages(out, m, ctx))
    stats.save(out / "stats.json")


def picked_stages(out: Path, m: MeasureSettings, ctx: Context) -> list[Any]:
    """The stages certify's measure step adds after the data side's (:mod:`boundcalc.measure.
    data.stages`), as its settings ``m`` ask: the compression (``compress``), then the
    bound-trained or the subspace posterior (``posterior``)."""
    from .bound_posterior import check_posterior
    from .posterior_stages import BoundPosteriorStage, SubspacePosteriorStage

    check_posterior(m.posterior)
    picked: list[Any] = []
    if m.compress:  # on the model and the rows of S the measurement loaded
        from ..measure.compress.compression import CompressionStage
        from ..measure.compress.options import CompressOptions

        picked.append(CompressionStage(
            CompressOptions(select="delta", quantizer="kmeans", levels_grid=tuple(m.levels)),
            str(out / "S.jsonl"), str(out / "prior"),
            # it moved model/ to the CPU in float32: later steps read it afresh
            after=lambda: ctx.loaded.forget(["model"])))
    if m.posterior == "bound":
        picked.append(BoundPosteriorStage(out, m, ctx.device, ctx.progress, ctx.loaded))
    elif m.posterior == "subspace":
        picked.append(SubspacePosteriorStage(out, m, ctx.device, ctx.progress, ctx.loaded))
    return picked


def _model_rows(out: Path, m: MeasureSettings, device: Any, test_error: float | None,
                ctx: Context) -> list[dict[str, Any]]:
    """The rows that certify model/ itself through its Gibbs posterior, with a held-out set
    (its texts only): the Gibbs bound plus the disagreement of model/ with its posterior
    (:mod:`.model_rows`, which writes ``stats_model.json``); ``[]`` without one."""
    from .model_rows import model_rows

    return model_rows(out, device, max_length=m.max_length, batch_size=m.batch_size,
                      seed=m.seed, test_error=test_error, progress=ctx.progress,
                      loaded=ctx.loaded)
