"""One cache for the forms compiled from an entry's declaration: built once per entry, reused by
every evaluation of it.

:func:`form` keeps, for each entry object, what is derived from its expression alone: the names
GridMin minimises over (:func:`gridmin_params`), the compiled evaluator (:func:`compiled_for`),
and the forms :mod:`boundcalc.optimize` builds on it (the evaluator along a batch axis, the
derivative evaluator and each symbol's derivative). The cache is keyed by the entry object
(and dropped with it), not written onto the entry: an entry stays the declaration it was
loaded as (the registry's disk cache encodes it by its fields alone).

Contract: ``form(entry, name, build)`` calls ``build()`` at most once per live entry and
``name``, and returns what it returned (an exception it returns is kept too: a derivative that
does not exist is not looked for twice).
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Hashable

from ..engine.compile import Compiled, axes_for
from ..engine.tree import as_tree
from ..registry.schema import Entry

# id(entry) → {name: form}; an entry's forms are dropped when it is collected
_FORMS: dict[int, dict[Hashable, Any]] = {}


def form(entry: Entry, name: Hashable, build: Callable[[], Any]) -> Any:
    """The form ``name`` of ``entry``, built by ``build()`` on first use (module docstring)."""
    forms = _FORMS.get(id(entry))
    if forms is None:
        forms = _FORMS[id(entry)] = {}
        weakref.finalize(entry, _FORMS.pop, id(entry), None)
    if name not in forms:
        forms[name] = build()
    return forms[name]


def gridmin_params(entry: Entry) -> list[str]:
    """Names of grid parameters that the expression minimises with GridMin."""
    return form(entry, "gridmin_params", lambda: sorted(
        {g.args[1].name for g in as_tree(entry.expression).atoms("GridMin")}))


def compiled_for(entry: Entry) -> Compiled:
    """The entry's compiled evaluator (built once per entry)."""
    def build() -> Compiled:
        axes = axes_for(list(entry.indices), gridmin_params(entry))
        return Compiled(axes, {n: s.indices for n, s in entry.symbols.items() if s.indexed},
                        set(gridmin_params(entry)))

    return form(entry, "compiled", build)
