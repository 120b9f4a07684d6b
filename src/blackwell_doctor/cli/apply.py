"""``apply``: run the recommended runtime through the Docker API (plan, --yes, --rollback).
The flow is :mod:`blackwell_doctor.app.apply`; here, its options and the output."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from blackwell_doctor.cli.basics import EXAMPLES, SUMMARIES, ExampleName, grouped
from blackwell_doctor.cli.options import (
    Launch,
    LaunchFacts,
    LaunchFactsFile,
    ModelDir,
    RateOptions,
    ShapeOptions,
    arrival_option,
    bench_option,
    burstiness_option,
    rate_group,
    rate_option,
    shape_group,
    shape_option,
    slo_level_option,
    slo_option,
)
from blackwell_doctor.cli.output import say, terminal_width, write

FactsFromAnotherHost = Annotated[
    bool,
    typer.Option(
        "--facts-from-another-host",
        help="Apply although --facts does not show this host's name (redacted, or another "
        "host's): the launch (tensor-parallel size, threads, P2P setting) is derived from "
        "that file's GPUs and CPUs, not this host's.",
    ),
]


_VERIFY = "Verification (--verify)"

# --verify --rate's options, worded for the gate.
_VerifyRate = Annotated[
    RateOptions,
    rate_group(
        Annotated[
            str | None,
            rate_option(
                "Bench at these request rates (or sweep to the knee) instead of the shapes' "
                "fixed concurrency; the gate then keeps the change only if the capacity at "
                "--slo did not drop.",
                _VERIFY,
            ),
        ],
        Annotated[
            str | None,
            arrival_option("With --rate: the arrival process (default poisson).", _VERIFY),
        ],
        Annotated[float | None, burstiness_option("With --arrival gamma: its shape.", _VERIFY)],
        Annotated[
            str | None,
            slo_option(
                "With --rate: the SLOs of the capacity the gate holds (ttft_ms, tpot_ms, "
                "e2e_ms), e.g. ttft_ms:500,tpot_ms:50.",
                _VERIFY,
            ),
        ],
        Annotated[
            float | None,
            slo_level_option(
                "With --slo: the share of requests that must meet them (default 90).", _VERIFY
            ),
        ],
    ),
]


# --verify's shapes and their requests (app/shape_options.py), worded for the bench it runs.
_VerifyShapes = Annotated[
    ShapeOptions,
    shape_group(
        shape_option(
            "shapes_file",
            help="Bench shapes file ([shape.NAME] tables, as for bench).",
            panel=_VERIFY,
        ),
        shape_option(
            "shape_names",
            help="Bench this shape (repeatable; default short, long, concurrent).",
            panel=_VERIFY,
        ),
        shape_option("seed", help="Seed of the bench prompts.", panel=_VERIFY),
        shape_option("requests", help="Measured requests per shape.", panel=_VERIFY),
        shape_option(
            "request_timeout_s", help="Deadline of each bench request in seconds.", panel=_VERIFY
        ),
    ),
]


@grouped
def apply(
    *,
    model_dir: ModelDir = None,
    yes: Annotated[
        bool, typer.Option("--yes", help="Carry out the plan (without it: print the plan).")
    ] = False,
    rollback: Annotated[
        bool,
        typer.Option(
            "--rollback",
            help="Bring back <name>-previous (the container an apply replaced); with --yes.",
        ),
    ] = False,
    health_timeout: Annotated[
        float,
        typer.Option(
            "--health-timeout",
            metavar="SECONDS",
            min=1.0,
            max=86400.0,
            help="Seconds the new container gets to answer its health check (the first "
            "start JIT-compiles kernels for a long time).",
        ),
    ] = 1800.0,
    stop_timeout: Annotated[
        int,
        typer.Option(
            "--stop-timeout",
            metavar="SECONDS",
            min=0,
            max=3600,
            help="Seconds the running container gets to stop before it is killed.",
        ),
    ] = 30,
    facts_file: LaunchFactsFile = None,
    launch: Launch,
    facts: LaunchFacts,
    facts_from_another_host: FactsFromAnotherHost = False,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="With --yes: bench the running container first, apply, time the warm "
            "start, bench the new one with the same seed and shapes, and keep the change "
            "only if the gate holds; otherwise roll back by itself (exit 5).",
            rich_help_panel=_VERIFY,
        ),
    ] = False,
    max_regression: Annotated[
        float,
        typer.Option(
            "--max-regression",
            min=0.0,
            max=1000.0,
            metavar="PCT",
            help="The gate: a gated metric may not be significantly worse (its whole "
            "bootstrap interval beyond) than PCT percent.",
            rich_help_panel=_VERIFY,
        ),
    ] = 10.0,
    repeat: Annotated[
        int,
        bench_option(
            "--repeat",
            help="Bench the baseline and the new container N times each; the gate then "
            "allows at least the noise floor those runs measure.",
            panel=_VERIFY,
        ),
    ] = 1,
    gate_metrics: Annotated[
        list[str] | None,
        typer.Option(
            "--gate-metric",
            metavar="[SHAPE:]METRIC",
            help="A metric the gate judges (repeatable; default itl_ms.p50 and "
            "output_tokens_per_s of the concurrent shape, or of the most concurrent one "
            "measured; with --rate, the capacity at SLO, always, and these besides).",
            rich_help_panel=_VERIFY,
        ),
    ] = None,
    divergence_after: Annotated[
        int | None,
        typer.Option(
            "--divergence-after",
            min=0,
            metavar="CHARS",
            help="Greedy outputs count as equivalent when they agree on their first CHARS "
            "characters (default: identical).",
            rich_help_panel=_VERIFY,
        ),
    ] = None,
    shape_options: _VerifyShapes,
    no_warm_start: Annotated[
        bool,
        typer.Option(
            "--no-warm-start",
            help="Do not time the new container's start and restart to the first token.",
            rich_help_panel=_VERIFY,
        ),
    ] = False,
    record_dir: Annotated[
        Path | None,
        typer.Option(
            "--record-dir",
            help="Where each verification keeps baseline.json, after.json, compare.json "
            "and verify.json (a directory <name>-<UTC time> inside; default "
            "$XDG_STATE_HOME/blackwell-doctor/apply).",
            rich_help_panel=_VERIFY,
        ),
    ] = None,
    report_md: Annotated[
        Path | None,
        typer.Option(
            "--report-md",
            help="Also write the verification as Markdown for an ops ticket.",
            rich_help_panel=_VERIFY,
        ),
    ] = None,
    rate_options: _VerifyRate,
    example: ExampleName = None,
) -> None:
    """Run the recommended runtime through the Docker API (DOCKER_HOST): a plan by
    default; --yes pulls, creates with all GPUs, starts, waits for health, scans the
    log, and keeps the previous container as <name>-previous. Any failure or Ctrl-C
    restores the previous container (exit 5 / 130)."""
    from blackwell_doctor.app import apply as flow
    from blackwell_doctor.app.verify import VerifyRequest
    from blackwell_doctor.cli.progress import pull_bar

    # The model directory is the runtime's mount (as recommend's).
    facts = facts._replace(facts_file=facts_file, model_dir=model_dir, model_mount=True)
    if example is not None:
        from blackwell_doctor.app.examples import apply_plan_only
        from blackwell_doctor.facts.errors import UserError

        if yes or rollback:
            raise UserError(apply_plan_only())
        facts = facts.with_example(
            example, command="apply", conflicting=("--facts", "--host-root"), reads_bench=False
        )
        # An example is another host by definition: its launch is shown, never run here.
        facts_from_another_host = True
    request = flow.ApplyRequest(
        launch=launch.request(facts.model_dir),
        facts=facts.request(),
        catalogue=launch.catalogue,
        facts_from_another_host=facts_from_another_host,
        yes=yes,
        rollback=rollback,
        health_timeout_s=health_timeout,
        stop_timeout_s=stop_timeout,
        verify=VerifyRequest(
            verify=verify,
            max_regression_pct=max_regression,
            gate_metrics=tuple(gate_metrics or ()),
            divergence_after=divergence_after,
            shape_options=shape_options,
            warm_start=not no_warm_start,
            record_dir=record_dir,
            report_md=report_md,
            repeat=repeat,
            rate_options=rate_options,
        ),
        width=terminal_width(None),
    )
    outcome = flow.apply(
        request,
        environ=os.environ,
        stdin=sys.stdin.buffer,
        say=say,
        write=write,
        pull_progress=pull_bar if sys.stderr.isatty() else None,
    )
    if outcome.output:
        # --example: the examples folder as <examples>, not this machine's path.
        if example is not None:
            from blackwell_doctor.app.examples import shown

            write(shown(outcome.output, "rich", command=True))
        else:
            write(outcome.output)
    raise typer.Exit(int(outcome.exit_code))


def register(app: typer.Typer) -> None:
    app.command(short_help=SUMMARIES["apply"], epilog=EXAMPLES["apply"])(apply)
