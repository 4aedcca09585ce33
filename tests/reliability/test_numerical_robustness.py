"""Numerical robustness: certified bounds are finite over their whole declared domain, never
below the empirical term they bound, monotone where the theory says so; layer products do not
overflow; kl⁻¹ is exact and rounded outward; a failing optimizer says so.

The entries are those of the registry at the time the tests run (new formula files keep
arriving): every certified entry is sampled from its own declared symbol domains. Entries whose
symbols cannot be sampled are listed by ``test_every_certified_entry_is_sampled``.
"""

from __future__ import annotations

import math
import re

import mpmath
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import boundcalc as bc
from _reference import kl_exact, kl_inv_exact
from boundcalc.engine.functions import kl_inv_upper
from boundcalc.errors import BoundcalcError, DomainError, OptimizationError
from boundcalc.evaluation import Prepared, dr_grids, gridmin_params
from boundcalc.registry.loader import entries_from_document
from boundcalc.registry.schema import Domain, Entry

REGISTRY = bc.load_registry()
CERTIFIED = [e for e in REGISTRY if e.kind == "certified"]

# An empirical term is a measured symbol that the bound sits on top of: the empirical (Gibbs,
# ramp, margin) risk or training loss, or the Monte Carlo estimate of the Gibbs risk. The bound
# must never be below it. Matched by name; the entries it selects are listed in the test ids.
EMPIRICAL = re.compile(r"^(emp_\w+|ramp_risk|train_loss|E_hat)$")

# Symbols along which the theory says the bound is monotone (parameters held fixed):
# fewer samples → larger bound; smaller δ → larger bound; larger KL → larger bound.
N_MIN_MONOTONE = 3  # log(n)/n (Bartlett's Dudley term at α = 1/n) decreases only for n ≥ e

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


# ---- sampling an entry's declared domain -------------------------------------------------------

def _log_uniform(lo: float, hi: float) -> st.SearchStrategy[float]:
    return st.floats(math.log10(lo), math.log10(hi)).map(lambda u: 10.0 ** u)


def _integers(dom: Domain, cap: float) -> st.SearchStrategy[float]:
    lo_f, hi_f = max(dom.lo, -cap), min(dom.hi, cap)
    lo = math.floor(lo_f) + 1 if dom.lo_open and lo_f == math.floor(lo_f) else math.ceil(lo_f)
    hi = math.ceil(hi_f) - 1 if dom.hi_open and hi_f == math.ceil(hi_f) else math.floor(hi_f)
    if hi <= lo:
        return st.just(float(lo))
    parts = [st.just(float(lo)), st.integers(lo, min(hi, lo + 20)).map(float)]
    if hi > lo + 20:
        parts.append(_log_uniform(max(lo, 1), hi).map(lambda x: float(min(max(round(x), lo), hi))))
    return st.one_of(parts)


def _reals(dom: Domain, cap: float = 1e8, tiny: float = 1e-8) -> st.SearchStrategy[float]:
    lo, hi = dom.lo, dom.hi
    parts: list[st.SearchStrategy[float]] = []
    if math.isfinite(lo) and not dom.lo_open:
        parts.append(st.just(lo))
    if math.isfinite(hi) and not dom.hi_open:
        parts.append(st.just(hi))
    if math.isfinite(lo) and math.isfinite(hi):
        width = hi - lo
        parts.append(st.floats(lo, hi, exclude_min=True, exclude_max=True, allow_subnormal=False))
        parts.append(_log_uniform(1e-12, 0.5).map(lambda t: lo + t * width))
        parts.append(_log_uniform(1e-12, 0.5).map(lambda t: hi - t * width))
    elif math.isfinite(lo):
        parts.append(_log_uniform(tiny, cap).map(lambda t: lo + t))
    elif math.isfinite(hi):
        parts.append(_log_uniform(tiny, cap).map(lambda t: hi - t))
    else:
        parts += [st.just(0.0), _log_uniform(tiny, cap), _log_uniform(tiny, cap).map(lambda t: -t)]
    return st.one_of(parts).filter(lambda x: bool(dom.contains(x)))


def scalar_strategy(dom: Domain, role: str) -> st.SearchStrategy[float]:
    if dom.integer:
        return _integers(dom, 1e9 if role in ("data_size", "measured") else 1e6)
    return _reals(dom)


def sampleable(entry: Entry) -> str | None:
    """Why the entry's symbols cannot be sampled, or None."""
    for s in entry.symbols.values():
        if s.domain.lo > s.domain.hi or (s.domain.lo == s.domain.hi and
                                         (s.domain.lo_open or s.domain.hi_open)):
            return f"symbol '{s.name}' has an empty domain {s.domain.text()}"
    for p in entry.parameters.values():
        if p.choice == "prior" and p.prior is None:
            return f"parameter '{p.name}' has no prior"
    return None


@st.composite
def entry_values(draw, entry: Entry, size_max: int = 4) -> dict:
    """Values for every symbol of ``entry``, drawn from the declared domains."""
    sizes = {}
    for idx, size_sym in entry.indices.items():
        if size_sym not in sizes:
            sizes[size_sym] = draw(st.integers(1, size_max))
    values: dict = {}
    for name, s in entry.symbols.items():
        if s.role == "size":
            values[name] = float(sizes.get(name, draw(st.integers(1, size_max))))
            continue
        elem = scalar_strategy(s.domain, s.role)
        if s.indexed:
            shape = tuple(sizes[entry.indices[i]] for i in s.indices)
            n = int(np.prod(shape))
            flat = draw(st.lists(elem, min_size=n, max_size=n))
            values[name] = np.array(flat, dtype=np.float64).reshape(shape)
        else:
            values[name] = draw(elem)
    return values


def draw_params(draw, prep: Prepared, rules: bool = True) -> dict[str, float]:
    """Free parameters: sometimes their closed form / default (when ``rules``), else a value
    drawn from the declared domain, grid or prior grid. A closed form that needs another
    parameter which has no value yet is not used (see test_entry_evaluates_without_parameters
    for entries where that makes the closed forms unusable)."""
    entry = prep.entry
    internal = set(gridmin_params(entry))
    scalar = [p for p in entry.parameters.values() if p.name not in internal]
    use_rule = {p.name: rules and (p.closed_form is not None or p.default is not None)
                and draw(st.booleans()) for p in scalar}
    changed = True
    while changed:  # a closed form may only depend on parameters that will have a value
        changed = False
        for p in scalar:
            if use_rule[p.name] and p.default is None and p.closed_form is not None:
                deps = {q.name for q in scalar if q.symbol in p.closed_form.free_symbols}
                if any(use_rule[d] and entry.parameters[d].default is None for d in deps):
                    use_rule[p.name] = False
                    changed = True
    out: dict[str, float] = {}
    for p in scalar:
        if use_rule[p.name]:
            continue
        if p.grid is not None:
            grid = prep.grids[p.name]
            out[p.name] = float(grid[draw(st.integers(0, len(grid) - 1))])
        elif p.prior is not None:
            j = draw(st.one_of(st.integers(1, 50), st.integers(1, min(p.prior.j_max, 5000))))
            out[p.name] = float(p.prior.value(j))
        else:
            out[p.name] = draw(_reals(p.domain, cap=1e6, tiny=1e-6))
    return out


def _ids(entries):
    return [e.id for e in entries]


SAMPLED = [e for e in CERTIFIED if sampleable(e) is None]
UNSAMPLED = {e.id: sampleable(e) for e in CERTIFIED if sampleable(e) is not None}


def test_every_certified_entry_is_sampled():
    """Lists the certified entries the domain sweep cannot sample (none expected)."""
    assert CERTIFIED, "the registry has no certified entries"
    if UNSAMPLED:
        pytest.skip(f"not sampled: {UNSAMPLED}")


def _finite(result) -> bool:
    if math.isnan(result.value):
        return False
    return math.isfinite(result.value) or math.isfinite(result.log10_value)


# ---- finite everywhere on the declared domain, never below the empirical term -----------------

# Known bug (boundcalc/evaluation.py, Prepared.resolve): a closed form that evaluates to 0 or
# to a non-finite number for a grid/prior parameter is refused instead of being snapped to the
# grid (pac_bayes_single_sigma with dist_sq = 0 or hess_trace = 0). The sweep skips exactly
# that refusal; test_degenerate_closed_form_snaps_to_the_grid is the strict xfail for it.
_DEGENERATE_CLOSED_FORM = re.compile(r"closed form of '\w+' is not finite|"
                                     r"parameter '\w+' = 0 is not a positive finite point")


@pytest.mark.parametrize("entry", SAMPLED, ids=_ids(SAMPLED))
@SETTINGS
@given(data=st.data())
def test_certified_bound_is_finite_on_its_whole_domain(entry, data):
    values = data.draw(entry_values(entry))
    prep = Prepared(entry, values, fixed=dr_grids(entry))
    params = draw_params(data.draw, prep)
    try:
        result = prep.result(params)
    except DomainError as exc:
        assume(not _DEGENERATE_CLOSED_FORM.search(str(exc)))
        raise
    assert _finite(result), (entry.id, values, params, result.value)
    assert result.kind == "certified"
    for name, t in result.terms.items():
        assert not math.isnan(t), (entry.id, name, values, params)
    # never below the empirical term it bounds (4 ulp of rounding allowed)
    for name in _empirical_symbols(entry):
        emp = float(values[name])
        assert result.value >= emp - 4 * math.ulp(emp), (entry.id, name, values, result.value)


# ---- which entries have an empirical term (checked in the sweep above) --------------------------

def _empirical_symbols(entry: Entry) -> list[str]:
    return [s.name for s in entry.symbols.values()
            if EMPIRICAL.match(s.name) and s.role == "measured" and not s.indexed]


WITH_EMPIRICAL = [e for e in SAMPLED if _empirical_symbols(e)]


def test_empirical_term_entries_are_the_expected_ones():
    """The name rule picks the PAC-Bayes / margin entries it is meant for (when present)."""
    picked = {e.id for e in WITH_EMPIRICAL}
    for expected in ("mcallester", "pac_bayes_kl", "catoni", "bartlett_spectral_ln2"):
        if expected in REGISTRY:
            assert expected in picked
    assert picked, "no certified entry has an empirical-risk term"


# ---- monotone where the theory says so ----------------------------------------------------------

def _monotone_cases():
    cases = []
    for e in SAMPLED:
        for s in e.symbols.values():
            if s.indexed:
                continue
            if s.role == "data_size":
                cases.append((e, s.name, "down"))
            elif s.role == "confidence":
                cases.append((e, s.name, "down"))
            elif s.name == "KL" and s.role == "measured":
                cases.append((e, s.name, "up"))
    return cases


MONOTONE = _monotone_cases()


@pytest.mark.parametrize("entry, name, direction", MONOTONE,
                         ids=[f"{e.id}-{n}" for e, n, _ in MONOTONE])
@settings(max_examples=10, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_bound_is_monotone(entry, name, direction, data):
    """n ↓ ⇒ bound ↑, δ ↓ ⇒ bound ↑, KL ↑ ⇒ bound ↑, at the same free parameters and the same
    union-bound costs (the theorem's statement for fixed parameters)."""
    values = data.draw(entry_values(entry))
    spec = entry.symbols[name]
    if spec.role == "data_size":
        assume(values[name] >= N_MIN_MONOTONE + 1)
    prep = Prepared(entry, values, fixed=dr_grids(entry))
    params, _, costs = prep.resolve(draw_params(data.draw, prep, rules=False))
    before = prep.value(params, costs)
    x = float(values[name])
    if direction == "down":
        lo = max(spec.domain.lo, N_MIN_MONOTONE if spec.role == "data_size" else 0.0)
        factor = data.draw(st.floats(1e-6, 1.0, exclude_max=True))
        y = lo + (x - lo) * factor
        if spec.domain.integer:
            y = float(math.floor(y))
        assume(bool(spec.domain.contains(y)) and y < x)
    else:
        y = x + data.draw(_log_uniform(1e-6, 1e6)) * max(x, 1.0)
    moved = dict(values)
    moved[name] = y
    after = Prepared(entry, moved, fixed=dr_grids(entry)).value(params, costs)
    assert not math.isnan(after) and not math.isnan(before)
    if before == math.inf:  # vacuous already (e.g. λ → 2 in pac_bayes_lambda)
        assert after == math.inf
        return
    assert after >= before - 1e-12 * abs(before) - 1e-300, (entry.id, name, x, y, before, after,
                                                             params)


# ---- products over many layers in log space -----------------------------------------------------

def _edelman_reference_log(L, A, C_QK, C_V, C_in, C_out, N21_QK, N21_V, N21_in, N21_out,
                           L_phi=1.13):
    """ln of B_Edelman, computed directly in logs with numpy (authors' formula)."""
    per_layer = np.log(L_phi) + np.log(C_in) + np.log(C_out) + np.log(
        np.sum(C_V * (1 + 4 * C_QK), axis=1))
    log_alpha = np.array([per_layer[l + 1:].sum() for l in range(L)])
    xi = (np.sum((C_out[:, None] * C_in[:, None] * C_V * N21_QK) ** (2 / 3)
                 + (C_out[:, None] * C_in[:, None] * N21_V) ** (2 / 3), axis=1)
          + (C_out * N21_in) ** (2 / 3) + N21_out ** (2 / 3))
    terms = (2 / 3) * log_alpha + np.log(xi)
    m = terms.max()
    log_sum = m + np.log(np.exp(-m) + np.exp(terms - m).sum())  # ln(1 + Σ exp(terms))
    return 1.5 * log_sum


@pytest.mark.skipif("spectrum_adaptive_edelman" not in REGISTRY, reason="entry not in registry")
def test_96_layer_edelman_proxy_with_spectral_norms_50_does_not_overflow():
    L, A = 96, 12
    rng = np.random.default_rng(0)
    v = {
        "C_QK": np.full((L, A), 50.0), "C_V": np.full((L, A), 50.0),
        "C_in": np.full(L, 50.0), "C_out": np.full(L, 50.0),
        "N21_QK": rng.uniform(100, 200, (L, A)), "N21_V": rng.uniform(100, 200, (L, A)),
        "N21_in": rng.uniform(100, 200, L), "N21_out": rng.uniform(100, 200, L),
    }
    r = bc.evaluate(REGISTRY.get("spectrum_adaptive_edelman"), {**v, "L": L, "A": A})
    ref = _edelman_reference_log(L, A, **v) / math.log(10)
    assert ref > 800  # far beyond float64: the plain product is inf
    assert math.isfinite(r.log10_value)
    assert r.log10_value == pytest.approx(ref, rel=1e-10)
    assert "e+" in r.value_text() and r.value_text() != "inf"


BARTLETT_LIKE = [e for e in REGISTRY if "R_bar" in e.definitions
                 and {"s", "b", "rho"} <= set(e.symbols)]


def _gamma_on_grid(prep: Prepared) -> dict[str, float]:
    out = {}
    for p in prep.scalar_params():
        if p.grid is not None:
            grid = prep.grids[p.name]
            out[p.name] = float(grid[int(np.argmin(np.abs(np.log(grid))))])  # nearest to 1
        elif p.closed_form is None and p.default is None and p.prior is None:
            out[p.name] = 1.0
    return out


@pytest.mark.parametrize("s_val", [50.0, 1e4])
@pytest.mark.parametrize("entry", BARTLETT_LIKE, ids=_ids(BARTLETT_LIKE))
def test_96_layer_bartlett_does_not_overflow(entry, s_val):
    """R̄ = Π s_i ρ_i · (Σ (b_i/s_i)^{2/3})^{3/2} over 96 layers: 1e166 for s = 50 and 1e388
    (beyond float64) for s = 1e4. Checked against a direct log-space computation."""
    L, X_fro, W, n, ramp = 96, 300.0, 4096, 10 ** 6, 0.1
    s = np.full(L, s_val)
    b = np.linspace(10.0, 200.0, L)
    values = {"L": L, "s": s, "b": b, "rho": np.ones(L), "ramp_risk": ramp, "X_fro": X_fro,
              "W": W, "n": n, "delta": 0.05}
    prep = Prepared(entry, {k: v for k, v in values.items() if k in entry.symbols})
    params = _gamma_on_grid(prep)
    r = prep.result(params)
    gamma = r.parameters["gamma"]
    ln_rbar = L * math.log(s_val) + 1.5 * math.log(float(np.sum((b / s) ** (2 / 3))))
    assert math.isfinite(r.log10_value) and not math.isnan(r.value)
    conf = r.terms["confidence_term"]
    d_eff = r.delta_effective
    lo = 3 * math.sqrt(math.log(1 / d_eff) / (2 * n))
    hi = 3 * math.sqrt(math.log(2 / d_eff) / (2 * n))
    assert lo * (1 - 1e-12) <= conf <= hi * (1 + 1e-12)
    if "K" in entry.definitions:  # Dudley-optimal α: K ≥ n/6, so the complexity saturates at 4
        ln_k = math.log(2 * X_fro * math.sqrt(math.log(2 * W ** 2)) / gamma) + ln_rbar
        assert ln_k > math.log(n / 6)
        assert r.terms["complexity"] == 4.0
        assert r.value == pytest.approx(ramp + 4.0 + conf, rel=1e-14)
    else:
        ln_c = math.log(72 * X_fro * math.sqrt(math.log(2 * W ** 2)) * math.log(n) / (gamma * n))
        expected = (ln_c + ln_rbar) / math.log(10)  # ramp, 8/n^1.5 and conf are negligible
        assert r.log10_value == pytest.approx(expected, rel=1e-12)
        if s_val > 1e3:
            assert expected > 308 and r.value_text() != "inf"


PRODUCT_ENTRIES = [e for e in REGISTRY if e.indices and any(
    "Product(" in t for t in [e.expression_text, *(d.text for d in e.definitions.values())])]


@pytest.mark.parametrize("entry", PRODUCT_ENTRIES, ids=_ids(PRODUCT_ENTRIES))
def test_any_layer_product_survives_96_layers_of_norm_50(entry):
    """Every entry with a Product over an index: 96 entries of 50 (or its domain's nearest value)
    per indexed measured symbol give a finite log10 value, never inf/NaN."""
    sizes = {sym: (96 if sym in ("L", "d") else 2) for sym in set(entry.indices.values())}
    values: dict = {}
    for name, s in entry.symbols.items():
        if s.role == "size":
            values[name] = float(sizes.get(name, 2))
        elif s.indexed:
            shape = tuple(sizes[entry.indices[i]] for i in s.indices)
            x = 50.0 if s.domain.contains(50.0) else (s.domain.lo + 1)
            values[name] = np.full(shape, x)
        elif s.default is None:
            cands = [0.1, 50.0, 1e6, 2.0, 1.0]
            values[name] = next(c for c in cands if s.domain.contains(c))
    prep = Prepared(entry, values, fixed=dr_grids(entry))
    r = prep.result(_gamma_on_grid(prep))
    assert math.isfinite(r.log10_value) or r.value == 0.0, (entry.id, r.value)


# ---- kl inverse: exact to 1e-12 and never below the true root -----------------------------------

mpmath.mp.dps = 80


@settings(max_examples=120, deadline=None, derandomize=True)
@given(q=st.one_of(st.just(0.0), st.floats(0, 1, exclude_max=True),
                   _log_uniform(1e-15, 1e-1), _log_uniform(1e-12, 1e-1).map(lambda t: 1 - t)),
       c=st.one_of(_log_uniform(1e-15, 30.0), st.floats(0, 5, allow_subnormal=False)))
def test_kl_inv_upper_matches_high_precision_root_and_rounds_outward(q, c):
    got = kl_inv_upper(q, c)
    if c == 0:
        assert got == q
        return
    if kl_exact(q, 1 - mpmath.mpf(2) ** -53) <= c:
        assert got == 1.0  # the root lies above the largest double below 1
        return
    root = kl_inv_exact(q, c, dps=80)
    assert mpmath.mpf(got) >= root, (q, c, got, root)  # never below the true root
    # the kernel certifies kl(q‖p) > c with a 1e-12 relative margin on kl, i.e. about 1e-12
    # relative on p − q: exact to 1e-12 absolutely, and to 2e-12 relatively for tiny roots
    assert float(mpmath.mpf(got) - root) <= 1e-12
    assert float((mpmath.mpf(got) - root) / root) <= 2e-12, (q, c, got, root)
    assert got >= q


def test_kl_inv_upper_known_values():
    # q = 0: kl(0‖p) = −ln(1 − p) = c  ⇒  p = 1 − e^{−c}
    for c in (1e-10, 0.01, 1.0, 10.0):
        assert kl_inv_upper(0.0, c) == pytest.approx(-math.expm1(-c), rel=2e-12, abs=1e-300)
        assert kl_inv_upper(0.0, c) >= -math.expm1(-c)
    assert kl_inv_upper(0.3, 0.0) == 0.3
    assert kl_inv_upper(1.0, 5.0) == 1.0
    assert kl_inv_upper(0.5, math.inf) == 1.0
    with pytest.raises(ValueError):
        kl_inv_upper(math.nan, 1.0)
    with pytest.raises(ValueError):
        kl_inv_upper(0.5, -1.0)


# ---- an optimizer that fails to converge says so ------------------------------------------------

def _optimize_module():
    try:
        from boundcalc import optimize as opt
    except ImportError:
        return None
    return opt if hasattr(opt, "optimize") else None


@pytest.mark.skipif(_optimize_module() is None, reason="boundcalc.optimize is not available yet")
def test_optimizer_on_an_objective_undefined_everywhere_raises_optimization_error():
    doc = {"family": "t", "entry": [{
        "id": "nowhere", "title": "t", "source": "s", "provenance": "p", "kind": "certified",
        "expression": "x + Piecewise((sqrt(-lam - 1), lam > 0), (0, True))",
        "symbols": {"x": {"meaning": "x", "role": "measured", "domain": "[0, inf)"}},
        "parameters": {"lam": {"choice": "simultaneous", "domain": "(0, inf)",
                               "bounds": [0.001, 1000], "log_scale": True}}}]}
    entry = entries_from_document(doc, "t.toml")[0]
    opt = _optimize_module()
    with pytest.raises(OptimizationError, match="lam"):
        opt.optimize(entry, values={"x": 0.5}, use_gp=False, sensitivity=False,
                     contributions=False)


@pytest.mark.skipif(_optimize_module() is None, reason="boundcalc.optimize is not available yet")
def test_search_primitives_refuse_to_return_a_point_for_a_pathological_objective():
    try:
        from boundcalc.optimize.search import Axis, minimize_1d, minimize_nd
    except ImportError:
        pytest.skip("boundcalc.optimize.search has no minimize_1d/minimize_nd")
    nan = lambda X: np.full(len(X), np.nan)  # noqa: E731
    inf = lambda X: np.full(len(X), np.inf)  # noqa: E731
    for f in (nan, inf):
        with pytest.raises(OptimizationError, match="'p'"):
            minimize_1d(f, Axis("p", 0.0, 1.0, False))
        with pytest.raises(OptimizationError, match="p, q"):
            minimize_nd(f, [Axis("p", 0.0, 1.0, False), Axis("q", 0.0, 1.0, False)], None)


def test_domain_sweep_rejects_values_outside_the_domain():
    """The sweep above only means something if out-of-domain values are refused."""
    e = REGISTRY.get("mcallester")
    for bad in ({"emp_risk": 1.5}, {"emp_risk": -0.1}, {"KL": -1.0}, {"n": 0}, {"n": 10.5},
                {"delta": 0.0}, {"delta": 1.0}, {"KL": math.nan}, {"KL": math.inf}):
        values = {"emp_risk": 0.1, "KL": 10.0, "n": 1000, "delta": 0.05, **bad}
        with pytest.raises(DomainError) as exc:
            bc.evaluate(e, values)
        assert next(iter(bad)) in str(exc.value)
    assert issubclass(DomainError, BoundcalcError)


# ---- focused xfails: bugs the domain sweep found ------------------------------------------------

@pytest.mark.skipif("pac_bayes_single_sigma" not in REGISTRY, reason="entry not in registry")
@pytest.mark.parametrize("hess, dist", [(1.0, 0.0), (0.0, 1.0), (0.0, 0.0)])
def test_degenerate_closed_form_snaps_to_the_grid(hess, dist):
    """dist_sq = 0 (weights did not move) and hess_trace = 0 are in the declared domains; the
    closed form σ = (Σ dist / (λ Σ hess))^{1/4} is only a heuristic for picking a prior-grid
    point, so the bound must still be evaluated (at an end of the grid) and be finite."""
    e = REGISTRY.get("pac_bayes_single_sigma")
    prep = Prepared(e, dict(train_loss=0.1, n=1000.0, delta=0.05, s=1.0, G=1.0,
                            hess_trace=np.array([hess]), dist_sq=np.array([dist])))
    lam = float(prep.grids["lam"][3])
    r = prep.result({"lam": lam})
    assert math.isfinite(r.value) and r.value >= 0.1
    # independent value at the chosen grid point
    sigma = r.parameters["sigma"]
    j = e.parameters["sigma"].prior.index_of(sigma)
    cost = math.log(len(prep.grids["lam"])) + 2 * math.log(j) + math.log(math.pi ** 2 / 6)
    kl = 0.0 if dist == 0 else dist / (2 * sigma ** 2)  # σ may be ~1e-218 (grid end)
    expected = 0.1 + sigma ** 2 * hess / 2 + lam / (2 * 1000) + (kl + math.log(1 / 0.05) + cost) / lam
    assert r.value == pytest.approx(expected, rel=1e-12)


CLOSED_FORM_ONLY = [e for e in REGISTRY if e.parameters and all(
    p.default is not None or p.closed_form is not None or p.name in gridmin_params(e)
    for p in e.parameters.values())]
CYCLIC_CLOSED_FORMS: dict[str, str] = {}  # entries whose closed forms cannot be resolved


def _typical(s) -> float:
    order = {"data_size": (10000.0,), "confidence": (0.05,)}.get(s.role, ())
    for x in (*order, 0.1, 0.05, 1.0, 1000.0, 2.0, 10.0, 0.5):
        if s.domain.contains(x):
            return x
    return s.domain.lo if math.isfinite(s.domain.lo) else 0.0


@pytest.mark.parametrize("entry", [
    pytest.param(e, id=e.id, marks=pytest.mark.xfail(strict=True, reason=CYCLIC_CLOSED_FORMS[e.id]))
    if e.id in CYCLIC_CLOSED_FORMS else pytest.param(e, id=e.id) for e in CLOSED_FORM_ONLY])
def test_entry_evaluates_without_parameters(entry):
    """Every free parameter has a default or a closed form, so `boundcalc evaluate ID` with only
    the symbols set must give a number (at typical values of the symbols)."""
    sizes = {sym: 2 for sym in set(entry.indices.values())}
    values = {}
    for name, s in entry.symbols.items():
        if s.role == "size":
            values[name] = float(sizes.get(name, 2))
        elif s.indexed:
            values[name] = np.full(tuple(sizes[entry.indices[i]] for i in s.indices), _typical(s))
        elif s.default is None:
            values[name] = _typical(s)
    r = bc.evaluate(entry, values, fixed=dr_grids(entry))  # hand-chosen σ_g: declared fixed
    assert not math.isnan(r.value)
