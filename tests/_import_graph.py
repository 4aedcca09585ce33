"""The import graph of boundcalc/, read with ``ast`` (a test helper; also runnable).

Every ``import`` and ``from … import`` statement counts, wherever it stands (module level or
inside a function), and so does a string handed to ``lazy_function``/``lazy_module``/
``importlib.import_module``. ``from package import name`` points at ``package.name`` when that is
a module, otherwise at ``package``. Modules are grouped into rooms by :data:`ROOMS` (the order
drawn in docs/architecture.md); an arrow to a room on the same or a higher floor is *upward*.

Run ``python tests/_import_graph.py`` to print the rooms, their arrows, cycles and upward arrows.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "boundcalc"

# Rooms by floor, lowest first: (floor, room, the modules it owns). ``x.*`` owns ``x`` and every
# module below it; a plain name owns that module only; the most specific pattern wins. A room may
# import only rooms on lower floors. Keep in step with docs/architecture.md.
ROOMS: list[tuple[int, str, tuple[str, ...]]] = [
    (0, "base", ("boundcalc", "boundcalc.errors", "boundcalc._lazy", "boundcalc.result",
                 "boundcalc.prior_spec", "boundcalc.codecheck", "boundcalc.which_model",
                 "boundcalc.claim", "boundcalc.hints", "boundcalc.bundled", "boundcalc.words",
                 "boundcalc.rounding", "boundcalc.options", "boundcalc.task_facts")),
    (1, "budgets", ("boundcalc.limits", "boundcalc.plan")),
    (1, "engine", ("boundcalc.engine.*",)),
    (2, "files", ("boundcalc.files.*",)),
    (3, "registry", ("boundcalc.registry.*",)),
    (3, "stats", ("boundcalc.stats", "boundcalc.stats_checks")),
    (4, "floor", ("boundcalc.floor",)),
    (4, "binding", ("boundcalc.binding",)),
    (4, "measure.base", tuple(f"boundcalc.measure.{m}" for m in (
        "io", "architectures", "samples", "safety", "device", "threads", "subgaussian",
        "fourier", "offline", "prior"))),
    (4, "stages", ("boundcalc.stages.*",)),
    (5, "evaluation", ("boundcalc.evaluation",)),
    (5, "measure.weights", ("boundcalc.measure.weights.*",)),
    (6, "api", ("boundcalc.api", "boundcalc.measured")),
    (6, "measure.data", ("boundcalc.measure.data.*",)),
    (6, "report", ("boundcalc.report.*",)),
    (7, "optimize", ("boundcalc.optimize.*",)),
    (7, "measure.compress", ("boundcalc.measure.compress.*",)),
    (7, "measure", ("boundcalc.measure",)),
    (8, "sweep", ("boundcalc.sweep.*",)),
    (8, "certify", ("boundcalc.certify.*",)),
    (9, "cli", ("boundcalc.cli.*", "boundcalc.__main__")),
]

# clients of the public API, not rooms of the library: the studies live outside the package
# (studies/ at the repository root), and no library module may import them
OUTSIDE = ("studies.*",)


def _matches(module: str, pattern: str) -> int:
    """How specifically ``pattern`` matches ``module`` (its length), or -1."""
    if pattern.endswith(".*"):
        base = pattern[:-2]
        return len(base) if module == base or module.startswith(base + ".") else -1
    return len(pattern) + 1 if module == pattern else -1


def module_files(root: Path = PACKAGE) -> dict[str, Path]:
    """Dotted module name → file, for every .py under ``root``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _resolve(target: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of ``target`` that is a module of the package, ``target`` itself for
    an OUTSIDE module (kept so that an import of it is seen), or None."""
    if any(_matches(target, p) >= 0 for p in OUTSIDE):
        return target
    parts = target.split(".")
    while parts:
        name = ".".join(parts)
        if name in modules:
            return name
        parts.pop()
    return None


_STRING_IMPORTERS = {"lazy_function", "lazy_module", "import_module"}


def imports(module: str, path: Path, modules: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, imported module of the package) for every import statement of one file."""
    package = module.split(".") if _is_package(path) else module.split(".")[:-1]
    found: list[tuple[int, str]] = []

    def add(line: int, target: str) -> None:
        resolved = _resolve(target, modules)
        if resolved is not None and resolved != module:
            found.append((line, resolved))

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            for alias in node.names:
                full = f"{source}.{alias.name}"
                add(node.lineno, full if full in modules else source)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                add(node.lineno, alias.name)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in _STRING_IMPORTERS and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                add(node.lineno, node.args[0].value)
    return found


def outside_imports(graph, rooms=None) -> list[str]:
    """Library modules importing a module OUTSIDE the rooms (the studies are clients only)."""
    return [f"{module}:{line} imports {target}" for module, targets in sorted(graph.items())
            if room_of(module, rooms) is not None
            for line, target in targets if room_of(target, rooms) is None]


def module_graph(root: Path = PACKAGE) -> dict[str, list[tuple[int, str]]]:
    """Module → [(line, imported module)], for every module of the package."""
    modules = module_files(root)
    return {name: imports(name, path, modules) for name, path in modules.items()}


def room_of(module: str, rooms=None) -> str | None:
    """The room owning ``module`` (longest matching prefix), None for OUTSIDE modules."""
    rooms = ROOMS if rooms is None else rooms
    if any(_matches(module, p) >= 0 for p in OUTSIDE):
        return None
    best, length = None, -1
    for _, room, patterns in rooms:
        for p in patterns:
            if _matches(module, p) > length:
                best, length = room, _matches(module, p)
    if best is None:
        raise KeyError(f"{module} belongs to no room: add it to ROOMS in tests/_import_graph.py")
    return best


def room_arrows(graph, rooms=None) -> dict[tuple[str, str], list[str]]:
    """(from room, to room) → ['file:line imports module', ...] for arrows between rooms."""
    arrows: dict[tuple[str, str], list[str]] = defaultdict(list)
    for module, targets in graph.items():
        src = room_of(module, rooms)
        if src is None:
            continue
        for line, target in targets:
            dst = room_of(target, rooms)
            if dst is not None and dst != src:
                where = f"{module}:{line} imports {target}"
                if where not in arrows[(src, dst)]:
                    arrows[(src, dst)].append(where)
    return dict(arrows)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(set(edges) | {w for ws in edges.values() for w in ws}):
        if v not in index:
            visit(v)
    return out


def module_cycles(graph, rooms=None) -> list[list[str]]:
    """Import cycles between modules (package ``__init__`` re-exports excluded: a package
    importing its own submodules is how a package names its public API)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for module, targets in graph.items():
        if room_of(module, rooms) is None:
            continue
        for _, target in targets:
            if room_of(target, rooms) is None:
                continue
            if target.startswith(module + "."):
                continue  # a package importing its own submodule
            edges[module].add(target)
    return cycles(edges)


def upward(graph, rooms=None) -> list[str]:
    """Every import from a room to a room on the same or a higher floor."""
    rooms = ROOMS if rooms is None else rooms
    floor = {room: level for level, room, _ in rooms}
    return [f"{a} -> {b}: {w}" for (a, b), where in sorted(room_arrows(graph, rooms).items())
            if floor[a] <= floor[b] for w in where]


if __name__ == "__main__":
    graph = module_graph()
    if "--modules" in sys.argv:
        for m, ts in sorted(graph.items()):
            print(m, "->", sorted({t for _, t in ts}))
        sys.exit()
    arrows = room_arrows(graph)
    floor = {room: level for level, room, _ in ROOMS}
    for level, room, _ in ROOMS:
        outs = sorted({b for (a, b) in arrows if a == room}, key=lambda r: (floor[r], r))
        print(f"{level:2d} {room:16s} -> {', '.join(outs)}")
    print("arrows:", len(arrows))
    room_edges: dict[str, set[str]] = defaultdict(set)
    for a, b in arrows:
        room_edges[a].add(b)
    print("room cycles:", cycles(room_edges))
    print("module cycles:", module_cycles(graph))
    print("upward:", *upward(graph), sep="\n  ")
