"""A Markdown report of an optimised result, referencing the PNG plots next to it.

Wording follows the result's kind: a certified bound is called a bound and compared with 1
(vacuous or not); a rate or a proxy is never called a bound and never compared with 1.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..evaluation import Result
from ..rounding import probability_text
from ..files.atomic_write import write_text_atomic
from .summary import target_words
from .tables import floor_rows, fmt


def _int_orfmt(x: Any) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else fmt(x)


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]
    return out + [""]


def headline(result: Result) -> str:
    """One sentence saying what the number is (and is not); the value rounded as
    :meth:`Result.value_text` rounds it, the probability 1 − δ rounded down."""
    v = result.value_text(6)
    output = getattr(result, "output", "risk")
    if result.kind == "certified" and result.is_bound and output != "risk":
        return (f"**Certified {output}: {v}**, {result.label}; it is not a bound on a risk and "
                f"is not compared with 1.")
    if result.kind == "certified":
        if result.is_bound:
            vac = ("vacuous " if result.vacuous else "non-vacuous ") + \
                result.vacuous_text.split(" ", 1)[1]
            return (f"**Certified bound: {v}** ({vac}), holding with probability ≥ "
                    f"{probability_text(result.delta or 0)} under the listed assumptions.")
        return f"**Value: {v}**, {result.label}; it is not a certified bound."
    if result.kind == "conditional":
        return (f"**Conditional value: {v}**, {result.label}. It is not certified and is not "
                f"compared with 1.")
    if result.kind == "rate":
        return f"**Rate value: {v}**, {result.label}; it is not a bound."
    return f"**Proxy value: {v}**, {result.label}."


def markdown_report(result: Result, plots: Mapping[str, str | Path] | None = None,
                    relative_to: str | Path | None = None) -> str:
    """The report as Markdown; plot paths are written relative to ``relative_to`` if given."""
    r = result
    x = r.extra
    lines = [f"# {r.id}: {r.title}", "", headline(r), ""]
    lines += [f"- kind: `{r.kind}`" + (f", variant: {r.variant}" if r.variant else ""),
              *[f"- condition: {c}" for c in r.conditions],
              f"- source: {r.source}", f"- provenance: {r.provenance}",
              f"- method: {r.method}",
              *([f"- about: {r.about_text}"] if r.about_text else []),
              *([f"- unit: {r.unit}"] if r.unit else []),
              f"- certified optimum: {fmt(x.get('certified_optimum'))}"
              + (f" ({x['certified_optimum_reason']})" if x.get("certified_optimum_reason")
                 else "")]
    if r.delta is not None:
        total = sum(r.union_bound_cost.values())
        lines.append(f"- δ = {r.delta:g}; union-bound cost {total:.4g} nats "
                     f"({', '.join(f'{k}: {v:.4g}' for k, v in r.union_bound_cost.items()) or 'none'}); "
                     f"formula evaluated at δ_eff = {fmt(r.delta_effective)}")
    if r.hidden_constants:
        lines.append("- hidden constants: " + ", ".join(f"{k} = {v:g}"
                                                      for k, v in r.hidden_constants.items()))
    if r.estimated_inputs:
        lines.append("- estimated inputs: " + "; ".join(r.estimated_inputs))
    lines.append("")
    floor = floor_rows(r)
    if floor:
        lines += ["## Floor and what dominates", ""]
        lines += [f"- {name}: {text}" for name, text in floor]
        if r.floor:
            lines += ["", "Each piece of the budget and its effect (the value minus the value "
                          "without it):", ""]
            f = r.floor
            rows = [[name, fmt(nats, 4), fmt(f["effects"].get(name, 0.0), 3)]
                    for name, nats in f["budget_nats"].items()]
            if f.get("mc_upper") is not None:
                rows.append(["Monte Carlo step", f"{fmt(f['emp_risk'], 4)} → "
                                                 f"{fmt(f['mc_upper'], 4, 'upper')}",
                             fmt(f["effects"].get("Monte Carlo"), 3)])
            lines += _table(["piece", "nats (or risk)", "effect on the value"], rows)
        else:
            lines.append("")
    if r.parameters:
        lines += ["## Parameters", ""]
        lines += _table(["name", "value", "how chosen", "union-bound cost"],
                        [[k, fmt(v), r.parameter_choice.get(k, ""),
                          fmt(r.union_bound_cost.get(k))] for k, v in r.parameters.items()])
    if x.get("comparison"):
        c, up = x["comparison"], r.value_side
        lines += ["## Per-group σ against tied σ", "",
                  f"Per-group σ_g: {fmt(c['per_group'], 6, up)}; all σ_g tied (same costs): "
                  f"{fmt(c['tied'], 6, up)}; improvement {fmt(c['improvement'])} "
                  f"({fmt(c['relative_improvement'])} relative). Classic single σ (one "
                  f"Dziugaite–Roy charge, union cost {fmt(c.get('single_union_cost'))} against "
                  f"{fmt(c.get('per_group_union_cost'))}): {fmt(c.get('single'), 6, up)}. "
                  f"{c['note']}.", ""]
    if r.terms:
        lines += ["## Terms", ""]
        lines += _table(["term", "value"], [[k, fmt(v)] for k, v in r.terms.items()])
    contrib = x.get("contributions")
    if contrib:
        lines += ["## Contributions", ""]
        lines += _table(["part", "value", "share"],
                        [[p["name"], fmt(p["value"]), fmt(p["share"], 3)]
                         for p in contrib["parts"]])
        for idx, info in (contrib.get("by_index") or {}).items():
            lines += [f"By {idx} ({info['meaning']}):", ""]
            parts = list(info["by_part"])
            rows = []
            for k, total in enumerate(np.asarray(info["values"])):
                rows.append([k, fmt(total)] + [fmt(np.asarray(info["by_part"][p])[k])
                                                 for p in parts])
            lines += _table([idx, "total", *parts], rows)
        for p in contrib["parts"]:
            for inner in p.get("inner_sums", []):
                vals = np.asarray(inner["values"])
                if vals.ndim != 1:
                    continue
                lines += [f"{inner['name']} by {inner['indices'][0]} (a sum inside "
                          f"'{p['name']}', not an additive part of the value):", ""]
                lines += _table([inner["indices"][0], "value"],
                                [[k, fmt(v)] for k, v in enumerate(vals)])
    sel = x.get("selections")
    if sel:
        lines += ["## Grid values chosen per matrix", ""]
        for s in sel:
            hist = ", ".join(f"{k}: {v}" for k, v in s["histogram"].items())
            lines += [f"- `{s['parameter']}` over {s['indices']} (grid of {s['grid_size']} "
                      f"points, cost {fmt(s['union_bound_cost'])}): {hist}"]
        lines.append("")
    sens = x.get("sensitivity")
    if sens:
        lines += ["## Sensitivity at the optimum", "",
                  "Optimal parameters held fixed (envelope theorem); for arrays the elasticity "
                  "is for scaling the whole array.", ""]
        lines += _table(["rank", "symbol", "role", "value", "∂B/∂c", "elasticity"],
                        [[s["rank"], s["symbol"], s["role"],
                          "array" if s["indexed"] else fmt(s.get("value")),
                          fmt(s.get("derivative") if not s["indexed"]
                               else s.get("scale_derivative")),
                          fmt(s.get("elasticity"), 4)] for s in sens])
    wit = x.get("what_it_takes")
    if wit:
        lines += ["## What would it take", ""]
        if "smallest_n" in wit:
            sn = wit["smallest_n"]
            if sn.get("status") == "found":
                lines.append(f"- smallest {sn['symbol']} with a certified bound below "
                             f"{target_words(wit)}: **{sn['n']}** (now {fmt(sn['current'])})"
                             + (f"; {sn['note']}" if sn.get("note") else ""))
            elif sn.get("status") == "never":
                lines.append(f"- no {sn['symbol']} up to {sn['cap']:g} brings the bound below "
                             f"{target_words(wit)} (never)")
        if "shrink" in wit:
            sh = wit["shrink"]
            if sh["status"] == "found":
                lines.append(f"- `{sh['symbol']}` would have to shrink by a factor "
                             f"**{fmt(sh['factor'], 4)}**")
            elif sh["status"] == "never":
                lines.append(f"- shrinking `{sh['symbol']}` alone never suffices: {sh['note']}")
            else:
                lines.append(f"- `{sh['symbol']}`: the bound is already below the target")
        if wit.get("note"):
            lines.append(f"- {wit['note']}")
        lines.append("")
        for key in ("n", "delta"):
            t = (wit.get("table") or {}).get(key)
            if t:
                lines += _table([t["symbol"], "value (re-optimised)"],
                                [[_int_orfmt(row[key]) if key == "n" else fmt(row[key]),
                                  fmt(row["value"], 6, r.value_side)] for row in t["rows"]])
    if r.assumptions:
        lines += ["## Assumptions", ""]
        lines += [f"- [{a['status']}] {a['text']}" for a in r.assumptions]
        lines.append("")
    if r.notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in r.notes] + [""]
    if plots:
        lines += ["## Plots", ""]
        for name, p in plots.items():
            ref = Path(p)
            if relative_to is not None:
                ref = Path(os.path.relpath(ref, Path(relative_to)))
            lines += [f"![{name}]({ref.as_posix()})", ""]
    return "\n".join(lines).rstrip() + "\n"


def write_markdown(path: str | Path, result: Result,
                   plots: Mapping[str, str | Path] | None = None) -> Path:
    """Write the report to ``path`` (plot links relative to its folder)."""
    path = Path(path)
    return write_text_atomic(path, markdown_report(result, plots, path.parent.resolve()
                                                   if plots else None))
