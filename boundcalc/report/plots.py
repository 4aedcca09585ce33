"""Plots of an optimised result (matplotlib, Agg backend, PNG files).

* contributions per layer (or group) and per term/matrix type, stacked;
* the Schatten index (or any GridMin grid value) chosen for every matrix;
* the value against n and against δ (re-optimised at each point);
* a sensitivity tornado (elasticities at the optimum).

Axis labels follow the result's kind: only a certified bound is called a bound, and only a
certified bound is drawn against a target line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..evaluation import Result


def _figure(nrows: int = 1, ncols: int = 1, figsize: tuple[float, float] = (8, 4.5)):
    """A figure on the Agg canvas without touching pyplot's global backend."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def value_word(result: Result) -> str:
    """What the number may be called on an axis."""
    output = getattr(result, "output", "risk")
    if result.kind == "certified" and output != "risk":
        return f"certified {output}" if result.is_bound else f"{output} (estimated)"
    if result.kind == "certified":
        return "certified bound" if result.is_bound else "value (estimated, not certified)"
    if result.kind == "conditional":
        return "conditional value (only under its condition)"
    if result.kind == "rate":
        return "rate value (hidden constant set by you)"
    return "proxy value (not a bound)"


def _save(fig, path: Path) -> Path:
    import io

    from ..files.atomic_write import write_bytes_atomic

    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, dpi=110, format="png")
    return write_bytes_atomic(path, buf.getvalue())


def _integer_ticks(axis) -> None:
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def _layer_index(contrib: dict[str, Any]) -> str | None:
    by = contrib.get("by_index") or {}
    for idx, info in by.items():
        if "layer" in info.get("meaning", "").lower() or "group" in info.get("meaning", "").lower():
            return idx
    return next(iter(by), None)


def plot_contributions(result: Result, path: str | Path) -> Path | None:
    """Stacked bars per layer (by term), or one bar per additive term when there are no layers."""
    contrib = result.extra.get("contributions")
    if not contrib:
        return None
    idx = _layer_index(contrib)
    fig, axes = _figure()
    ax = axes[0][0]
    if idx is not None:
        info = contrib["by_index"][idx]
        bottom = np.zeros(len(info["values"]))
        for name, series in info["by_part"].items():
            series = np.asarray(series, dtype=float)
            ax.bar(np.arange(len(series)), series, bottom=bottom, label=name)
            bottom = bottom + series
        ax.set_xlabel(f"{idx}  ({info['size_symbol']}: {info['meaning']})")
        _integer_ticks(ax.xaxis)
        ax.set_ylabel(f"contribution to the {value_word(result)}")
        ax.legend(fontsize=8)
    else:
        parts = contrib["parts"]
        ax.barh([p["name"] for p in parts], [p["value"] for p in parts])
        ax.set_xlabel(f"contribution to the {value_word(result)}")
    ax.set_title(f"{result.id}: where the value comes from")
    return _save(fig, Path(path))


def plot_selections(result: Result, path: str | Path) -> Path | None:
    """Chosen grid value (Schatten index p) per matrix: heat maps for layer × head arrays."""
    sel = result.extra.get("selections")
    if not sel:
        return None
    fig, axes = _figure(1, len(sel), (3.6 * len(sel), 3.6))
    for ax, s in zip(axes[0], sel):
        vals = np.asarray(s["values"], dtype=float)
        if vals.ndim == 2:
            im = ax.imshow(vals, aspect="auto", vmin=s["grid_min"], vmax=s["grid_max"],
                           cmap="viridis")
            ax.set_ylabel(s["indices"][0])
            ax.set_xlabel(s["indices"][1])
            _integer_ticks(ax.xaxis)
            _integer_ticks(ax.yaxis)
            fig.colorbar(im, ax=ax, fraction=0.046)
        else:
            vals = vals.reshape(-1)
            ax.plot(np.arange(len(vals)), vals, "o-")
            ax.set_ylim(s["grid_min"] - 0.05, s["grid_max"] + 0.05)
            ax.set_xlabel(s["indices"][0] if s["indices"] else "instance")
            _integer_ticks(ax.xaxis)
        ax.set_title(f"{s['parameter']} (grid of {s['grid_size']})", fontsize=9)
    fig.suptitle(f"{result.id}: grid value chosen per matrix")
    return _save(fig, Path(path))


def plot_value_vs(result: Result, path: str | Path) -> Path | None:
    """The re-optimised value against n and against δ (target line for certified bounds)."""
    table = (result.extra.get("what_it_takes") or {}).get("table") or {}
    if not table:
        return None
    panels = [k for k in ("n", "delta") if k in table]
    fig, axes = _figure(1, len(panels), (5 * len(panels), 4))
    target = (result.extra.get("what_it_takes") or {}).get("target")
    for ax, key in zip(axes[0], panels):
        rows = [r for r in table[key]["rows"] if r["value"] is not None and r["value"] > 0]
        x = [r[key] for r in rows]
        y = [r["value"] for r in rows]
        ax.loglog(x, y, "o-")
        ax.axvline(table[key]["current"], color="grey", ls=":", label="current")
        if result.kind == "certified" and getattr(result, "output", "risk") == "risk" \
                and target is not None:
            ax.axhline(target, color="red", ls="--", label=f"target {target:g}")
        ax.set_xlabel(table[key]["symbol"])
        ax.set_ylabel(value_word(result))
        ax.legend(fontsize=8)
    fig.suptitle(f"{result.id}: value re-optimised at each point")
    return _save(fig, Path(path))


def plot_tornado(result: Result, path: str | Path, top: int = 15) -> Path | None:
    """Elasticities ∂ln B/∂ln c at the optimum, largest magnitude on top."""
    rows = [r for r in (result.extra.get("sensitivity") or [])
            if r.get("elasticity") is not None and r["elasticity"] != 0]
    if not rows:
        return None
    rows = rows[:top][::-1]
    fig, axes = _figure(figsize=(7, 0.35 * len(rows) + 1.5))
    ax = axes[0][0]
    el = [r["elasticity"] for r in rows]
    ax.barh([r["symbol"] + (" (all entries)" if r["indexed"] else "") for r in rows], el,
            color=["tab:red" if e > 0 else "tab:blue" for e in el])
    ax.axvline(0, color="black", lw=0.8)
    ax.set_xlabel("elasticity ∂ln B / ∂ln c at the optimum")
    ax.set_title(f"{result.id}: sensitivity ({value_word(result)})")
    return _save(fig, Path(path))


def write_plots(result: Result, directory: str | Path) -> dict[str, Path]:
    """Write every applicable plot as ``DIR/<id>_<name>.png``; returns name → path."""
    d = Path(directory)
    out = {}
    for name, fn in (("contributions", plot_contributions), ("selections", plot_selections),
                     ("value_vs", plot_value_vs), ("sensitivity", plot_tornado)):
        p = fn(result, d / f"{result.id}_{name}.png")
        if p is not None:
            out[name] = p
    return out

