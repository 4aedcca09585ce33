"""Build hook: ship the repository's top-level ``formulas/`` inside the package.

``formulas/`` stays the one source of the formula files in the repository; at build time its
files are copied to ``boundcalc/formulas/`` in the build tree, so the wheel carries them as
package data and ``importlib.resources.files("boundcalc") / "formulas"`` finds them; the source
notes of ``docs/sources/`` go to ``boundcalc/sources/`` the same way. Everything
else is declared in ``pyproject.toml``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py as _build_py

HERE = Path(__file__).resolve().parent
FORMULAS = HERE / "formulas"
SOURCES = HERE / "docs" / "sources"


class build_py(_build_py):
    """The usual build, plus ``formulas/*.toml``, ``formulas/README.md`` and the source notes
    ``docs/sources/*.md`` (as ``boundcalc/sources/``) as package data."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads the checkout's formulas/ directly
            return
        files = sorted(FORMULAS.glob("*.toml"))
        if not files:
            raise SystemExit(f"{FORMULAS}: no formula files to package")
        target = Path(self.build_lib) / "boundcalc" / "formulas"
        target.mkdir(parents=True, exist_ok=True)
        for f in [*files, FORMULAS / "README.md"]:
            if f.is_file():
                shutil.copyfile(f, target / f.name)
        # the source notes the entries cite (`boundcalc show` prints where to open them)
        notes = Path(self.build_lib) / "boundcalc" / "sources"
        notes.mkdir(parents=True, exist_ok=True)
        for f in sorted(SOURCES.glob("*.md")):
            shutil.copyfile(f, notes / f.name)


setup(cmdclass={"build_py": build_py})
