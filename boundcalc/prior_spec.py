"""What ``--init`` and ``--head-init`` ask for, parsed without importing torch (the CLI checks
them before loading anything). The centres themselves are built in
:mod:`boundcalc.measure.prior`."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from .errors import CheckpointError, one_line
from .words import keyword, option


def hint(stored: bool = False) -> str:
    """Which prior centre to choose when none was given, naming the option in the caller's
    words (:mod:`boundcalc.words`), or as a keyword whatever the front end when ``stored``
    (a note written into a stats file)."""
    name = keyword if stored else option
    return (f"no {name('init')}: no prior centre, so entries needing ‖w − w_prior‖ are "
            f"skipped; give {name('init')} with the checkpoint this model was fine-tuned from "
            f"(the usual choice), or a data-independent centre: {name('init', 'random:SEED')} "
            f"(its own initialisation) or {name('init', 'zero')}")

_RANDOM = re.compile(r"random:(\d{1,12})")


@dataclass(frozen=True)
class CentreSpec:
    """What ``--init`` / ``--head-init`` asked for."""

    kind: str  # "checkpoint" | "zero" | "random"
    seed: int | None = None
    source: Any = None  # the checkpoint (path, module, mapping) for kind "checkpoint"

    @property
    def text(self) -> str:
        if self.kind == "zero":
            return "zero"
        if self.kind == "random":
            return f"random:{self.seed}"
        return self.source if isinstance(self.source, str) else \
            (os.fspath(self.source) if isinstance(self.source, os.PathLike)
             else f"<{type(self.source).__name__}>")


def parse_centre(value: Any, name: str = "init") -> CentreSpec:
    """``zero`` | ``random:SEED`` | a checkpoint (path, module, mapping). A file that happens
    to be called ``zero`` is reached as ``./zero``. ``name``: the option's keyword name, for
    the error."""
    if isinstance(value, CentreSpec):
        return value
    if isinstance(value, str):
        if value == "zero":
            return CentreSpec("zero")
        if value.startswith("random"):
            m = _RANDOM.fullmatch(value)
            if m is None:
                raise CheckpointError(f"{option(name)} '{one_line(value)[:60]}' is not a "
                                      "centre: expected random:SEED with SEED a non-negative "
                                      "integer (random:0), zero, or a checkpoint path")
            return CentreSpec("random", int(m.group(1)))
    return CentreSpec("checkpoint", source=value)


def parse_head_init(value: Any) -> CentreSpec:
    """``--head-init``: ``zero`` (default) or ``random:SEED``."""
    spec = parse_centre("zero" if value is None else value, "head_init")
    if spec.kind == "checkpoint":
        raise CheckpointError(f"{option('head_init')} '{one_line(str(value))[:60]}' is not a "
                              "centre: expected zero or random:SEED")
    return spec


def is_keyword(value: Any) -> bool:
    """True for ``zero`` / ``random:…`` (not a path to check for existence)."""
    return isinstance(value, str) and (value == "zero" or value.startswith("random"))


