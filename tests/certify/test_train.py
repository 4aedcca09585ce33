"""certify's training loop: the same weights as the plain loop it replaced (a tokenizer call
per batch, the proximal term summed into the loss by autograd), no host synchronisation per
step, the tokenized batches equal to the tokenizer's own, the rows per batch on a card by
hand, and the held-out error counted by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests._certify_helpers import synthetic_rows

CPU = torch.device("cpu")


def _tokenizer():
    from boundcalc.measure.data.hf import load_tokenizer
    from tests._measure_helpers import minilm_path

    return load_tokenizer(minilm_path())


def _model(seed=0, dropout=0.1):
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=_tokenizer().vocab_size, hidden_size=16, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=64,
                     num_labels=2, hidden_dropout_prob=dropout,
                     attention_probs_dropout_prob=dropout)
    return BertForSequenceClassification(cfg)


def _rows(n, seed=0):
    rows = synthetic_rows(n, seed)
    return [t for t, _ in rows], [int(lab == "sport") for _, lab in rows]


def _plain_loop(model, tok, texts, labels, epochs, lr, batch, max_length, seed, proximal,
                anchor):
    """The loop as it was written before: the tokenizer per batch, the pull as a Python sum
    over every parameter tensor inside the loss, Adam."""
    y = torch.tensor(labels)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(len(y), generator=gen).tolist()
        for lo in range(0, len(y), batch):
            rows = perm[lo:lo + batch]
            enc = tok([texts[i] for i in rows], padding=True, truncation=True,
                      max_length=max_length, return_tensors="pt")
            loss = torch.nn.functional.cross_entropy(model(**enc).logits, y[rows])
            if anchor is not None:
                loss = loss + proximal * sum((p - anchor[n]).square().sum()
                                             for n, p in model.named_parameters())
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()


@pytest.mark.parametrize("proximal", [0.0, 1.0, 0.3])
def test_same_weights_as_the_plain_loop(proximal):
    from boundcalc.certify.train import TrainSpec, train_classifier
    from boundcalc.measure.threads import blas_threads, data_threads

    tok = _tokenizer()
    texts, labels = _rows(40)
    start = _model()
    anchor = ({n: p.detach() + 0.01 * torch.randn_like(p) for n, p in start.named_parameters()}
              if proximal else None)
    ref, new = _model(), _model()
    new.load_state_dict(ref.state_dict())
    torch.manual_seed(5)  # dropout draws from the global generator in both loops
    with blas_threads(data_threads(ref, CPU)):  # as train_classifier: sums in one order
        _plain_loop(ref, tok, texts, labels, 2, 1e-2, 16, 20, 3, proximal, anchor)
    torch.manual_seed(5)
    how = train_classifier(new, tok, texts, labels,
                           TrainSpec("posterior" if proximal else "prior", 2, 1e-2, 16, 20, 3,
                                     CPU, proximal, anchor))
    assert how["precision"] == "fp32" and how["batch_size"] == 16
    assert how["steps"] == 2 * math.ceil(40 / 16)
    for (n, a), b in zip(ref.state_dict().items(), new.state_dict().values()):
        assert torch.equal(a, b), n  # the same float32 numbers, not just close


class _Syncs(TorchDispatchMode):
    """Counts the operators that make the host wait for a device: a scalar read back, a
    data-dependent shape, a comparison to a Python bool, a copy between devices; those called
    from transformers' mask preparation apart."""

    WAITS = {"_local_scalar_dense", "nonzero", "is_nonzero", "equal", "masked_select",
             "unique", "_unique2", "_unique", "item"}

    def __init__(self):
        super().__init__()
        self.ours: list[str] = []
        self.masks = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name.split("::")[-1]
        if name in self.WAITS or (name in ("_to_copy", "copy_", "to")
                                  and _devices(args, kwargs) > 1):
            import traceback

            if any("masking_utils" in f.filename for f in traceback.extract_stack()):
                self.masks += 1
            else:
                self.ours.append(name)
        return func(*args, **kwargs)


def _devices(args, kwargs):
    """How many devices a copy touches (a device keyword counts as one of them)."""
    found = {a.device for a in args if isinstance(a, torch.Tensor)}
    found |= {torch.device(kwargs["device"])} if kwargs.get("device") is not None else set()
    return len(found)


def _count_syncs(steps, same_length=False):
    from boundcalc.certify.train import Encoded, TrainSpec, _train

    tok = _tokenizer()
    texts, labels = _rows(8 * steps)
    if same_length:  # every text 10 tokens: no padding in any batch
        texts = [("sport " if y else "food ") + "the " * 7 for y in labels]
    model = _model()
    anchor = {n: p.detach().clone() for n, p in model.named_parameters()}
    spec = TrainSpec("posterior", 1, 1e-3, 8, 16, 0, CPU, 1.0, anchor)
    enc = Encoded(tok, texts, 16, CPU)
    with _Syncs() as mode:  # Adam as on CUDA (fused: its step counts never read back)
        done = _train(model, enc, labels, spec, 8, "fp32", None, fused=True)
    assert done == steps
    return mode


def test_no_host_synchronisation_per_step():
    """Our loop reads nothing back per step. transformers reads a padded batch's mask back
    once per forward pass (to drop it when it is all ones): at most once per step, and never
    where no batch has padding (the mask is left out)."""
    for same in (False, True):
        few, more = _count_syncs(2, same), _count_syncs(6, same)
        assert few.ours == more.ours == [], (few.ours, more.ours)
        assert few.masks <= 2 and more.masks <= 6
        if same:
            assert few.masks == more.masks == 0


def test_encoded_batches_equal_the_tokenizer_per_batch():
    from boundcalc.certify.train import Encoded

    tok = _tokenizer()
    texts = [t for t, _ in synthetic_rows(12, 4)] + ["word " * 40]  # one truncated row
    for side in ("right", "left"):
        tok.padding_side = side
        enc = Encoded(tok, texts, 24, CPU)
        for rows in ([0, 3, 5], [12, 1], [7]):
            want = tok([texts[i] for i in rows], padding=True, truncation=True, max_length=24,
                       return_tensors="pt")
            got = enc.batch(torch.tensor(rows), np.array(rows))
            if bool(want["attention_mask"].all()):  # no padding: the mask left out
                assert "attention_mask" not in got
                del want["attention_mask"]
            assert set(got) == set(want)
            for k in want:
                assert torch.equal(got[k], want[k]), (side, rows, k)


def test_rows_per_batch():
    from boundcalc.certify.train import batch_rows, card_rows

    model = _model()
    assert batch_rows(model, 64, 10_000, CPU) == 32  # a CPU: as before
    assert batch_rows(model, 64, 10_000, CPU, requested=7) == 7
    # BERT-base, 128 tokens: 2·12·128·768·(34 + 5·12·128/768) = 2,359,296·44 = 103,809,024
    # bytes per row
    gib = 2**30
    # 80 GiB free: a quarter (21,474,836,480 bytes) fits 206 rows → 128; 10,000 rows allow
    # 1,250 per batch; without a backward pass 2,068 fit → 512, the most
    assert card_rows(80 * gib, 768, 12, 12, 128, 10_000) == 128
    assert card_rows(80 * gib, 768, 12, 12, 128, 10_000, backward=False) == 512
    assert card_rows(80 * gib, 768, 12, 12, 128, 1000) == 64  # ≥ 8 steps per epoch
    assert card_rows(80 * gib, 768, 12, 12, 128, 1000, backward=False) == 512  # evaluation
    assert card_rows(10 * gib, 768, 12, 12, 128, 10_000) == 32  # 25 fit: never below 32


def test_error_rate_counts_by_hand():
    from boundcalc.certify.train import error_rate

    tok = _tokenizer()
    texts, labels = _rows(21, 2)
    model = _model(dropout=0.0).eval()
    with torch.no_grad():
        enc = tok(texts, padding=True, truncation=True, max_length=20, return_tensors="pt")
        pred = model(**enc).logits.argmax(-1).tolist()
    wrong = sum(p != y for p, y in zip(pred, labels))
    assert error_rate(model, tok, texts, labels, 20, 8, CPU) == wrong / 21
    assert math.isnan(error_rate(model, tok, [], [], 20, 8, CPU))


def test_bf16_autocast_trains_and_is_recorded():
    """The CUDA arithmetic (bf16 autocast, fused Adam) run on the CPU: float32 weights that
    moved, a finite loss path, the record naming it; the fp32 run of the same data differs."""
    from boundcalc.certify.train import TrainSpec, train_classifier

    tok = _tokenizer()
    texts, labels = _rows(32)
    a, b = _model(dropout=0.0), _model(dropout=0.0)
    start = {k: v.clone() for k, v in a.state_dict().items()}
    how = train_classifier(a, tok, texts, labels,
                           TrainSpec("prior", 1, 1e-2, 16, 20, 0, CPU, precision="bf16"))
    train_classifier(b, tok, texts, labels, TrainSpec("prior", 1, 1e-2, 16, 20, 0, CPU))
    assert how["precision"] == "bf16" and how["steps"] == 2
    w = a.state_dict()
    assert all(v.dtype == start[k].dtype for k, v in w.items())  # weights stay float32
    assert all(torch.isfinite(v.float()).all() for v in w.values())
    moved = w["classifier.weight"] - start["classifier.weight"]
    assert moved.abs().max() > 1e-3  # two Adam steps of lr 1e-2
    assert not torch.equal(w["classifier.weight"], b.state_dict()["classifier.weight"])
