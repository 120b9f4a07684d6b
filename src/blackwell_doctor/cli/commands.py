"""The registry of commands: one module per command under ``blackwell_doctor.cli``, each
with ``register(app)``. A new command (bench, model, fleet, ...) is a module here and one
line in :data:`COMMANDS`, whose order is the order of ``--help``.

Command modules import at start-up only typer, the shared options and their format enums;
the work they call is imported when the command runs.
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
    "examples",
)


def register_commands(app: typer.Typer) -> None:
    """Add every command of :data:`COMMANDS` to ``app``."""
    for name in COMMANDS:
        importlib.import_module(f"blackwell_doctor.cli.{name}").register(app)
