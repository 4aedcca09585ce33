"""A small Markdown study report: sections of text, tables and PNG figures.

Every figure is saved next to the report and referenced from it; :meth:`StudyReport.write`
checks that each listed figure file exists, so a report never points at a missing plot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from boundcalc.files.atomic_write import write_text_atomic


@dataclass
class StudyReport:
    """Collects a study's findings and writes ``<out>/report.md`` with its figures."""

    title: str
    out_dir: Path
    blocks: list[str] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)

    def text(self, markdown: str) -> None:
        self.blocks.append(markdown.strip())

    def table(self, header: Sequence[str], rows: Sequence[Sequence[Any]],
              caption: str | None = None) -> None:
        lines = []
        if caption:
            lines.append(f"*{caption}*\n")
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
        for row in rows:
            lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
        self.blocks.append("\n".join(lines))

    def figure(self, fig, name: str, caption: str) -> Path:
        """Save a matplotlib figure as ``name`` (PNG) and reference it in the report."""
        if not name.endswith(".png"):
            name += ".png"
        path = self.out_dir / name
        fig.savefig(path, dpi=120, bbox_inches="tight")
        import matplotlib.pyplot as plt

        plt.close(fig)
        self.figures.append(name)
        self.blocks.append(f"![{caption}]({name})\n\n*{caption}*")
        return path

    def write(self) -> Path:
        missing = [f for f in self.figures if not (self.out_dir / f).is_file()]
        if missing:
            raise FileNotFoundError(f"report figures missing: {missing}")
        text = f"# {self.title}\n\n" + "\n\n".join(self.blocks) + "\n"
        return write_text_atomic(self.out_dir / "report.md", text)


def _cell(c: Any) -> str:
    if isinstance(c, float):
        return f"{c:.4g}"
    return str(c).replace("|", "\\|")


def add_study_options(parser: Any, name: str, full_help: str) -> None:
    """The options every study shares: ``--out`` (default ``out/study_<name>``) and ``--full``."""
    from pathlib import Path

    parser.add_argument("--out", type=Path, default=Path(f"out/study_{name}"),
                        help="folder for report.md, the PNG figures and the data files "
                             "(default: %(default)s)")
    parser.add_argument("--full", action="store_true", help=full_help)


def certified_model(entry_id: str, row: dict[str, Any] | None = None) -> str:
    """Which model a certified row is about, from the statistics its registry entry reads:
    the model a compression code decodes to (as ``compare`` names it: the row's
    ``certifies``), the bound-trained Gibbs posterior (its mean trained on S on the bound), the
    subspace Gibbs posterior around the prior, a Gaussian Gibbs posterior around the fine-tuned
    weights, or the fine-tuned weights themselves."""
    from boundcalc.registry.registry import load_registry

    try:
        stats = {s.stat for s in load_registry().get(entry_id).symbols.values() if s.stat}
    except Exception:  # an entry this registry does not know: say nothing wrong
        return "unknown (entry not in this registry)"
    if any(s.startswith(("scalars.code_bits", "scalars.quantized", "curves.quantized"))
           for s in stats):
        c = (row or {}).get("certifies")
        return ("the quantized model: " + c["text"]) if c else "the quantized model"
    if "scalars.gibbs_subspace_mean" in stats:
        return ("the subspace Gibbs posterior N(z, s_Q² I) on the coordinates of a random "
                "subspace around the prior (z and s_Q trained on S on the bound; its mean saved "
                "as posterior_subspace/), not model/ itself")
    if "curves.gibbs_risk_learned" in stats:
        return ("the bound-trained Gibbs posterior N(μ, diag σ_Q,g²) (μ and σ trained on S on "
                "the bound; μ saved as posterior_bound/), not model/ itself")
    if "curves.gibbs_risk_groups" in stats:
        return ("the Gibbs posterior N(w, diag σ_g²) around the fine-tuned weights model/ "
                "(a random model), not model/ itself")
    if any(s.startswith("curves.gibbs") for s in stats):
        return ("the Gibbs posterior N(w, σ²I) around the fine-tuned weights model/ "
                "(a random model), not model/ itself")
    return "the fine-tuned model model/"


def certified_rows(rows: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """compare --json's certified rows for a report: ``certified`` (about the user's model,
    by value), ``certified_other_model`` (compression rows whose code decodes to another
    model: listed apart), ``certified_bound_posterior`` (rows on the bound-trained Gibbs
    posterior: apart too), ``certified_subspace_posterior`` (rows on the subspace Gibbs
    posterior: apart too), each with what it certifies; ``minimum`` (the least certified value
    with its honest δ) and ``minimum_text`` (how it is quoted, one line)."""
    out: dict[str, Any] = {"certified": [], "certified_other_model": [],
                           "certified_bound_posterior": [],
                           "certified_subspace_posterior": []}
    for r in sorted(rows["certified"], key=lambda r: r["value"] if r["value"] is not None
                    else math.inf):
        row = {k: r.get(k) for k in keys}
        row["certifies"] = certified_model(r["id"], r)
        row["about"] = (r.get("certifies") or {}).get("about", "measured")
        key = {"measured": "certified", "bound_posterior": "certified_bound_posterior",
               "subspace_posterior": "certified_subspace_posterior"}
        out[key.get(row["about"], "certified_other_model")].append(row)
    out["minimum"] = rows.get("minimum")
    out["minimum_text"] = rows.get("minimum_text")
    return out
