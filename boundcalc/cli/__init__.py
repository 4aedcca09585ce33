"""Command line interface, thin over the Python API. One module per command group."""

from __future__ import annotations

import importlib

from .app import app, reflow_command_help

# Each module registers its commands on ``app`` when imported. A module that is not there yet
# (work in progress) is skipped, so the CLI stays usable.
_COMMAND_MODULES = ("registry_cmds", "measure_cmd", "optimize_cmds", "report_cmd", "sweep_cmds",
                    "certify_cmd", "holdout_cmd")


def _load_commands() -> None:
    for name in _COMMAND_MODULES:
        try:
            importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
    reflow_command_help(app)


_load_commands()


def main() -> None:
    """Console-script entry point."""
    app()
