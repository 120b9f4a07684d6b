"""``examples``: list the examples shipped with the package (``--example NAME`` elsewhere)."""

from __future__ import annotations

import typer

from blackwell_doctor.cli.options import Output
from blackwell_doctor.cli.output import terminal_width, write


def examples(output: Output = None) -> None:
    """List the shipped examples (real captured or reconstructed hosts, logs, bench runs, a
    model) that check, recommend, apply, model, fleet and bench take with --example NAME: no
    GPU needed."""
    from blackwell_doctor.app.examples import catalogue
    from blackwell_doctor.render.examples import render_examples
    from blackwell_doctor.ruledata.examples import example_path

    width = terminal_width(output) or 100  # its listing always wrapped at 100
    write(render_examples(catalogue(), str(example_path("")), width=width), output)


def register(app: typer.Typer) -> None:
    app.command()(examples)
