"""The per-sample noise hooks without a factorisation per batch (issue 29 item 1): the aten
operators of one per-sample pass contain no QR, SVD, eigen-decomposition, least squares or
linear solve; their matmul FLOPs stay within 2.5× a plain pass of the same batch, on a
BERT-shaped and a ViT-shaped model; and the Cholesky route with its fallback for rows whose
Gram is singular keeps the exact law σ²·XXᵀ (against the hand-computed covariance)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from boundcalc.measure.data.row_noise import RowNoise
from tests._measure_helpers import single_thread

# words of aten operator names (split at "_"): linalg_qr, _linalg_svd, linalg_eigh,
# linalg_lstsq, linalg_solve_ex, cholesky_solve, triangular_solve, geqrf, linalg_lu_factor_ex...
FORBIDDEN = {"qr", "svd", "svdvals", "eig", "eigh", "eigvals", "eigvalsh", "lstsq", "solve",
             "geqrf", "ormqr", "householder", "lu", "inv", "pinv", "inverse"}


@pytest.fixture(autouse=True)
def one_thread():
    with single_thread():
        yield


class OpCensus(TorchDispatchMode):
    """Every aten operator that runs inside it, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def _bert():
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=60, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=256, max_position_embeddings=32, num_labels=2,
                     attn_implementation="eager")
    model = BertForSequenceClassification(cfg).eval()
    ids = torch.randint(0, 60, (6, 16))
    return model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def _vit():
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    cfg = ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=64,
                    num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                    num_labels=3, attn_implementation="eager")
    return ViTForImageClassification(cfg).eval(), {"pixel_values": torch.randn(6, 3, 16, 16)}


@pytest.mark.parametrize("build", [_bert, _vit], ids=["bert", "vit"])
def test_per_sample_pass_runs_no_factorisation_and_at_most_2_5x_the_matmul_flops(build):
    model, inputs = build()
    R = next(iter(inputs.values())).shape[0]
    sig = {n: 0.01 for n, _ in model.named_parameters()}
    with torch.no_grad():
        with FlopCounterMode(display=False) as plain_flops:
            model(**inputs)
        with RowNoise(model, sig, torch.Generator().manual_seed(0)) as h:
            h.start_pass(R)
            model(**inputs)  # the one-time row checks of replayed modules run here
            census = OpCensus()
            with census, FlopCounterMode(display=False) as noisy_flops:
                h.start_pass(R)
                out = model(**inputs).logits
    assert torch.isfinite(out).all()
    bad = sorted(op for op in census.ops if FORBIDDEN & set(op.split("_")))
    assert not bad, bad
    # the T < d_in Linears took the Gram route (16 or 17 tokens, width 64 and 256)
    assert "linalg_cholesky_ex" in census.ops
    ratio = noisy_flops.get_total_flops() / plain_flops.get_total_flops()
    assert 1.0 < ratio <= 2.5, ratio


def test_gram_route_keeps_the_law_with_singular_rows():
    """Rows with a repeated position (a singular T × T Gram, in float32 and float64) next to
    full-rank rows: every row's noise on output unit 0 has covariance σ²·XXᵀ + σ_b²·11ᵀ."""
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        lin = torch.nn.Linear(12, 3).to(dtype)
        full = torch.randn(3, 12, dtype=dtype)
        rep = full.clone()
        rep[2] = rep[0]  # positions 0 and 2 identical: rank 2 < T = 3
        zero = torch.zeros(3, 12, dtype=dtype)  # a zero row: no weight noise at all
        R, s, sb = 12000, 0.3, 0.2
        X = torch.stack([full, rep, zero]).repeat(R // 3, 1, 1)  # rows alternate the three
        with torch.no_grad():
            y0 = lin(X)
            with RowNoise(lin, {"weight": s, "bias": sb},
                          torch.Generator().manual_seed(1)) as h:
                h.start_pass(R)
                out = (lin(X) - y0).double()
        for k, x in enumerate((full, rep, zero)):
            x = x.double()
            cov = torch.cov(out[k::3, :, 0].T)
            ref = s * s * x @ x.T + sb * sb
            tol = 5 * math.sqrt(2 / (R // 3)) * float(ref.abs().max())
            assert torch.allclose(cov, ref, atol=tol), (dtype, k, cov, ref)
        # the repeated position shares its noise exactly (up to float rounding)
        assert torch.allclose(out[1::3, 0], out[1::3, 2], atol=1e-5)
