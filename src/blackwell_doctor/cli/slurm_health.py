"""``slurm-health``: Slurm's HealthCheckProgram (or NHC's). The drain/resume policy lives in
``blackwell_doctor.apply.slurm``; the facts come from
:func:`blackwell_doctor.app.obtain.obtain_facts` like every other command's."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from blackwell_doctor.cli.basics import (
    EXAMPLES,
    SUMMARIES,
    FailOn,
    Judging,
    OptionGroup,
    fail_on_option,
    grouped,
    judge,
    judging_options,
    strict_option,
)
from blackwell_doctor.cli.options import HOST, FactsOptions
from blackwell_doctor.report import exitcodes

# The host as slurm-health reads it: probes worded for a node whose GPUs jobs own, no logs.
_NodeFacts = Annotated[
    FactsOptions,
    OptionGroup(
        FactsOptions,
        (
            (
                "no_probe",
                Annotated[
                    bool,
                    typer.Option(
                        "--no-probe",
                        help="Do not run the probe kernels (recommended: jobs own the GPUs).",
                    ),
                ],
                False,
            ),
            *HOST,
        ),
    ),
]

# --fail-on and --strict worded by what they do here: drain the node.
_NodeJudging = Annotated[
    Judging,
    judging_options(
        Annotated[FailOn, fail_on_option("Lowest status that drains the node.")],
        Annotated[bool, strict_option("Also drain when a check could not be evaluated.")],
    ),
]


def register(app: typer.Typer) -> None:
    """Add ``slurm-health`` to ``app``."""

    @app.command(
        "slurm-health", short_help=SUMMARIES["slurm-health"], epilog=EXAMPLES["slurm-health"]
    )
    @grouped
    def slurm_health(
        *,
        node: Annotated[
            str | None,
            typer.Option(
                "--node",
                metavar="NAME",
                help="This node's NodeName in Slurm (default: $SLURMD_NODENAME, else the "
                "short hostname); one node, never a list or range.",
            ),
        ] = None,
        facts_file: Annotated[
            Path | None,
            typer.Option(
                "--facts", help="Judge this facts file instead of collecting (replays, tests)."
            ),
        ] = None,
        judging: _NodeJudging,
        facts: _NodeFacts,
        dry_run: Annotated[
            bool,
            typer.Option("--dry-run", help="Say what would be done; change nothing in Slurm."),
        ] = False,
    ) -> None:
        """Health check for Slurm: on findings at or above --fail-on, drain this node with a
        reason naming the check ids; when healthy again, resume it only if blackwell-doctor
        drained it (never a node drained for another reason). Exit codes as `check`; 6 when
        sinfo/scontrol failed."""
        from blackwell_doctor.app.obtain import obtain_facts
        from blackwell_doctor.apply.slurm import (
            Action,
            SlurmError,
            apply_decision,
            decide,
            node_name_problem,
            node_state,
        )
        from blackwell_doctor.cli.output import write
        from blackwell_doctor.facts.errors import UserError

        if node is not None:  # given, even empty: judged as given, never a fallback
            name = node
        else:
            import socket

            name = os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
        problem = node_name_problem(name)
        if problem is not None:
            raise UserError(f"--node {name!r}: {problem}")
        request = facts._replace(
            facts_file=facts_file, select=judging.select, ignore=judging.ignore
        ).request()
        obtained = obtain_facts(request, environ=os.environ, stdin=sys.stdin.buffer)
        report = judge(obtained, judging)
        try:
            state = node_state(name)
        except SlurmError as exc:
            sys.stderr.write(f"blackwell-doctor: slurm-health: {name}: {exc}\n")
            raise typer.Exit(int(exitcodes.slurm_failed())) from None
        decision = decide(state, report)
        change = decision.action in (Action.DRAIN, Action.RESUME)
        verb = {
            Action.DRAIN: "drain",
            Action.RESUME: "resume",
            Action.KEEP: "unchanged",
            Action.LEAVE: "left alone",
        }[decision.action]
        if dry_run and change:
            verb = f"dry run, would {verb}"
        # Said before it is done: an output that cannot be written (> /dev/full, a closed
        # pipe) is exit 2 with Slurm untouched, never a node changed and no word of it.
        write(f"{name}: {verb}: {decision.why}\n")
        if dry_run:
            raise typer.Exit(report.exit_code)
        try:
            apply_decision(name, decision)
        except SlurmError as exc:
            sys.stderr.write(f"blackwell-doctor: slurm-health: {name}: {verb} failed: {exc}\n")
            raise typer.Exit(int(exitcodes.slurm_failed())) from None
        raise typer.Exit(report.exit_code)
