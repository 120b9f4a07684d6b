"""Command-line interface: declares commands and options, maps outcomes to exit codes.

Everything that reads the host lives in ``collect`` (reached through
:func:`blackwell_doctor.app.obtain.obtain_facts`), every verdict in ``rules``, every output format
in ``render`` and the documents' own renderers. Only this package prints.

``app`` (the typer application and its root options), ``options`` (options shared by
commands), ``output`` (standard output or ``--output``) and ``boundary`` (the one error
boundary: :func:`main`) import no command; ``commands`` lists the command modules, one per
command, each registering itself on the app.
"""

from __future__ import annotations

from blackwell_doctor.cli.app import app
from blackwell_doctor.cli.boundary import run
from blackwell_doctor.cli.commands import register_commands
from blackwell_doctor.facts.errors import UserError

register_commands(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI and turn every outcome into a documented exit code."""
    return run(app, argv)


__all__ = ["UserError", "app", "main"]
