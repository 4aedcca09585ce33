"""A byte-level GPT-2-style language model on the standard library's source, and certified bits
per predicted byte for it (``examples/language_model.py``): every byte of a chunk but its first,
which has no context, is predicted and scored (63 of the 64 bytes of a full chunk).

Tokens are bytes: a byte-level tokenizer saved with the model (``tokenizer.json``: byte b is
token b, no special tokens added, one padding token 256), so V = 257 and bits per token are bits
per byte. Data (:mod:`.stdlib_text`): the ``.py`` files of
the standard library, tests excluded, split by file (seeded) into

* ``prior``: the language model is trained on these files only (it never sees the pool); its
  weights are the prior centre / the reference the compression code is taken from;
* ``bound``: the **pool** of units: the files cut into consecutive ``chunk``-byte pieces (a cut
  inside a multi-byte UTF-8 character moves back to the character's start; the last, shorter
  piece of a file is dropped).
  S is ``n_bound`` chunks drawn from the pool i.i.d. uniformly with replacement, so the
  sampling assumption of the bounds is true by construction, and every certified number is
  about a chunk drawn uniformly from this pool (not about Python code in general). The pool's
  own value is computed exactly over all its chunks;
* ``heldout``: other files, never used for training, tuning or bounds; the held-out bits per
  byte are measured on a uniform sample of their chunks.

The model measured (``model/``) is the prior fine-tuned for a few steps on S.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from boundcalc.errors import BoundcalcError
from boundcalc.measure.data.lm_loss import token_logprob
from boundcalc.measure.device import resolve_device
from boundcalc.rounding import probability_text, upper_text
from .stdlib_text import (SPLITS, iid_draws, package_of, run_cli, split_by_file, stage,
                          stdlib_files, stdlib_root, write_json)

PAD = 256  # byte b is token b; 256 pads
VOCAB = 257


@dataclass
class LMConfig:
    """Sizes and training settings; the defaults run in minutes on 2 CPU cores."""

    seed: int = 0
    chunk: int = 64  # bytes per unit
    fractions: tuple[float, float, float] = (0.87, 0.03, 0.10)  # prior, bound pool, held-out
    n_bound: int = 1000  # |S|: i.i.d. draws from the pool
    n_test: int = 500  # held-out chunks evaluated (a uniform sample without replacement)
    max_files: int | None = None  # use a seeded subset of the files (reduced runs)
    n_embd: int = 128
    n_layer: int = 4
    n_head: int = 4
    train_steps: int = 1200
    batch: int = 32
    lr: float = 3e-3
    post_steps: int = 10
    post_lr: float = 1e-4
    device: str = "auto"  # where it trains and is measured: CUDA when present (--device)
    # what boundcalc measure is run with (fixed before S is drawn)
    smoothing: float = 0.01
    sigmas: tuple[float, ...] = (0.002,)
    draws: int = 4
    levels: str = "1,16"
    quantizer: str = "kmeans"
    compress: bool = True
    tune: bool = True  # --tune-data OUT/prior.jsonl: the per-group σ shape, free (disjoint from S)
    extra_flags: tuple[str, ...] = field(default_factory=tuple)
    # the bound-trained Gibbs posterior (fixed before S is drawn; they do not change the models)
    bound: bool = True
    bound_init: str = "prior"  # where μ starts: the prior (as PBB) or the fine-tuned model
    bound_epochs: int = 3
    bound_lr: float = 1e-3
    bound_draws: int = 16  # Monte Carlo passes over S (and over the held-out chunks)
    # the subspace Gibbs posterior around the prior (language_model_subspace.SubspaceLM)
    subspace: bool = True


# settings of measure and of the bound-trained posterior: an earlier build with other values
# of these is reused (they do not change the models)
AFTER_BUILD = ("tune", "bound", "bound_init", "bound_epochs", "bound_lr", "bound_draws",
               "subspace")


def model_config(cfg: "LMConfig") -> dict[str, Any]:
    """The configuration recorded with a build: every field but :data:`AFTER_BUILD`."""
    return {k: v for k, v in asdict(cfg).items() if k not in AFTER_BUILD}


# for a card: about 4.9 min of computation at 10 % of an H200's bf16 peak by the FLOP count of
# studies.lm_flops (29 PFLOP, 73 % of it the prior's training; benchmarks/plan_lm_presets.py)
FULL = dict(chunk=256, n_bound=20000, n_test=5000, n_embd=384, n_layer=6, n_head=6,
            train_steps=20000, batch=64, lr=1e-3, post_steps=50, draws=20)
# GPT-2 small's body (12 layers of width 768, 12 heads) on bytes: 85.4 M weights (GPT-2's own
# 124 M include a 38.6 M BPE embedding table; no BPE vocabulary ships offline, and bytes keep
# the bits per byte of every preset comparable). About 7 min of computation at 10 % of an
# H200's bf16 peak (studies.lm_flops), inside a 15-minute lease; compression off (k-means over
# 85 M weights runs on the host, uncounted by the plan)
GPT2 = dict(chunk=256, n_bound=5000, n_test=1000, n_embd=768, n_layer=12, n_head=12,
            train_steps=4000, batch=64, lr=6e-4, post_steps=20, draws=10, bound_epochs=1,
            bound_draws=8, compress=False)


def collect(cfg: LMConfig, root: str | Path | None = None) -> dict[str, Any]:
    """Files split by file (stratified by top-level package), their bytes, and the chunks.

    Returns ``{"files": {split: [...]}, "prior_bytes": uint8 array, "pool": int64 array
    (chunks × chunk token ids), "heldout": int64 array, "root": str}``."""
    root = Path(root) if root is not None else stdlib_root()
    files = stdlib_files(root)
    if cfg.max_files is not None:
        rng = np.random.default_rng(cfg.seed + 11)
        files = sorted(rng.choice(files, min(cfg.max_files, len(files)), replace=False).tolist())
    raw = {f: (root / f).read_bytes() for f in files}
    groups: dict[str, list[tuple[str, int]]] = {}
    for f in files:
        groups.setdefault(package_of(f), []).append((f, len(raw[f])))
    # strata are whole packages; single-file modules form one stratum together
    merged: dict[str, list[tuple[str, int]]] = {"<modules>": []}
    for k, v in groups.items():
        (merged.setdefault(k, []) if len(v) > 1 else merged["<modules>"]).extend(v)
    assign = split_by_file(merged, cfg.fractions, cfg.seed)
    out_files = {s: sorted(f for f in files if SPLITS[assign[f]] == s) for s in SPLITS}

    def chunks(names: list[str]) -> list[bytes]:
        return [c for f in names for c in cut(raw[f], cfg.chunk)]

    prior = np.frombuffer(b"".join(raw[f] for f in out_files["prior"]), dtype=np.uint8)
    return {"files": out_files, "prior_bytes": prior, "pool": chunks(out_files["bound"]),
            "heldout": chunks(out_files["heldout"]), "root": str(root)}


def cut(data: bytes, size: int) -> list[bytes]:
    """Consecutive pieces of at most ``size`` bytes; a cut inside a multi-byte UTF-8 character
    moves back to its first byte; the last piece (shorter than ``size``) is dropped. A file that
    is not UTF-8 gives no pieces."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return []
    out, start = [], 0
    while start + size <= len(data):
        end = start + size
        while end < len(data) and (data[end] & 0xC0) == 0x80:
            end -= 1
        out.append(data[start:end])
        start = end
    return out


def _read(root: str, rel: str) -> bytes:
    return (Path(root) / rel).read_bytes()


def encode(units: list[bytes]) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids (byte values, padded with 256 on the right) and the attention mask."""
    T = max((len(u) for u in units), default=0)
    ids = torch.full((len(units), T), PAD, dtype=torch.long)
    mask = torch.zeros((len(units), T), dtype=torch.long)
    for i, u in enumerate(units):
        ids[i, :len(u)] = torch.frombuffer(bytearray(u), dtype=torch.uint8).long()
        mask[i, :len(u)] = 1
    return ids, mask


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in character for every byte (what the ByteLevel pre-tokenizer
    of ``tokenizers`` produces)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def _gpt2(cfg: LMConfig):
    from transformers import GPT2Config, GPT2LMHeadModel

    c = GPT2Config(vocab_size=VOCAB, n_positions=cfg.chunk, n_embd=cfg.n_embd,
                   n_layer=cfg.n_layer, n_head=cfg.n_head, bos_token_id=None,
                   eos_token_id=None, pad_token_id=PAD, resid_pdrop=0.0, embd_pdrop=0.0,
                   attn_pdrop=0.0)
    return GPT2LMHeadModel(c)


def byte_tokenizer():
    """A fast tokenizer whose tokens are the bytes of the UTF-8 text (token id = byte value),
    with no special tokens added and ``<pad>`` = 256."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: b for b, c in _bytes_to_unicode().items()}
    t = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    t.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=t, pad_token="<pad>")


def _train(model, batches, steps: int, lr: float, warm: bool) -> None:
    """AdamW on the model's device (batches moved there); with ``warm``, a cosine schedule
    with warm-up and a progress line at least every 10 s (steps/s, ETA) and every fifth.

    On CUDA (issue 51): the forward and loss under bf16 autocast (weights, gradients and Adam's
    state stay float32), TF32 matmuls, the fused AdamW, batches copied without blocking; the
    loss is read back only on a progress line. On a CPU the loop is the float32 one it always
    was (same seed, same weights: ``tests/studies/test_language_model_train.py``)."""
    dev = next(model.parameters()).device
    cuda = dev.type == "cuda"
    t0 = last = time.monotonic()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0,
                            **({"fused": True} if cuda else {}))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: min(1.0, (i + 1) / 50) * (0.5 * (1 + math.cos(math.pi * i / steps)))
        if warm else 1.0)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
    model.train()
    for i in range(steps):
        x, m = (t.to(dev, non_blocking=True) for t in batches(i))
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
            loss = model(input_ids=x, attention_mask=m,
                         labels=x.masked_fill(m == 0, -100)).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        now = time.monotonic()
        if warm and ((i + 1) % max(steps // 5, 1) == 0 or now - last >= 10):
            last = now
            rate = (i + 1) / max(now - t0, 1e-9)
            stage(f"  step {i + 1}/{steps}: training loss {loss.item() / math.log(2):.3f} "
                  f"bits/byte ({rate:.1f} steps/s, ETA {(steps - i - 1) / rate:.0f} s)")
    model.eval()


def chunk_bits(model, units: list[bytes], batch: int = 64) -> np.ndarray:
    """Per unit: mean over its next-byte predictions of −log2 p (the float model, unsmoothed):
    bits per predicted byte (every byte but the first, which has no context)."""
    out = []
    dev = next(model.parameters()).device
    with torch.no_grad():
        for lo in range(0, len(units), batch):
            x, m = (t.to(dev) for t in encode(units[lo:lo + batch]))
            # float64 one row at a time, never the batch's whole vocabulary (issue 51)
            nll = -token_logprob(model(input_ids=x, attention_mask=m).logits[:, :-1], x[:, 1:])
            w = m[:, 1:].double()
            out.append(((nll * w).sum(1) / w.sum(1).clamp(min=1) / math.log(2)).cpu().numpy())
    return np.concatenate(out) if out else np.zeros(0)


def _write_jsonl(path: Path, units: list[bytes]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for u in units:
            fh.write(json.dumps({"text": u.decode("utf-8")}) + "\n")


def build(out: str | Path, cfg: LMConfig | None = None,
          root: str | Path | None = None) -> dict[str, Any]:
    """Collect, split, train and save under ``out``: ``prior/``, ``model/`` (HF folders with the
    byte tokenizer), ``S.jsonl`` (column ``text``: the bound sample), ``prior.jsonl`` (up to
    2000 chunks of every tenth prior-split file), ``splits.json``. Returns the
    held-out and pool bits per predicted byte of the model."""
    cfg = cfg or LMConfig()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stage("reading standard-library sources")
    data = collect(cfg, root)
    pool, held, prior = data["pool"], data["heldout"], data["prior_bytes"]
    if len(pool) == 0 or len(held) == 0 or len(prior) <= cfg.chunk:
        raise BoundcalcError("a split has no chunk; use more files or a shorter chunk")
    draw = iid_draws(len(pool), cfg.n_bound, cfg.seed + 1)
    S = [pool[i] for i in draw]
    _write_jsonl(out / "S.jsonl", S)
    # prior-split chunks in the same format: data disjoint from S, for choices made for free
    # (e.g. ``--tune-data prior.jsonl`` once measure has it)
    _write_jsonl(out / "prior.jsonl", [c for f in data["files"]["prior"][::10]
                                       for c in cut(_read(data["root"], f), cfg.chunk)][:2000])
    rng = np.random.default_rng(cfg.seed + 3)
    test_idx = np.sort(rng.choice(len(held), min(cfg.n_test, len(held)), replace=False))
    write_json(out / "splits.json", {
        "root": data["root"], "files": data["files"], "unit": f"{cfg.chunk}-byte chunk",
        "pool": f"every non-overlapping {cfg.chunk}-byte chunk of the bound-split files "
                f"({len(pool)} chunks)",
        "S": {"draws": draw.tolist(), "rule": f"{cfg.n_bound} i.i.d. uniform draws with "
                                              f"replacement from the pool, seed {cfg.seed + 1}"},
        "heldout": {"chunks": len(held), "evaluated": test_idx.tolist()},
        "config": model_config(cfg)})
    _write_jsonl(out / "heldout.jsonl", [held[i] for i in test_idx])
    stage(f"files: " + ", ".join(f"{s} {len(data['files'][s])}" for s in SPLITS)
          + f"; prior {len(prior) / 1e6:.2f} MB, pool {len(pool)} chunks of {cfg.chunk} bytes "
          f"(S = {cfg.n_bound} draws), held-out {len(held)} chunks ({len(test_idx)} evaluated)")
    torch.manual_seed(cfg.seed)
    model = _gpt2(cfg).to(resolve_device(cfg.device))  # trains where it is measured
    n_params = sum(p.numel() for p in model.parameters())
    tok = byte_tokenizer()
    gen = np.random.default_rng(cfg.seed + 5)
    prior_ids = prior.astype(np.int64)

    def prior_batch(_: int) -> tuple[torch.Tensor, torch.Tensor]:
        starts = gen.integers(0, len(prior_ids) - cfg.chunk, size=cfg.batch)
        x = torch.from_numpy(np.stack([prior_ids[s:s + cfg.chunk] for s in starts]))
        return x, torch.ones_like(x)

    stage(f"training the byte-level GPT-2 ({n_params:,} parameters) on the prior split, "
          f"{cfg.train_steps} steps of {cfg.batch}×{cfg.chunk} bytes")
    _train(model, prior_batch, cfg.train_steps, cfg.lr, warm=True)
    model.save_pretrained(out / "prior")
    tok.save_pretrained(out / "prior")
    gs = np.random.default_rng(cfg.seed + 2)

    def s_batch(_: int) -> tuple[torch.Tensor, torch.Tensor]:
        return encode([S[i] for i in gs.integers(0, len(S), size=cfg.batch)])

    stage(f"fine-tuning on S for {cfg.post_steps} steps (the posterior mean)")
    _train(model, s_batch, cfg.post_steps, cfg.post_lr, warm=False)
    model.save_pretrained(out / "model")
    tok.save_pretrained(out / "model")
    stage("held-out and pool bits per predicted byte")
    test = chunk_bits(model, [held[i] for i in test_idx])
    pool_bits = chunk_bits(model, pool)
    info = {"dir": str(out), "n_params": n_params, "n_test": len(test_idx),
            "n_pool": len(pool), "heldout_bits": float(test.mean()),
            "heldout_bits_stderr": float(test.std(ddof=1) / math.sqrt(len(test)))
            if len(test) > 1 else float("nan"),
            "pool_bits": float(pool_bits.mean()),
            "bound_bits": float(chunk_bits(model, S).mean()),
            "random_guess_bits": math.log2(VOCAB)}
    write_json(out / "build.json", info)
    return info


def measure_args(out: Path, cfg: LMConfig) -> list[str]:
    """The one place where the ``boundcalc measure`` flags are chosen (all fixed before S).

    With ``cfg.tune``: ``--tune-data OUT/prior.jsonl``, the per-group σ shape searched with the
    prior weights on prior-split chunks (disjoint from S: free), which the bound-trained
    posterior's prior N(prior, diag (c·ρ_g)²) is made of."""
    args = ["measure", str(out / "model"), "--init", str(out / "prior"),
            "--data", str(out / "S.jsonl"), "--max-length", str(cfg.chunk),
            "--batch-size", "64", "--draws", str(cfg.draws),
            "--hessian-probes", "0", "--smoothing", str(cfg.smoothing)]
    if cfg.device != "auto":
        args += ["--device", cfg.device]
    for s in cfg.sigmas:
        args += ["--sigma", str(s)]
    if cfg.tune:
        args += ["--tune-data", str(out / "prior.jsonl")]
    if cfg.compress:
        args += ["--compress", "delta", "--quantizer", cfg.quantizer, "--levels", cfg.levels]
    return [*args, *cfg.extra_flags, "-o", str(out / "stats.json"), "--json"]


def _entry_units() -> dict[str, str]:
    """Entry id → "bits" (an expected log-loss in bits: ``output = "loss"``) or "gibbs" (the
    Monte Carlo Gibbs curve, which for a language model is the smoothed per-token loss divided
    by ln(V/α)); entries on the top-1 next-token error are left out."""
    import boundcalc as bc

    out = {}
    for e in bc.load_registry():
        if e.output == "loss":
            out[e.id] = "bits"
        elif any(s.stat and ("gibbs_risk" in s.stat or "gibbs_subspace" in s.stat)
                 for s in e.symbols.values()):
            out[e.id] = "gibbs"
    return out


def minimum_by_sum(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The least of the certified bounds ``rows`` (one quantity: bits per predicted byte),
    with its honest δ: the least of k bounds on the same S holds when all k do, so with
    probability ≥ 1 − Σδ (the sum of the δ's of the rows it ranges over); each row alone
    holds at its own δ. ``text`` says so in one line (the value rounded up, 1 − Σδ down)."""
    bounds = [r for r in rows if r.get("is_bound") and r.get("value") is not None]
    if not bounds:
        return None
    best = min(bounds, key=lambda r: r["value"])
    total = float(sum(r["delta"] or 0.0 for r in bounds))
    holds = (f"holds with probability ≥ 1 − Σδ = {probability_text(total)}" if total < 1
             else f"needs Σδ = {total:g} ≥ 1: no guarantee")
    return {"id": best["id"], "value": best["value"], "k": len(bounds), "method": "sum",
            "delta_total": total, "rows": [r["id"] for r in bounds],
            "text": (f"minimum over {len(bounds)} certified rows with the sum of their δ's: "
                     f"{upper_text(best['value'])} bits per predicted byte ({best['id']}) {holds} "
                     f"(union bound over the {len(bounds)} rows)")}


def bound_posterior_step(out: Path, cfg: LMConfig,
                         root: str | Path | None = None) -> dict[str, Any]:
    """The bound-trained Gibbs posterior N(μ, diag σ_Q,g²) of the language model
    (:func:`boundcalc.measure.data.bound_posterior.add_bound_posterior`: trained on S on the
    PAC-Bayes bound with the smoothed log-loss / ln(V/α), prior N(prior/, diag (c·ρ_g)²) of
    measure's per-group σ search on prior-split chunks), added to ``stats.json`` for the row
    ``pac_bayes_kl_gaussian_learned_mc``; μ saved as ``posterior_bound/``. On the held-out
    chunks (never used for a choice): the same Gibbs predictor's smoothed bits per predicted
    byte (:func:`heldout_gibbs`) and the mean μ's plain bits, recorded under
    ``provenance.gibbs_learned.held_out`` and returned."""
    from boundcalc.measure.data.batch_rows import read_sized
    from boundcalc.measure.data.bound_posterior import BoundTraining, add_bound_posterior
    from boundcalc.measure.data.hf import load_task_model
    from boundcalc.measure.data.tune import sigma_groups
    from boundcalc.measure.threads import blas_threads, data_threads
    from boundcalc.stats import load_stats

    dev = resolve_device(cfg.device)
    stats = load_stats(out / "stats.json")
    tm, prior = (load_task_model(out / d, dev) for d in ("model", "prior"))
    if not (out / "heldout.jsonl").exists():  # a build from before the file was written
        held = collect(cfg, root)["heldout"]
        idx = json.loads((out / "splits.json").read_text())["heldout"]["evaluated"]
        _write_jsonl(out / "heldout.jsonl", [held[i] for i in idx])

    def read(name: str):
        return read_sized(str(out / name), tm, dev, max_length=cfg.chunk, given=64)

    spec = BoundTraining(sigma="scale", init=cfg.bound_init, epochs=cfg.bound_epochs,
                         lr_mu=cfg.bound_lr, seed=cfg.seed)
    stage(f"the bound-trained Gibbs posterior: {cfg.bound_epochs} epochs over S, μ from "
          f"{cfg.bound_init}, σ the prior's learned scale")
    with blas_threads(data_threads(tm.model, dev)):
        learned = add_bound_posterior(stats, tm, prior, read("S.jsonl"), dev, spec,
                                      draws=cfg.bound_draws, seed=cfg.seed + 40_000,
                                      prior_source=str(out / "prior"))
        sig = dict(zip(learned.groups, learned.sigma_post))
        per = heldout_gibbs(tm, read("heldout.jsonl"), dev,
                            {n: sig[g] for n, g in sigma_groups(tm.model).items()},
                            cfg.bound_draws, cfg.seed + 50_000, cfg.smoothing)
    per = per * math.log2(VOCAB / cfg.smoothing)  # bits per predicted byte
    units = [json.loads(line)["text"].encode("utf-8")
             for line in (out / "heldout.jsonl").read_text(encoding="utf-8").splitlines()]
    held = {"chunks": len(units), "gibbs_bits": float(per.mean()),
            "gibbs_bits_stderr": float(per.std(ddof=1) / math.sqrt(len(per))),
            "mean_bits": float(chunk_bits(tm.model, units).mean()),
            "note": f"the Gibbs predictor's smoothed loss (α = {cfg.smoothing}) in bits per "
                    f"predicted byte on the {len(units)} held-out chunks, each averaged over "
                    f"{cfg.bound_draws} weight draws (one draw per pass over all chunks), "
                    "± the standard error over the chunks; and the mean μ's plain bits: "
                    "estimates for the report, no choice uses them"}
    rec = stats.provenance["gibbs_learned"]
    rec["mean_model"], rec["held_out"] = str(out / "posterior_bound"), held
    tm.model.save_pretrained(out / "posterior_bound")
    byte_tokenizer().save_pretrained(out / "posterior_bound")
    stats.save(out / "stats.json")
    stage(f"bound-trained posterior: {learned.steps} steps in {learned.seconds:.0f} s; held-out "
          f"{held['gibbs_bits']:.3f} bits per predicted byte (Gibbs, smoothed), "
          f"{held['mean_bits']:.3f} (its mean μ)")
    return held


def heldout_gibbs(tm: Any, data: Any, device: Any, sigma: dict[str, float], draws: int,
                  seed: int, alpha: float) -> np.ndarray:
    """Per row of ``data``: its bounded (smoothed) loss averaged over ``draws`` weight draws
    θ + u, u ∼ N(0, diag σ²) (one draw per pass over all rows): the Gibbs predictor's loss on
    each held-out chunk, for an estimate with a standard error over the chunks."""
    from boundcalc.measure.data.data_pass import run_pass
    from boundcalc.measure.data.gibbs import perturbed

    gen = torch.Generator().manual_seed(seed)
    passes = []
    for _ in range(draws):
        with perturbed(tm.model, sigma, gen):
            passes.append(np.asarray(run_pass(tm, data, device, alpha=alpha,
                                              norms=False).bounded, dtype=float))
    return np.mean(passes, axis=0)


def _gibbs_about(entry: str, certifies: dict[str, Any] | None) -> str:
    """Which random model a Gibbs row certifies (its posterior), in words."""
    if certifies and certifies.get("about") == "subspace_posterior":
        return ("the subspace Gibbs posterior N(z, s_Q² I) on rank-r adapters of the prior's "
                "blocks, z and s_Q trained on S (a random model around prior/, not model/)")
    if certifies and certifies.get("about") == "bound_posterior":
        return ("the bound-trained Gibbs posterior N(μ, diag σ_Q,g²): μ and σ trained on S on "
                "the PAC-Bayes bound (posterior_bound/ holds μ; a random model)")
    if "groups" in entry:
        return ("the Gibbs posterior N(w, diag σ_g²) around the fine-tuned weights model/, σ_g "
                "searched per group (a random model)")
    return "the Gibbs posterior N(w, σ²I) around the fine-tuned weights model/ (a random model)"


def run(out: str | Path, cfg: LMConfig | None = None,
        root: str | Path | None = None, reuse: bool = False) -> dict[str, Any]:
    """Build (or, with ``reuse``, read ``build.json`` of an earlier build with the same
    configuration), then ``boundcalc measure`` and ``boundcalc compare``; writes
    ``report.json``."""
    from .text_classifier import _reused

    cfg = cfg or LMConfig()
    out = Path(out)
    info = _reused(out, model_config(cfg)) if reuse else None
    info = info or build(out, cfg, root)
    stage(f"held-out {info['heldout_bits']:.3f} ± {info['heldout_bits_stderr']:.3f} bits per "
          f"predicted byte "
          f"({info['n_test']} chunks); pool {info['pool_bits']:.3f} (exact, {info['n_pool']} "
          f"chunks); S {info['bound_bits']:.3f}; random guess log2 {VOCAB} = "
          f"{info['random_guess_bits']:.3f}")
    run_cli(measure_args(out, cfg), "measure")
    held_gibbs = bound_posterior_step(out, cfg, root) if cfg.bound else None
    from .language_model_subspace import baseline, subspace_step

    held_sub = subspace_step(out, cfg, VOCAB) if cfg.subspace else None
    rows = json.loads(run_cli(["compare", "--stats", str(out / "stats.json"), "--json"],
                              "compare"))
    stats = json.loads((out / "stats.json").read_text())
    units = _entry_units()
    to_bits = math.log2(VOCAB / cfg.smoothing)
    report: dict[str, Any] = {
        "unit": "predicted byte",
        "unit_note": "bits per predicted byte: every byte of a chunk but its first, which has "
                     f"no context and is not scored ({cfg.chunk - 1} of {cfg.chunk} bytes of a "
                     "full chunk); the held-out, pool and S values count the same bytes",
        "random_guess_bits": info["random_guess_bits"],
        "heldout_bits": info["heldout_bits"], "heldout_bits_stderr": info["heldout_bits_stderr"],
        "pool_bits": info["pool_bits"], "bound_bits": info["bound_bits"], "n": cfg.n_bound,
        "n_test": info["n_test"], "n_pool": info["n_pool"], "n_params": info["n_params"],
        "sampling": f"units are {cfg.chunk}-byte chunks; the pool is every non-overlapping "
                    "chunk of the bound-split files; S is drawn from it i.i.d. uniformly with "
                    "replacement; every certified value is about a chunk drawn uniformly from "
                    "that pool",
        "certified": [], "certified_other": [], "certified_other_model": [],
        "baseline": baseline(out, cfg.smoothing, VOCAB, resolve_device(cfg.device))}
    for r in sorted(rows["certified"], key=lambda r: r["value"] if r["value"] is not None
                    else math.inf):
        row = {k: r.get(k) for k in ("id", "value", "label", "delta", "parameters", "is_bound",
                                     "floor", "vacuous", "vacuous_against")}
        c = r.get("certifies")
        row["about"] = c["about"] if c else "measured"
        if c:
            row["certifies"] = "the quantized model: " + c["text"]
        if units.get(r["id"]) == "bits":
            row["note"] = "smoothed log-loss of the quantized model, bits per predicted byte"
            report["certified" if row["about"] == "measured"
                   else "certified_other_model"].append(row)
        elif units.get(r["id"]) == "gibbs" and r["value"] is not None:
            row["value_normalized"] = r["value"]
            row["value"] = r["value"] * to_bits
            row["certifies"] = _gibbs_about(r["id"], c)
            held_row = {"bound_posterior": held_gibbs,
                        "subspace_posterior": held_sub}.get(row["about"])
            if held_row is not None:
                row["heldout_bits"] = held_row["gibbs_bits"]
                row["heldout_bits_stderr"] = held_row["gibbs_bits_stderr"]
            row["note"] = (f"Gibbs (noisy) model's smoothed loss (α = {cfg.smoothing}) divided "
                           f"by ln(V/α), times log2(V/α) = {to_bits:.3f}: bits per predicted "
                           f"byte")
            report["certified"].append(row)
        else:
            row["note"] = "top-1 next-byte error (a probability), not bits"
            report["certified_other" if row["about"] == "measured"
                   else "certified_other_model"].append(row)
    report["certified"].sort(key=lambda r: r["value"] if r["value"] is not None else math.inf)
    report["minimum"] = minimum_by_sum(report["certified"])
    comp = stats.get("provenance", {}).get("compression")
    if comp:
        report["compression"] = {"levels": int(stats["scalars"]["quant_levels"]["value"]),
                                 "code_bits": comp["code"]["total_bits"],
                                 "per_level": comp["per_level"]}
    write_json(out / "report.json", report)
    return report
