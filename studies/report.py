"""A small Markdown study report: sections of text, tables and PNG figures.

Every figure is saved next to the report and referenced from it; :meth:`StudyReport.write`
checks that each listed figure file exists, so a report never points at a missing plot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from boundcalc.report.io import write_text_atomic


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
