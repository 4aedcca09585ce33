"""One call: bind an entry to a stats file and/or values, choose its free parameters, and attach
sensitivities, contributions and (optionally) what-it-would-take to the Result."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import numpy as np

from ..api import resolve_entry
from ..binding import bind
from ..errors import BoundcalcError, DomainError, MissingValueError
from ..limits import check_allocation
from ..evaluation import Prepared, Result, count_value
from ..registry import Entry, Registry
from ..stats import Stats, load_stats
from .core import Options, choose, result_for
from .per_instance import optimize_per_instance, per_instance_symbols
from .sensitivity import contributions, selections, sensitivities
from .whatif import bound_table, shrink_factor, smallest_n

_PLACEHOLDER = 1e-2  # value of an optimizer-chosen array before it is chosen


def _index_size(entry: Entry, index: str, values: Mapping[str, Any]) -> int | None:
    size_sym = entry.indices[index]
    if size_sym in values:
        return count_value(entry, size_sym, values[size_sym])
    for name, s in entry.symbols.items():
        if name in values and index in s.indices:
            arr = np.asarray(values[name])
            if arr.ndim == len(s.indices):
                return int(arr.shape[s.indices.index(index)])
    return None


def prepare_entry(entry: Entry | str, stats: Stats | str | None = None,
                  values: Mapping[str, Any] | None = None, registry: Registry | None = None,
                  estimated: Mapping[str, str] | None = None) -> Prepared:
    """Bind and validate like :func:`boundcalc.prepare`, with placeholders for the arrays the
    optimizer chooses itself (per-group σ_g, see :mod:`.per_instance`)."""
    e = resolve_entry(entry, registry)
    if isinstance(stats, str):
        stats = load_stats(stats)
    overrides = dict(values or {})
    placeholders = set()
    for pi in per_instance_symbols(e):
        if pi.name in overrides:
            continue
        loose = bind(e, stats, overrides, strict=False)
        shape = []
        for idx in e.symbols[pi.name].indices:
            n = _index_size(e, idx, loose.values)
            if n is None:
                raise MissingValueError(f"entry '{e.id}': cannot tell how many groups "
                                        f"'{pi.name}' has (size of index '{idx}')")
            if not (isinstance(n, (int, float)) and n >= 0 and float(n).is_integer()):
                raise DomainError(f"entry '{e.id}': size of index '{idx}' of '{pi.name}' is "
                                  f"{n}, not a count")
            shape.append(int(n))
        check_allocation(8.0 * math.prod(shape), f"entry '{e.id}': '{pi.name}' of shape {shape}")
        overrides[pi.name] = np.full(shape, _PLACEHOLDER)
        placeholders.add(pi.name)
    binding = bind(e, stats, overrides)
    est = dict(binding.estimated)
    est.update(estimated or {})
    prepared = Prepared(e, binding.values, est)
    prepared.placeholders = placeholders
    return prepared


def applicable(entry: Entry, stats: Stats, overrides: Mapping[str, Any] | None = None) -> bool:
    """Whether every symbol gets a value (the optimizer-chosen arrays count as given)."""
    from ..measured import tuned_inputs

    try:  # ρ and distances of a per-group Gibbs risk come from the stats file's record
        tuned = tuned_inputs(entry, stats, overrides or {})
    except BoundcalcError:
        return True  # a damaged record: optimize() reports it as this entry's error
    if tuned is not None:
        overrides = {**tuned[1], **(overrides or {})}
    try:
        missing = bind(entry, stats, overrides, strict=False).missing
    except Exception:  # noqa: BLE001 - a malformed stats section means "not applicable"
        return False
    chosen = {p.name for p in per_instance_symbols(entry)}
    return not [m for m in missing if m not in chosen]


def _choose(prepared: Prepared, options: Options):
    placeholders = prepared.placeholders
    specs = [p for p in per_instance_symbols(prepared.entry) if p.name in placeholders]
    if specs:
        if len(specs) > 1:
            from ..errors import OptimizationError
            raise OptimizationError(f"entry '{prepared.entry.id}': more than one per-group "
                                    f"parameter ({', '.join(p.name for p in specs)})")
        final, choice, details = optimize_per_instance(prepared, specs[0], options)
        return final, choice, specs[0]
    return prepared, choose(prepared, options), None


def quick_value(prepared: Prepared, options: Options | None = None) -> float:
    """The optimised value only (no GP, no report): used for the what-if searches."""
    opts = dataclasses.replace(options or Options(), use_gp=False, sensitivity=False,
                               contributions=False, what_if=False)
    final, choice, _ = _choose(prepared, opts)
    if math.isnan(choice.value):  # nothing to choose: one plain evaluation
        return final.result(choice.values, how=choice.how, rigorous=False).value
    return choice.value


def optimize_prepared(prepared: Prepared, options: Options | None = None) -> Result:
    """Choose the free parameters of a prepared entry and build the annotated Result."""
    o = options or Options()
    final, choice, per = _choose(prepared, o)
    result = result_for(final, choice)
    exclude: tuple[str, ...] = ()
    if per is not None:
        info = choice.details["per_instance"][per.name]
        result.parameters[per.name] = info["values"]
        result.parameter_choice[per.name] = (
            f"per group on the Dziugaite–Roy grid {info['grid']}; j = "
            f"{', '.join(str(int(x)) for x in np.ravel(info['j']))}; {info['how']}")
        result.extra["comparison"] = choice.details["comparison"]
        exclude = (per.name, per.c_symbol, per.b_symbol)
    params = {k: v for k, v in result.parameters.items()
              if k in final.entry.parameters and k not in final.compiled.grid_params}
    ctx = final.context(params, result.delta_effective)  # shared: one memo for both reports
    if o.contributions:
        result.extra["contributions"] = contributions(final, params, result.delta_effective, ctx)
        sel = selections(final, result.parameters)
        if sel:
            result.extra["selections"] = sel
    if o.sensitivity:
        result.extra["sensitivity"] = sensitivities(final, params, result.delta_effective,
                                                    exclude, ctx)
    if o.what_if:
        result.extra["what_it_takes"] = what_it_takes(final, result, o)
    return result


def what_it_takes(prepared: Prepared, result: Result, options: Options) -> dict[str, Any]:
    """Smallest n and shrink factor (certified entries only) and the n/δ tables."""
    def opt(p: Prepared) -> float:
        return quick_value(p, options)

    base = prepared
    placeholders = prepared.placeholders
    target = 1.0 if options.target is None else options.target
    out: dict[str, Any] = {"target": target,
                           "target_rule": options.target_rule or (
                               "1" if options.target is None else "given")}
    out["table"] = bound_table(base, opt)
    if result.kind == "certified" and getattr(result, "output", "risk") == "risk":
        known = [(r["n"], r["value"]) for r in out["table"].get("n", {}).get("rows", [])]
        out["smallest_n"] = smallest_n(base, opt, target, known=known)
        symbol = options.shrink or _default_shrink(result, placeholders)
        if symbol is not None:
            out["shrink"] = shrink_factor(base, opt, symbol, target)
    if "smallest_n" not in out:
        what = result.kind if result.kind != "certified" else f"certified {result.output}"
        tables = " and ".join(t["symbol"] for t in out["table"].values())
        out["note"] = (f"a {what} is never compared with a target; " + (
            f"only the tables of its value against {tables} are given" if tables else
            "it has no sample size and no δ to tabulate it against either"))
    return out


def _default_shrink(result: Result, placeholders: set[str]) -> str | None:
    """The measured statistic with the largest positive elasticity."""
    rows = result.extra.get("sensitivity") or []
    for r in rows:
        if r["role"] == "measured" and (r.get("elasticity") or 0) > 0 \
                and r["symbol"] not in placeholders:
            return r["symbol"]
    return None


def optimize(entry: Entry | str, stats: Stats | str | None = None,
             values: Mapping[str, Any] | None = None, *, registry: Registry | None = None,
             estimated: Mapping[str, str] | None = None, options: Options | None = None,
             **option_overrides: Any) -> Result:
    """Optimise ``entry`` on a stats file and/or hand-set values.

    ``options`` (or keyword overrides such as ``sensitivity=False``, ``what_if=True``,
    ``target=0.5``, ``use_gp=False``) control what is computed; see :class:`Options`.
    The Result carries ``method``, and in ``extra``: ``certified_optimum``, ``optimizer``,
    ``sensitivity``, ``contributions``, ``selections`` and ``what_it_takes``.
    """
    from ..measured import hand_set, over_points

    o = dataclasses.replace(options or Options(), **option_overrides)
    e = resolve_entry(entry, registry)
    if isinstance(stats, str):
        stats = load_stats(stats)
    if o.what_if and o.target is None:  # compare with what the bound must beat to say anything
        from ..floor import vacuity_level

        level, rule = vacuity_level(e, stats)
        o = dataclasses.replace(o, target=level, target_rule=rule)
    values = dict(values or {})

    def run(variant: Entry, vals: dict[str, Any], prm: dict[str, float],
            est: dict[str, str]) -> Result:
        return optimize_prepared(prepare_entry(variant, stats, {**vals, **prm}, registry,
                                               {**(estimated or {}), **est}), o)

    found = over_points(e, stats, values, None, estimated, run)
    if found is not None:
        return found
    return run(e, values, {}, hand_set(e, values))
