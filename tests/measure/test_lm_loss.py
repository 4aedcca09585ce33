"""A language model's losses over its vocabulary in chunks (issue 51): the per-row values of
every stage equal the full-tensor formula ``log_softmax(logits.double())`` (written here, on
the whole batch) to 1e-9 relative, and a dispatch meter fails the test when any stage — the data
pass, the Monte Carlo, the Hessian terms, the bound-trained posterior, compression's risk —
produces a float64 tensor wider than one row's [T, V], or compute-dtype logits of more rows than
:func:`~boundcalc.measure.data.lm_loss.logit_rows` allows.

The model: a 1-layer GPT-2 of width 16 with a vocabulary of 1,000 (wider than every other axis,
so a vocabulary-wide tensor is told apart by its last size), 10 rows of 12 tokens in batches of
5, one row padded after its seventh token; the chunk budget is set to 2 rows' logits, so each
batch is cut into 2 + 2 + 1 rows, and the blocks of the float64 log-sum-exp to 5 positions.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from boundcalc.measure.data import lm_loss
from boundcalc.measure.data.dataset_io import Batched
from boundcalc.measure.data.hf import TaskModel
from tests._measure_helpers import single_thread

V, T, ROWS, BATCH, CHUNK, ALPHA, BLOCK = 1000, 12, 10, 5, 2, 0.01, 5
CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def one_thread():
    with single_thread():
        yield


@pytest.fixture
def chunked(monkeypatch):
    """The chunk budget: CHUNK rows of float32 logits over T positions; blocks of BLOCK
    positions in :func:`lm_loss.scan` (a row of 12 read as 5 + 5 + 2)."""
    monkeypatch.setattr(lm_loss, "CPU_LOGITS_BYTES", CHUNK * T * V * 4)
    monkeypatch.setattr(lm_loss, "BLOCK_BYTES", BLOCK * V * 8)


def _lm(seed: int = 0):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=V, n_positions=T, n_embd=16, n_layer=1, n_head=2,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, pad_token_id=V - 1,
                     attn_implementation="eager")  # second derivatives for the Hessian
    model = GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, V - 1, (ROWS, T))
    mask = torch.ones_like(ids)
    mask[3, 7:] = 0
    ids = ids.masked_fill(mask == 0, V - 1)
    batches = [({"input_ids": ids[i:i + BATCH], "attention_mask": mask[i:i + BATCH]}, None)
               for i in range(0, ROWS, BATCH)]
    tm = TaskModel(model, "causal_lm", "GPT2LMHeadModel", V)
    return tm, Batched(batches, ROWS, T, "rows", f"{ROWS} rows"), ids, mask


def _by_full_tensor(model, ids, mask):
    """Per row (numpy): mean NLL, mean smoothed loss, top-1 error over the next-token positions
    that count, by the straightforward formula on the whole [rows, T, V] float64 tensor."""
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits.double()[:, :-1]
    logp = torch.log_softmax(logits, -1)
    lp = logp.gather(-1, ids[:, 1:, None]).squeeze(-1)
    smooth = -torch.log((1 - ALPHA) * lp.exp() + ALPHA / V) / math.log(V / ALPHA)
    wrong = (logits.argmax(-1) != ids[:, 1:]).double()
    w = mask[:, 1:].double()
    per = lambda t: ((t * w).sum(1) / w.sum(1)).numpy()  # noqa: E731
    return per(-lp), per(smooth), per(wrong)


class Meter(TorchDispatchMode):
    """Every operator's outputs: the widest float64 tensor whose last axis is the vocabulary,
    and the most rows × positions of a compute-dtype (float32) one, in elements."""

    def __init__(self):
        super().__init__()
        self.f64 = self.f32 = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.ndim >= 2 and t.shape[-1] == V:
                if t.dtype == torch.float64:
                    self.f64 = max(self.f64, t.numel())
                elif t.dtype == torch.float32:
                    self.f32 = max(self.f32, t.numel())
        return out

    def check(self) -> None:
        assert 0 < self.f64 <= T * V, f"a float64 tensor of {self.f64 / V:.0f} positions × V"
        assert 0 < self.f32 <= CHUNK * T * V, f"float32 logits of {self.f32 / V:.0f} positions"


def test_the_meter_sees_the_full_tensor_formula():
    """The meter is not vacuous: the formula of the tests (today's code before issue 51) trips
    it."""
    tm, _, ids, mask = _lm()
    with Meter() as m:
        _by_full_tensor(tm.model, ids, mask)
    with pytest.raises(AssertionError, match="float64 tensor of"):
        m.check()


def test_token_logprob_and_its_gradient_are_the_float64_log_softmax():
    torch.manual_seed(3)
    logits = (4 * torch.randn(3, 7, 50)).requires_grad_(True)
    y = torch.randint(0, 50, (3, 7))
    g = torch.randn(3, 7, dtype=torch.float64)
    got = lm_loss.token_logprob(logits, y)
    (dgot,) = torch.autograd.grad((got * g).sum(), logits)
    ref = torch.log_softmax(logits.double(), -1).gather(-1, y[..., None]).squeeze(-1)
    (dref,) = torch.autograd.grad((ref * g).sum(), logits)
    assert got.dtype == torch.float64
    np.testing.assert_allclose(got.detach().numpy(), ref.detach().numpy(), rtol=1e-13)
    np.testing.assert_allclose(dgot.numpy(), dref.numpy(), rtol=1e-6, atol=1e-7)  # float32
    with torch.no_grad():
        np.testing.assert_allclose(lm_loss.token_logprob(logits, y).numpy(),
                                   ref.detach().numpy(), rtol=1e-13)


def test_logit_rows_follow_the_budget(chunked):
    tm, *_ = _lm()
    assert lm_loss.logit_rows(tm, T, CPU) == CHUNK
    assert lm_loss.logit_rows(tm, 10 * T, CPU) == 1  # never less than one row
    classifier = TaskModel(tm.model, "sequence_classification", "x", 2)
    assert lm_loss.logit_rows(classifier, T, CPU) > 1e15


def test_data_pass_per_row_values_and_memory(chunked):
    from boundcalc.measure.data.data_pass import run_pass

    tm, data, ids, mask = _lm()
    nll, smooth, wrong = _by_full_tensor(tm.model, ids, mask)
    with Meter() as m:
        got = run_pass(tm, data, CPU, alpha=ALPHA)
    m.check()
    np.testing.assert_allclose(got.ce, nll, rtol=1e-9)
    np.testing.assert_allclose(got.bounded, smooth, rtol=1e-9)
    np.testing.assert_array_equal(got.err01, wrong)


def test_monte_carlo_at_sigma_zero_is_the_mean_smoothed_loss_and_chunked(chunked):
    """σ = 0: every draw is the trained weights, so each pass's mean is the data's mean
    smoothed loss; the passes cut every batch into chunks of 2 rows."""
    from boundcalc.measure.data.gibbs import MonteCarlo, gibbs_estimate

    tm, data, ids, mask = _lm()
    _, smooth, _ = _by_full_tensor(tm.model, ids, mask)
    seen = []
    tm.model.register_forward_pre_hook(lambda mod, a, kw: seen.append(kw["input_ids"].shape[0]),
                                       with_kwargs=True)
    with Meter() as m:
        est = gibbs_estimate(tm, data, CPU, [0.0], MonteCarlo(2, 0, ALPHA, "whole"))
    m.check()
    assert est.engine == "weights" and seen == [2, 2, 1] * 4
    np.testing.assert_allclose(est.means, np.full((1, 2), smooth.mean()), rtol=1e-9)


def test_hessian_terms_are_chunked_and_add_up_to_the_mean_nll(chunked):
    from boundcalc.measure.data.curvature import hutchinson_trace
    from boundcalc.measure.data.data_pass import hessian_terms

    tm, data, ids, mask = _lm()
    nll, _, _ = _by_full_tensor(tm.model, ids, mask)
    terms, used = hessian_terms(tm, data, CPU, ROWS)
    assert used == ROWS and len(terms) == 6  # 2 + 2 + 1 rows in each batch of 5
    with torch.no_grad():
        total = sum(float(t()) for t in terms)
    assert total == pytest.approx(nll.mean(), rel=1e-5)  # float32 terms
    for p in tm.model.parameters():
        p.requires_grad_(True)
    with Meter() as m:
        tr = hutchinson_trace(tm.model, terms, n_probes=2, groups=None, seed=0)
    assert m.f64 <= T * V and 0 < m.f32 <= CHUNK * T * V
    assert math.isfinite(tr.total.value)


def test_bound_posterior_language_model_steps_are_chunked(chunked):
    from boundcalc.measure.data.bound_posterior import BoundTraining, train_bound_posterior
    from boundcalc.measure.data.tune import sigma_groups

    tm, data, *_ = _lm()
    prior = TaskModel(copy.deepcopy(tm.model), tm.task, tm.architecture, V)
    groups = sigma_groups(tm.model)
    sig = {g: 0.01 for g in set(groups.values())}
    with Meter() as m:
        out = train_bound_posterior(tm, prior, data, CPU, groups, sig,
                                    BoundTraining(smoothing=ALPHA, lr_sigma=0.0))
    m.check()
    assert out.steps == 6 and all(math.isfinite(h) for h in out.history)


def test_compression_risk_per_row_values_and_memory(chunked):
    from boundcalc.measure.compress.risk import batched_risk

    tm, data, ids, mask = _lm()
    _, _, wrong = _by_full_tensor(tm.model, ids, mask)
    with torch.no_grad():
        logits = tm.model(input_ids=ids, attention_mask=mask).logits.double()[:, :-1]
    p = torch.softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    w = mask[:, 1:].double()
    ref = ((-torch.log2((1 - ALPHA) * p + ALPHA / V) * w).sum(1) / w.sum(1)).numpy()
    with Meter() as m:
        got = batched_risk(tm.model, tm, data, alphas=(ALPHA,))
    m.check()
    np.testing.assert_allclose(got.smoothed[ALPHA], ref, rtol=1e-9)
    np.testing.assert_array_equal(got.errors, wrong)


def test_the_plan_calibration_warms_up_on_one_row_on_a_cpu(chunked):
    """measure's calibration (work_plan.calibrate) times the data pass on the first batch after
    an untimed warm-up: on a CPU that warm-up is one row (on the tiny GPT-2 of issue 51 a batch's
    warm-up cost half a data pass), then the batch of 5 in chunks of 2 + 2 + 1 rows."""
    from boundcalc.measure.data.work_plan import calibrate

    tm, data, *_ = _lm()
    seen = []
    tm.model.register_forward_pre_hook(lambda mod, a, kw: seen.append(kw["input_ids"].shape[0]),
                                       with_kwargs=True)
    got = calibrate(tm, data, CPU, noisy=False)
    assert seen == [1, 2, 2, 1] and got["rows"] == BATCH and got["noisy"] == got["plain"] > 0


def test_nonfinite_counts_the_positions_holding_a_nan_or_an_infinity():
    x = torch.randn(2, 3, 7, generator=torch.Generator().manual_seed(5))
    assert int(lm_loss.nonfinite(x)) == 0
    x[0, 1, 2], x[1, 0, 6], x[1, 2, 0], x[1, 2, 1] = math.nan, -math.inf, math.inf, math.inf
    assert int(lm_loss.nonfinite(x)) == 3 == int((~torch.isfinite(x)).any(-1).sum())


def test_a_language_model_with_an_infinite_logit_is_refused_in_the_data_pass_and_the_mc(chunked):
    from boundcalc.errors import BoundcalcError
    from boundcalc.measure.data.data_pass import run_pass
    from boundcalc.measure.data.gibbs import MonteCarlo, gibbs_estimate

    tm, data, *_ = _lm()
    with torch.no_grad():
        tm.model.lm_head.weight[17, 0] = math.inf  # tied: token 17's embedding too
    with pytest.raises(BoundcalcError, match="NaN or infinite logits"):
        run_pass(tm, data, CPU, alpha=ALPHA)
    with pytest.raises(BoundcalcError, match="NaN or infinite logits"):
        gibbs_estimate(tm, data, CPU, [0.0], MonteCarlo(1, 0, ALPHA, "whole"))


def test_scan_is_torch_logsumexp_block_by_block_with_the_top1_and_the_nonfinite_count(
        monkeypatch):
    """:func:`lm_loss.scan` in blocks of 3 positions (7 = 3 + 3 + 1) equals
    ``torch.logsumexp`` of the widened logits to float64 rounding, its top-1 equals argmax and
    its count equals :func:`lm_loss.nonfinite`, on float32 and bfloat16 logits, with a row
    whose greatest logit is +inf (unshifted, as torch does: lse +inf) and a -inf logit (lse
    finite, the position counted)."""
    monkeypatch.setattr(lm_loss, "BLOCK_BYTES", 3 * 50 * 8)
    assert lm_loss.block_positions(7, 50) == 3 and lm_loss.block_positions(2, 50) == 2
    assert lm_loss.block_positions(7, 10 ** 9) == 1
    # on a card a whole row per block (kernel launches, not the cache, cost there)
    assert lm_loss.block_positions(7, 50, torch.device("cuda")) == 7
    gen = torch.Generator().manual_seed(11)
    for dtype in (torch.float32, torch.bfloat16):
        x = (6 * torch.randn(4, 7, 50, generator=gen)).to(dtype)
        x[1, 4, 9] = -math.inf
        x[2, 6, 3] = math.inf
        got = lm_loss.scan(x, top=True)
        ref = torch.logsumexp(x.double(), -1)
        fin = torch.isfinite(ref)
        assert fin.sum() == 27 and got.lse[2, 6] == math.inf
        np.testing.assert_allclose(got.lse[fin].numpy(), ref[fin].numpy(), rtol=1e-15)
        assert torch.equal(got.top[fin], x.argmax(-1)[fin])
        assert int(got.bad) == int(lm_loss.nonfinite(x)) == 2
        assert lm_loss.scan(x).top is None


def test_scored_aligns_a_causal_models_targets_and_counts_every_position():
    """``scored``: log p(target) of the positions before the last (a causal model's last
    position predicts nothing) equals the float64 log-softmax gathered at the targets; a NaN
    at the last position is still counted."""
    gen = torch.Generator().manual_seed(12)
    x = 3 * torch.randn(2, 6, 40, generator=gen)
    ids = torch.randint(0, 40, (2, 6), generator=gen)
    lp, top, bad = lm_loss.scored(x, ids[:, 1:], causal=True, top=True)
    ref = torch.log_softmax(x.double(), -1)[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
    np.testing.assert_allclose(lp.numpy(), ref.numpy(), rtol=1e-14)
    assert torch.equal(top, x[:, :-1].argmax(-1)) and int(bad) == 0
    x[1, 5, 0] = math.nan
    assert int(lm_loss.scored(x, ids[:, 1:], causal=True)[2]) == 1


def test_a_narrow_language_model_runs_its_data_side_on_one_thread():
    """The vocabulary head is not the model's width (threads.data_threads): the width-16 GPT-2
    with a vocabulary of 1,000 runs on one thread, as a width-16 classifier does; a body wider
    than SMALL_DATA_WIDTH keeps torch's threads."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from boundcalc.measure.threads import SMALL_DATA_WIDTH, data_threads, widest_layer

    tm, *_ = _lm()
    assert widest_layer(tm.model) == V and data_threads(tm.model, CPU) == 1
    wide = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=8, n_embd=SMALL_DATA_WIDTH + 8,
                                      n_layer=1, n_head=2))
    assert data_threads(wide, CPU) is None


def test_a_narrow_language_model_has_its_threads_timed_on_a_cpu_with_cores_to_spare(
        monkeypatch):
    """threads.timed_choice: the width-16 GPT-2 (vocabulary head aside) is timed on one thread
    and on every core when this process may use two or more; not with one core, not on a card,
    not a body wider than SMALL_DATA_WIDTH, not a classifier (no vocabulary head: one thread,
    data_threads's rule)."""
    from transformers import BertConfig, BertForSequenceClassification, GPT2Config, \
        GPT2LMHeadModel

    from boundcalc.measure import threads
    from boundcalc.measure.threads import SMALL_DATA_WIDTH, timed_choice

    tm, *_ = _lm()
    monkeypatch.setattr(threads, "available_cores", lambda: 2)
    assert timed_choice(tm.model, CPU) == (1, 2)
    assert timed_choice(tm.model, torch.device("meta")) is None
    wide = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=8, n_embd=SMALL_DATA_WIDTH + 8,
                                      n_layer=1, n_head=2))
    assert timed_choice(wide, CPU) is None
    cls = BertForSequenceClassification(BertConfig(vocab_size=50, hidden_size=16,
                                                   num_hidden_layers=1, num_attention_heads=2,
                                                   intermediate_size=32))
    assert timed_choice(cls, CPU) is None
    monkeypatch.setattr(threads, "available_cores", lambda: 1)
    assert timed_choice(tm.model, CPU) is None


def test_faster_threads_times_each_count_on_four_rows_and_the_losses_do_not_depend_on_it(
        chunked):
    """work_plan.faster_threads runs, per thread count, a one-row warm-up and four timed rows
    (chunks of 2 + 2), under that count; it returns the faster count, both speeds and the rows
    timed; the data pass gives the same per-row figures on one thread and on two."""
    from boundcalc.measure.data.data_pass import run_pass
    from boundcalc.measure.data.work_plan import CALIBRATION_MIN_ROWS, faster_threads
    from boundcalc.measure.threads import blas_threads

    tm, data, *_ = _lm()
    seen = []
    tm.model.register_forward_pre_hook(
        lambda mod, a, kw: seen.append((torch.get_num_threads(), kw["input_ids"].shape[0])),
        with_kwargs=True)
    best, seconds, rows = faster_threads(tm, data, CPU, (1, 2))
    assert CALIBRATION_MIN_ROWS == rows == 4
    assert seen == [(1, 1), (1, 2), (1, 2), (2, 1), (2, 2), (2, 2)]
    assert set(seconds) == {1, 2} and all(s > 0 for s in seconds.values())
    assert seconds[best] == min(seconds.values())
    with blas_threads(1):
        one = run_pass(tm, data, CPU, alpha=ALPHA)
    with blas_threads(2):
        two = run_pass(tm, data, CPU, alpha=ALPHA)
    for a, b in ((one.ce, two.ce), (one.bounded, two.bounded), (one.err01, two.err01)):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_calibration_rows_are_half_a_second_of_rows_between_four_and_the_batch():
    """By hand: a 0.1 s warm-up row -> 5 rows (0.5 s); 1 ms -> the batch of 32; 10 s -> 4; a
    batch of 3 -> 3."""
    from boundcalc.measure.data.work_plan import calibration_rows

    assert calibration_rows(0.1, 32) == 5
    assert calibration_rows(0.001, 32) == 32
    assert calibration_rows(10.0, 32) == 4
    assert calibration_rows(0.1, 3) == 3


def test_the_calibration_reuses_a_plain_speed_already_timed(chunked):
    """calibrate(plain=(s, rows)): the data pass is not timed again (no forward at all when no
    noisy step is asked), the speed and rows given are the calibration's."""
    from boundcalc.measure.data.work_plan import calibrate

    tm, data, *_ = _lm()
    seen = []
    tm.model.register_forward_pre_hook(lambda mod, a, kw: seen.append(1), with_kwargs=True)
    got = calibrate(tm, data, CPU, noisy=False, plain=(0.25, 4))
    assert seen == [] and got == {"plain": 0.25, "noisy": 0.25, "rows": 4}
