"""``collect``: write the facts document, for ``check --facts`` elsewhere or later."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from blackwell_doctor.cli.options import (
    EXAMPLES,
    SUMMARIES,
    BenchFile,
    CheckModelDir,
    Containers,
    FactsOptions,
    GpuTimeout,
    HostRoot,
    Journal,
    KernelLog,
    Logs,
    ModelHub,
    NoProbe,
    Output,
    Stack,
    StackImage,
    StackPython,
)
from blackwell_doctor.cli.output import write, writes_to_file


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
    hub: ModelHub = False,
    stack: Stack = False,
    python: StackPython = None,
    image: StackImage = None,
    bench: BenchFile = None,
) -> None:
    """Write the facts document: everything read from this host, for `check --facts`."""
    from blackwell_doctor.app.obtain import obtain_facts
    from blackwell_doctor.facts.document import encode_facts

    request = FactsOptions(
        host_root=host_root,
        gpu_timeout=gpu_timeout,
        no_probe=no_probe,
        logs=logs,
        containers=containers,
        journal=journal,
        kernel_log=kernel_log,
        redact=redact,
        model_dir=model_dir,
        hub=hub,
        bench=bench,
        stack=stack,
        python=python,
        image=image,
    ).request()
    obtained = obtain_facts(request, environ=os.environ, stdin=sys.stdin.buffer)
    write(encode_facts(obtained.facts).decode("utf-8"), output)
    if writes_to_file(output):
        from blackwell_doctor.app.obtain import written_words

        sys.stderr.write(written_words(obtained.facts, str(output)) + "\n")


def register(app: typer.Typer) -> None:
    app.command(short_help=SUMMARIES["collect"], epilog=EXAMPLES["collect"])(collect)
