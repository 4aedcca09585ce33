"""The rooms of boundcalc.measure import downward only: base < weights < data < compress.

A lower room importing an upper one (at module level or inside a function) is what turns the
data side back into one tangle; this reads every import statement with ``ast`` and fails on the
first upward one, naming the file and the line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import boundcalc.measure as measure_pkg

MEASURE = Path(measure_pkg.__file__).resolve().parent
RANK = {"weights": 1, "data": 2, "compress": 3}


def _room(dotted: str) -> int:
    """Rank of a module under boundcalc.measure (0 for the base modules)."""
    parts = dotted.split(".")
    return RANK.get(parts[2], 0) if len(parts) > 2 and parts[:2] == ["boundcalc", "measure"] else -1


def _imports(path: Path) -> list[tuple[int, str]]:
    rel = path.relative_to(MEASURE.parent.parent).with_suffix("")
    package = list(rel.parts[:-1])  # the module's package, as a list of names
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target] if node.module else [f"{target}.{a.name}" for a in node.names]
            out += [(node.lineno, t) for t in names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
    return out


def test_every_room_imports_downward_only():
    files = sorted(p for p in MEASURE.rglob("*.py") if p.name != "__init__.py" or p.parent != MEASURE)
    assert any(p.parent.name == "data" for p in files) and any(p.parent.name == "weights" for p in files)
    upward = []
    for path in files:
        own = _room("boundcalc.measure." + ".".join(path.relative_to(MEASURE).with_suffix("").parts))
        for line, target in _imports(path):
            if _room(target) > own:
                upward.append(f"{path.relative_to(MEASURE)}:{line} imports {target}")
    assert not upward, "upward imports: " + "; ".join(upward)


def test_the_checker_sees_an_upward_import(tmp_path):
    """The rule is not vacuous: a base module importing the data side is caught."""
    fake = MEASURE / "io.py"
    lines = _imports(fake)
    assert lines, "the checker found no imports in measure/io.py"
    assert _room("boundcalc.measure.data.curvature") > _room("boundcalc.measure.io")
    assert _room("boundcalc.measure.compress.compression") > _room("boundcalc.measure.data.hf")
