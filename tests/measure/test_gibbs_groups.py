"""Per-group Gaussian posteriors with σ_g chosen on data the bound does not use (issue #22):
the search never sees S (nor, for the free shape, the posterior weights), the stats record,
and the certified value recomputed with 50-digit arithmetic (mpmath) for the free and the
charged choice."""

from __future__ import annotations

import json
import math
import os

import mpmath as mp
import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import boundcalc as bc
from boundcalc.cli import app
from boundcalc.errors import StatsError
from studies.digits_vit import DigitsConfig, build
from boundcalc.measure.data import tune as tune_mod
from boundcalc.measure.data.dataset_io import Batched
from boundcalc.measure.data.gibbs import MonteCarlo
from boundcalc.measure.data.options import MeasureOptions
from boundcalc.optimize import optimize
from boundcalc.stats import Curve, Quantity, Stats
from tests._measure_helpers import single_thread
from tests._reference import kl_inv_exact

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
runner = CliRunner()
ENTRY = "pac_bayes_kl_gaussian_groups_mc"


# ---- the search alone, on a risk function written here -----------------------------------

def test_shape_search_keeps_the_target_and_widens_tolerant_groups():
    """risk = base + Σ_g (σ_g/τ_g)²: group 'b' tolerates 4× the noise of 'a'."""
    tau = {"a": 0.01, "b": 0.04}
    groups = {"a.w": "a", "b.w": "b", "b.v": "b"}
    seen: list[dict] = []

    def risk(sig):
        seen.append(dict(sig))
        assert set(sig) == set(groups)  # one σ per parameter name, nothing else
        return 0.02 + sum((sig[n] / tau[g]) ** 2 for n, g in groups.items()) / 3

    shape = tune_mod.choose_shape(risk, groups, {"a": 100, "b": 1000}, base=0.02, slack=0.05)
    rho = dict(zip(shape.groups, shape.rho))
    # every ρ is a Dziugaite–Roy point, the chosen vector meets the target
    for j, r in zip(shape.j, shape.rho):
        assert r == pytest.approx(math.sqrt(0.1 * math.exp(-j / 100)), rel=1e-12)
    final = {n: rho[g] for n, g in groups.items()}
    assert risk(final) <= shape.target + 1e-12
    assert shape.kind == "per-group" and rho["b"] > 2 * rho["a"]
    # isotropic: 3σ²(1/τ_a² + 2/τ_b²)/3 = 0.05 → σ, within the bisection's 5 steps of j
    s_iso = math.sqrt(0.05 / ((1 / tau["a"] ** 2 + 2 / tau["b"] ** 2) / 3))
    assert tune_mod.dr_sigma(shape.j_isotropic) == pytest.approx(s_iso, rel=0.03)
    assert tune_mod.dr_sigma(shape.j_isotropic) <= s_iso * (1 + 1e-9)


def test_isotropic_shape_only_stops_after_the_isotropic_bisection():
    """tune_shape 'isotropic': the search returns the isotropic σ of the same bisection the
    per-group search starts with, in at most ISOTROPIC_EVALUATIONS evaluations (the per-group
    search of the same risk takes more and widens the tolerant group)."""
    tau = {"a": 0.01, "b": 0.04}
    groups = {"a.w": "a", "b.w": "b", "b.v": "b"}
    calls = []

    def risk(sig):
        calls.append(1)
        return 0.02 + sum((sig[n] / tau[g]) ** 2 for n, g in groups.items()) / 3

    iso = tune_mod.choose_shape(risk, groups, {"a": 100, "b": 1000}, 0.02, 0.05,
                                per_group=False)
    n_iso = len(calls)
    full = tune_mod.choose_shape(risk, groups, {"a": 100, "b": 1000}, 0.02, 0.05)
    assert iso.kind == "isotropic" and iso.j == [iso.j_isotropic] * 2
    assert iso.j_isotropic == full.j_isotropic
    assert n_iso == len(iso.trace) <= tune_mod.ISOTROPIC_EVALUATIONS
    assert len(calls) - n_iso > n_iso and full.kind == "per-group"
    assert tune_mod.search_evaluations(16, False) == \
        tune_mod.ISOTROPIC_EVALUATIONS + tune_mod.scale_evaluations() == 19


@pytest.mark.parametrize("tau", [0.03, 0.05, 0.07, 0.15, 0.2, 0.3, 0.5, 1.0])  # best at 1 … 12
def test_scale_search_finds_the_grid_minimum_in_nine_tries(tau):
    """choose_scale tries every 4th grid point, then halves around the best: on a bound with
    one valley it lands on the grid point an exhaustive pass over all 17 picks (computed here
    by hand from the same formula), with ≤ scale_evaluations() = 9 risk evaluations."""
    from boundcalc.engine.functions import kl_inv_upper

    groups = {"a.w": "a", "b.w": "b"}
    shape = tune_mod.Shape(groups=["a", "b"], j=[300, 200], j_isotropic=250, target=0.1,
                           base=0.05, kind="per-group")
    dist_sq = {"a": 0.02, "b": 0.5}
    n, draws, delta, delta_mc = 1000, 3000, 0.05, 0.01
    calls = []

    def risk(sig):
        calls.append(1)  # the risk rises with the noise: 0.05 + Σ (σ/τ)², capped below 1
        return min(0.9, 0.05 + sum((s / tau) ** 2 for s in sig.values()) / 10)

    def by_hand(c):
        sig = {g: c * r for g, r in zip(shape.groups, shape.rho)}
        kl = sum(dist_sq[g] / (2 * sig[g] ** 2) for g in shape.groups)
        r = min(0.9, 0.05 + sum((sig[g] / tau) ** 2 for g in groups.values()) / 10)
        up = kl_inv_upper(r, math.log(2 / delta_mc) / draws)
        return kl_inv_upper(up, (kl + math.log(2 * math.sqrt(n) * 17 / delta)) / n)

    best = min(tune_mod.SCALE_GRID, key=by_hand)
    c, rows = tune_mod.choose_scale(risk, groups, shape, dist_sq, n, draws, delta, delta_mc)
    assert c == best
    assert len(calls) == len(rows) <= tune_mod.scale_evaluations() == 9
    assert {r["scale"] for r in rows} <= set(tune_mod.SCALE_GRID)


def test_scale_grid_is_the_formula_grid():
    e = bc.load_registry().get(ENTRY)
    from boundcalc.evaluation import Prepared

    probe = Prepared(e, {"E_hat": 0.1, "k": 10, "n": 100, "dist_sq": [0.1], "rho": [0.1]})
    assert np.allclose(probe.grids["scale"], tune_mod.SCALE_GRID, rtol=1e-12, atol=0)


# ---- on real trained ViTs ------------------------------------------------------------------

@pytest.fixture(scope="module")
def vits(tmp_path_factory):
    from boundcalc.measure.data.dataset_io import read_batches
    from boundcalc.measure.data.hf import load_task_model

    out = tmp_path_factory.mktemp("vits")
    with single_thread():
        build(out, DigitsConfig(n_prior=300, n_bound=300, hidden=16, prior_epochs=8,
                                post_epochs=1))
    dev = torch.device("cpu")
    tm = load_task_model(out / "model", dev)
    prior = load_task_model(out / "prior", dev)
    S = read_batches(str(out / "bound.npz"), tm, batch_size=300)
    T = read_batches(str(out / "prior.npz"), tm, batch_size=300)
    return out, tm, prior, S, T


class _Guarded(Batched):
    """S, which raises when its batches are read before ``open`` is set."""

    open = False

    @property
    def batches(self):
        if not _Guarded.open:
            raise AssertionError("S was read during the σ search")
        return self._batches

    @batches.setter
    def batches(self, value):
        self._batches = value


def test_S_never_reaches_the_search(vits, monkeypatch):
    out, tm, prior, S, T = vits
    guarded = _Guarded(batches=S.batches, n=S.n, seq_len=S.seq_len, source=S.source,
                       description=S.description)
    calls = []
    real_risk, real_final, real_scale = (tune_mod.risk_draws, tune_mod.final_risk,
                                         tune_mod.choose_scale)
    real_search = tune_mod.search_risk  # the shape search's risk (it may stop a pass early)
    stage = {"now": "shape"}

    def spy_risk(tmx, data, *a, **k):
        calls.append((stage["now"], tmx is prior, tmx is tm, data is T, data is guarded))
        return real_risk(tmx, data, *a, **k)

    def spy_search(tmx, data, *a, **k):
        calls.append((stage["now"], tmx is prior, tmx is tm, data is T, data is guarded))
        return real_search(tmx, data, *a, **k)

    def spy_final(tmx, data, *a, **k):
        calls.append((stage["now"], tmx is prior, tmx is tm, data is T, data is guarded))
        return real_final(tmx, data, *a, **k)

    def spy_scale(*a, **k):
        stage["now"] = "scale"
        got = real_scale(*a, **k)
        stage["now"] = "final"
        _Guarded.open = True  # from here on S may be read: the one measurement
        return got

    monkeypatch.setattr(tune_mod, "risk_draws", spy_risk)
    monkeypatch.setattr(tune_mod, "search_risk", spy_search)
    monkeypatch.setattr(tune_mod, "final_risk", spy_final)
    monkeypatch.setattr(tune_mod, "choose_scale", spy_scale)
    _Guarded.open = False
    stats = Stats()
    with single_thread():
        tune_mod.measure_groups(stats, tm, guarded, torch.device("cpu"),
                                MeasureOptions(tune_data="prior.npz", group_draws=5,
                                               tune_draws=2),
                                tune_mod.Tuning(prior, "prior", T))
    _Guarded.open = False
    shape = [c for c in calls if c[0] == "shape"]
    scale = [c for c in calls if c[0] == "scale"]
    final = [c for c in calls if c[0] == "final"]
    assert shape and all(c[1] and c[3] for c in shape)  # prior weights, tune data only
    assert scale and all(c[2] and c[3] for c in scale)  # posterior weights, tune data
    assert final == [("final", False, True, False, True)]  # S once, at the chosen vector
    rec = stats.provenance["gibbs_groups"]
    assert rec["shape_disjoint_from_S"] is True and rec["tune_data"] == "prior.npz"
    assert "no union-bound cost" in rec["shape_note"]


def _plain_group_dist(out):
    """‖w_g − w₀,g‖² by a plain loop over the two saved checkpoints."""
    from transformers import ViTForImageClassification

    from boundcalc.measure.data.curvature import param_groups

    w = ViTForImageClassification.from_pretrained(out / "model")
    w0 = dict(ViTForImageClassification.from_pretrained(out / "prior").named_parameters())
    base = param_groups(w)
    d: dict[str, float] = {}
    for n, p in w.named_parameters():
        g = f"{base[n]}:{'matrix' if p.dim() >= 2 else 'vector'}"
        d[g] = d.get(g, 0.0) + float(((p.detach().double() - w0[n].detach().double()) ** 2).sum())
    return d


@pytest.fixture(scope="module")
def measured(vits, tmp_path_factory):
    out = vits[0]
    stats = tmp_path_factory.mktemp("st") / "stats.json"
    with single_thread():
        res = runner.invoke(app, ["measure", str(out / "model"), "--init", str(out / "prior"),
                                  "--data", str(out / "bound.npz"), "--tune-data",
                                  str(out / "prior.npz"), "--sigma", "0.01", "--draws", "6",
                                  "--tune-draws", "2", "--hessian-probes", "0",
                                  "--batch-size", "300", "-o", str(stats), "--json"])
    assert res.exit_code == 0, res.output[-2000:]
    return out, stats, json.loads(stats.read_text())


def _mp_value(rec, E, k, n, charged, delta=0.05, delta_mc=0.01):
    """The whole chain at 50 digits: KL, grid charges, kl⁻¹ of kl⁻¹."""
    with mp.workdps(50):
        c = mp.mpf(rec["scale"])
        KL = mp.fsum(mp.mpf(d) / (2 * c ** 2 * mp.mpf(r) ** 2)
                     for d, r in zip(rec["dist_sq"], rec["shape"]))
        cost = mp.log(17)
        if charged:
            for r in rec["shape"]:
                j = mp.nint(100 * mp.log(mp.mpf("0.1") / mp.mpf(r) ** 2))
                cost += 2 * mp.log(j) + mp.log(mp.pi ** 2 / 6)
        upper = kl_inv_exact(E, mp.log(2 / mp.mpf(delta_mc)) / k, dps=50)
        budget = (KL + mp.log(2 * mp.sqrt(n) / (mp.mpf(delta) * mp.exp(-cost)))) / n
        return kl_inv_exact(upper, budget, dps=50), KL, cost


def test_record_and_the_certified_value_at_50_digits(vits, measured, tmp_path):
    out, path, doc = measured
    rec = doc["provenance"]["gibbs_groups"]
    plain = _plain_group_dist(out)
    assert sorted(rec["groups"]) == sorted(plain)
    for g, d in zip(rec["groups"], rec["dist_sq"]):
        assert d == pytest.approx(plain[g], rel=1e-10, abs=1e-15)
    assert rec["sigma"] == pytest.approx([rec["scale"] * r for r in rec["shape"]], rel=1e-12)
    curve = doc["curves"]["gibbs_risk_groups"]
    # 6 passes over the 300 samples of S, every sample of every pass its own posterior draw
    # (the ViT's row-wise noise is exact, so --gibbs-mode auto is sample): N = 6·300
    assert rec["mc"] == {"mode": "sample", "passes": 6, "rows_per_unit": 1, "units": 1800,
                         "delta_mc": 0.01, "samples_per_pass": 300}
    assert curve["at"] == [rec["scale"]] and curve["n_samples"] == 1800
    assert doc["scalars"]["gibbs_groups_units"]["value"] == 1800
    assert "N = 6·300 = 1800" in curve["method"]
    E, k, n = curve["value"][0], 1800, 300
    # Ê is a mean of 1800 zero-one losses: a multiple of 1/1800
    assert E * 1800 == pytest.approx(round(E * 1800), abs=1e-9)
    for charged in (False, True):
        if charged:  # the same vector, but chosen with data that depend on S
            doc2 = json.loads(path.read_text())
            doc2["provenance"]["gibbs_groups"]["shape_disjoint_from_S"] = False
            p = tmp_path / "charged.json"
            p.write_text(json.dumps(doc2))
        else:
            p = path
        exact, KL, cost = _mp_value(rec, E, k, n, charged)
        for r in (bc.compute(ENTRY, str(p)),
                  optimize(ENTRY, str(p), sensitivity=False, contributions=False)):
            assert r.is_bound and r.kind == "certified" and not r.estimated
            assert r.value >= exact * (1 - 1e-15)  # rounded outward
            assert r.value == pytest.approx(float(exact), rel=1e-9)
            assert r.terms["KL_groups"] == pytest.approx(float(KL), rel=1e-12)
            assert sum(r.union_bound_cost.values()) == pytest.approx(float(cost), rel=1e-12)
            assert r.union_bound_cost["scale"] == pytest.approx(math.log(17), rel=1e-12)
            assert ("rho" in r.union_bound_cost) == charged
            assert r.delta == pytest.approx(0.06)
            assert ("no union-bound cost" in r.parameter_choice["rho"]) != charged


def test_compare_lists_the_group_entry_as_certified(measured):
    _, path, _ = measured
    res = runner.invoke(app, ["compare", "--stats", str(path), "--json"])
    assert res.exit_code == 0, res.output[-1500:]
    rows = {r["id"]: r for r in json.loads(res.stdout)["certified"]}
    assert rows[ENTRY]["is_bound"] and rows[ENTRY]["label"] == "certified bound"


def _stats_with(rec):
    return Stats(scalars={"n": Quantity(300.0), "gibbs_groups_units": Quantity(6.0)},
                 curves={"gibbs_risk_groups": Curve("scale", np.array([1.0]), np.array([0.1]),
                                                    estimated=True, n_samples=6)},
                 provenance={"gibbs_groups": rec})


@pytest.mark.parametrize("bad, culprit", [
    ({"shape": [0.1, -0.2]}, "shape[1]"),
    ({"dist_sq": [0.1]}, "dist_sq"),
    ({"shape_disjoint_from_S": "yes"}, "shape_disjoint_from_S"),
    ({"groups": "a"}, "groups"),
])
def test_a_damaged_record_is_one_line_naming_the_field(bad, culprit):
    rec = {"groups": ["a", "b"], "dist_sq": [0.01, 0.02], "shape": [0.1, 0.2],
           "shape_disjoint_from_S": True, **bad}
    with pytest.raises(StatsError, match=culprit.replace("[", r"\[").replace("]", r"\]")) as exc:
        bc.compute(ENTRY, _stats_with(rec))
    assert "\n" not in str(exc.value)


def test_hand_set_shape_is_charged_unless_declared_fixed():
    rec = {"groups": ["a", "b"], "dist_sq": [0.01, 0.02], "shape": [0.1, 0.2],
           "shape_disjoint_from_S": True}
    j = 300
    rho = [math.sqrt(0.1 * math.exp(-j / 100))] * 2
    r = bc.compute(ENTRY, _stats_with(rec), values={"rho": rho})
    assert r.union_bound_cost["rho"] == pytest.approx(2 * (2 * math.log(j)
                                                          + math.log(math.pi ** 2 / 6)))
    r = bc.compute(ENTRY, _stats_with(rec), values={"rho": rho}, fixed=("rho",))
    assert "rho" not in r.union_bound_cost


@pytest.mark.parametrize("extra, needle", [
    (["--tune-data", "{S}"], "disjoint"),
    (["--tune-data", "{dir}/nope.npz"], "--tune-data"),
])
def test_bad_tune_options_are_one_line(vits, tmp_path, extra, needle):
    out = vits[0]
    extra = [a.format(S=out / "bound.npz", dir=tmp_path) for a in extra]
    res = runner.invoke(app, ["measure", str(out / "model"), "--init", str(out / "prior"),
                              "--data", str(out / "bound.npz"), *extra,
                              "-o", str(tmp_path / "s.json")])
    assert res.exit_code != 0 and needle in res.output
    assert len(res.output.strip().splitlines()) == 1 and not (tmp_path / "s.json").exists()


def test_tune_data_needs_init(vits, tmp_path):
    out = vits[0]
    res = runner.invoke(app, ["measure", str(out / "model"), "--data", str(out / "bound.npz"),
                              "--tune-data", str(out / "prior.npz"),
                              "-o", str(tmp_path / "s.json")])
    assert res.exit_code != 0 and "--init" in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_units_are_equal_chunks_of_S_each_with_its_own_draw(vits):
    """At σ = 0 every unit is the plain error of its chunk (a loop written here); at σ > 0 the
    units of one pass differ in draw, so their count, not the passes, is the N of the kl term."""
    from transformers import ViTForImageClassification

    out, tm, _, S, _ = vits
    zero = dict.fromkeys((n for n, _ in tm.model.named_parameters()), 0.0)
    with single_thread():
        units, rows = tune_mod.unit_risks(tm, S, torch.device("cpu"), zero, 2, 0, 0.01)
    assert rows == 60 and len(units) == 2 * 5
    z = np.load(out / "bound.npz")
    m = ViTForImageClassification.from_pretrained(out / "model").eval()
    with torch.no_grad():
        wrong = (m(pixel_values=torch.from_numpy(z["pixel_values"])).logits.argmax(-1)
                 != torch.from_numpy(z["labels"])).double().numpy()
    plain = wrong.reshape(5, 60).mean(1)
    assert units[:5] == pytest.approx(plain, abs=1e-12)
    assert units[5:] == pytest.approx(plain, abs=1e-12)
    assert tune_mod.unit_rows(S, most=64) == 60
    odd = Batched(batches=[({"x": torch.zeros(7, 1)}, None)], n=7, seq_len=1, source="",
                  description="")
    assert tune_mod.unit_rows(odd) == 0  # 7 rows: no chunk of ≥ 8, a unit is a whole pass


def _plain_wrong(out):
    from transformers import ViTForImageClassification

    z = np.load(out / "bound.npz")
    m = ViTForImageClassification.from_pretrained(out / "model").eval()
    with torch.no_grad():
        return (m(pixel_values=torch.from_numpy(z["pixel_values"])).logits.argmax(-1)
                != torch.from_numpy(z["labels"])).double().numpy()


def test_final_risk_draws_per_sample_where_exact_else_per_chunk(vits, monkeypatch):
    """auto on the ViT: every sample of every pass is one loss (N = k·n); at σ = 0 their mean
    is the plain error (a loop written here). Where row-wise noise is not exact (tied weights,
    simulated) auto falls back to one draw per chunk of 60 rows (N = k·5); --gibbs-mode whole
    asks for that directly; --gibbs-samples m gives N = k·m."""
    from boundcalc.measure.data import row_noise

    out, tm, _, S, _ = vits
    zero = dict.fromkeys((n for n, _ in tm.model.named_parameters()), 0.0)
    wrong = _plain_wrong(out)
    cpu = torch.device("cpu")
    with single_thread():
        fin = tune_mod.final_risk(tm, S, cpu, zero, MonteCarlo(3, 0, 0.01))
        assert (fin.mode, fin.n_losses, fin.passes, fin.rows_per_unit) == ("sample", 900, 3, 1)
        assert fin.mean == pytest.approx(wrong.mean(), abs=1e-12)
        sub = tune_mod.final_risk(tm, S, cpu, zero, MonteCarlo(3, 0, 0.01, samples=50))
        assert (sub.mode, sub.n_losses) == ("sample", 150)
        whole = tune_mod.final_risk(tm, S, cpu, zero, MonteCarlo(2, 0, 0.01, mode="whole"))
        assert (whole.mode, whole.n_losses, whole.rows_per_unit) == ("chunk", 10, 60)
        assert whole.mean == pytest.approx(wrong.mean(), abs=1e-12)
        monkeypatch.setattr(row_noise, "unsupported_reason", lambda *a: "tied weights")
        tied = tune_mod.final_risk(tm, S, cpu, zero, MonteCarlo(2, 0, 0.01))
        assert (tied.mode, tied.n_losses, tied.rows_per_unit) == ("chunk", 10, 60)
        assert "not exact" in tied.how



def test_a_search_pass_stops_once_above_its_target_with_the_same_answer(vits):
    """issue 54: the shape search asks only "risk ≤ target?"; a pass of whole-model draws
    (gibbs_estimate's ``stop_above``, as search_groups' shape risk calls it)
    stops once its summed loss exceeds target·rows and returns that partial mean, a lower bound
    still above the target: the answer is the full pass's for every target tried, and a pass
    that stops read fewer rows (its mean below the full one)."""
    from boundcalc.measure.data.dataset_io import read_batches
    from boundcalc.measure.data.gibbs import MonteCarlo, gibbs_estimate

    def risk_draws(tm, data, dev, sigma, draws, seed, alpha, stop_above=None):
        return gibbs_estimate(tm, data, dev, [sigma], MonteCarlo(draws, seed, alpha, mode="whole"),
                              stop_above=stop_above).means[0]

    out, tm, prior, S, T = vits
    dev = torch.device("cpu")
    T50 = read_batches(str(out / "prior.npz"), prior, batch_size=50)  # 6 batches of 50
    for sigma in (0.003, 0.03, 0.3):
        full = float(risk_draws(prior, T50, dev, sigma, 1, 7, 0.1).mean())
        assert full == float(risk_draws(prior, T50, dev, sigma, 1, 7, 0.1,
                                        stop_above=2.0).mean())  # never reached: the same
        for target in (0.0, full / 3, full * 0.99, full, full * 1.01, 0.5, 0.99):
            got = float(risk_draws(prior, T50, dev, sigma, 1, 7, 0.1,
                                   stop_above=target).mean())
            assert (got <= target) == (full <= target), (sigma, target, got, full)
            assert got <= full + 1e-12
            if got < full - 1e-12:  # stopped early: certainly above the target already
                assert got > target
    # the first batch alone exceeds a target of 0: the pass read 50 of its 300 rows
    first = float(risk_draws(prior, T50, dev, 0.3, 1, 7, 0.1, stop_above=0.0).mean())
    assert 0 < first < float(risk_draws(prior, T50, dev, 0.3, 1, 7, 0.1).mean())
