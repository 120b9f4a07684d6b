"""``check``: judge this host (or a facts file) and report. The CI gate."""

# No `from __future__ import annotations`: typer reads this command's signature at every
# run, and string annotations are eval'd there (start-up: docs/performance.md).

import os
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from blackwell_doctor.cli.basics import (
    EXAMPLES,
    SUMMARIES,
    CheckJudging,
    ExampleName,
    Output,
    Verbose,
    format_option,
    grouped,
    judge,
)
from blackwell_doctor.cli.options import HostFacts
from blackwell_doctor.cli.output import text_style, write, writes_to_file
from blackwell_doctor.render.formats import Format


@grouped
def check(
    *,
    facts_file: Annotated[
        Path | None,
        typer.Option(
            "--facts",
            help="Judge a facts file written by `collect` (or - for stdin) instead of this host.",
        ),
    ] = None,
    fmt: Annotated[Format, format_option()] = Format.RICH,
    output: Output = None,
    judging: CheckJudging,
    facts: HostFacts,
    embed_facts: Annotated[
        bool, typer.Option("--embed-facts", help="Include the judged facts in JSON output.")
    ] = False,
    verbose: Verbose = False,
    example: ExampleName = None,
) -> None:
    """Collect facts (or read --facts), run every check, and report. The CI gate."""
    started_at, clock = time.time(), time.monotonic()
    from blackwell_doctor.app.obtain import obtain_facts
    from blackwell_doctor.render import render

    request = (
        facts._replace(facts_file=facts_file, select=judging.select, ignore=judging.ignore)
        .with_example(example, command="check", conflicting=("--facts", "--host-root"))
        .request()
    )
    if fmt is Format.NFD:
        # nfd labels the GPUs' compute capability from NVML, whatever checks are selected.
        import msgspec

        request = msgspec.structs.replace(request, output_reads=frozenset({"nvml"}))
    obtained = obtain_facts(request, environ=os.environ, stdin=sys.stdin.buffer)
    report = judge(
        obtained,
        judging,
        # nfd labels the GPUs' compute capability, which only the facts carry.
        embed_facts=embed_facts or fmt is Format.NFD,
    )
    color, width = text_style(output)
    color = color and fmt is Format.RICH
    timing = None
    # Only prometheus and nfd report the run's time (importing nothing for the others).
    if fmt in (Format.PROMETHEUS, Format.NFD):
        from blackwell_doctor.render.timing import RunTiming

        timing = RunTiming(started_at=started_at, duration_s=time.monotonic() - clock)
    text = render(report, fmt, color=color, verbose=verbose, timing=timing, width=width)
    if example is not None:  # the examples folder as <examples>, not this machine's path
        from blackwell_doctor.app.examples import shown

        text = shown(text, fmt.value)
    write(text, output)
    if writes_to_file(output):
        s = report.summary
        sys.stderr.write(
            f"wrote {output}: {s.fail} failed, {s.warn} warnings, {s.error} not evaluated "
            f"(exit {report.exit_code})\n"
        )
    raise typer.Exit(report.exit_code)


def register(app: typer.Typer) -> None:
    app.command(short_help=SUMMARIES["check"], epilog=EXAMPLES["check"])(check)
