"""``scan-logs``: runtime and kernel logs alone, for fallback and failure signatures."""

# No `from __future__ import annotations`: typer reads this command's signature at every
# run, and string annotations are eval'd there (start-up: docs/performance.md).

import sys
from pathlib import Path
from typing import Annotated

import typer

from blackwell_doctor.cli.basics import EXAMPLES, SUMMARIES, FailOn, Output, format_option
from blackwell_doctor.cli.output import text_style, write_outcome
from blackwell_doctor.render.formats import ScanLogsFormat


def scan_logs(
    paths: Annotated[
        list[str] | None,
        typer.Argument(
            help="Log files, directories (recursed), globs, rotated .gz files, docker "
            "json-file logs, or - for standard input.",
            show_default=False,
        ),
    ] = None,
    fmt: Annotated[ScanLogsFormat, format_option()] = ScanLogsFormat.RICH,
    output: Output = None,
    fail_on: Annotated[
        FailOn,
        typer.Option("--fail-on", help="Lowest finding severity that makes the exit code 1."),
    ] = "fail",
    container: Annotated[
        list[str] | None,
        typer.Option(
            "--container",
            metavar="NAME",
            help="Scan this container's logs through the Docker API "
            "(repeatable; DOCKER_HOST is honoured).",
        ),
    ] = None,
    journal: Annotated[
        bool, typer.Option("--journal", help="Scan this boot's systemd journal.")
    ] = False,
    kernel_log: Annotated[
        bool,
        typer.Option(
            "--kernel-log",
            help="Scan the kernel log (/dev/kmsg, else dmesg) for Xid, IOMMU faults.",
        ),
    ] = False,
    host_root: Annotated[
        Path | None,
        typer.Option("--host-root", help="Read /dev/kmsg under this directory (default: /)."),
    ] = None,
) -> None:
    """Scan runtime and kernel logs for fallback and failure signatures.

    The logs checks (logs.moe_kernels, logs.arch_support, ...) judge the scan, as `check
    --logs` judges it. A directory is searched for log files (*.log, *.txt, *.out, *.err,
    syslog, rotated and .gz; journal and Docker JSON exports), past VCS, virtual
    environments, caches and binary files; what was skipped is counted in the report.
    Exit 0: nothing at or above --fail-on; 1: findings at or above it; 2: no input could
    be read (an unreadable input among readable ones is reported, not fatal).
    """
    from blackwell_doctor import TOOL_NAME
    from blackwell_doctor.app.obtain import LogRequest, obtain_logs
    from blackwell_doctor.facts.errors import UserError
    from blackwell_doctor.render import render_scan_logs
    from blackwell_doctor.rules.presets import judge_logs

    request = LogRequest(
        paths=tuple(paths or ()),
        containers=tuple(container or ()),
        journal=journal,
        kernel_log=kernel_log,
    )
    if not request.requested:
        raise UserError("scan-logs needs a PATH, - (stdin), --container, --journal or --kernel-log")
    from blackwell_doctor.cli.progress import ScanDisplay

    with ScanDisplay() as display:
        facts = obtain_logs(
            request,
            host_root=host_root,
            stdin=sys.stdin.buffer,
            progress=display if display.tty else None,
        )
    # The logs checks judge the scan, through the same report and renderers as `check`.
    document = judge_logs(facts, fail_on=fail_on)
    report = document.report
    color, width = text_style(output)
    text = render_scan_logs(document, fmt, color=color, width=width)
    write_outcome(
        text,
        output,
        failed="no log input could be read (exit 2)" if report.exit_code == 2 else None,
    )
    if report.exit_code == 2:
        errors = "; ".join(s.error or "unreadable" for s in report.sources)
        sys.stderr.write(f"{TOOL_NAME}: error: no log input could be read: {errors}\n")
    raise typer.Exit(report.exit_code)


def register(app: typer.Typer) -> None:
    app.command("scan-logs", short_help=SUMMARIES["scan-logs"], epilog=EXAMPLES["scan-logs"])(
        scan_logs
    )
