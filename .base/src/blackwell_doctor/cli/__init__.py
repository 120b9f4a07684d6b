"""Command-line interface: declares commands and options, maps outcomes to exit codes.

Everything that reads the host lives in ``collect`` (reached through
:func:`blackwell_doctor.app.obtain.obtain_facts`), every verdict in ``rules``, every output format
in ``render`` and the documents' own renderers. Only this package prints.

``root`` (the typer application and its root options), ``options`` (options shared by
commands), ``output`` (standard output or ``--output``) and ``boundary`` (the one error
boundary: :func:`main`) import no command; ``commands`` lists the command modules, one per
command, each registering itself on the app. :func:`main` registers only the command that
runs (start-up is import time: docs/performance.md); ``app`` here has all of them.
"""

from __future__ import annotations

import gc
import sys
from typing import TYPE_CHECKING

from blackwell_doctor.cli.boundary import run
from blackwell_doctor.cli.commands import COMMANDS, commands_for, register_commands
from blackwell_doctor.cli.root import new_app
from blackwell_doctor.facts.errors import UserError

if TYPE_CHECKING:
    import typer


def build_app(names: tuple[str, ...] = COMMANDS) -> typer.Typer:
    """The application with the commands of ``names`` registered."""
    app = new_app()
    register_commands(app, names)
    return app


def main(argv: list[str] | None = None, *, gc_paused: bool = False) -> int:
    """Run the CLI and turn every outcome into a documented exit code. ``gc_paused``: the
    caller disabled the cyclic collector for start-up (``blackwell_doctor.__main__``); it
    resumes once the command's modules are imported, with what they allocated frozen."""
    args = sys.argv[1:] if argv is None else argv
    try:
        app = build_app(commands_for(args))
    finally:
        if gc_paused:
            gc.freeze()
            gc.enable()
    return run(app, argv)


def __getattr__(name: str) -> typer.Typer:
    if name == "app":  # every command: what tests and tools introspect
        return build_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["UserError", "app", "build_app", "main"]
