"""``apply``: run the recommended runtime through the Docker API (plan, --yes, --rollback).
The flow is :mod:`blackwell_doctor.app.apply`; here, its options and exit codes."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from blackwell_doctor.cli.options import (
    DEFAULT_BIND,
    DEFAULT_NAME,
    DEFAULT_PORT,
    Bind,
    CatalogueFile,
    Containers,
    EnvVars,
    GpuTimeoutBrief,
    HostRootBrief,
    Journal,
    KernelLog,
    LaunchFactsFile,
    Logs,
    ModelDir,
    Name,
    NoProbe,
    Port,
    RuntimeId,
    ShmSize,
    facts_request,
)
from blackwell_doctor.cli.output import say, write
from blackwell_doctor.report.exitcodes import ExitCode

if TYPE_CHECKING:
    from blackwell_doctor.app.verify import VerifySettings
    from blackwell_doctor.apply.docker import PullEvent

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


def apply(
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
            min=0,
            max=3600,
            help="Seconds the running container gets to stop before it is killed.",
        ),
    ] = 30,
    facts_file: LaunchFactsFile = None,
    runtime: RuntimeId = None,
    catalogue: CatalogueFile = None,
    name: Name = DEFAULT_NAME,
    bind: Bind = DEFAULT_BIND,
    port: Port = DEFAULT_PORT,
    shm_size: ShmSize = None,
    env: EnvVars = None,
    no_probe: NoProbe = False,
    host_root: HostRootBrief = None,
    gpu_timeout: GpuTimeoutBrief = None,
    logs: Logs = None,
    containers: Containers = None,
    journal: Journal = False,
    kernel_log: KernelLog = False,
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
    gate_metrics: Annotated[
        list[str] | None,
        typer.Option(
            "--gate-metric",
            metavar="[SHAPE:]METRIC",
            help="A metric the gate judges (repeatable; default itl_ms.p50 and "
            "output_tokens_per_s of the concurrent shape, or of the most concurrent one "
            "measured).",
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
    shapes_file: Annotated[
        Path | None,
        typer.Option(
            "--shapes",
            help="Bench shapes file ([shape.NAME] tables, as for bench).",
            rich_help_panel=_VERIFY,
        ),
    ] = None,
    shape_names: Annotated[
        list[str] | None,
        typer.Option(
            "--shape",
            help="Bench this shape (repeatable; default short, long, concurrent).",
            rich_help_panel=_VERIFY,
        ),
    ] = None,
    seed: Annotated[
        int,
        typer.Option("--seed", help="Seed of the bench prompts.", rich_help_panel=_VERIFY),
    ] = 0,
    requests: Annotated[
        int | None,
        typer.Option(
            "--requests",
            min=1,
            max=1_000_000,
            help="Measured requests per shape.",
            rich_help_panel=_VERIFY,
        ),
    ] = None,
    request_timeout: Annotated[
        float,
        typer.Option(
            "--request-timeout",
            min=0.1,
            max=86400.0,
            help="Deadline of each bench request in seconds.",
            rich_help_panel=_VERIFY,
        ),
    ] = 300.0,
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
) -> None:
    """Run the recommended runtime through the Docker API (DOCKER_HOST): a plan by
    default; --yes pulls, creates with all GPUs, starts, waits for health, scans the
    log, and keeps the previous container as <name>-previous. Any failure or Ctrl-C
    restores the previous container (exit 5 / 130)."""
    from blackwell_doctor.app import apply as flow
    from blackwell_doctor.app.obtain import finite_seconds
    from blackwell_doctor.facts.errors import UserError
    from blackwell_doctor.recommend.options import launch_options

    flow.check_name(name)
    health_timeout = finite_seconds("--health-timeout", health_timeout)
    settings = _verify_settings(
        verify=verify,
        yes=yes,
        rollback=rollback,
        max_regression=max_regression,
        gate_metrics=gate_metrics or [],
        divergence_after=divergence_after,
        shapes_file=shapes_file,
        shape_names=shape_names or [],
        seed=seed,
        requests=requests,
        request_timeout=request_timeout,
        warm_start=not no_warm_start,
        first_token_timeout=health_timeout,
        record_dir=record_dir,
        report_md=report_md,
    )
    if rollback:
        outcome = flow.rollback(name, yes=yes, stop_timeout_s=stop_timeout, say=say)
    else:
        if model_dir is None:
            raise UserError("apply needs --model-dir DIR (the model, mounted read-only)")
        options = launch_options(
            model_dir=model_dir,
            runtime=runtime,
            name=name,
            bind=bind,
            port=port,
            shm_size=shm_size,
            env=env or [],
            environ=os.environ,
            on_this_host=True,
        )
        request = facts_request(
            facts_file=facts_file,
            host_root=host_root,
            gpu_timeout=gpu_timeout,
            no_probe=no_probe,
            logs=logs,
            containers=containers,
            journal=journal,
            kernel_log=kernel_log,
            model_dir=model_dir,
        )
        spec, model = flow.launch_spec(
            request,
            options,
            catalogue=catalogue,
            facts_from_another_host=facts_from_another_host,
            environ=os.environ,
            stdin=sys.stdin.buffer,
        )
        if verify and yes:
            outcome = flow.carry_out_verified(
                spec,
                settings,
                health_timeout_s=health_timeout,
                stop_timeout_s=stop_timeout,
                say=say,
                write=write,
                pull_progress=_pull_bar if sys.stderr.isatty() else None,
                model=model,
            )
        elif yes:
            outcome = flow.carry_out(
                spec,
                health_timeout_s=health_timeout,
                stop_timeout_s=stop_timeout,
                say=say,
                pull_progress=_pull_bar if sys.stderr.isatty() else None,
                model=model,
            )
        else:
            outcome = flow.plan(spec)
    if outcome.output:
        write(outcome.output)
    exit_codes = {
        flow.Ending.DONE: ExitCode.OK,
        flow.Ending.FAILED: ExitCode.APPLY_FAILED,
        flow.Ending.INTERRUPTED: ExitCode.INTERRUPTED,
    }
    raise typer.Exit(int(exit_codes[outcome.ending]))


def _verify_settings(
    *,
    verify: bool,
    yes: bool,
    rollback: bool,
    max_regression: float,
    gate_metrics: list[str],
    divergence_after: int | None,
    shapes_file: Path | None,
    shape_names: list[str],
    seed: int,
    requests: int | None,
    request_timeout: float,
    warm_start: bool,
    first_token_timeout: float,
    record_dir: Path | None,
    report_md: Path | None,
) -> VerifySettings:
    """--verify's options, checked before anything is touched (UserError, exit 2)."""
    from blackwell_doctor.app.verify import VerifySettings
    from blackwell_doctor.facts.errors import UserError
    from blackwell_doctor.ruledata.shapes import ShapeError, load_shapes, select_shapes
    from blackwell_doctor.rules.compare import LATENCY_METRICS
    from blackwell_doctor.rules.gate import GateMetric, GateSpecError, parse_gate_metric

    if verify and (rollback or not yes):
        raise UserError("--verify goes with --yes (it changes the host), not with --rollback")
    if not verify:
        used = [
            name
            for name, value in (
                ("--gate-metric", gate_metrics),
                ("--shapes", shapes_file),
                ("--shape", shape_names),
                ("--requests", requests),
                ("--record-dir", record_dir),
                ("--report-md", report_md),
                ("--divergence-after", divergence_after),
            )
            if value
        ]
        if used:
            raise UserError(f"{', '.join(used)} appl{'ies' if len(used) == 1 else 'y'} to --verify")
    for label, value in (
        ("--max-regression", max_regression),
        ("--request-timeout", request_timeout),
    ):
        if not math.isfinite(value):
            raise UserError(f"{label} must be a finite number, got {value}")
    known = frozenset({*LATENCY_METRICS, "output_tokens_per_s"})
    try:
        shapes = select_shapes(load_shapes(shapes_file), shape_names)
        metrics = [parse_gate_metric(m, known) for m in gate_metrics]
    except (ShapeError, GateSpecError) as exc:
        raise UserError(str(exc)) from None
    names = {s.name for s in shapes}
    for m in metrics:
        if m.shape is not None and m.shape not in names:
            raise UserError(f"--gate-metric {m.label}: shape {m.shape!r} is not benched")
    return VerifySettings(
        shapes=shapes,
        seed=seed,
        requests=requests,
        request_timeout_s=request_timeout,
        metrics=metrics
        or [GateMetric(None, "itl_ms.p50"), GateMetric(None, "output_tokens_per_s")],
        max_regression_pct=max_regression,
        divergence_after=divergence_after,
        warm_start=warm_start,
        first_token_timeout_s=first_token_timeout,
        record_dir=record_dir,
        report_md=report_md,
    )


@contextmanager
def _pull_bar() -> Iterator[PullEvent]:
    """docker pull progress as a rich bar on standard error (a terminal)."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    tasks: dict[str, Any] = {}

    def on_event(event: dict[str, Any]) -> None:
        layer = event.get("id")
        detail = event.get("progressDetail") or {}
        if not layer or "total" not in detail:
            return
        if layer not in tasks:
            tasks[layer] = progress.add_task(str(layer), total=detail["total"])
        progress.update(
            tasks[layer],
            completed=detail.get("current", 0),
            description=f"{layer} {event.get('status', '')}",
        )

    with progress:
        yield on_event


def register(app: typer.Typer) -> None:
    app.command()(apply)
