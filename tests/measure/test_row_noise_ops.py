"""The per-sample noise hooks without a factorisation per batch (issue 29 item 1): the aten
operators of one per-sample pass contain no QR, SVD, eigen-decomposition, least squares or
linear solve; their matmul FLOPs stay within 2.5× a plain pass of the same batch, on a
BERT-shaped and a ViT-shaped model; and the Cholesky route with its fallback for rows whose
Gram is singular keeps the exact law σ²·XXᵀ (against the hand-computed covariance), with the
bias noise added after the product or riding it as a last column of the factor.

The hooks' arithmetic is the formula written out in float64 on the same draws: a Linear's
y + σ_w·L·ξ_{<T} + σ_b·ξ_T (Gram route) or y + σ_w·X·ξ_{<d_in} + σ_b·ξ_{d_in} (direct), a
LayerNorm's x̂·(γ + σ_w·z₀) + β + σ_b·z₁; outside autograd the noise goes into the module's
own output in place, inside it the output is left alone and gradients reach the weights."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from boundcalc.measure.data.census import flop_counter
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
        with flop_counter() as plain_flops:
            model(**inputs)
        with RowNoise(model, sig, torch.Generator().manual_seed(0)) as h:
            h.start_pass(R)
            model(**inputs)  # the one-time row checks of replayed modules run here
            census = OpCensus()
            with census, flop_counter() as noisy_flops:
                h.start_pass(R)
                out = model(**inputs).logits
    assert torch.isfinite(out).all()
    bad = sorted(op for op in census.ops if FORBIDDEN & set(op.split("_")))
    assert not bad, bad
    # the T < d_in Linears took the Gram route (16 or 17 tokens, width 64 and 256)
    assert "linalg_cholesky_ex" in census.ops
    ratio = noisy_flops.get_total_flops() / plain_flops.get_total_flops()
    assert 1.0 < ratio <= 2.5, ratio


@pytest.mark.parametrize("d_out, sb", [(3, 0.2), (5, 0.2), (5, 0.6)],
                         ids=["bias_added", "bias_in_factor", "bias_in_factor_ratio_2"])
def test_gram_route_keeps_the_law_with_singular_rows(d_out, sb):
    """Rows with a repeated position (a singular T × T Gram, in float32 and float64) next to
    full-rank rows: every row's noise on output unit 0 has covariance σ²·XXᵀ + σ_b²·11ᵀ, with
    the bias noise added after the product (T = d_out) or as the factor's last column σ_b/σ
    (T < d_out; σ_b/σ = 2/3 and 2)."""
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        lin = torch.nn.Linear(12, d_out).to(dtype)
        full = torch.randn(3, 12, dtype=dtype)
        rep = full.clone()
        rep[2] = rep[0]  # positions 0 and 2 identical: rank 2 < T = 3
        zero = torch.zeros(3, 12, dtype=dtype)  # a zero row: no weight noise at all
        R, s = 12000, 0.3
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


def _close(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got − want| relative to max |want|."""
    return float((got.double() - want).abs().max() / want.abs().max())


@pytest.mark.parametrize("shape", [(4, 24, 9), (8, 6, 9)], ids=["gram", "direct"])
@pytest.mark.parametrize("sw, sb", [(0.3, 0.2), (0.3, 0.0), (0.0, 0.2)])
def test_linear_noise_is_the_formula_on_the_hooks_draws(shape, sw, sb):
    """The draws ξ (R, k + 1, d_out), in the order the hooks take them from their generator,
    put through the formula in float64: the factor L of XXᵀ (T < d_in: the Gram route) or X
    itself (T ≥ d_in), the bias noise the last row of ξ."""
    T, d_in, d_out = shape
    R = 5
    torch.manual_seed(0)
    lin = torch.nn.Linear(d_in, d_out)
    X = torch.randn(R, T, d_in)
    with torch.no_grad():
        y = lin(X).double()
        with RowNoise(lin, {"weight": sw, "bias": sb}, torch.Generator().manual_seed(4)) as h:
            h.start_pass(R)
            got = lin(X)
    Xd = X.double()
    F = torch.linalg.cholesky(Xd @ Xd.mT) if T < d_in else Xd
    k = F.shape[2] if sw > 0 else 0
    xi = torch.randn((R, k + (sb > 0), d_out), generator=torch.Generator().manual_seed(4))
    xi = xi.double()
    want = y + (sw * F @ xi[:, :k] if k else 0) + (sb * xi[:, k:] if sb > 0 else 0)
    assert _close(got, want) < 2e-6, _close(got, want)


def test_hooks_add_into_the_output_in_place_only_outside_autograd():
    """No grad: the module's own output comes back with the noise in it (no copy). With
    grad: the output is left as the module made it, the noisy result is a new tensor, and
    the gradient of its sum is the hand one (Σ over rows and positions of x for every weight
    row, R·T for the bias: the noise does not depend on W). A one-row output broadcast to R
    rows is never written."""
    torch.manual_seed(0)
    R, T = 5, 4
    lin = torch.nn.Linear(24, 9)
    X = torch.randn(R, T, 24)
    raw = []
    lin.register_forward_hook(lambda m, a, out: raw.append(out))  # runs before the noise hook
    with RowNoise(lin, {"weight": 0.3, "bias": 0.2}, torch.Generator().manual_seed(4)) as h:
        with torch.no_grad():
            plain = X @ lin.weight.T + lin.bias
            h.start_pass(R)
            got = lin(X)
            assert got.data_ptr() == raw[-1].data_ptr()
            assert not torch.allclose(got, plain, atol=1e-3)
            h.start_pass(R)
            one = lin(X[:1])  # one row for R rows: R draws on a copy
            assert one.shape == (R, T, 9) and torch.allclose(raw[-1], plain[:1], atol=1e-5)
            assert not torch.allclose(one[0], one[1], atol=1e-3)
        h.start_pass(R)
        noisy = lin(X)
        assert noisy.data_ptr() != raw[-1].data_ptr()
        assert torch.allclose(raw[-1], plain, atol=1e-5)
        noisy.sum().backward()
    assert torch.allclose(lin.weight.grad, X.sum((0, 1)).expand(9, 24), atol=1e-4)
    assert torch.allclose(lin.bias.grad, torch.full((9,), float(R * T)))


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("sw, sb", [(0.2, 0.1), (0.2, 0.0), (0.0, 0.1)])
def test_layer_norm_noise_is_the_formula_on_the_hooks_draws(sw, sb, grad):
    """z (R, parts, 1, d) as the hooks draw it: x̂·(γ + σ_w·z₀) + β + σ_b·z_last in float64,
    with and without autograd (then the gradient of the sum reaches γ: Σ x̂)."""
    torch.manual_seed(0)
    R, d = 5, 16
    ln = torch.nn.LayerNorm(d)
    with torch.no_grad():
        ln.weight.normal_(1.0, 0.3)
        ln.bias.normal_(0.0, 0.3)
    x = torch.randn(R, 3, d) * 2 + 0.5
    with torch.set_grad_enabled(grad), RowNoise(ln, {"weight": sw, "bias": sb},
                                                torch.Generator().manual_seed(6)) as h:
        h.start_pass(R)
        got = ln(x)
        if grad:
            got.sum().backward()
    parts = (sw > 0) + (sb > 0)
    z = torch.randn((R, parts, 1, d), generator=torch.Generator().manual_seed(6)).double()
    xd = x.double()
    xhat = (xd - xd.mean(-1, keepdim=True)) / torch.sqrt(xd.var(-1, unbiased=False,
                                                                 keepdim=True) + ln.eps)
    gamma = ln.weight.detach().double() + (sw * z[:, 0] if sw > 0 else 0)
    beta = ln.bias.detach().double() + (sb * z[:, parts - 1] if sb > 0 else 0)
    assert _close(got.detach(), xhat * gamma + beta) < 2e-6
    if grad:
        assert torch.allclose(ln.weight.grad.double(), xhat.sum((0, 1)), atol=1e-4)


def test_the_bias_rides_the_product_only_where_its_scale_stays_exact():
    """σ_b/σ_w becomes an entry of the factor only where the product keeps it exactly: any
    ratio in float32 (no TF32 on a CPU), in bfloat16 only one with 8 significant bits (2, not
    2/3); elsewhere the bias noise is added after the product, as an add over the output."""
    torch.manual_seed(0)
    X = torch.randn(3, 4, 24)
    for dtype, sb, folded in ((torch.float32, 0.2, True), (torch.bfloat16, 0.6, True),
                              (torch.bfloat16, 0.2, False)):
        lin = torch.nn.Linear(24, 9).to(dtype)
        census = OpCensus()
        with torch.no_grad(), RowNoise(lin, {"weight": 0.3, "bias": sb},
                                       torch.Generator().manual_seed(2)) as h:
            h.start_pass(3)
            with census:
                lin(X.to(dtype))
        assert ("cat" in census.ops) == folded and ("add_" in census.ops) != folded, census.ops
