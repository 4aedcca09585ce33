"""Rooms import downward only: inside boundcalc.measure (base < weights < data < compress), and
for the whole package, with the rooms and floors of docs/architecture.md.

A lower room importing an upper one (at module level or inside a function) is what turns the
package back into one tangle; this reads every import statement with ``ast`` (the whole-package
graph: tests/_import_graph.py) and fails on every upward one, naming the file and the line.
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


# ---- the whole package ------------------------------------------------------------------------
# Rooms and floors from docs/architecture.md (tests/_import_graph.py holds them as ROOMS).

from tests import _import_graph as graph  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"


def test_the_package_has_no_import_cycle():
    cycles = graph.module_cycles(graph.module_graph())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_every_room_of_the_package_imports_lower_floors_only():
    """Deferred imports (inside functions, ``lazy_function`` strings) count as arrows."""
    up = graph.upward(graph.module_graph())
    assert not up, "upward or sideways imports:\n" + "\n".join(up)


def test_no_library_module_imports_the_studies():
    """studies/ (outside the package) is a client of the public API, never imported by it."""
    out = graph.outside_imports(graph.module_graph())
    assert not out, "; ".join(out)


def test_every_module_has_a_room():
    missing = []
    for module in graph.module_files():
        try:
            graph.room_of(module)
        except KeyError:
            missing.append(module)
    assert not missing, f"modules in no room of tests/_import_graph.py: {missing}"


def test_the_rooms_are_those_of_docs_architecture():
    rows = [line.split("|")[1:3] for line in DOC.read_text().splitlines()
            if line.startswith("| ") and line.split("|")[1].strip().isdigit()]
    documented = [(int(f), r.strip()) for f, r in rows]
    assert documented == [(floor, room) for floor, room, _ in graph.ROOMS]


def _fake_package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "boundcalc"
    for name, text in {"__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


ROOMS = [(0, "low", ("boundcalc", "boundcalc.low")), (1, "high", ("boundcalc.high",)),
         (1, "side", ("boundcalc.side",))]


def test_the_checker_sees_deferred_upward_sideways_and_cyclic_imports(tmp_path):
    """Not vacuous: an import inside a function, a lazy_function string, a sideways import
    and a cycle are each caught, with file and line."""
    root = _fake_package(tmp_path, {
        "low.py": "def f():\n    from .high import g\n",
        "high.py": "from boundcalc import low\nfrom . import side\n",
        "side.py": "from ._lazy import lazy_function\nh = lazy_function('boundcalc.high', 'g')\n",
        "_lazy.py": ""})
    rooms = ROOMS + [(0, "lazy", ("boundcalc._lazy",))]
    g = graph.module_graph(root)
    up = graph.upward(g, rooms)
    assert "low -> high: boundcalc.low:2 imports boundcalc.high" in up
    assert "high -> side: boundcalc.high:2 imports boundcalc.side" in up
    assert "side -> high: boundcalc.side:2 imports boundcalc.high" in up
    assert graph.module_cycles(g, rooms) == [["boundcalc.high", "boundcalc.low",
                                              "boundcalc.side"]]
    clean = _fake_package(tmp_path / "clean", {"low.py": "", "high.py": "from .low import x\n"})
    assert graph.upward(graph.module_graph(clean), ROOMS) == []


def test_no_submodule_shadows_a_name_of_the_public_api():
    """``boundcalc.evaluate`` is a function: a subpackage of that name, once imported, would
    replace it. No exception: ``bind``'s module is ``boundcalc.binding``, and the function
    stays the function after every submodule is imported."""
    import importlib
    import types

    import boundcalc

    shadowing = sorted(name for name in boundcalc._EXPORTS
                       if f"boundcalc.{name}" in graph.module_files())
    assert not shadowing, shadowing
    importlib.import_module("boundcalc.binding")
    assert isinstance(boundcalc.bind, types.FunctionType) and boundcalc.bind.__name__ == "bind"
    assert not hasattr(boundcalc, "_keep_bind_function")


def test_the_checker_sees_a_library_module_importing_the_studies(tmp_path):
    """Not vacuous: a deferred import of studies/ from a library module is caught."""
    root = _fake_package(tmp_path, {"low.py": "def f():\n    from studies.digits_vit import build\n"})
    out = graph.outside_imports(graph.module_graph(root), ROOMS)
    assert out == ["boundcalc.low:2 imports studies.digits_vit"]
