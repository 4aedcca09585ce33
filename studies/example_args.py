"""The examples' own arguments (``examples/*.py``), checked before any work in the wording of
the ``boundcalc`` command line (:mod:`boundcalc.options`): a bad number or an output folder
that cannot be one gives one ``error:`` line and exit 2, never a traceback or a full run."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from boundcalc.cli.words import CLI_WORDS, flag
from boundcalc.options import Spec, refusal
from boundcalc.words import use_words

# a count of steps or draws: a whole number, at least one (0 would divide by zero or skip the
# very quantity the example certifies)
COUNT = Spec(int, low=1)


def refused(args: Any, specs: Mapping[str, Spec]) -> str | None:
    """The first refusal of ``args`` (an ``argparse.Namespace``) as one line, or None: each
    of ``specs`` given (not None) and kept by its declaration, and ``args.out`` a folder or a
    path where one can be made (no file on its way)."""
    with use_words(CLI_WORDS):
        for name, s in specs.items():
            value = getattr(args, name)
            if value is not None and not s.accepts(value):
                return str(refusal(name, value, s.rule()))
        out = Path(args.out)
        for p in (out, *out.parents):
            if p.exists() and not p.is_dir():
                return (f"{flag('out')} {out}: {'is' if p == out else f'{p} is'} a file, not "
                        f"a folder; give a folder for the example's outputs")
    return None
