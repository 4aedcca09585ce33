"""The plan rule of certify (boundcalc/certify/plan_rule.py, issue 54 item 4): the counts
left None are filled by the richest plan whose work, in weight·token products, fits the
budget; computed here by hand from a config and texts."""

from __future__ import annotations

import pytest

from boundcalc.certify import CertifyConfig
from boundcalc.certify import plan_rule as pr
from boundcalc.certify.preflight import token_ids
from boundcalc.certify.run_plan import plan_text
from boundcalc.errors import BoundcalcError
from boundcalc.measure.data import sizing
from boundcalc.measure.data.tune import search_evaluations


def _bert(hidden: int, layers: int, inter: int, classes: int = 2):
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    cfg = BertConfig(vocab_size=500, hidden_size=hidden, num_hidden_layers=layers,
                     num_attention_heads=2, intermediate_size=inter, num_labels=classes)
    with torch.device("meta"):
        return BertForSequenceClassification(cfg)


class _Tok:
    """A tokenizer of whitespace words plus [CLS] and [SEP], as the rule calls it."""

    def __call__(self, texts, truncation, max_length):
        assert truncation
        return {"input_ids": [list(range(min(len(t.split()) + 2, max_length))) for t in texts]}


def test_facts_by_hand():
    """Linear weights: per layer Q, K, V, O (h² each) and the two feed-forward matrices
    (h·i each), the pooler (h²) and the classifier (h·k); tokens truncated at max_length."""
    model = _bert(hidden=16, layers=3, inter=40, classes=4)
    texts = ["a b c", "a " * 30, "x"]
    f = pr.facts(model, [len(r) for r in token_ids(texts, _Tok(), max_length=10)])
    assert f.weights == 3 * (4 * 16 * 16 + 2 * 16 * 40) + 16 * 16 + 16 * 4
    assert f.tokens_per_row == pytest.approx((5 + 10 + 3) / 3)
    assert f.rows == 3
    assert f.groups == 2 * (3 + 2)  # embeddings, 3 layers, head; matrices and vectors apart


def test_work_by_hand_and_the_level_it_picks():
    f = pr.Facts(weights=10_765_056, groups=16, rows=2000, tokens_per_row=57.05)  # real text
    lean = pr.LEVELS[-1]
    by_hand = 10_765_056 * 57.05 * (2.0 * 2 * 1000 + search_evaluations(16, False) * 64)
    assert pr.work(lean, f, draws=3, prior_fraction=0.5) == pytest.approx(by_hand, rel=1e-12)
    full = pr.LEVELS[0]
    by_hand = 10_765_056 * 57.05 * (2.0 * (2 * 3 + 6) * 1000 + search_evaluations(16) * 192)
    assert pr.work(full, f, 3, 0.5) == pytest.approx(by_hand, rel=1e-12)
    level, works = pr.choose(f, 3, 0.5)
    assert level.name == "lean" and works["reduced"] > pr.BUDGET >= works["lean"]
    short = pr.Facts(weights=10_765_056, groups=16, rows=2000, tokens_per_row=12.07)
    assert pr.choose(short, 3, 0.5)[0].name == "full"  # the synthetic MiniLM benchmark
    huge = pr.Facts(weights=10**9, groups=50, rows=10**6, tokens_per_row=512)
    assert pr.choose(huge, 3, 0.5)[0].name == "lean"  # none fits: the last


def test_resolve_fills_only_what_is_left_and_records_it():
    long = pr.Facts(weights=10_765_056, groups=16, rows=2000, tokens_per_row=57.05)
    cfg, rec = CertifyConfig().resolve(long)
    assert (cfg.sigmas, cfg.group_draws, cfg.tune_rows, cfg.tune_shape) == \
        (None, 2, 64, "isotropic")
    assert rec["level"] == "lean" and rec["given_by_caller"] == []
    opts = cfg.measure_options("tune.jsonl")
    assert opts.draws == 0 and opts.sigmas is None and not any(sizing.auto(opts).values())
    assert opts.tune_shape == "isotropic"
    cfg, rec = CertifyConfig(group_draws=5).resolve(long)
    assert (cfg.group_draws, cfg.tune_rows, rec["given_by_caller"]) == (5, 64, ["group_draws"])
    cfg, _ = CertifyConfig(sigmas=(0.01,), draws=2).resolve(long)
    opts = cfg.measure_options("tune.jsonl")
    assert (opts.sigmas, opts.draws) == ((0.01,), 2)
    short = pr.Facts(weights=70_000, groups=8, rows=2000, tokens_per_row=12)
    cfg, rec = CertifyConfig().resolve(short)
    assert (cfg.sigmas, cfg.group_draws, cfg.tune_rows, cfg.tune_shape) == \
        ((0.003, 0.01), 6, 192, "per-group")


def test_draws_without_an_isotropic_sigma_is_refused_in_one_line():
    long = pr.Facts(weights=10_765_056, groups=16, rows=2000, tokens_per_row=57.05)
    with pytest.raises(BoundcalcError, match="^draws does nothing without sigmas: the lean "
                                             "plan measures no isotropic σ here; give sigmas "
                                             "or leave draws out$"):
        CertifyConfig(draws=5).resolve(long)
    short = pr.Facts(weights=70_000, groups=8, rows=2000, tokens_per_row=12)
    assert CertifyConfig(draws=5).resolve(short)[0].draws == 5  # the full plan measures σ


def test_the_plan_line_names_the_rule_and_its_counts():
    long = pr.Facts(weights=10_765_056, groups=16, rows=2000, tokens_per_row=57.05)
    cfg, rec = CertifyConfig().resolve(long)
    sizes = {"prior": 999, "S": 999, "tune": 64}
    line = plan_text(cfg, sizes, 600, True, (1e-4, 3e-5, 2), rec)
    assert "measure (the lean plan of the rule: 3.2e+12 weight·token products" in line
    assert "σ search (isotropic shape) on 64 rows" in line
    assert "isotropic σ ×" not in line and "2 pass(es) over S at the per-group σ" in line
    cfg, rec = CertifyConfig(sigmas=(0.01,), group_draws=2, tune_rows=64,
                             tune_shape="per-group").resolve(long)
    line = plan_text(cfg, sizes, 600, True, (1e-4, 3e-5, 2), rec)
    assert "the rule" not in line and "1 isotropic σ × 3 Monte Carlo pass(es) over S" in line
