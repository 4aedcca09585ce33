"""The registry: every entry of every formula file, listed, filtered and fetched by id."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Iterator

from ..errors import BoundcalcError, FormulaError
from .loader import load_file
from .schema import Entry


def default_formula_dirs() -> list[Path]:
    """``$BOUNDCALC_FORMULAS`` (os.pathsep-separated), else the repository's ``formulas/``."""
    env = os.environ.get("BOUNDCALC_FORMULAS")
    if env:
        return [Path(p) for p in env.split(os.pathsep) if p]
    here = Path(__file__).resolve().parents[2] / "formulas"
    return [here]


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
                               f"{other.file}")
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


def load_registry(paths: Iterable[str | Path] | None = None) -> Registry:
    """Load every ``*.toml`` formula file in the given folders (or files).

    Parsed registries are cached by file path, size and modification time, so repeated calls
    (``optimize("id")`` in a loop, say) do not re-parse unchanged files.
    """
    files: list[Path] = []
    for base in (list(paths) if paths is not None else default_formula_dirs()):
        base = Path(base)
        if base.is_file():
            files.append(base)
        elif base.is_dir():
            files.extend(sorted(base.glob("*.toml")))
        else:
            raise FormulaError(f"{base}: no such formula file or folder")
    try:
        key = tuple((str(f.resolve()), f.stat().st_mtime_ns, f.stat().st_size) for f in files)
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
        raise FormulaError(f"{getattr(exc, 'filename', None) or 'formula folder'}: cannot "
                           f"read ({getattr(exc, 'strerror', None) or exc})") from None
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    reg = Registry()
    for f in files:
        for entry in load_file(f):
            reg.add(entry)
    _CACHE.clear()  # keep only the latest registry
    _CACHE[key] = reg
    return reg
