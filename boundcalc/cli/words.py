"""The CLI's words for the library's options and commands (see :mod:`boundcalc.words`).

An option's flag is its keyword name with ``_`` written ``-`` after ``--`` (typer's rule for the
commands' parameters), except the names in :data:`FLAGS`. A suggested command is written as a
user types it: ``boundcalc measure MODEL --data DATA``.
"""

from __future__ import annotations

from typing import Any

from ..words import NO_VALUE, Words

# keyword names whose flag does not follow the rule
FLAGS: dict[str, str] = {
    "output": "-o",
    "select": "--compress",  # which weights a compression codes (measure)
    "levels_grid": "--levels",  # the level counts a compression tries (measure)
    "values": "--set",  # the API's values={...}: one --set NAME=VALUE each
    "n_bootstrap": "--bootstrap",  # sweep.correlate's keyword
    "sigmas": "--sigma",  # repeatable: one σ each (measure, certify)
    "prior_epochs": "--epochs",  # certify's prior training
    "prior_lr": "--lr",
}


def flag(name: str) -> str:
    """The flag of the keyword option ``name``."""
    return FLAGS.get(name, "--" + name.replace("_", "-"))


class CliWords(Words):
    """``--tune-data 5``; ``boundcalc measure MODEL --data DATA --draws K``; ``--set n=VALUE``."""

    def option(self, name: str, value: Any = NO_VALUE) -> str:
        return flag(name) if value is NO_VALUE else f"{flag(name)} {value}"

    def command(self, name: str, positional: list[str], options: list[tuple[str, str | None]]
                ) -> str:
        parts = ["boundcalc", name, *positional]
        for key, value in options:
            parts.append(self.option(key) if value is None else self.option(key, value))
        return " ".join(parts)

    def set_value(self, name: str, value: str) -> str:
        return f"{flag('values')} {name}={value}"


CLI_WORDS = CliWords()
