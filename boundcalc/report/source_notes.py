"""Where a user can open the source notes an entry cites (``docs/sources/NAME.md``).

In a checkout they are the repository's ``docs/sources/``; an installed wheel carries a copy as
package data in ``boundcalc/sources/`` (copied there by ``setup.py``, like the formula files).
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

_CITED = re.compile(r"docs/sources/([A-Za-z0-9_\-]+\.md)")
_CHECKOUT = Path(__file__).resolve().parents[2] / "docs" / "sources"


def cited_notes(text: str) -> list[str]:
    """The file names of the source notes that ``text`` (a provenance) cites, in order."""
    return list(dict.fromkeys(_CITED.findall(text or "")))


def note_path(name: str) -> Path | None:
    """The installed copy of source note ``name`` if the package carries one, else the
    checkout's file; None if neither exists."""
    try:
        shipped = resources.files("boundcalc") / "sources" / name
        if shipped.is_file():
            return Path(str(shipped))
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError):
        pass
    local = _CHECKOUT / name
    return local if local.is_file() else None


def note_paths(text: str) -> dict[str, str | None]:
    """Each source note cited in ``text`` → the path to open (None: not available here)."""
    return {n: (str(p) if (p := note_path(n)) is not None else None) for n in cited_notes(text)}
