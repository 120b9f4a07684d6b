"""``examples``: list the examples shipped with the package (``--example NAME`` elsewhere)."""

from __future__ import annotations

from pathlib import Path

import typer

from blackwell_doctor.cli.basics import EXAMPLES, SUMMARIES, Output
from blackwell_doctor.cli.output import terminal_width, write


def examples(output: Output = None) -> None:
    """List the shipped examples (real captured or reconstructed hosts, logs, bench runs, a
    model) that check, recommend, apply, model, fleet and bench take with --example NAME: no
    GPU needed."""
    from blackwell_doctor.app.examples import catalogue
    from blackwell_doctor.render.examples import render_examples
    from blackwell_doctor.ruledata.examples import example_path

    width = terminal_width(output) or 100  # its listing always wrapped at 100
    write(render_examples(catalogue(), _shown(example_path("")), width=width), output)


def _shown(folder: Path) -> str:
    """Where the example files are, said without this machine's prefix (issue 40: the
    listing printed an absolute site-packages path): in an install, under the package
    (``blackwell_doctor/_data/examples``); in a checkout, relative to the working
    directory when under it; else as it is."""
    import blackwell_doctor

    package = Path(blackwell_doctor.__file__).resolve().parent
    for base, prefix in ((package, Path(package.name)), (Path.cwd().resolve(), Path())):
        if folder.resolve().is_relative_to(base):
            return str(prefix / folder.resolve().relative_to(base)) or "."
    return str(folder)


def register(app: typer.Typer) -> None:
    app.command(short_help=SUMMARIES["examples"], epilog=EXAMPLES["examples"])(examples)
