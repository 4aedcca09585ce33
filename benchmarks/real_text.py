"""A real-text classification task nobody in this project wrote: the opening of the docstrings
of four scientific Python libraries, labelled by library (string labels).

    python benchmarks/real_text.py --out out/real_text     # train.csv, heldout.csv, manifest.json

Rows: the opening paragraphs (about 64 tokens: joined until 240 characters, cut at a word
before 400) of every public function's, class's and method's docstring in a fixed list of
submodules of numpy, scipy, sympy and torch (``SOURCES``), whitespace collapsed, at
least 40 characters. The libraries' own names (``numpy``, ``np``, ``scipy``, ``sympy``,
``torch``, …) are replaced by ``lib`` so that a class is not given away by one token. A text
found under two libraries is dropped (torch copies some of numpy's docstrings). The rows of each
class are shuffled with ``--seed`` and cut to ``--per-class``; ``--heldout`` rows per class go to
``heldout.csv``, the rest to ``train.csv`` (columns ``text``, ``label``). ``manifest.json``
records the library versions (the docstrings change with them), the counts and the files'
SHA-256, so a run says exactly which text it used.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import importlib
import inspect
import json
import random
import re
import sys
import warnings
from pathlib import Path

SOURCES = {
    "numpy": ("numpy", "numpy.linalg", "numpy.fft", "numpy.random", "numpy.ma",
              "numpy.polynomial", "numpy.lib"),
    "scipy": ("scipy.stats", "scipy.linalg", "scipy.optimize", "scipy.signal", "scipy.special",
              "scipy.sparse", "scipy.integrate", "scipy.interpolate", "scipy.ndimage",
              "scipy.spatial", "scipy.cluster"),
    "sympy": ("sympy", "sympy.functions", "sympy.matrices", "sympy.polys", "sympy.solvers",
              "sympy.series", "sympy.logic", "sympy.sets", "sympy.physics.units"),
    "torch": ("torch", "torch.nn", "torch.nn.functional", "torch.linalg", "torch.distributions",
              "torch.optim", "torch.fft", "torch.special", "torch.utils.data"),
}
NAMES = re.compile(r"\b(numpy|np|scipy|sp|sympy|torch|pytorch|PyTorch|NumPy|SciPy|SymPy)\b")


def first_paragraph(doc: str, least: int = 240, most: int = 400) -> str:
    """The docstring's opening paragraphs, joined until ``least`` characters (about 64
    tokens), cut at a word boundary before ``most``; whitespace collapsed, library names
    masked."""
    text = ""
    for par in inspect.cleandoc(doc).split("\n\n"):
        text = (text + " " + re.sub(r"\s+", " ", par.strip())).strip()
        if len(text) >= least:
            break
    if len(text) > most:
        text = text[:most].rsplit(" ", 1)[0]
    return NAMES.sub("lib", text)


def library_texts(modules: tuple[str, ...]) -> list[str]:
    """Every distinct opening (:func:`first_paragraph`, ≥ 40 characters) of the public objects of ``modules``
    and of their classes' public attributes, in a fixed order (module, name, attribute)."""
    seen: dict[str, None] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in modules:
            mod = importlib.import_module(name)
            for attr in sorted(dir(mod)):
                if attr.startswith("_"):
                    continue
                try:
                    obj = getattr(mod, attr)
                except Exception:  # noqa: BLE001 (a lazy attribute that fails to import)
                    continue
                objs = [obj]
                if inspect.isclass(obj):
                    objs += [v for k, v in sorted(vars(obj).items()) if not k.startswith("_")]
                for o in objs:
                    doc = getattr(o, "__doc__", None)
                    if isinstance(doc, str) and not inspect.ismodule(o):
                        text = first_paragraph(doc)
                        if len(text) >= 40:
                            seen.setdefault(text, None)
    return list(seen)


def docstring_rows(per_class: int, seed: int = 0) -> dict[str, list[str]]:
    """``{library: texts}``: ``per_class`` shuffled texts of each library, texts found under
    two libraries removed; refused when a library has fewer."""
    found = {lib: library_texts(mods) for lib, mods in SOURCES.items()}
    owners: dict[str, set[str]] = {}
    for lib, texts in found.items():
        for t in texts:
            owners.setdefault(t, set()).add(lib)
    out = {}
    for lib, texts in found.items():
        mine = [t for t in texts if len(owners[t]) == 1]
        random.Random(f"{seed}:{lib}").shuffle(mine)
        if len(mine) < per_class:
            raise SystemExit(f"{lib}: only {len(mine)} distinct docstring openings, "
                             f"fewer than --per-class {per_class}")
        out[lib] = mine[:per_class]
    return out


def _write(path: Path, rows: list[tuple[str, str]]) -> str:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        w.writerows(rows)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_task(out: Path, per_class: int = 650, heldout: int = 150,
               seed: int = 0) -> dict[str, object]:
    """Write ``train.csv``, ``heldout.csv`` and ``manifest.json`` into ``out``; return the
    manifest."""
    out.mkdir(parents=True, exist_ok=True)
    by_lib = docstring_rows(per_class, seed)
    train = [(t, lib) for lib, texts in by_lib.items() for t in texts[heldout:]]
    test = [(t, lib) for lib, texts in by_lib.items() for t in texts[:heldout]]
    random.Random(seed).shuffle(train)
    random.Random(seed + 1).shuffle(test)
    versions = {lib: importlib.import_module(lib).__version__ for lib in SOURCES}
    manifest = {"task": "library of a docstring's opening (names masked)",
                "classes": sorted(by_lib), "per_class": per_class, "heldout_per_class": heldout,
                "seed": seed, "versions": versions, "python": sys.version.split()[0],
                "train": {"rows": len(train), "sha256": _write(out / "train.csv", train)},
                "heldout": {"rows": len(test), "sha256": _write(out / "heldout.csv", test)}}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("out/real_text"))
    ap.add_argument("--per-class", type=int, default=650)
    ap.add_argument("--heldout", type=int, default=150, help="held-out rows per class")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    m = write_task(args.out, args.per_class, args.heldout, args.seed)
    print(f"{m['train']['rows']} training rows, {m['heldout']['rows']} held-out rows of "
          f"{len(m['classes'])} classes ({', '.join(m['classes'])}) in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
