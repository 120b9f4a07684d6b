"""The typer application: its name, help and root options. Commands are added by
:mod:`blackwell_doctor.cli.commands`; this module imports none of them.

:func:`new_app` builds a fresh application for each run, so that a run registers (and
imports) only the command it runs; ``blackwell_doctor.cli.app`` is the one with every
command, for introspection."""

# No `from __future__ import annotations`: typer reads this command's signature at every
# run, and string annotations are eval'd there (start-up: docs/performance.md).

import sys
from typing import Annotated

import typer
from typer._completion_classes import completion_init  # typer's own module (typer<0.29)

from blackwell_doctor import TOOL_NAME, __version__


def new_app() -> typer.Typer:
    """A typer application with the root options and no command yet."""
    # Shell completion (docs/install.md): the shell runs the command with
    # _BLACKWELL_DOCTOR_COMPLETE set (click's protocol; `=source_bash` prints typer's bash
    # script). typer registers its shells only for its --install-completion option
    # (add_completion), which would also put two options on every run; registering them is
    # all completion needs (typer imports the module itself: nothing more is loaded).
    completion_init()
    app = typer.Typer(
        name=TOOL_NAME,
        help=(
            "Is this GPU inference host on the fast path for NVFP4 mixture-of-experts serving "
            "on NVIDIA workstation Blackwell (SM 12.x)? If not, why, and what fixes it.\n\n"
            "Exit codes: 0 nothing at or above the gate; 1 findings at or above --fail-on; "
            "2 usage error or unreadable input; 3 --strict and something could not be evaluated; "
            "4 internal error; 5 apply failed; 6 slurm-health: sinfo/scontrol failed; "
            "130 interrupted."
        ),
        invoke_without_command=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )
    app.callback()(_root)
    return app


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"{TOOL_NAME} {__version__}\n")
        raise typer.Exit(0)


def _root(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Diagnose a GPU inference host (see the commands below)."""
    if ctx.invoked_subcommand is None:
        sys.stdout.write(ctx.get_help() + "\n")
        raise typer.Exit(0)
