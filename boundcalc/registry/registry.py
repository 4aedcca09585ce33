"""The registry: every entry of every formula file, listed, filtered and fetched by id."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Iterator

from ..errors import BoundcalcError, FormulaError
from ..files import check_regular_file
from ..words import option
from .cache import load_file_cached
from .schema import Entry


ENV_VAR = "BOUNDCALC_FORMULAS"


def bundled_formula_dir() -> Path:
    """The formula files that ship with boundcalc.

    In an installed wheel they are package data (``boundcalc/formulas/``, copied there from the
    repository's top-level ``formulas/`` at build time) and are found through
    :mod:`importlib.resources`; in a checkout the top-level ``formulas/`` is read directly.
    """
    from importlib.resources import files

    packaged = files("boundcalc") / "formulas"
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[2] / "formulas"


def user_formula_dirs(extra: Iterable[str | Path] | None = None) -> list[Path]:
    """User folders: ``$BOUNDCALC_FORMULAS`` (``os.pathsep``-separated), then ``extra``."""
    env = os.environ.get(ENV_VAR, "")
    out = [Path(p) for p in env.split(os.pathsep) if p]
    out.extend(Path(p) for p in (extra or ()))
    return out


def default_formula_dirs(extra: Iterable[str | Path] | None = None) -> list[Path]:
    """The bundled formulas, then the user folders of :func:`user_formula_dirs`."""
    return [bundled_formula_dir(), *user_formula_dirs(extra)]


class Registry:
    """A collection of entries with unique ids."""

    def __init__(self, entries: Iterable[Entry] = ()):
        self._entries: dict[str, Entry] = {}
        for e in entries:
            self.add(e)

    def add(self, entry: Entry) -> None:
        if entry.id in self._entries:
            other = self._entries[entry.id]
            raise FormulaError(f"{entry.file}: entry id '{entry.id}' is already defined in "
                               f"{other.file} (pass {option('replace')}, or BOUNDCALC_REPLACE=1, to let "
                               f"the later file replace it)")
        self._entries[entry.id] = entry

    def replace(self, entry: Entry) -> None:
        """Put ``entry`` in place of the entry with the same id (keeping its position)."""
        self._entries[entry.id] = entry

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._entries.values())

    def __contains__(self, ident: str) -> bool:
        return ident in self._entries

    def get(self, ident: str) -> Entry:
        """The entry with this id; the error lists close matches."""
        try:
            return self._entries[ident]
        except KeyError:
            import difflib

            close = difflib.get_close_matches(ident, list(self._entries), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else \
                "; run `boundcalc list` to see all ids"
            raise BoundcalcError(f"no registry entry '{ident}'{hint}") from None

    def families(self) -> list[str]:
        return sorted({e.family for e in self})

    def filter(self, family: str | None = None, kind: str | None = None,
               requires: str | None = None) -> list[Entry]:
        """Entries of a family, of a kind, and/or binding to a stats path (prefix match)."""
        out = []
        for e in self:
            if family and e.family != family:
                continue
            if kind and e.kind != kind:
                continue
            if requires and not any(s.startswith(requires) for s in e.required_stats()):
                continue
            out.append(e)
        return out


_CACHE: dict[tuple, Registry] = {}


def load_registry(paths: Iterable[str | Path] | None = None, *,
                  replace: bool | None = None, symbolic: bool = True) -> Registry:
    """Load every ``*.toml`` formula file in the given folders (or files).

    ``paths=None`` loads the bundled formulas plus the user folders named in
    ``$BOUNDCALC_FORMULAS`` (:func:`default_formula_dirs`). An id defined twice is an error naming
    both files, unless ``replace`` is true: then a later file's entry replaces the earlier one
    (user folders come after the bundled formulas, so a user entry replaces a bundled one).
    ``replace=None`` reads ``$BOUNDCALC_REPLACE`` (``1`` means true).

    Parsed registries are cached by file path, size and modification time, so repeated calls
    (``optimize("id")`` in a loop, say) do not re-parse unchanged files.

    ``symbolic=False`` serves entries from the disk cache as the engine's plain trees, without
    importing SymPy: enough to evaluate, not to print LaTeX, differentiate or optimize.
    """
    if replace is None:
        replace = os.environ.get("BOUNDCALC_REPLACE", "") == "1"
    files: list[Path] = []
    for base in (list(paths) if paths is not None else default_formula_dirs()):
        base = Path(base)
        if not os.path.lexists(base):
            raise FormulaError(f"{base}: no such formula file or folder")
        # every file checked with stat before anything opens it: a FIFO would hang a read
        found = [base] if not base.is_dir() else sorted(base.glob("*.toml"))
        for f in found:
            check_regular_file(f, FormulaError, "formula file")
        files.extend(found)
    try:
        key = tuple((str(f.resolve()), f.stat().st_mtime_ns, f.stat().st_size) for f in files)
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
        raise FormulaError(f"{getattr(exc, 'filename', None) or 'formula folder'}: cannot "
                           f"read ({getattr(exc, 'strerror', None) or exc})") from None
    key = (*key, replace, symbolic)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    reg = Registry()
    seen: set[Path] = set()
    for f in files:
        if f.resolve() in seen:  # the same file named twice (a folder given twice, say)
            continue
        seen.add(f.resolve())
        for entry in load_file_cached(f, symbolic):
            if replace and entry.id in reg:
                reg.replace(entry)
            else:
                reg.add(entry)
    _CACHE.clear()  # keep only the latest registry
    _CACHE[key] = reg
    return reg
