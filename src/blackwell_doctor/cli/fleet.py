"""``fleet``: judge many nodes' facts at once; the work lives in ``blackwell_doctor.app.fleet``."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Annotated

import typer

from blackwell_doctor.cli.basics import (
    EXAMPLES,
    SUMMARIES,
    ExampleName,
    FailOnStatus,
    Judging,
    Output,
    format_option,
    grouped,
    judging_options,
    selection_errors,
    split,
    strict_option,
)
from blackwell_doctor.cli.output import (
    terminal_width,
    text_style,
    write_outcome,
    writes_to_file,
)
from blackwell_doctor.render.formats import FleetFormat

if TYPE_CHECKING:
    from collections.abc import Iterator

    from blackwell_doctor.facts.document import Facts

# --strict says what it adds here: a node whose facts could not be read.
_FleetJudging = Annotated[
    Judging,
    judging_options(
        FailOnStatus,
        Annotated[
            bool,
            strict_option(
                "Exit 3 when a check could not be evaluated or a node's facts could not be read."
            ),
        ],
    ),
]


def register(app: typer.Typer) -> None:
    """Add ``fleet`` to ``app``."""

    @app.command("fleet", short_help=SUMMARIES["fleet"], epilog=EXAMPLES["fleet"])
    @grouped
    def fleet(
        *,
        inputs: Annotated[
            list[str] | None,
            typer.Argument(
                help="Facts files written by `collect` on each node: files, directories "
                "(searched for *.json), globs (** recurses); not with --example.",
                show_default=False,
            ),
        ] = None,
        fmt: Annotated[FleetFormat, format_option()] = FleetFormat.RICH,
        output: Output = None,
        judging: _FleetJudging,
        jobs: Annotated[
            int,
            typer.Option(
                "--jobs",
                "-j",
                metavar="N",
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
        from blackwell_doctor.app.fleet import expand_inputs, judge_fleet_spooled
        from blackwell_doctor.render.fleet import json_pieces, render_fleet

        started_at, clock = time.time(), time.monotonic()
        obtained: list[tuple[str, Facts]] = []
        if example is not None:
            from blackwell_doctor.app.examples import node_facts, replace_options

            ex = replace_options(
                example,
                {"inputs": inputs},
                part="fleet",
                command="fleet",
                conflicting=("INPUTS",),
            )
            # Each node as `check --example NAME` obtains it: one host, one verdict.
            obtained = [(f"example {n.name}", node_facts(n)) for n in ex.nodes]
        elif not inputs:
            from blackwell_doctor.facts.errors import UserError

            raise UserError("fleet needs facts files (INPUTS...) or --example NAME")
        paths, missing = expand_inputs(inputs or [])
        with selection_errors():
            report, spool = judge_fleet_spooled(
                paths,
                missing,
                select=split(judging.select),
                ignore=split(judging.ignore),
                fail_on=judging.fail_on,
                strict=judging.strict,
                jobs=jobs,
                obtained=obtained,
            )
        timing = None
        if fmt is FleetFormat.PROMETHEUS:  # the only format with timing: import it only then
            from blackwell_doctor.render.timing import RunTiming

            timing = RunTiming(started_at=started_at, duration_s=time.monotonic() - clock)
        color = text_style(output)[0] and fmt is FleetFormat.RICH
        width = terminal_width(output)
        text: str | Iterator[str]
        if fmt is FleetFormat.JSON:
            # Streamed: the nodes come back from the spool a few hundred at a time.
            text = json_pieces(report, spool)
        else:
            import msgspec

            report = msgspec.structs.replace(report, nodes=list(spool))
            text = render_fleet(
                report, fmt, color=color, verbose=verbose, timing=timing, width=width
            )
        if example is not None:  # the examples folder as <examples>, not this machine's path
            from blackwell_doctor.app.examples import shown, shown_pieces

            text = (
                shown(text, fmt.value) if isinstance(text, str) else shown_pieces(text, fmt.value)
            )
        # Not one node judged (exit 2, like an unreadable --facts): a report of nothing must
        # not replace the last good one at --output.
        failed = "not one node could be judged" if report.summary.nodes == 0 else None
        try:
            write_outcome(text, output, failed=failed)
        finally:
            spool.close()
        if failed is not None and not writes_to_file(output):
            # The document lists each file with its reason; standard error says it in one
            # line, as every command says an input it cannot use (docs/exit-codes.md).
            from blackwell_doctor import TOOL_NAME

            first = report.unjudged[0] if report.unjudged else None
            why = f": {first.source}: {first.reason}" if first is not None else ""
            more = f" (and {len(report.unjudged) - 1} more)" if len(report.unjudged) > 1 else ""
            sys.stderr.write(f"{TOOL_NAME}: error: {failed}{why}{more}\n")
        if writes_to_file(output) and failed is None:
            s = report.summary
            sys.stderr.write(
                f"wrote {output}: {s.nodes} nodes judged, {s.findings} with findings, "
                f"{s.unjudged} not judged (exit {report.exit_code})\n"
            )
        raise typer.Exit(report.exit_code)
