"""Trauger & Tewari's sparse-majority experiment, ported from the official Keras code to torch.

Setup (norm_bounds.md §6.3, ``traugerjacob/Transformer-Gen-Bounds/run_experiment.py`` @ 30e70de):
s = 9 relevant positions drawn from range(T); i.i.d. uniform bit strings; label = majority of the
9 relevant bits; tokens ``zero``/``one``/``CLS`` drawn U[−1,1]^64, Gram–Schmidt orthogonalised,
scaled to unit ℓ1 norm; sinusoidal PE ``sin/cos(j / 10000^(i/64))`` on all T+1 positions; the
model of :class:`~.tiny_transformers.SparseMajorityTransformer`; BCE-with-logits on one-hot
labels; SGD(lr 0.01, momentum 0.9) with ``lr ← max(0.001, 0.999·lr)`` at every epoch start;
stop at the first epoch whose running training accuracy is 1.0; keep the weights with the best
validation (= test-set) loss. Reported: per-tensor entrywise ℓ1 norms and their sum, train/test
accuracy and loss, and the gaps.

Two training recipes (:data:`RECIPES`):

* ``official``: the optimiser, schedule, batch size and epoch cap above, unchanged;
* ``fast``: a labelled deviation for CPU-sized runs, where the official schedule needs thousands
  of epochs before accuracy leaves chance level: full-batch Adam (lr 3·10⁻³, β = (0.9, 0.9),
  constant lr), epoch cap 20,000. Data, model, initialisation, loss, stopping rule and
  checkpoint rule are the official ones. Checked to reach training accuracy 1.0 on 12 seeds ×
  T ∈ {10, 20, 40} within 6,000 epochs.

Deviations of both recipes, all documented in the study report:
* random numbers come from seeded torch/numpy generators, not TF's global state;
* ``accuracy`` is argmax (categorical) accuracy. Keras 2.x resolves ``metrics=['accuracy']`` from
  the shapes (2-dim one-hot targets and 2-dim outputs → categorical accuracy), not from the loss;
* at reduced scale the epoch count is capped and the test set is smaller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

from boundcalc.errors import BoundcalcError
from .tiny_transformers import KerasSGD, SparseMajorityTransformer

EMBED_DIM = 64
SPARSITY = 9
HEADS = 2
EDELMAN_GAMMA = 1.0  # margin of the Edelman rate, fixed before any run


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------

def orthogonal_token_embeddings(rng: np.random.Generator, d: int = EMBED_DIM
                                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``zero, one, cls`` as in the official code: U[−1,1]^d, Gram–Schmidt (one ⟂ zero; cls ⟂ zero,
    then ⟂ the orthogonalised one), each scaled to unit ℓ1 norm."""
    zero = rng.uniform(-1, 1, d)
    one = rng.uniform(-1, 1, d)
    one = one - one @ zero * zero / (zero @ zero)
    cls = rng.uniform(-1, 1, d)
    cls = cls - cls @ zero * zero / (zero @ zero)
    cls = cls - cls @ one * one / (one @ one)
    return tuple(v / np.abs(v).sum() for v in (zero, one, cls))  # type: ignore[return-value]


def positional_encoding(n_positions: int, d: int = EMBED_DIM) -> np.ndarray:
    """``pe[j, i] = sin(j / 10000^(i/d))`` for even i, ``cos(...)`` for odd i (exponent i/d, as the
    official code writes it, not the usual 2⌊i/2⌋/d)."""
    j = np.arange(n_positions)[:, None]
    i = np.arange(d)[None, :]
    angle = j / 10000.0 ** (i / d)
    return np.where(i % 2 == 0, np.sin(angle), np.cos(angle))


@dataclass
class SparseMajorityData:
    """Bit strings, labels and the fixed token/position embeddings of one run."""

    T: int
    relevant: np.ndarray            # the s relevant positions
    bits: np.ndarray                # (N, T) int8
    labels: np.ndarray              # (N,) int64
    tokens: np.ndarray              # (3, d): zero, one, cls
    pe: np.ndarray                  # (T+1, d)
    n_train: int

    def embed(self, rows: np.ndarray | slice, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Embedded sequences ``(len(rows), T+1, d)``: token embedding + PE, CLS last."""
        b = self.bits[rows]
        seq = np.concatenate([b, np.full((b.shape[0], 1), 2, dtype=b.dtype)], axis=1)
        return torch.as_tensor(self.tokens[seq] + self.pe[None], dtype=dtype)

    def ids(self, rows: np.ndarray | slice) -> torch.Tensor:
        """Token ids ``(len(rows), T+1)``: the bits, then 2 (CLS)."""
        b = self.bits[rows]
        seq = np.concatenate([b, np.full((b.shape[0], 1), 2, dtype=b.dtype)], axis=1)
        return torch.as_tensor(seq, dtype=torch.long)

    @property
    def train_rows(self) -> slice:
        return slice(0, self.n_train)

    @property
    def test_rows(self) -> slice:
        return slice(self.n_train, self.bits.shape[0])

    def max_token_l2(self) -> float:
        """max_t ‖x_t‖₂ over every token any sequence can contain (the input bound B_X)."""
        worst = 0.0
        for j in range(self.T + 1):
            for tok in ((0, 1) if j < self.T else (2,)):
                worst = max(worst, float(np.linalg.norm(self.tokens[tok] + self.pe[j])))
        return worst


def make_data(T: int, n_train: int, n_test: int, seed: int, s: int = SPARSITY,
              d: int = EMBED_DIM) -> SparseMajorityData:
    """One run's data, drawn in the official order: relevant positions, bits, embeddings."""
    if s % 2 != 1:
        raise BoundcalcError(f"sparse majority: s must be odd, got {s}")
    if T < s:
        raise BoundcalcError(f"sparse majority: sequence length T={T} is below s={s}")
    rng = np.random.default_rng(seed)
    relevant = rng.choice(T, s, replace=False)
    bits = rng.integers(0, 2, size=(n_train + n_test, T), dtype=np.int8)
    tokens = np.stack(orthogonal_token_embeddings(rng, d))
    labels = (bits[:, relevant].sum(1) >= s / 2).astype(np.int64)
    return SparseMajorityData(T, relevant, bits, labels, tokens, positional_encoding(T + 1, d),
                              n_train)


# ---------------------------------------------------------------------------------------------
# training: the Keras loop of the official script, with the official or the fast recipe
# ---------------------------------------------------------------------------------------------

@dataclass
class TrainConfig:
    """One training recipe. ``batch_size=None`` means full batch; the learning rate is set to
    ``max(lr_floor, lr_decay · lr)`` at the start of every epoch (Keras' schedule callback)."""

    recipe: str = "official"
    optimizer: str = "keras_sgd"          # "keras_sgd" (momentum) or "adam"
    lr: float = 0.01
    momentum: float = 0.9                 # keras_sgd only
    betas: tuple[float, float] = (0.9, 0.999)   # adam only
    lr_decay: float = 0.999
    lr_floor: float = 0.001
    batch_size: int | None = 128
    max_epochs: int = 200_000
    eval_batch: int = 4096


RECIPES: dict[str, TrainConfig] = {
    "official": TrainConfig(),
    "fast": TrainConfig(recipe="fast", optimizer="adam", lr=3e-3, betas=(0.9, 0.9),
                        lr_decay=1.0, lr_floor=0.0, batch_size=None, max_epochs=20_000),
}


def recipe(name: str, **overrides: Any) -> TrainConfig:
    """A copy of the named recipe with some fields replaced (``None`` values are ignored)."""
    from dataclasses import replace

    if name not in RECIPES:
        raise BoundcalcError(f"sparse majority: unknown recipe {name!r} "
                             f"(choose from {', '.join(RECIPES)})")
    return replace(RECIPES[name], **{k: v for k, v in overrides.items() if v is not None})


@dataclass
class TrainOutcome:
    """How training ended. The model holds the best-validation weights. ``final_state`` holds
    the weights of the last epoch: with full-batch training and the stop rule fired, those at
    its start (the running accuracy is theirs, so they fit the training set exactly); otherwise
    those at its end (Keras' running accuracy over mini-batches measures no single weight
    vector)."""

    epochs: int
    reached_full_train_accuracy: bool
    best_epoch: int
    history: dict[str, list[float]] = field(default_factory=dict)
    final_state: dict[str, torch.Tensor] | None = None


def _make_optimizer(model: SparseMajorityTransformer, cfg: TrainConfig):
    if cfg.optimizer == "keras_sgd":
        return KerasSGD(model.parameters(), cfg.lr, cfg.momentum)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=cfg.lr, betas=cfg.betas)
    raise BoundcalcError(f"sparse majority: unknown optimizer {cfg.optimizer!r}")


def _set_lr(opt, lr: float) -> None:
    if isinstance(opt, KerasSGD):
        opt.lr = lr
    else:
        for group in opt.param_groups:
            group["lr"] = lr


def _fixed_embeddings(data: SparseMajorityData) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.as_tensor(data.tokens, dtype=torch.float32),
            torch.as_tensor(data.pe, dtype=torch.float32))


def _loss_acc_ids(model: SparseMajorityTransformer, ids: torch.Tensor, labels: torch.Tensor,
                  tokens: torch.Tensor, pe: torch.Tensor, batch: int) -> tuple[float, float]:
    total_loss, correct = 0.0, 0
    with torch.no_grad():
        for lo in range(0, ids.shape[0], batch):
            logits = model.forward_ids(ids[lo:lo + batch], tokens, pe)
            y = labels[lo:lo + batch]
            onehot = F.one_hot(y, 2).to(logits.dtype)
            total_loss += float(F.binary_cross_entropy_with_logits(logits, onehot,
                                                                   reduction="sum")) / 2
            correct += int((logits.argmax(1) == y).sum())
    return total_loss / ids.shape[0], correct / ids.shape[0]


def _loss_acc(model: SparseMajorityTransformer, data: SparseMajorityData, rows: slice,
              batch: int) -> tuple[float, float]:
    """Mean BCE-with-logits on one-hot labels and argmax accuracy over ``rows``."""
    idx = np.arange(data.bits.shape[0])[rows]
    return _loss_acc_ids(model, data.ids(idx), torch.as_tensor(data.labels[idx]),
                         *_fixed_embeddings(data), batch)


def train(model: SparseMajorityTransformer, data: SparseMajorityData, cfg: TrainConfig,
          seed: int) -> TrainOutcome:
    """Keras ``fit`` of the official script: shuffled mini-batches, LR schedule at epoch start,
    running training accuracy, best-``val_loss`` checkpoint (reloaded at the end), stop at the
    first epoch with training accuracy 1.0. The optimiser, learning rate, schedule and batch
    size come from ``cfg`` (the official or the fast recipe)."""
    gen = torch.Generator().manual_seed(seed)
    opt = _make_optimizer(model, cfg)
    n = data.n_train
    batch = n if cfg.batch_size is None else cfg.batch_size
    lr = cfg.lr
    best_loss, best_state, best_epoch = math.inf, None, -1
    hist: dict[str, list[float]] = {"train_acc": [], "val_loss": [], "lr": []}
    reached = False
    epoch = 0
    tokens, pe = _fixed_embeddings(data)
    ids_train = data.ids(data.train_rows)
    y_train = torch.as_tensor(data.labels[data.train_rows])
    ids_val = data.ids(data.test_rows)
    y_val = torch.as_tensor(data.labels[data.test_rows])
    full_batch = batch >= n
    start_state: dict[str, torch.Tensor] | None = None
    for epoch in range(1, cfg.max_epochs + 1):
        lr = max(cfg.lr_floor, cfg.lr_decay * lr)
        _set_lr(opt, lr)
        perm = torch.randperm(n, generator=gen)
        correct = 0
        if full_batch:  # the weights whose training accuracy this epoch's running accuracy is
            start_state = {k: t.detach().clone() for k, t in model.state_dict().items()}
        for lo in range(0, n, batch):
            sel = perm[lo:lo + batch]
            logits = model.forward_ids(ids_train[sel], tokens, pe)
            y = y_train[sel]
            loss = F.binary_cross_entropy_with_logits(logits, F.one_hot(y, 2).to(logits.dtype))
            opt.zero_grad()
            loss.backward()
            opt.step()
            correct += int((logits.detach().argmax(1) == y).sum())
        train_acc = correct / n
        val_loss, _ = _loss_acc_ids(model, ids_val, y_val, tokens, pe, cfg.eval_batch)
        hist["train_acc"].append(train_acc)
        hist["val_loss"].append(val_loss)
        hist["lr"].append(lr)
        if val_loss < best_loss:
            best_loss, best_epoch = val_loss, epoch
            best_state = {k: t.detach().clone() for k, t in model.state_dict().items()}
        if train_acc == 1.0:
            reached = True
            break
    if reached and start_state is not None:
        final_state = start_state
    else:
        final_state = {k: t.detach().clone() for k, t in model.state_dict().items()}
    if best_state is not None:
        model.load_state_dict(best_state)
    return TrainOutcome(epoch, reached, best_epoch, hist, final_state)


# ---------------------------------------------------------------------------------------------
# norms and registry quantities
# ---------------------------------------------------------------------------------------------

def weight_norms(model: SparseMajorityTransformer) -> dict[str, Any]:
    """Entrywise ℓ1 of every trainable tensor (Keras names) and their sum, as the official code
    reports; spectral, Frobenius and (2,1) norms of every matrix and of the per-head products
    QK_h = W_Q,hᵀ W_K,h / √key_dim and Ṽ_h = (W_O,h W_V,h)ᵀ, via :mod:`boundcalc.measure.weights.spectra`."""
    from boundcalc.measure.weights.spectra import matrix_stats, product_stats

    l1 = {name: float(p.detach().double().abs().sum()) for name, p in model.named_tensors_keras()}
    mats = {}
    for name in ("q", "k", "v", "o", "dense", "head"):
        W = getattr(model, name).weight.detach().double()
        stats, _ = matrix_stats(W)
        mats[name] = {k: stats[k] for k in ("spectral", "frobenius", "norm_21", "norm_11")}
    h, kd, d = model.heads, model.key_dim, model.d
    q = model.q.weight.detach().double().view(h, kd, d) / math.sqrt(kd)
    k = model.k.weight.detach().double().view(h, kd, d)
    v = model.v.weight.detach().double().view(h, kd, d)
    ot = model.o.weight.detach().double().T.reshape(h, kd, d)
    per_head = {"QK": [s for s, _ in product_stats(q, k)], "V": [s for s, _ in product_stats(v, ot)]}
    return {"l1": l1, "l1_sum": float(sum(l1.values())),
            "l1_bias": float(sum(v for n, v in l1.items() if n.endswith("bias"))),
            "matrices": mats,
            "heads": {t: [{k: s[k] for k in ("spectral", "frobenius", "norm_21")} for s in lst]
                      for t, lst in per_head.items()}}


def margins(model: SparseMajorityTransformer, data: SparseMajorityData, rows: slice) -> np.ndarray:
    """Binary margins logit_y − logit_{1−y}."""
    idx = np.arange(data.bits.shape[0])[rows]
    tokens, pe = _fixed_embeddings(data)
    with torch.no_grad():
        logits = model.forward_ids(data.ids(idx), tokens, pe).double().numpy()
    y = data.labels[idx]
    return logits[np.arange(idx.size), y] - logits[np.arange(idx.size), 1 - y]


def edelman_norm_factor(norms: dict[str, Any], b_x: float) -> float:
    """C_norms supplied to ``edelman_cor45_rate`` (whose exact factor is [NF]): the value-path
    Lipschitz product B_X · Σ_h ‖Ṽ_h‖₂ · ‖W_dense‖₂ · ‖W_head‖₂. Our choice, stated in the report;
    it omits the QK and (2,1) terms of Edelman et al.'s Theorem 4.3."""
    mats = norms["matrices"]
    v_sum = sum(h["spectral"] for h in norms["heads"]["V"])
    return b_x * v_sum * mats["dense"]["spectral"] * mats["head"]["spectral"]


def registry_quantities(norms: dict[str, Any], *, T: int, m: int, b_x: float,
                        train_margins: np.ndarray, registry=None) -> dict[str, Any]:
    """Evaluate the Trauger–Tewari ℓ1 proxy and the Edelman rate through the registry."""
    import boundcalc as bc

    reg = registry or bc.load_registry()
    mats = norms["matrices"]
    tt = bc.compute("trauger_tewari_l11_sum", registry=reg, values={
        "L": 1, "n11_q": [mats["q"]["norm_11"]], "n11_k": [mats["k"]["norm_11"]],
        "n11_v": [mats["v"]["norm_11"]], "n11_o": [mats["o"]["norm_11"]],
        "n11_in": [mats["dense"]["norm_11"]], "n11_out": [mats["head"]["norm_11"]]})
    c_norms = edelman_norm_factor(norms, b_x)
    emp = float(np.mean(train_margins < EDELMAN_GAMMA))
    ed = bc.compute("edelman_cor45_rate", registry=reg, values={
        "emp_margin_risk": emp, "C_norms": c_norms, "m": m, "T": T + 1},
        params={"gamma": EDELMAN_GAMMA})
    return {"trauger_tewari": ed_summary(tt), "edelman": ed_summary(ed),
            "edelman_C_norms": c_norms, "edelman_emp_margin_risk": emp}


def ed_summary(r) -> dict[str, Any]:
    """The fields of a registry Result the study keeps."""
    return {"id": r.id, "kind": r.kind, "label": r.label, "value": r.value,
            "terms": dict(r.terms)}


# ---------------------------------------------------------------------------------------------
# one run and the whole study
# ---------------------------------------------------------------------------------------------

@dataclass
class StudyConfig:
    T_values: tuple[int, ...] = (10, 20, 40)
    runs: int = 1
    n_train: int = 300
    n_test: int = 10_000
    seed: int = 0
    train: TrainConfig = field(default_factory=TrainConfig)   # the official recipe


def evaluate_model(model: SparseMajorityTransformer, data: SparseMajorityData, *, m: int,
                   eval_batch: int = 4096, registry=None) -> dict[str, Any]:
    """Train/test accuracy and loss, the gaps, the norms and the registry quantities of the
    model's current weights."""
    tr_loss, tr_acc = _loss_acc(model, data, data.train_rows, eval_batch)
    te_loss, te_acc = _loss_acc(model, data, data.test_rows, eval_batch)
    norms = weight_norms(model)
    reg = registry_quantities(norms, T=data.T, m=m, b_x=data.max_token_l2(),
                              train_margins=margins(model, data, data.train_rows),
                              registry=registry)
    return {"train_acc": tr_acc, "test_acc": te_acc, "train_loss": tr_loss,
            "test_loss": te_loss, "acc_gap": tr_acc - te_acc, "loss_gap": te_loss - tr_loss,
            "norms": norms, "registry": reg}


def run_one(T: int, run: int, cfg: StudyConfig, registry=None) -> dict[str, Any]:
    """Data, model, training, evaluation, norms and registry quantities of one (T, run).

    The top-level numbers are those of the best-validation checkpoint (the official protocol);
    ``at_stop`` holds the same numbers for ``TrainOutcome.final_state``, the weights of the
    epoch where the stopping rule (training accuracy 1.0) fired, if it did."""
    seed = cfg.seed * 1_000_003 + T * 1009 + run
    data = make_data(T, cfg.n_train, cfg.n_test, seed)
    torch.manual_seed(seed)
    model = SparseMajorityTransformer(EMBED_DIM, HEADS, EMBED_DIM)
    model.keras_init(torch.Generator().manual_seed(seed + 1))
    outcome = train(model, data, cfg.train, seed + 2)
    kw = {"m": cfg.n_train, "eval_batch": cfg.train.eval_batch, "registry": registry}
    checkpoint = evaluate_model(model, data, **kw)
    model.load_state_dict(outcome.final_state)
    at_stop = evaluate_model(model, data, **kw)
    return {"T": T, "run": run, "seed": seed, "relevant": data.relevant.tolist(),
            "epochs": outcome.epochs, "best_epoch": outcome.best_epoch,
            "reached_full_train_accuracy": outcome.reached_full_train_accuracy,
            **checkpoint, "B_X": data.max_token_l2(), "at_stop": at_stop,
            "history": outcome.history}


def run_study(cfg: StudyConfig, progress: Callable[[str], None] | None = None,
              registry=None) -> list[dict[str, Any]]:
    """Every (T, run) of the study, in order."""
    import boundcalc as bc

    registry = registry or bc.load_registry()
    out = []
    for T in cfg.T_values:
        for run in range(cfg.runs):
            if progress:
                progress(f"T={T} run {run + 1}/{cfg.runs}")
            out.append(run_one(T, run, cfg, registry))
    return out
