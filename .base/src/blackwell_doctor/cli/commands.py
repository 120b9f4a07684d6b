"""The registry of commands: one module per command under ``blackwell_doctor.cli``, each
with ``register(app)``. A new command (bench, model, fleet, ...) is a module here and one
line in :data:`COMMANDS`, whose order is the order of ``--help``.

Command modules import at start-up only typer, the shared options and their format enums;
the work they call is imported when the command runs. A run registers only the command its
arguments name (:func:`commands_for`; ``--version`` none): ``check`` never imports
``bench``'s module, nor has typer read the signatures of the other nine. ``--help``, a root
option first or a name that is no command registers them all (the list, the suggestion for
a misspelt name).
"""

from __future__ import annotations

import importlib

import typer

COMMANDS = (
    "check",
    "collect",
    "probe",
    "scan_logs",
    "recommend",
    "apply",
    "model",
    "fleet",
    "slurm_health",
    "bench",
    "audit",
    "examples",
)


def command_name(module: str) -> str:
    """The name a user types for the command of module ``module`` (``scan_logs``: ``scan-logs``)."""
    return module.replace("_", "-")


def commands_for(args: list[str]) -> tuple[str, ...]:
    """The command modules a run on ``args`` needs: the one its first argument names, or,
    when that is an option or no command, all of them."""
    if args[:1] == ["--version"]:  # eager: prints and exits before any command
        return ()
    if args and not args[0].startswith("-"):
        for name in COMMANDS:
            if command_name(name) == args[0]:
                return (name,)
    return COMMANDS


def register_commands(app: typer.Typer, names: tuple[str, ...] = COMMANDS) -> None:
    """Add the commands of ``names`` (modules of :data:`COMMANDS`) to ``app``."""
    for name in names:
        importlib.import_module(f"blackwell_doctor.cli.{name}").register(app)
