"""Does a measure track generalization? Rank correlation of every entry against a target.

For every entry of a sweep's results table (one value per checkpoint):

* Kendall's τ (τ-b, ties handled) and Spearman's ρ between the entry's value and the target
  column, with percentile bootstrap confidence intervals (checkpoints resampled with
  replacement);
* Jiang et al. 2020 ("Fantastic generalization measures and where to find them", ICLR 2020,
  arXiv:1912.02178, §4.2 eq. 4–5), the granulated Kendall coefficient: for each declared
  hyper-parameter θ_i, ψ_i is the mean, over every setting of the other hyper-parameters, of
  τ over the models that differ only in θ_i; Ψ is the mean of the ψ_i. Their τ is the pair sign
  average (1/(|T|(|T|−1))) Σ_{a≠b} sign(μ_a−μ_b)·sign(g_a−g_b), so a measure that does not change
  with θ_i scores 0 there.

Values are ranked on log10 of the entry's value (exact for values beyond float range); a rank
statistic is unchanged by that monotone map. Certified, conditional, rate and proxy entries are
ranked together (tracking is a property of a measure) and labelled with their kind.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import BoundcalcError
from ..words import option


@dataclass
class Correlation:
    """The ranked table (a DataFrame) and what it was computed from."""

    table: Any
    target: str
    hyperparameters: list[str]
    n_bootstrap: int
    confidence: float


def load_table(path: str | Path):
    """A results table written by a sweep (CSV or Parquet)."""
    from ..files import read_pandas

    p = Path(path)
    if not p.exists() and not p.is_symlink():
        raise BoundcalcError(f"{p}: no such results table")
    return read_pandas(p, BoundcalcError, "the results table")


def pair_tau(x: np.ndarray, y: np.ndarray) -> float:
    """Jiang et al.'s τ: the mean over ordered pairs a ≠ b of sign(x_a−x_b)·sign(y_a−y_b)."""
    n = len(x)
    if n < 2:
        return float("nan")
    sx = np.sign(x[:, None] - x[None, :])
    sy = np.sign(y[:, None] - y[None, :])
    return float((sx * sy).sum() / (n * (n - 1)))


def granulated_tau(frame: Any, measure: str, target: str,
                   hyperparameters: Sequence[str]) -> dict[str, float]:
    """ψ_i for each hyper-parameter and Ψ (key ``"Psi"``), Jiang et al. 2020 eq. 4–5.

    Groups of models sharing every other hyper-parameter and with at least two values of θ_i
    enter ψ_i; a hyper-parameter with no such group gets NaN and is left out of Ψ."""
    out: dict[str, float] = {}
    for hp in hyperparameters:
        others = [h for h in hyperparameters if h != hp]
        taus = []
        groups = frame.groupby(others, sort=True, dropna=False) if others else [((), frame)]
        for _, g in groups:
            if g[hp].nunique() < 2:
                continue
            taus.append(pair_tau(g[measure].to_numpy(float), g[target].to_numpy(float)))
        out[hp] = float(np.mean(taus)) if taus else float("nan")
    psi = [v for v in out.values() if math.isfinite(v)]
    out["Psi"] = float(np.mean(psi)) if psi else float("nan")
    return out


def _kendall(x: np.ndarray, y: np.ndarray) -> float:
    from scipy.stats import kendalltau

    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return 0.0  # a constant ranks nothing: no association
    return float(kendalltau(x, y).statistic)


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    from scipy.stats import rankdata

    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return 0.0
    rx, ry = rankdata(x), rankdata(y)
    return float(np.corrcoef(rx, ry)[0, 1])


def _bootstrap(x: np.ndarray, y: np.ndarray, n: int, rng: np.random.Generator,
               alpha: float) -> tuple[float, float, float, float]:
    """Percentile intervals of τ and ρ over ``n`` resamples, computed a chunk of resamples at a
    time with numpy (the draws are the same as one ``rng.integers(0, m, m)`` per resample)."""
    m = len(x)
    taus, rhos = np.empty(n), np.empty(n)
    chunk = max(1, 2_000_000 // max(m * m, 1))
    for lo in range(0, n, chunk):
        b = min(chunk, n - lo)
        idx = rng.integers(0, m, (b, m))
        xs, ys = x[idx], y[idx]
        taus[lo:lo + b] = _kendall_rows(xs, ys)
        rhos[lo:lo + b] = _spearman_rows(xs, ys)
    lo, hi = 100 * alpha / 2, 100 * (1 - alpha / 2)
    return (float(np.percentile(taus, lo)), float(np.percentile(taus, hi)),
            float(np.percentile(rhos, lo)), float(np.percentile(rhos, hi)))


def _kendall_rows(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Kendall τ-b of each row pair, as :func:`_kendall` (scipy's τ-b; 0 for a constant row):
    (concordant − discordant) / √(pairs untied in x) / √(pairs untied in y)."""
    i, j = np.triu_indices(xs.shape[1], 1)
    sx, sy = np.sign(xs[:, i] - xs[:, j]), np.sign(ys[:, i] - ys[:, j])
    num = (sx * sy).sum(1)
    nx, ny = np.abs(sx).sum(1), np.abs(sy).sum(1)
    ok = (nx > 0) & (ny > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        tau = num / np.sqrt(nx) / np.sqrt(ny)
    return np.where(ok, np.clip(tau, -1.0, 1.0), 0.0)


def _spearman_rows(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Spearman ρ of each row pair, as :func:`_spearman` (0 for a constant row)."""
    from scipy.stats import rankdata

    rx, ry = rankdata(xs, axis=1), rankdata(ys, axis=1)
    rx -= rx.mean(1, keepdims=True)
    ry -= ry.mean(1, keepdims=True)
    vx, vy = (rx * rx).sum(1), (ry * ry).sum(1)
    ok = (np.ptp(xs, axis=1) > 0) & (np.ptp(ys, axis=1) > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = (rx * ry).sum(1) / np.sqrt(vx) / np.sqrt(vy)
    return np.where(ok, np.clip(rho, -1.0, 1.0), 0.0)


def _plan_bootstrap(groups: list, n_bootstrap: int, alpha: float) -> None:
    """Refuse a bootstrap that cannot finish within the time or memory budget, before it
    starts: the speed is measured on a pilot of up to 256 resamples of the largest entry (its
    own random stream, so the results do not change)."""
    if n_bootstrap <= 0 or not groups:
        return
    from ..plan import bootstrap_plan, check

    g = max(groups, key=len)
    x, y = g["_measure"].to_numpy(float), g["_target"].to_numpy(float)
    _bootstrap(x, y, 1, np.random.default_rng(0), alpha)  # imports and warm-up, not timed
    pilot = min(n_bootstrap, 256)
    start = time.perf_counter()
    _bootstrap(x, y, pilot, np.random.default_rng(0), alpha)
    per = (time.perf_counter() - start) / pilot
    check(bootstrap_plan(n_bootstrap, len(groups), per))


def write_correlation(corr: "Correlation", out: str | Path) -> tuple[Path, Path]:
    """``correlation.csv`` and ``correlation.png`` in the folder ``out`` (created if needed),
    with the rules of every other writer (:mod:`boundcalc.files.atomic_write`): a path that is a
    file or a device is refused, a failure is one :class:`~boundcalc.errors.OutputError` line and
    leaves no half-written file."""
    from ..errors import OutputError, shown
    from ..files import write_bytes_atomic

    folder = Path(out)
    if not str(out).strip():
        raise OutputError(f"{option('out')}: the folder name is empty")
    if folder.exists() and not folder.is_dir():
        raise OutputError(f"{option('out', shown(folder))}: exists and is not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{option('out', shown(folder))}: cannot create the folder "
                          f"({exc.strerror or type(exc).__name__})") from None
    csv_path = write_bytes_atomic(folder / "correlation.csv",
                                  corr.table.to_csv(index=False).encode("utf-8"))
    return csv_path, plot_correlation(corr, folder / "correlation.png")


def correlate(table: Any, target: str, hyperparameters: Sequence[str] | None = None,
              n_bootstrap: int = 1000, confidence: float = 0.95, seed: int = 0) -> Correlation:
    """Rank every entry of a sweep table by how well it tracks ``target``.

    ``table``: a DataFrame or the path of ``results.csv``/``results.parquet``.
    ``hyperparameters``: columns for the granulated τ (default: the ``hp:`` columns).
    Entries with a value on fewer than 3 checkpoints are left out and listed in
    ``table.attrs["left_out"]``. A constant measure gets τ = ρ = 0 (it ranks nothing).
    """
    import pandas as pd

    df = (load_table(table) if isinstance(table, (str, Path)) else table).reset_index(drop=True)
    for col in ("id", "kind", "log10_value", "status", "path"):
        if col not in df.columns:
            raise BoundcalcError(f"results table: no '{col}' column (is it a sweep's "
                                 "results.csv?)")
    if target not in df.columns:
        raise BoundcalcError(f"{option('target', target)}: no such column (columns: "
                             f"{', '.join(map(str, df.columns))})")
    tgt = pd.to_numeric(df[target], errors="coerce")
    if tgt.isna().any() or not np.isfinite(tgt.to_numpy(float)).all():
        bad = int(np.flatnonzero(~np.isfinite(tgt.to_numpy(float)))[0])
        raise BoundcalcError(f"{option('target', target)}: row {bad + 1} of the table is "
                             f"{str(df[target].iloc[bad])!r}; every row needs a finite number")
    hps = list(hyperparameters) if hyperparameters is not None else [
        c for c in df.columns if str(c).startswith("hp:")]
    for h in hps:
        if h not in df.columns:
            raise BoundcalcError(f"hyper-parameter column '{h}' is not in the table")
    if not 0 < confidence < 1:
        raise BoundcalcError(f"{option('confidence')} must lie in (0, 1), got {confidence}")
    ok = df[(df["status"] == "ok") & df["id"].notna()].copy()
    ok["_target"] = tgt[ok.index].astype(float)
    ok["_measure"] = pd.to_numeric(ok["log10_value"], errors="coerce")
    ok = ok[np.isfinite(ok["_measure"].to_numpy(float))]
    if isinstance(n_bootstrap, bool) or not 0 <= n_bootstrap:
        raise BoundcalcError(f"{option('n_bootstrap')} must be a count >= 0, got "
                             f"{n_bootstrap!r}")
    rng = np.random.default_rng(seed)
    records, left_out = [], []
    key = "row" if "row" in ok.columns else "path"
    groups = [(i, g.drop_duplicates(subset=[key])) for i, g in ok.groupby("id", sort=True)]
    _plan_bootstrap([g for _, g in groups if len(g) >= 3], n_bootstrap, 1 - confidence)
    for entry_id, g in groups:
        x, y = g["_measure"].to_numpy(float), g["_target"].to_numpy(float)
        if len(g) < 3:
            left_out.append(f"{entry_id} ({len(g)} checkpoints)")
            continue
        rec: dict[str, Any] = {"id": entry_id, "kind": str(g["kind"].iloc[0]), "n": len(g),
                               "kendall_tau": _kendall(x, y), "spearman_rho": _spearman(x, y)}
        if n_bootstrap > 0:
            (rec["tau_lo"], rec["tau_hi"], rec["rho_lo"],
             rec["rho_hi"]) = _bootstrap(x, y, n_bootstrap, rng, 1 - confidence)
        if hps:
            gran = granulated_tau(g, "_measure", "_target", hps)
            rec["granulated_tau"] = gran.pop("Psi")
            rec.update({f"psi[{h}]": v for h, v in gran.items()})
        records.append(rec)
    if not records:
        raise BoundcalcError("no entry has a value on at least 3 checkpoints; nothing to rank")
    out = pd.DataFrame.from_records(records)
    by = "granulated_tau" if hps and out["granulated_tau"].notna().any() else "kendall_tau"
    out = out.sort_values([by, "kendall_tau", "id"], ascending=[False, False, True],
                          na_position="last").reset_index(drop=True)
    out.insert(0, "rank", np.arange(1, len(out) + 1))
    out.attrs["left_out"] = left_out
    out.attrs["ranked_by"] = by
    return Correlation(table=out, target=target, hyperparameters=hps, n_bootstrap=n_bootstrap,
                       confidence=confidence)


def plot_correlation(corr: Correlation, path: str | Path) -> Path:
    """Horizontal bars of Kendall τ per entry (bootstrap interval as error bars, colour = kind),
    Spearman ρ and granulated τ as markers; ranked as in the table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = corr.table
    colors = {"certified": "#1b7837", "conditional": "#7fbf7b", "rate": "#2166ac",
              "proxy": "#b2182b"}
    n = len(t)
    fig, ax = plt.subplots(figsize=(8, max(3.0, 0.42 * n + 1.4)))
    ypos = np.arange(n)[::-1]
    tau = t["kendall_tau"].to_numpy(float)
    err = None
    if "tau_lo" in t:
        err = np.clip(np.vstack([tau - t["tau_lo"].to_numpy(float),
                                 t["tau_hi"].to_numpy(float) - tau]), 0, None)
    ax.barh(ypos, tau, xerr=err, color=[colors.get(k, "grey") for k in t["kind"]],
            alpha=0.85, capsize=3, label="Kendall τ (bar, bootstrap CI)")
    ax.plot(t["spearman_rho"], ypos, "k|", markersize=12, label="Spearman ρ")
    if "granulated_tau" in t:
        ax.plot(t["granulated_tau"], ypos, "D", color="orange", markersize=5,
                label="granulated τ (Jiang et al.)")
    ax.set_yticks(ypos)
    ax.set_yticklabels([f"{i} [{k}]" for i, k in zip(t["id"], t["kind"])], fontsize=8)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_xlim(-1.05, 1.05)
    ax.set_xlabel(f"rank correlation with {corr.target} (> 0: larger measure, larger target)")
    ax.set_title("Which entries track generalization", fontsize=11)
    handles, labels = ax.get_legend_handles_labels()
    from matplotlib.patches import Patch

    kinds = [k for k in colors if k in set(t["kind"])]
    handles += [Patch(color=colors[k]) for k in kinds]
    labels += kinds
    ax.legend(handles, labels, fontsize=7, loc="lower right")
    fig.tight_layout()
    import io

    from ..files import write_bytes_atomic

    buf = io.BytesIO()
    fig.savefig(buf, dpi=110, format="png")
    plt.close(fig)
    return write_bytes_atomic(path, buf.getvalue())
