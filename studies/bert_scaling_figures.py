"""The figures of the spectrum-adaptive study (studies/bert_scaling.py): the spectral decay
per matrix type, the selected Schatten index and each matrix's contribution over the post hoc
grid, and both proxies against width and depth (the paper's figs. 1, 2, 3 and 5)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

# Breakdown and ScalePoint in the annotations are studies/bert_scaling.py's records, read here
# and never built (not imported: the study imports this module)

MTYPES = ("QK", "V", "M_in", "M_out")
COLOURS = {"QK": "tomato", "V": "royalblue", "M_in": "darkolivegreen", "M_out": "darkseagreen"}
TEX = {"QK": r"$W^{QK}$", "V": r"$\tilde V = VW^{O}$", "M_in": r"$M^{in}$", "M_out": r"$M^{out}$"}
OURS_COLOUR, EDELMAN_COLOUR = "orange", "slateblue"
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def fig_spectral_decay(stats, layers: int = 4, title: str = ""):
    """Raw singular values σ_i against i for layers 0..layers−1, all heads, by matrix type."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.2))
    n_layers = int(stats.model["n_layers"])
    shown = min(layers, n_layers)
    for mtype in MTYPES:
        first = True
        for m in stats.of_type(mtype):
            if m.layer >= shown or m.singular_values is None:
                continue
            sv = m.singular_values[m.singular_values > 0]
            ax.plot(np.arange(1, sv.size + 1), sv, color=COLOURS[mtype],
                    alpha=0.35 if m.head is not None else 0.9, lw=1.0,
                    label=TEX[mtype] if first else None)
            first = False
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("index $i$ (log scale)")
    ax.set_ylabel(r"singular value $\sigma_i$ (log scale, not normalised)")
    ax.set_title("Spectral decay of BERT weights" + (f" — {title}" if title else "")
                 + f"\nlayers 0–{shown - 1}, every head", fontsize=11)
    ax.grid(True, which="both", alpha=0.3)
    leg = ax.legend()
    for line in leg.get_lines():
        line.set_alpha(1.0)
    fig.tight_layout()
    return fig


def fig_selected_p(b: Breakdown):
    """Selected Schatten index of every matrix: QK and Ṽ as layer × head maps, FFN per layer."""
    import matplotlib.pyplot as plt

    by = {t: [r for r in b.rows if r.type == t] for t in MTYPES}
    pmax = float(b.grid[-1])
    fig = plt.figure(figsize=(max(9.0, 0.7 * b.A + 4), max(6.0, 2.8 + 0.9 * b.L)),
                     layout="constrained")
    gs = fig.add_gridspec(2, 2, width_ratios=[max(b.A, 3), 2.4])
    im = None
    for row, mtype in enumerate(("QK", "V")):
        ax = fig.add_subplot(gs[row, 0])
        P = np.zeros((b.L, b.A))
        for r in by[mtype]:
            P[r.layer, r.head] = r.p
        im = ax.imshow(P, cmap="viridis", vmin=0, vmax=pmax, aspect="auto")
        for (i, j), v in np.ndenumerate(P):
            ax.text(j, i, f"{v:.2g}", ha="center", va="center", fontsize=8,
                    color="white" if v < 0.6 * pmax else "black")
        ax.set_xticks(range(b.A))
        ax.set_yticks(range(b.L))
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_title(f"{TEX[mtype]} (per head)", fontsize=10)
    ax = fig.add_subplot(gs[:, 1])
    P = np.zeros((b.L, 2))
    for col, mtype in enumerate(("M_in", "M_out")):
        for r in by[mtype]:
            P[r.layer, col] = r.p
    ax.imshow(P, cmap="viridis", vmin=0, vmax=pmax, aspect="auto")
    for (i, j), v in np.ndenumerate(P):
        ax.text(j, i, f"{v:.2g}", ha="center", va="center", fontsize=8,
                color="white" if v < 0.6 * pmax else "black")
    ax.set_xticks([0, 1])
    ax.set_xticklabels([TEX["M_in"], TEX["M_out"]])
    ax.set_yticks(range(b.L))
    ax.set_ylabel("layer")
    ax.set_title("FFN (per layer)", fontsize=10)
    cbar = fig.colorbar(im, ax=fig.axes, shrink=0.8)
    cbar.set_label("selected Schatten index $p$")
    m = len(b.grid) // 2
    fig.suptitle(f"Selected Schatten index per matrix — {b.label}\n"
                 f"(post hoc grid $\\{{0, 1/{m}, \\ldots, 2\\}}$, m = ⌈L + ln N⌉ = {m}; "
                 f"{b.count()} matrices)", fontsize=11)
    return fig


def fig_contribution(b: Breakdown):
    """T_p/T_0 over the grid for every matrix (the paper's fig. 5), one panel per type."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 7.5), sharex=True)
    for ax, mtype in zip(axes.flat, MTYPES):
        rows = [r for r in b.rows if r.type == mtype]
        per_head = rows[0].head is not None
        for r in rows:
            ax.plot(b.grid, r.curve, color=COLOURS[mtype], alpha=0.35 if per_head else 0.9,
                    lw=1.0)
            j = int(np.argmin(np.abs(b.grid - r.p)))
            ax.plot(b.grid[j], r.curve[j], "k.", ms=5)
        ax.axhline(1.0, color="grey", lw=0.8, ls=":")
        ax.set_yscale("log")
        ax.set_title(f"{TEX[mtype]}: {len(rows)} {'heads' if per_head else 'layers'}",
                     fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("Schatten index $p$")
    for ax in axes[:, 0]:
        ax.set_ylabel(r"$\mathcal{T}_p(W)\,/\,\mathcal{T}_0(W)$ (log scale)")
    fig.suptitle(f"Proxy contribution by head/layer — {b.label}\n"
                 "black dot: the selected p (minimum of each curve)", fontsize=11)
    fig.tight_layout()
    return fig


# ---- scaling ------------------------------------------------------------------------------------


def fig_scaling(points: Sequence[ScalePoint], along: str):
    """Both proxies against N at fixed L (along='N') or against L at fixed N (along='L'),
    each curve divided by its value at the smallest x; log y."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullFormatter

    fixed = "L" if along == "N" else "N"
    groups: dict[int, list[ScalePoint]] = {}
    for p in points:
        groups.setdefault(getattr(p, fixed), []).append(p)
    fig, ax = plt.subplots(figsize=(8, 5.4))
    handles = []
    xs_all: set[int] = set()
    for k, (g, ps) in enumerate(sorted(groups.items())):
        ps = sorted(ps, key=lambda p: getattr(p, along))
        if len(ps) < 2:
            continue
        xs = [getattr(p, along) for p in ps]
        xs_all.update(xs)
        mk = MARKERS[k % len(MARKERS)]
        for attr, col, ls in (("log10_ours", OURS_COLOUR, "-"),
                              ("log10_edelman", EDELMAN_COLOUR, "--")):
            ys = [10 ** (getattr(p, attr) - getattr(ps[0], attr)) for p in ps]
            ax.plot(xs, ys, ls, marker=mk, color=col)
        handles.append(Line2D([], [], color="grey", marker=mk, ls="", label=f"{fixed} = {g}"))
    handles = [Line2D([], [], color=OURS_COLOUR, ls="-", label=r"$B_{ours}$ (spectrum-adaptive)"),
               Line2D([], [], color=EDELMAN_COLOUR, ls="--",
                      label=r"$B_{Edelman}$ (norm-based)")] + handles
    ax.set_yscale("log")
    if along == "N":
        ax.set_xscale("log")
        ax.set_xticks(sorted(xs_all))
        ax.set_xticklabels([str(x) for x in sorted(xs_all)])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("Hidden dimension $N$")
        ax.set_ylabel("proxy / proxy at the smallest $N$ (log scale)")
        ax.set_title("Scaling with hidden dimension at fixed depth", fontsize=11)
    else:
        ax.set_xticks(sorted(xs_all))
        ax.set_xlabel("Depth $L$ (number of layers)")
        ax.set_ylabel("proxy / proxy at the smallest $L$ (log scale)")
        ax.set_title("Scaling with depth at fixed hidden dimension", fontsize=11)
    ax.axhline(1.0, color="grey", lw=0.8, ls=":")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(handles=handles, fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig
