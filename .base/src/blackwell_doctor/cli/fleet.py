"""``fleet``: judge many nodes' facts at once; the work lives in ``blackwell_doctor.app.fleet``."""

from __future__ import annotations

import os
import sys
import time
from typing import Annotated

import typer

from blackwell_doctor.cli.options import (
    ExampleName,
    FailOnStatus,
    Ignore,
    Output,
    Select,
    selection_errors,
    split,
    strict_option,
)
from blackwell_doctor.cli.output import write_outcome, writes_to_file
from blackwell_doctor.render.formats import FleetFormat


def register(app: typer.Typer) -> None:
    """Add ``fleet`` to ``app``."""

    @app.command("fleet")
    def fleet(
        inputs: Annotated[
            list[str] | None,
            typer.Argument(
                help="Facts files written by `collect` on each node: files, directories "
                "(searched for *.json), globs (** recurses); not with --example.",
                show_default=False,
            ),
        ] = None,
        fmt: Annotated[
            FleetFormat, typer.Option("--format", "-f", help="Output format.")
        ] = FleetFormat.RICH,
        output: Output = None,
        fail_on: FailOnStatus = "fail",
        strict: Annotated[
            bool,
            strict_option(
                "Exit 3 when a check could not be evaluated or a node's facts could not be read."
            ),
        ] = False,
        select: Select = None,
        ignore: Ignore = None,
        jobs: Annotated[
            int,
            typer.Option(
                "--jobs",
                "-j",
                min=0,
                max=256,
                help="Worker processes (0: one per CPU). Default 1: identical machines are "
                "judged once, so a pool helps only with many distinct configurations.",
            ),
        ] = 1,
        verbose: Annotated[
            bool, typer.Option("--verbose", "-v", help="List every node of every group.")
        ] = False,
        example: ExampleName = None,
    ) -> None:
        """Judge many nodes' facts at once: nodes grouped by finding, worst first, one
        action per group. Unreadable or future-version facts are listed, not fatal."""
        from blackwell_doctor.app.fleet import expand_inputs, judge_fleet
        from blackwell_doctor.render.fleet import render_fleet

        started_at, clock = time.time(), time.monotonic()
        if example is not None:
            from blackwell_doctor.app.examples import replace_options

            ex = replace_options(
                example,
                {"inputs": inputs},
                part="fleet",
                command="fleet",
                conflicting=("INPUTS",),
            )
            inputs = list(ex.fleet)
        if not inputs:
            from blackwell_doctor.facts.errors import UserError

            raise UserError("fleet needs facts files (INPUTS...) or --example NAME")
        paths, missing = expand_inputs(inputs)
        with selection_errors():
            report = judge_fleet(
                paths,
                missing,
                select=split(select),
                ignore=split(ignore),
                fail_on=fail_on,
                strict=strict,
                jobs=jobs,
            )
        timing = None
        if fmt is FleetFormat.PROMETHEUS:  # the only format with timing: import it only then
            from blackwell_doctor.render.timing import RunTiming

            timing = RunTiming(started_at=started_at, duration_s=time.monotonic() - clock)
        to_terminal = not writes_to_file(output) and sys.stdout.isatty()
        color = to_terminal and fmt is FleetFormat.RICH and not os.environ.get("NO_COLOR")
        text = render_fleet(report, fmt, color=color, verbose=verbose, timing=timing)
        # Not one node judged (exit 2, like an unreadable --facts): a report of nothing must
        # not replace the last good one at --output.
        failed = "not one node could be judged" if report.summary.nodes == 0 else None
        write_outcome(text, output, failed=failed)
        if writes_to_file(output) and failed is None:
            s = report.summary
            sys.stderr.write(
                f"wrote {output}: {s.nodes} nodes judged, {s.findings} with findings, "
                f"{s.unjudged} not judged (exit {report.exit_code})\n"
            )
        raise typer.Exit(report.exit_code)
