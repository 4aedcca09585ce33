"""What would it take: the sample size, or the shrinkage of a statistic, that brings a certified
bound below a target; and the bound as a function of n and of δ.

Every point is re-optimised (free parameters chosen again, union-bound costs included). Other
statistics are held at their measured values: in particular the empirical risk is assumed not
to change with n. Only certified entries are compared with a target; for rates and proxies
only the n/δ tables are given.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..errors import BoundcalcError
from ..evaluation import Prepared, confidence_symbol

N_CAP = 1e15
DELTAS = (0.5, 0.2, 0.1, 0.05, 0.01, 1e-3, 1e-4, 1e-6)

Optimizer = Callable[[Prepared], float]


def reprepare(prepared: Prepared, overrides: Mapping[str, Any]) -> Prepared:
    """The same entry and inputs with some values replaced (placeholders kept)."""
    values = dict(prepared.raw)
    values.update(overrides)
    out = Prepared(prepared.entry, values, prepared.estimated)
    out.placeholders = prepared.placeholders
    return out


def data_size_symbol(prepared: Prepared) -> str | None:
    sizes = [s.name for s in prepared.entry.symbols.values() if s.role == "data_size"]
    return sizes[0] if sizes else None


def _value_at(prepared: Prepared, optimizer: Optimizer, overrides: Mapping[str, Any]) -> float:
    try:
        return optimizer(reprepare(prepared, overrides))
    except BoundcalcError:
        return math.inf


def smallest_n(prepared: Prepared, optimizer: Optimizer, target: float = 1.0,
               cap: float = N_CAP, known: Sequence[tuple[float, float | None]] = ()
               ) -> dict[str, Any]:
    """Smallest integer n with bound(n) < target (bisection in log n, which assumes the bound
    decreases in n). ``status``: 'found', 'never' (not below the target up to ``cap``).

    ``known``: (n, value) pairs already evaluated (the table against n; None where the bound
    could not be evaluated). One at or above the bisection's answer whose value is not below
    the target shows the bound is not monotone there: the search starts again above the
    largest such n, and ``note`` says so. So the answer never contradicts the table."""
    name = data_size_symbol(prepared)
    if name is None:
        return {"status": "no data size", "symbol": None}
    spec = prepared.entry.symbols[name]
    lo = max(1.0, spec.domain.lo if math.isfinite(spec.domain.lo) else 1.0)
    lo = math.ceil(lo)
    hi = float(cap)
    f_hi = _value_at(prepared, optimizer, {name: hi})
    out: dict[str, Any] = {"symbol": name, "target": target, "cap": cap,
                           "current": prepared.scalars[name]}
    if not f_hi < target:
        out.update(status="never", n=None, value_at_cap=f_hi)
        return out

    def below(a: int) -> tuple[int, float]:
        """The smallest n > a (n = lo when a < lo) with f(n) < target, by bisection."""
        if a < lo:
            f_lo = _value_at(prepared, optimizer, {name: lo})
            if f_lo < target:
                return int(lo), f_lo
            a = int(lo)
        b, f_b = int(hi), f_hi  # f(a) >= target > f(b)
        while b - a > 1:
            mid = int(round(math.sqrt(a * b))) if b > 2 * a else (a + b) // 2
            mid = min(max(mid, a + 1), b - 1)
            f_mid = _value_at(prepared, optimizer, {name: mid})
            if f_mid < target:
                b, f_b = mid, f_mid
            else:
                a = mid
        return b, f_b

    n, value = below(0)
    against = [(k, v) for k, v in known if k >= n and (v is None or not v < target)]
    if against:
        k, v = max(against, key=lambda kv: kv[0])
        if k < hi:
            n, value = below(int(k))
            out["note"] = (f"the bound is not monotone in {name}: it is "
                           f"{'not evaluable' if v is None else f'{v:.6g}'} ≥ {target:.6g} "
                           f"at {name} = {int(k)}, above where the bisection first stopped; "
                           f"searched again above {int(k)}")
    out.update(status="found", n=int(n), value=value)
    return out


def shrink_factor(prepared: Prepared, optimizer: Optimizer, symbol: str,
                  target: float = 1.0, smallest: float = 1e-12) -> dict[str, Any]:
    """Factor k ≥ 1 by which ``symbol`` (scalar or whole array) must shrink, c → c/k, for the
    re-optimised bound to fall below ``target``; 'never' if even c·1e-12 does not suffice."""
    raw = prepared.raw.get(symbol)
    if raw is None:
        raise BoundcalcError(f"entry '{prepared.entry.id}': no value for '{symbol}'")
    base = np.asarray(raw, dtype=float)

    def at(s: float) -> float:
        v = base * s
        return _value_at(prepared, optimizer, {symbol: v if v.ndim else float(v)})

    out: dict[str, Any] = {"symbol": symbol, "target": target}
    f1 = at(1.0)
    if f1 < target:
        out.update(status="already below", factor=1.0, value=f1)
        return out
    f0 = at(smallest)
    if not f0 < target:
        out.update(status="never", factor=None, value_at_smallest=f0,
                   note=f"even {symbol}×{smallest:g} leaves the bound at {f0:.4g} ≥ {target:g}")
        return out
    a, b = math.log(smallest), 0.0  # f(e^a) < target <= f(e^b)
    for _ in range(80):
        mid = (a + b) / 2
        if at(math.exp(mid)) < target:
            a = mid
        else:
            b = mid
        if b - a < 1e-10:
            break
    out.update(status="found", factor=math.exp(-a), value=at(math.exp(a)))
    return out


def bound_table(prepared: Prepared, optimizer: Optimizer, n_values: list[float] | None = None,
                deltas: tuple[float, ...] = DELTAS) -> dict[str, Any]:
    """The re-optimised value as a function of n (around the current n) and of δ."""
    out: dict[str, Any] = {}
    name = data_size_symbol(prepared)
    if name is not None:
        n0 = prepared.scalars[name]
        if n_values is None:
            n_values = sorted({*(float(max(1, round(n0 * 10 ** k))) for k in
                                 np.arange(-2, 4.01, 0.5)), float(n0)})
        integer = prepared.entry.symbols[name].domain.integer
        rows = []
        for n in n_values:
            n_use = float(round(n)) if integer else n
            rows.append({"n": n_use, "value": _finite(_value_at(prepared, optimizer,
                                                                 {name: n_use}))})
        out["n"] = {"symbol": name, "current": n0, "rows": rows}
    conf = confidence_symbol(prepared.entry)
    if conf is not None:
        rows = [{"delta": d, "value": _finite(_value_at(prepared, optimizer, {conf: d}))}
                for d in deltas]
        out["delta"] = {"symbol": conf, "current": prepared.scalars[conf], "rows": rows}
    return out


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
