"""``apply``: run the recommended runtime through the Docker API (plan, --yes, --rollback).
The flow is :mod:`blackwell_doctor.apply.flow`; here, its options and exit codes."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
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
from blackwell_doctor.exitcodes import ExitCode

if TYPE_CHECKING:
    from blackwell_doctor.apply.run import PullEvent

FactsFromAnotherHost = Annotated[
    bool,
    typer.Option(
        "--facts-from-another-host",
        help="Apply although --facts does not show this host's name (redacted, or another "
        "host's): the launch (tensor-parallel size, threads, P2P setting) is derived from "
        "that file's GPUs and CPUs, not this host's.",
    ),
]


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
) -> None:
    """Run the recommended runtime through the Docker API (DOCKER_HOST): a plan by
    default; --yes pulls, creates with all GPUs, starts, waits for health, scans the
    log, and keeps the previous container as <name>-previous. Any failure or Ctrl-C
    restores the previous container (exit 5 / 130)."""
    from blackwell_doctor.apply import flow
    from blackwell_doctor.errors import UserError
    from blackwell_doctor.obtain import finite_seconds
    from blackwell_doctor.recommend.options import launch_options

    flow.check_name(name)
    health_timeout = finite_seconds("--health-timeout", health_timeout)
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
        spec = flow.launch_spec(
            request,
            options,
            catalogue=catalogue,
            facts_from_another_host=facts_from_another_host,
            environ=os.environ,
            stdin=sys.stdin.buffer,
        )
        if yes:
            outcome = flow.carry_out(
                spec,
                health_timeout_s=health_timeout,
                stop_timeout_s=stop_timeout,
                say=say,
                pull_progress=_pull_bar if sys.stderr.isatty() else None,
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
