"""Defaults that scale with n (issue 44 item 4): with tune data the isotropic σ is chosen there
and measured once on S, free where the prior weights chose it; without, the default grid and
draws are cut to the time target at the calibrated speed; the output says what more draws buy."""

from __future__ import annotations

import json
import math

import mpmath as mp
import pytest
import torch

from boundcalc.errors import StatsError
from boundcalc.measure.data import sizing, work_plan
from boundcalc.measure.data.options import MeasureOptions
from boundcalc.measure.data.stages import measure_plan
from boundcalc.measure.data.sigma_grid import DEFAULT_SIGMAS, dr_sigma
from boundcalc.measure.data.tune import ISOTROPIC_EVALUATIONS, search_evaluations
from tests._measure_helpers import (TEXTS, single_thread, tiny_text_checkpoints,
                                    write_text_splits)
from tests._reference import kl_inv_exact

@pytest.fixture(scope="module")
def route(tmp_path_factory):
    """``cls``: the fine-tuned 3-class model; ``prior``: a classifier with its own head (cls
    plus small noise, as certify's prior); ``base``: the same body without a head."""
    from transformers import BertForSequenceClassification, BertModel

    out = tmp_path_factory.mktemp("sizing")
    with single_thread():
        tok, cfg = tiny_text_checkpoints(out)
        cls = BertForSequenceClassification.from_pretrained(out / "cls")
        gen = torch.Generator().manual_seed(3)
        noisy = {k: v + 0.01 * torch.randn(v.shape, generator=gen)
                 for k, v in cls.state_dict().items()}
        prior = BertForSequenceClassification(cls.config)
        prior.load_state_dict(noisy)
        prior.save_pretrained(out / "prior")
        tok.save_pretrained(out / "prior")
        base = BertModel(cfg, add_pooling_layer=True)
        base.load_state_dict({k[len("bert."):]: v for k, v in noisy.items()
                              if k.startswith("bert.")})
        base.save_pretrained(out / "base")
        tok.save_pretrained(out / "base")
    write_text_splits(out)
    return out


def _measure(route, init: str, **kw):
    from boundcalc.measure.data.task_measure import measure_task

    said: list[str] = []
    with single_thread():
        stats = measure_task(str(route / "cls"), str(route / "S.csv"), str(route / init),
                             tune_data=str(route / "tune.csv"), hessian_probes=0,
                             say=said.append, **kw)
    return stats, said


@pytest.fixture(scope="module")
def free(route):
    return _measure(route, "prior")


def _hand_value(stats, delta: float) -> float:
    """pac_bayes_kl_gaussian_mc by hand: kl⁻¹(kl⁻¹(Ê, ln(2/δ′)/N), (d²/(2σ²) + ln(2√n/δ))/n)
    at one σ (δ′ = 0.01 not split)."""
    c = stats.curves["gibbs_risk_mean"]
    sigma, e, N = float(c.at[0]), float(c.value[0]), int(c.n_samples)
    n, d = stats.scalars["n"].value, stats.scalars["dist_init_total"].value
    up = kl_inv_exact(e, mp.log(2 / mp.mpf("0.01")) / N)
    budget = (mp.mpf(d) ** 2 / (2 * mp.mpf(sigma) ** 2) + mp.log(2 * mp.sqrt(n) / delta)) / n
    return float(kl_inv_exact(up, budget))


def test_with_tune_data_one_sigma_is_measured_on_S_and_it_is_free(free):
    from boundcalc.api import compute

    stats, said = free
    rec, groups = stats.provenance["gibbs_sigma"], stats.provenance["gibbs_groups"]
    # the σ is the isotropic step of the per-group search, with the prior weights, on tune
    assert rec["disjoint_from_S"] is True and rec["j"] == groups["isotropic_j"]
    assert rec["sigma"] == pytest.approx(dr_sigma(groups["isotropic_j"]), rel=1e-12)
    c = stats.curves["gibbs_risk_mean"]
    assert list(c.at) == [pytest.approx(rec["sigma"], rel=1e-12)]
    # the passes over S, from the plan: one σ × draws for the isotropic row, then the groups
    stages = {s["what"].split(",")[0]: s for s in stats.provenance["plan"]["stages"]}
    mc, draws = stages["Monte Carlo"], stats.provenance["sizing"]["draws"]
    assert mc["what"].startswith("Monte Carlo, 1 σ × ") and mc["passes"] == draws
    assert mc["rows"] == stats.scalars["n"].value == len(TEXTS)
    assert stats.scalars["gibbs_passes"].value == draws
    assert "isotropic σ search" not in stages  # the prior predicts: its own search serves
    assert said[0].startswith("defaults sized to this machine: 1 σ chosen on the tune data")
    # the plan line says the stages in the order they run: the σ search first
    assert any(line.startswith("plan: σ search, ≤ ") and "; data pass: 1 × 6 rows" in line
               for line in said)
    r = compute("pac_bayes_kl_gaussian_mc", stats)
    # no grid cost: the bound at δ = 0.05 itself, not at δ·6/(π² j²)
    assert r.value == pytest.approx(_hand_value(stats, 0.05), rel=1e-9)
    assert math.isclose(float(r.delta), 0.06, rel_tol=1e-12)
    assert "not charged" in r.parameter_choice["sigma"]


def test_a_sigma_not_chosen_off_S_pays_its_grid_weight(free):
    """The same file with the record saying charged: the Dziugaite–Roy weight of j is paid."""
    from boundcalc.api import compute

    stats, _ = free
    stats.provenance["gibbs_sigma"] = {**stats.provenance["gibbs_sigma"],
                                       "disjoint_from_S": False}
    try:
        j = stats.provenance["gibbs_sigma"]["j"]
        r = compute("pac_bayes_kl_gaussian_mc", stats)
        want = _hand_value(stats, 0.05 * 6 / (math.pi ** 2 * j ** 2))
        assert r.value == pytest.approx(want, rel=1e-9)
    finally:
        stats.provenance["gibbs_sigma"]["disjoint_from_S"] = True


def test_a_headless_base_chooses_with_the_model_weights_and_is_charged(route):
    stats, said = _measure(route, "base")
    rec = stats.provenance["gibbs_sigma"]
    assert rec["disjoint_from_S"] is False and "model's weights" in rec["chosen_on"]
    assert 1 <= rec["evaluations"] <= ISOTROPIC_EVALUATIONS
    stages = [s["what"] for s in stats.provenance["plan"]["stages"]]
    assert any(w.startswith("isotropic σ search") for w in stages)
    assert len(stats.curves["gibbs_risk_mean"].at) == 1
    # where the KL comes from (issue 44: vacuous rows with a headless base): by hand, the
    # head the base lacks is centred at zero, the body at the base's tensors
    from transformers import BertForSequenceClassification, BertModel

    cls = BertForSequenceClassification.from_pretrained(route / "cls")
    base = dict(BertModel.from_pretrained(route / "base").named_parameters())
    head = sum(float(p.detach().double().pow(2).sum()) for n, p in cls.named_parameters()
               if n.startswith("classifier."))
    body = sum(float((p.detach().double() - base[n[len("bert."):]].detach().double())
                     .pow(2).sum()) for n, p in cls.named_parameters() if n.startswith("bert."))
    share = stats.provenance["prior_predictor"]["kl_share"]
    assert share["head_tensors"] == ["classifier.bias", "classifier.weight"]
    assert share["head_dist_sq"] == pytest.approx(head, rel=1e-9)
    assert share["body_dist_sq"] == pytest.approx(body, rel=1e-9)
    assert share["head_share"] == pytest.approx(head / (head + body), rel=1e-9)
    assert share["head_dist_sq"] + share["body_dist_sq"] == pytest.approx(
        stats.scalars["dist_init_total"].value ** 2, rel=1e-6)  # the weights side's distance
    line = next(x for x in said if x.startswith("the isotropic KL"))
    assert f"{100 * head / (head + body):.1f} % from the head classifier.bias" in line
    assert "a prior with its own head trained on rows disjoint from S" in line


def test_a_free_record_with_other_points_is_refused(free, tmp_path):
    from boundcalc.stats import load_stats

    stats, _ = free
    path = stats.save(tmp_path / "s.json")
    data = json.loads(path.read_text())
    data["provenance"]["gibbs_sigma"]["sigma"] = 0.5 * data["provenance"]["gibbs_sigma"]["sigma"]
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(StatsError, match="free only as the one point"):
        load_stats(tmp_path / "bad.json")
    data["provenance"]["gibbs_sigma"] = {**stats.provenance["gibbs_sigma"],
                                         "tune_shared_rows": 2}
    (tmp_path / "bad2.json").write_text(json.dumps(data))
    with pytest.raises(StatsError, match="shared by no row of S"):
        load_stats(tmp_path / "bad2.json")


def test_the_output_says_what_more_draws_would_buy(free):
    stats, said = free
    more = stats.provenance["more_draws"]["gibbs_risk_mean"]
    c = stats.curves["gibbs_risk_mean"]
    e, N = float(c.value[0]), int(c.n_samples)
    now = float(kl_inv_exact(e, mp.log(2 / mp.mpf("0.01")) / N)) - e
    later = float(kl_inv_exact(e, mp.log(2 / mp.mpf("0.01")) / (4 * N))) - e
    assert more["N"] == N and more["N_more"] == 4 * N
    assert more["best"]["term"] == pytest.approx(now, rel=1e-6)
    assert more["best"]["term_more"] == pytest.approx(later, rel=1e-6) and later < now
    assert any(line.startswith("gibbs_risk_mean: the Monte Carlo term adds") and
               f"4× the draws (N = {4 * N:,}" in line for line in said)
    assert "gibbs_risk_groups" in stats.provenance["more_draws"]


# ---- without tune data: the default plan fits the time target at a calibrated speed ----------

def _estimate_by_hand(points: int, draws: int, probes: int, n: int, samples: int,
                      plain: float, noisy: float) -> float:
    return n * plain + points * draws * n * noisy + probes * min(samples, n) * 8.5 * plain


@pytest.mark.parametrize("plain, noisy, points, draws, probes", [
    (1e-5, 3e-5, 7, 20, 20),    # a fast model: the old default, 7 σ × 20 draws, 20 probes
    (0.004, 0.012, 7, 5, 2),    # MiniLM-like on 2 cores: Hessian probes cut, then draws
    (0.01, 0.03, 7, 2, 2),      # slower: draws at their least, 2 probes left
    (0.02, 0.06, 2, 3, 2),      # slower still: fewer σ points
])
def test_default_plan_respects_the_time_target(monkeypatch, plain, noisy, points, draws,
                                              probes):
    monkeypatch.setattr(sizing, "time_budget", lambda: 3600.0)
    opts = MeasureOptions()
    speed = {"rows": 32, "plain": plain, "noisy": noisy}
    got = sizing.size(opts, 1000, None, 0, speed, per_row_draw=True, posterior_search=False)
    o = got.options
    assert (len(o.sigmas), o.draws, o.hessian_probes) == (points, draws, probes)
    assert o.sigmas == {7: DEFAULT_SIGMAS, 2: sizing.GRIDS[2]}[points]
    want = _estimate_by_hand(points, draws, probes, 1000, 256, plain, noisy)
    assert got.seconds == pytest.approx(want, rel=1e-12)
    assert got.seconds <= sizing.TARGET_SECONDS and got.record["fits"] is True
    # the richer choice just before it in the ladder would not have fitted
    ladder = [(len(c.sigmas), c.draws, c.hessian_probes) for c in sizing.candidates(opts, True)]
    at = ladder.index((points, draws, probes))
    if at:
        richer = _estimate_by_hand(*ladder[at - 1], 1000, 256, plain, noisy)
        assert richer > sizing.TARGET_SECONDS


def test_a_smaller_time_budget_lowers_the_target_and_nothing_fitting_is_said(monkeypatch):
    monkeypatch.setattr(sizing, "time_budget", lambda: 60.0)
    assert sizing.target_seconds() == 48.0
    speed = {"rows": 32, "plain": 0.05, "noisy": 0.15}
    got = sizing.size(MeasureOptions(), 1000, None, 0, speed, True, False)
    assert (got.options.sigmas, got.options.draws, got.options.hessian_probes) == \
        ((0.01,), 2, 0)  # the cheapest
    assert got.record["fits"] is False
    assert "the cheapest choice, still over the target of 48 s" in sizing.sizing_text(got)


def test_with_tune_data_the_budget_sizes_draws_and_tune_draws(monkeypatch):
    monkeypatch.setattr(sizing, "time_budget", lambda: 3600.0)
    opts = MeasureOptions(tune_data="t.csv", hessian_probes=0)
    speed = {"rows": 32, "plain": 0.004, "noisy": 0.012}
    got = sizing.size(opts, 1000, 200, 16, speed, True, posterior_search=True)
    o = got.options
    assert len(o.sigmas) == 1
    evals = search_evaluations(16) * o.tune_draws
    want = (1000 * 0.004 + ISOTROPIC_EVALUATIONS * o.tune_draws * 200 * 0.004
            + o.draws * 1000 * 0.012 + evals * 200 * 0.004 + o.draws * 1000 * 0.012)
    assert got.seconds == pytest.approx(want, rel=1e-12) and got.seconds <= 480
    assert (o.draws, o.tune_draws) == (10, 2)  # 20 draws do not fit; 10 with 4 tune draws neither


def test_given_counts_are_kept():
    opts = MeasureOptions(sigmas=(0.01, 0.02), draws=7, tune_draws=3, hessian_probes=4)
    assert not any(sizing.auto(opts).values())
    assert [(c.sigmas, c.draws, c.tune_draws, c.hessian_probes)
            for c in sizing.candidates(opts, True)] == [((0.01, 0.02), 7, 3, 4)]


# ---- the σ searches' rows of the tune data (the acceptance run: 76 % of the work) ------------

def test_when_the_search_dominates_its_tune_rows_are_cut_before_the_draws(monkeypatch):
    """The acceptance run of issue 44 (MiniLM, 1,000 rows of S, 199 tune rows, 16 groups)
    spent 76 % of its work in the per-group search, which nothing sized: its 117 evaluations
    × 199 rows. Now the rows the searches read are cut (128, then 64) after the tune draws
    and the Hessian probes and before the draws on S. Here a tune split of 2,000 rows at a
    MiniLM-like speed: 20 draws on S kept, the searches on 128 rows."""
    monkeypatch.setattr(sizing, "time_budget", lambda: 3600.0)
    opts = MeasureOptions(tune_data="t.csv", hessian_probes=0)
    speed = {"rows": 32, "plain": 0.004, "noisy": 0.010}
    got = sizing.size(opts, 1000, 2000, 16, speed, True, posterior_search=True)
    o = got.options
    assert (o.draws, o.tune_draws, o.search_rows) == (20, 1, 128)
    evals = search_evaluations(16)

    def by_hand(rows, tune_draws):  # data, isotropic search, MC, per-group search, groups
        return (1000 * 0.004 + ISOTROPIC_EVALUATIONS * tune_draws * rows * 0.004
                + 20 * 1000 * 0.010 + evals * tune_draws * rows * 0.004 + 20 * 1000 * 0.010)

    assert got.seconds == pytest.approx(by_hand(128, 1), rel=1e-12) and got.seconds <= 480
    # the richer choices before it: every row of the split, or two tune draws, do not fit
    assert by_hand(2000, 1) > 480 and by_hand(128, 2) > 480
    assert got.record["search_rows"] == 128
    assert "σ searches on 128 tune rows" in sizing.sizing_text(got)
    # given rows are kept, and without tune data there is nothing to cut
    kept = sizing.candidates(MeasureOptions(tune_data="t.csv", search_rows=500), True)
    assert {c.search_rows for c in kept} == {500}
    assert {c.search_rows for c in sizing.candidates(MeasureOptions(), True)} == {None}


def test_the_search_split_is_a_seeded_sample_with_every_class_of_a_sorted_file():
    """A tune file sorted by class (4 classes of 10 rows) cut to 20 rows for the searches:
    every class gets its share 20·10/40 = 5 (the first 20 rows would hold two classes only),
    each row kept is a row of the file with its own label, the same seed the same rows."""
    from boundcalc.measure.data.dataset_io import Batched

    ids = torch.arange(40 * 3).reshape(40, 3)
    y = torch.arange(40) // 10  # sorted by class
    tune = Batched([({"input_ids": ids[i:i + 16]}, y[i:i + 16]) for i in range(0, 40, 16)],
                   40, 3, "t.csv", "40 rows")
    opts = MeasureOptions(tune_data="t.csv", search_rows=20, seed=5)
    cut = sizing.search_split(tune, opts)
    got_ids = torch.cat([b[0]["input_ids"] for b in cut.batches])
    got_y = torch.cat([b[1] for b in cut.batches])
    assert cut.n == 20 == got_ids.shape[0]
    assert sorted(got_y.tolist()) == [0] * 5 + [1] * 5 + [2] * 5 + [3] * 5
    rows = (got_ids[:, 0] // 3).tolist()  # row r holds ids 3r, 3r+1, 3r+2
    assert len(set(rows)) == 20 and torch.equal(got_ids, ids[rows])
    assert torch.equal(got_y, y[rows]) and y[:20].unique().tolist() == [0, 1]
    assert max(b[0]["input_ids"].shape[0] for b in cut.batches) <= 16  # no batch grows
    again = sizing.search_split(tune, opts)
    assert torch.equal(torch.cat([b[0]["input_ids"] for b in again.batches]), got_ids)
    assert "20 rows drawn (stratified by label, seed 5)" in cut.description
    # shares by largest remainder, by hand: 3 of 10 rows in classes of 5, 3, 2 -> exact 1.5,
    # 0.9, 0.6; floors 1, 0, 0; the two largest remainders (0.9, 0.6) get one more each
    labels = [0] * 5 + [1] * 3 + [2] * 2
    assert [labels[i] for i in sizing.subsample_rows(10, 3, labels, 0)] == [0, 1, 2]
    # rows without one class label each (here float targets) are drawn uniformly
    floats = Batched([({"input_ids": ids}, y.double())], 40, 3, "t.csv", "40 rows")
    assert "(uniform, seed 5)" in sizing.search_split(floats, opts).description
    for same in (MeasureOptions(tune_data="t.csv"),
                 MeasureOptions(tune_data="t.csv", search_rows=40)):
        assert sizing.search_split(tune, same) is tune


# ---- the whole command in the plan: the time spent before it, and the searches' draws ------

def test_the_estimate_counts_the_time_before_the_plan_and_the_whole_model_draws(monkeypatch):
    """The acceptance run planned 7.3 min of passes and took 12.9: the estimate now counts
    the seconds spent before the plan and one whole-model draw per σ-search evaluation, so a
    command that spent 120 s loading fits the 8 min with fewer draws on S."""
    monkeypatch.setattr(sizing, "time_budget", lambda: 3600.0)
    opts = MeasureOptions(tune_data="t.csv", hessian_probes=0, search_rows=64)
    evals, iso = search_evaluations(16), ISOTROPIC_EVALUATIONS

    def by_hand(draws, tune_draws, spent, draw):
        forwards = (1000 * 0.004 + iso * tune_draws * 64 * 0.004 + draws * 1000 * 0.010
                    + evals * tune_draws * 64 * 0.004 + draws * 1000 * 0.010)
        return spent + forwards + (iso + evals) * tune_draws * draw

    quick = {"rows": 32, "plain": 0.004, "noisy": 0.010}
    got = sizing.size(opts, 1000, 200, 16, quick, True, posterior_search=True)
    assert (got.options.draws, got.options.tune_draws) == (20, 2)  # 469.6 s by hand
    assert got.seconds == pytest.approx(by_hand(20, 2, 0.0, 0.0), rel=1e-12)
    slow = {**quick, "spent": 120.0, "draw": 0.15}
    got = sizing.size(opts, 1000, 200, 16, slow, True, posterior_search=True)
    assert (got.options.draws, got.options.tune_draws) == (10, 2)  # 427.9 s by hand
    assert got.seconds == pytest.approx(by_hand(10, 2, 120.0, 0.15), rel=1e-12)
    # 20 draws no longer fit even with one tune draw (576 s), nor 10 with 4 (532 s)
    assert by_hand(20, 1, 120.0, 0.15) > 480 and by_hand(10, 4, 120.0, 0.15) > 480
    text = work_plan.plan_text(got.plan, slow, got.seconds)
    assert "2 min spent before the plan (loading, the weights side, reading the data)" in text
    assert "0.15 s a whole-model draw" in text


def test_measure_plans_the_whole_command_and_records_what_each_phase_took(free):
    """End to end on a tiny BERT: the plan's seconds are the time spent before it plus its
    stages at the calibrated speeds (by hand from the record), and the phases' measured
    seconds are recorded beside it."""
    stats, said = free
    rec = stats.provenance["plan"]
    speed = rec["calibration"]
    assert speed["spent"] > 0 and speed["draw"] > 0
    by_hand = speed["spent"]
    for st in rec["stages"]:
        per = speed["noisy"] if st["kind"] == "noisy" else speed["plain"]
        by_hand += st["passes"] * st["rows"] * per * (
            work_plan.HVP_COST if st["kind"] == "hvp" else 1) + st["draws"] * speed["draw"]
    assert rec["seconds"] == pytest.approx(by_hand, rel=1e-12)
    searches = [st for st in rec["stages"] if "σ search" in st["what"]]
    assert searches and all(st["draws"] == st["passes"] for st in searches)
    took = rec["measured_seconds"]
    # each stage that ran, by its name (stages.STAGES)
    assert set(took) >= {"before the passes", "σ search", "data pass", "Monte Carlo",
                         "per-group σ", "all"}
    assert took["all"] >= sum(v for k, v in took.items() if k != "all") - 1e-9
    plan_line = next(line for line in said if line.startswith("plan:"))
    assert "spent before the plan" in plan_line


def test_measure_searches_on_the_rows_it_says(route):
    """End to end: with ``search_rows`` the per-group search reads that many tune rows (its
    record names them) and the plan's search stage counts them; S is read whole."""
    stats, _ = _measure(route, "prior", search_rows=2)
    where = stats.provenance["gibbs_groups"]["shape_chosen_on"]
    assert "(2 samples)" in where
    stages = {s["what"].split(",")[0]: s for s in stats.provenance["plan"]["stages"]}
    assert stages["σ search"]["rows"] == 2
    assert stats.scalars["n"].value == len(TEXTS)


def test_the_plan_counts_are_the_options_at_their_cheapest():
    """plan.measure_plan reads one record of counts (issue 41 item 3): built here from the
    options, every automatic choice at its cheapest (one σ, 2 draws, 1 tune draw, no Hessian
    probe), the per-group counts only with the per-group posterior, by hand."""
    from boundcalc import plan

    auto = sizing.plan_counts(MeasureOptions())
    assert auto == plan.Counts(sigmas=1, draws=2, hessian_probes=0, hessian_samples=256,
                               perturbation_draws=0, batch_size=32)
    # two σ that snap to one Dziugaite–Roy point are one σ of work
    given = sizing.plan_counts(MeasureOptions(sigmas=(0.01, 0.01 * (1 + 1e-9)), draws=7,
                                              hessian_probes=4, tune_data="t.csv",
                                              group_draws=3, gibbs_samples=50, batch_size=8))
    assert (given.sigmas, given.draws, given.hessian_probes, given.group_draws,
            given.tune_draws, given.gibbs_samples, given.batch_size) == (1, 7, 4, 3, 1, 50, 8)
    items = measure_plan(given, plan.Sizes(rows=10, tune_rows=4))
    # with gibbs_samples, the passes over S name it first (round six: it sets every pass's rows)
    # in the order the stages run (stages.STAGES): the σ search first, the per-group passes last
    assert [it.option.split()[0] for it in items] == [
        "tune_draws=1", "DATA", "gibbs_samples=50", "hessian_probes=4", "gibbs_samples=50"]
    assert "draws=7" in items[2].option and "group_draws=3" in items[4].option
