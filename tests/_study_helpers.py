"""Shared checks for the study tests: load an example script, validate a PNG, read a report's
figure references."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_example(name: str):
    """Import ``examples/<name>.py`` as a module (its ``main(argv)`` runs the study)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def check_png(path: Path, min_bytes: int = 10_000, min_shape: tuple[int, int] = (250, 400)) -> None:
    """A real, non-trivial picture: PNG signature, size, dimensions and pixel variation."""
    import matplotlib.image as mpimg

    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    assert len(data) > min_bytes, (path, len(data))
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] >= min_shape[0] and img.shape[1] >= min_shape[1], \
        (path, img.shape)
    assert float(img[..., :3].std()) > 0.03, path


def figure_refs(report_text: str) -> list[str]:
    """The image files a Markdown report references, in order."""
    return re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report_text)


def run_capturing_figures(name: str, out: Path) -> tuple[int, list[str]]:
    """Run ``examples/<name>.py --out OUT``; return its exit code and the figures its
    StudyReport listed when it wrote the report."""
    from studies.report import StudyReport

    captured: list[str] = []
    original = StudyReport.write

    def spy(self):
        captured.extend(self.figures)
        return original(self)

    StudyReport.write = spy
    try:
        rc = load_example(name).main(["--out", str(out)])
    finally:
        StudyReport.write = original
    return rc, captured
