"""``collect``: write the facts document, for ``check --facts`` elsewhere or later."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from blackwell_doctor.cli.options import (
    BenchFile,
    CheckModelDir,
    Containers,
    GpuTimeout,
    HostRoot,
    Journal,
    KernelLog,
    Logs,
    NoProbe,
    Output,
    Stack,
    StackPython,
    facts_request,
)
from blackwell_doctor.cli.output import write


def collect(
    output: Output = None,
    redact: Annotated[
        bool,
        typer.Option(
            "--redact",
            help="Also hide host identity (hostname, GPU UUIDs). Secret-looking environment "
            "values are always redacted.",
        ),
    ] = False,
    no_probe: NoProbe = False,
    host_root: HostRoot = None,
    gpu_timeout: GpuTimeout = None,
    logs: Logs = None,
    containers: Containers = None,
    journal: Journal = False,
    kernel_log: KernelLog = False,
    model_dir: CheckModelDir = None,
    stack: Stack = False,
    python: StackPython = None,
    bench: BenchFile = None,
) -> None:
    """Write the facts document: everything read from this host, for `check --facts`."""
    from blackwell_doctor.app.obtain import obtain_facts
    from blackwell_doctor.facts.document import encode_facts

    request = facts_request(locals())
    obtained = obtain_facts(request, environ=os.environ, stdin=sys.stdin.buffer)
    write(encode_facts(obtained.facts).decode("utf-8"), output)


def register(app: typer.Typer) -> None:
    app.command()(collect)
