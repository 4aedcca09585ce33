"""The memory budget follows the machine (issue 29 item 2): work boundcalc sizes itself (the
Monte Carlo draws' saved weights and noise, row chunks, probe stacks) is held to half the card's
free memory or a quarter of the available RAM unless the user sets a budget, so a BERT-base
``--draws 20`` × 5 σ plan (1.2 GiB) is no longer refused on an 80 GB card; declared sizes
beyond the machine are still refused before anything is allocated. ``torch.cuda.mem_get_info``
and the available RAM are faked."""

from __future__ import annotations

import pytest
import torch

from boundcalc import limits, plan
from boundcalc.errors import ResourceError
from boundcalc.measure.data.stages import measure_plan
from boundcalc.limits import set_memory_budget, work_budget
from boundcalc.measure.device import work_budget_for

GiB = 1 << 30
BERT = dict(sigmas=5, draws=20, hessian_probes=0, hessian_samples=256, perturbation_draws=0,
            batch_size=64)
BERT_SIZES = dict(rows=2048, positions=128, n_params=109_483_778, device="cuda")


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    monkeypatch.delenv(limits.ENV_BUDGET, raising=False)
    set_memory_budget(None)
    yield
    set_memory_budget(None)


def fake(monkeypatch, *, card: int | None = None, ram: int | None = None) -> None:
    if card is not None:
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (card, 2 * card))
    monkeypatch.setattr(limits, "available_ram", lambda: ram)


def test_work_budget_is_a_share_of_what_is_free(monkeypatch):
    base = limits.memory_budget()
    fake(monkeypatch, card=80 * GiB, ram=64 * GiB)
    assert work_budget_for(torch.device("cuda")) == 40 * GiB  # half the card's free memory
    assert work_budget_for(torch.device("cpu")) == 16 * GiB  # a quarter of the available RAM
    fake(monkeypatch, card=GiB // 4, ram=None)  # a full card, RAM unknown: the default
    assert work_budget_for(torch.device("cuda")) == base
    assert work_budget_for(torch.device("cpu")) == base
    set_memory_budget(123456)  # the user's budget wins either way
    fake(monkeypatch, card=80 * GiB, ram=64 * GiB)
    assert work_budget_for(torch.device("cuda")) == 123456 == work_budget()
    monkeypatch.setenv(limits.ENV_BUDGET, "2G")
    set_memory_budget(None)
    assert work_budget_for(torch.device("cpu")) == 2 * GiB


def test_bert_base_draws_fit_an_80_gb_card_and_huge_counts_are_still_refused(monkeypatch):
    items = measure_plan(plan.Counts(**BERT), plan.Sizes(**BERT_SIZES))  # API words
    draws = next(it for it in items if it.option.startswith("draws="))
    assert draws.nbytes == 8 * 100 + 12 * 109_483_778  # 1.22 GiB: over the fixed 1 GiB
    with pytest.raises(ResourceError, match="draws=20 .*memory budget of 1 GiB"):
        plan.check(items)  # today's refusal
    fake(monkeypatch, card=80 * GiB, ram=8 * GiB)
    plan.check(items, work_budget_for(torch.device("cuda")))  # accepted
    fake(monkeypatch, card=2 * GiB, ram=8 * GiB)  # a card with 2 GiB free: refused, one line
    with pytest.raises(ResourceError, match="memory budget of 1 GiB") as err:
        plan.check(items, work_budget_for(torch.device("cuda")))
    assert "\n" not in str(err.value)
    # host work (96 rows: 2048 would be over the time budget on a CPU) with 64 GiB available:
    # accepted there too; with 4 GiB available (a 1 GiB share) refused
    cpu = measure_plan(plan.Counts(**BERT),
                            plan.Sizes(**{**BERT_SIZES, "device": "cpu", "rows": 96}))
    fake(monkeypatch, ram=64 * GiB)
    plan.check(cpu, work_budget_for(torch.device("cpu")))
    fake(monkeypatch, ram=4 * GiB)
    with pytest.raises(ResourceError, match="draws=20"):
        plan.check(cpu, work_budget_for(torch.device("cpu")))
    # a declared count beyond any machine: refused before anything is allocated
    fake(monkeypatch, card=80 * GiB, ram=64 * GiB)
    with pytest.raises(ResourceError, match="draws=10000000000 .*memory budget of 40 GiB"):
        plan.check(measure_plan(plan.Counts(**{**BERT, "draws": 10**10}),
                                     plan.Sizes(**BERT_SIZES)),
                   work_budget_for(torch.device("cuda")))


def test_available_ram_reads_the_machine():
    ram = limits.available_ram()
    assert ram is not None and 0 < ram < 1 << 50
