"""``collect``: write the facts document, for ``check --facts`` elsewhere or later."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from blackwell_doctor.cli.basics import EXAMPLES, SUMMARIES, Output, grouped
from blackwell_doctor.cli.options import HostFacts
from blackwell_doctor.cli.output import write, writes_to_file


@grouped
def collect(
    *,
    output: Output = None,
    redact: Annotated[
        bool,
        typer.Option(
            "--redact",
            help="Also hide host identity (hostname, GPU UUIDs). Secret-looking environment "
            "values are always redacted.",
        ),
    ] = False,
    facts: HostFacts,
) -> None:
    """Write the facts document: everything read from this host, for `check --facts`."""
    from blackwell_doctor.app.obtain import obtain_facts
    from blackwell_doctor.facts.document import encode_facts

    request = facts._replace(redact=redact).request()
    obtained = obtain_facts(request, environ=os.environ, stdin=sys.stdin.buffer)
    write(encode_facts(obtained.facts).decode("utf-8"), output)
    if writes_to_file(output):
        from blackwell_doctor.app.obtain import written_words

        sys.stderr.write(written_words(obtained.facts, str(output)) + "\n")


def register(app: typer.Typer) -> None:
    app.command(short_help=SUMMARIES["collect"], epilog=EXAMPLES["collect"])(collect)
