"""The typer application: its name, help and root options. Commands are added by
:mod:`blackwell_doctor.cli.commands`; this module imports none of them.

:func:`new_app` builds a fresh application for each run, so that a run registers (and
imports) only the command it runs; ``blackwell_doctor.cli.app`` is the one with every
command, for introspection."""

# No `from __future__ import annotations`: typer reads this command's signature at every
# run, and string annotations are eval'd there (start-up: docs/performance.md).

import sys
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import typer
from typer import _click as click  # the click typer runs on (vendored in typer 0.28)
from typer._completion_classes import completion_init  # typer's own module (typer<0.29)
from typer.core import TyperCommand, TyperGroup

from blackwell_doctor import TOOL_NAME, __version__


def new_app() -> typer.Typer:
    """A typer application with the root options and no command yet."""
    # Shell completion (docs/install.md): the shell runs the command with
    # _BLACKWELL_DOCTOR_COMPLETE set (click's protocol; `=source_bash` prints typer's bash
    # script). typer registers its shells only for its --install-completion option
    # (add_completion), which would also put two options on every run; registering them is
    # all completion needs (typer imports the module itself: nothing more is loaded).
    completion_init()
    app = _App(
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
        cls=_Group,
    )
    app.callback()(_root)
    return app


def _version(value: bool) -> None:
    if value:
        from blackwell_doctor.collect.about import read_about
        from blackwell_doctor.render.about import render_about

        sys.stdout.write(render_about(read_about(__version__), TOOL_NAME))
        raise typer.Exit(0)


def _root(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_version,
            is_eager=True,
            help="Print the version, commit, rule data, schemas, Python and GPU bindings.",
        ),
    ] = False,
) -> None:
    """Diagnose a GPU inference host (see the commands below)."""
    if ctx.invoked_subcommand is None:
        sys.stdout.write(ctx.get_help() + "\n")
        raise typer.Exit(0)


# --help as a person reads it (issue 40). click wraps help with textwrap, which breaks a
# line after any hyphen inside a word (TextWrapper.break_on_hyphens, left on by wrap_text in
# typer/_click/formatting.py, typer 0.28): `--fail-on` became `--fail-`/`on`, and
# `blackwell-doctor` likewise. Hyphens are held as U+2011 (a non-breaking hyphen, one
# column too) while click lays the text out, and given back as they are written.
_HELD_HYPHEN = "\u2011"


def _hold(text: str) -> str:
    return text.replace("-", _HELD_HYPHEN)


class _HelpFormatter(click.HelpFormatter):
    def write_text(self, text: str) -> None:
        super().write_text(_hold(text))

    def write_dl(
        self, rows: Sequence[tuple[str, str]], col_max: int = 30, col_spacing: int = 2
    ) -> None:
        super().write_dl([(_hold(a), _hold(b)) for a, b in rows], col_max, col_spacing)

    def write(self, string: str) -> None:
        super().write(string.replace(_HELD_HYPHEN, "-"))


class _Context(typer.Context):
    formatter_class = _HelpFormatter


class _Command(TyperCommand):
    """A command whose --help wraps without breaking words and whose ``epilog`` is its
    examples: one command a line, never rewrapped (a command is copied whole). Each command
    gives a ``short_help`` that fits the list beside its name at 80 columns: click cuts a
    longer one mid-sentence with "..." (make_default_short_help, typer/_click/utils.py,
    typer 0.28)."""

    context_class = _Context

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if not self.epilog:
            return
        formatter.write_paragraph()
        formatter.write_heading("Examples")
        for line in self.epilog.strip().splitlines():
            formatter.write(f"{' ' * (formatter.current_indent + 2)}{line.strip()}\n")


class _Group(TyperGroup):
    context_class = _Context


class _App(typer.Typer):
    """typer's application whose commands are :class:`_Command` (their help laid out as
    above) unless a command asks for another class."""

    def command(  # type: ignore[override]
        self, name: str | None = None, *, cls: type[TyperCommand] | None = None, **kwargs: Any
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        return super().command(name, cls=cls or _Command, **kwargs)
