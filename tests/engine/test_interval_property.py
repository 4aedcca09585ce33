"""Every certified value is never below the exact value of its formula, and within 1e-12 of it.

For each certified entry, 200 seeded random inputs over the entry's declared domains (a fifth
of them pushed to the domain edges: closed ends exactly, open ends within 1e-12, infinite ends
at 1e12) are evaluated by boundcalc, and the same formula at the same inputs (the same free
parameters, the same grid, δ·e^{−cost} with the cost recomputed here) by an independent
60-digit mpmath walk written in this file. The printed value must be ≥ the 60-digit value and
within 1e-12 relative of it. Inputs a formula cannot take (an error naming the culprit) are
skipped; at least half of the draws must be evaluable.
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
import sympy as sp

import boundcalc as bc
from _draw_helpers import grid_points, inputs
from _reference import kl_inv_exact
from boundcalc.engine.functions import Cases, GridMin, kl_inv, var_ratio_div
from boundcalc.errors import BoundcalcError

REG = bc.load_registry()
CERTIFIED = [e.id for e in REG if e.kind == "certified"]
CONDITIONAL = [e.id for e in REG if e.kind == "conditional"]  # printed the same way
DRAWS = 200
DPS = 60


# ---- an independent 60-digit evaluation of a formula ------------------------------------------

class Exact:
    def __init__(self, scalars, arrays, grids):
        self.scalars, self.arrays, self.grids = scalars, arrays, grids

    def ev(self, e, env):  # noqa: C901 - one case per node type
        if isinstance(e, sp.Integer):
            return mp.mpf(int(e))
        if isinstance(e, sp.Rational):
            return mp.mpf(int(e.p)) / int(e.q)
        if isinstance(e, sp.Float):
            return mp.mpf(str(e))
        if e is sp.pi:
            return +mp.pi
        if e is sp.E:
            return mp.e
        if isinstance(e, sp.Symbol):
            return env[e.name] if e.name in env else mp.mpf(self.scalars[e.name])
        if isinstance(e, sp.Indexed):
            idx = tuple(int(self.ev(i, env)) for i in e.indices)
            return mp.mpf(float(self.arrays[e.base.label.name][idx]))
        if isinstance(e, sp.Add):
            return mp.fsum(self.ev(a, env) for a in e.args)
        if isinstance(e, sp.Mul):
            return mp.fprod(self.ev(a, env) for a in e.args)
        if isinstance(e, sp.Pow):
            return mp.power(self.ev(e.args[0], env), self.ev(e.args[1], env))
        if isinstance(e, sp.exp):
            return mp.exp(self.ev(e.args[0], env))
        if isinstance(e, sp.log):
            return mp.log(self.ev(e.args[0], env))
        if isinstance(e, sp.Abs):
            return abs(self.ev(e.args[0], env))
        if isinstance(e, sp.Min):
            return min(self.ev(a, env) for a in e.args)
        if isinstance(e, sp.Max):
            return max(self.ev(a, env) for a in e.args)
        if isinstance(e, sp.floor):
            return mp.floor(self.ev(e.args[0], env))
        if isinstance(e, sp.ceiling):
            return mp.ceil(self.ev(e.args[0], env))
        if isinstance(e, kl_inv):
            return kl_inv_exact(*(self.ev(a, env) for a in e.args), dps=DPS)
        if isinstance(e, var_ratio_div):
            a, b = (self.ev(x, env) for x in e.args)
            with mp.workdps(3 * DPS):  # the textbook form, with digits to spare
                x = (a / b) ** 2
                return +(x - 1 - mp.log(x))
        if isinstance(e, (sp.Piecewise, Cases)):
            a = e.args
            pairs = [(v, c) for v, c in a] if isinstance(e, sp.Piecewise) else \
                [(a[i], a[i + 1]) for i in range(0, len(a) - 1, 2)] + [(a[-1], sp.true)]
            for v, c in pairs:
                if self.truth(c, env):
                    return self.ev(v, env)
            raise AssertionError("no branch")
        if isinstance(e, (sp.Sum, sp.Product)):
            return self.reduce(e, list(e.limits), env)
        if isinstance(e, GridMin):
            body, p = e.args
            return min(self.ev(body, {**env, p.name: mp.mpf(float(g))})
                       for g in self.grids[p.name])
        raise AssertionError(f"no exact rule for {type(e).__name__}")

    def truth(self, c, env):
        if c in (sp.true, True):
            return True
        if c in (sp.false, False):
            return False
        if isinstance(c, sp.And):
            return all(self.truth(a, env) for a in c.args)
        if isinstance(c, sp.Or):
            return any(self.truth(a, env) for a in c.args)
        x, y = self.ev(c.lhs, env), self.ev(c.rhs, env)
        return {sp.StrictLessThan: x < y, sp.LessThan: x <= y, sp.StrictGreaterThan: x > y,
                sp.GreaterThan: x >= y, sp.Equality: x == y, sp.Unequality: x != y}[type(c)]

    def reduce(self, e, limits, env):
        if not limits:
            return self.ev(e.function, env)
        (var, lo, hi), rest = limits[0], limits[1:]
        parts = [self.reduce(e, rest, {**env, var.name: mp.mpf(i)})
                 for i in range(int(self.ev(lo, env)), int(self.ev(hi, env)) + 1)]
        if isinstance(e, sp.Sum):
            return mp.fsum(parts)
        return mp.fprod(parts) if parts else mp.mpf(1)


def exact_value(prep: bc.Prepared, r: bc.Result, used: bool = False) -> mp.mpf:
    """The value at 60 digits with every confidence δ at the decimal it is written as (its
    repr: what the printed value must hold at), or with ``used`` at the double the engine
    evaluates it at (rounding.at_most_decimal: what the printed value is tight against)."""
    from boundcalc.rounding import at_most_decimal

    e = prep.entry
    scalars = {**prep.scalars, **{k: v for k, v in r.parameters.items()
                                  if not isinstance(v, (list, np.ndarray))}}
    confs = [s.name for s in e.symbols.values() if s.role == "confidence"]
    with mp.workdps(DPS):
        for name in confs:
            scalars[name] = (mp.mpf(at_most_decimal(prep.scalars[name])) if used
                             else mp.mpf(repr(float(prep.scalars[name]))))
    conf = confs
    conf = "delta" if "delta" in conf else (conf[0] if conf else None)
    with mp.workdps(DPS):
        if conf is not None:
            cost = mp.mpf(0)
            for name, c in r.union_bound_cost.items():
                p = e.parameters.get(name)
                if p is None:  # a per-group σ_g set by hand: σ_g² = c·e^(−j/b), 2 ln j + ln(π²/6)
                    gc, gb = prep.scalars[f"{name}_prior_c"], prep.scalars[f"{name}_prior_b"]
                    for v in np.ravel(prep.arrays[name]):
                        j = int(mp.nint(gb * mp.log(gc / mp.mpf(float(v)) ** 2)))
                        cost += 2 * mp.log(j) + mp.log(mp.pi ** 2 / 6)
                elif p.choice == "prior":
                    j = p.prior.index_of(r.parameters[name])
                    cost += 2 * mp.log(j) + mp.log(mp.pi ** 2 / 6)
                else:
                    size = len(prep.grids[name])
                    count = round(c / math.log(size)) if size > 1 else 0
                    cost += count * mp.log(size)
            scalars[conf] = scalars[conf] * mp.exp(-cost)
        return Exact(scalars, prep.arrays, prep.grids).ev(e.expression, {})


@pytest.mark.parametrize("entry_id", CERTIFIED + CONDITIONAL)
def test_printed_value_never_below_the_60_digit_value(entry_id):
    entry = REG.get(entry_id)
    rng = np.random.default_rng(sum(map(ord, entry_id)))  # seeded per entry
    done = 0
    for i in range(DRAWS):
        vals = inputs(entry, rng, edgy=i < DRAWS // 5)
        try:
            prep = bc.Prepared(entry, vals)
            r = prep.result(grid_points(prep, rng))
        except BoundcalcError:
            continue
        if not math.isfinite(r.value):
            continue
        exact = exact_value(prep, r)  # δ at its decimal: the statement printed
        assert mp.mpf(r.value) >= exact, (entry_id, vals, r.value, exact)
        used = exact_value(prep, r, used=True)  # δ at the double evaluated: tight against it
        tol = mp.mpf("1e-12") * abs(used) + mp.mpf("1e-300")
        assert mp.mpf(r.value) - used <= tol, (entry_id, vals, r.value, used)
        done += 1
    assert done >= DRAWS // 2, f"{entry_id}: only {done} of {DRAWS} draws were evaluable"


def test_finding_3_gaussian_kl_near_equal_variances():
    """σ_post ≈ σ_prior: the textbook form cancels to −9.0e-9; the exact value is +9.0e-9."""
    r = bc.evaluate(REG.get("gaussian_kl_diagonal_groups"),
                    {"d": [1e9], "dist_sq": [0.0], "sigma_post": [1.0],
                     "sigma_prior": [1.000000003]})
    with mp.workdps(80):
        x = (mp.mpf(1.0) / mp.mpf(1.000000003)) ** 2
        want = mp.mpf(1e9) * (x - 1 - mp.log(x)) / 2
    assert want > 0 and float(want) == pytest.approx(9.0e-9, rel=1e-6)
    assert r.value >= want and r.value == pytest.approx(float(want), rel=1e-12)


def test_catoni_was_below_the_exact_value_and_no_longer_is():
    """Finding 4: the float path lands 2.8e-16 relative below the exact value here."""
    prep = bc.Prepared(REG.get("catoni"), {"emp_risk": 0.3, "KL": 12.5, "n": 1000,
                                           "delta": 0.01})
    r = prep.result()
    exact = exact_value(prep, r)
    assert r.extra["interval"]["float_value"] < exact <= r.value
    assert r.extra["interval"]["lower"] <= exact and r.extra["interval"]["agrees"]
