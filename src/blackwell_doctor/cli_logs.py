"""The ``scan-logs`` command. ``cli.py`` calls :func:`register` once ``app``, ``UserError``
and ``_write`` exist; everything else lives in ``blackwell_doctor.logs``."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer


class ScanFormat(StrEnum):
    rich = "rich"
    json = "json"


class ScanFailOn(StrEnum):
    warn = "warn"
    fail = "fail"


def register(app: typer.Typer) -> None:
    """Add ``scan-logs`` to ``app``."""

    @app.command("scan-logs")
    def scan_logs(
        paths: Annotated[
            list[str] | None,
            typer.Argument(
                help="Log files, directories (recursed), globs, rotated .gz files, docker "
                "json-file logs, or - for standard input.",
                show_default=False,
            ),
        ] = None,
        fmt: Annotated[
            ScanFormat, typer.Option("--format", "-f", help="Output format.")
        ] = ScanFormat.rich,
        output: Annotated[
            Path | None,
            typer.Option("--output", "-o", help="Write to this file instead of standard output."),
        ] = None,
        fail_on: Annotated[
            ScanFailOn,
            typer.Option("--fail-on", help="Lowest finding severity that makes the exit code 1."),
        ] = ScanFailOn.fail,
        container: Annotated[
            list[str] | None,
            typer.Option(
                "--container",
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

        Exit 0: nothing at or above --fail-on; 1: findings at or above it; 2: no input
        could be read (an unreadable input among readable ones is reported, not fatal).
        """
        from blackwell_doctor.cli import UserError, _write
        from blackwell_doctor.logs.collect import scan_sources
        from blackwell_doctor.logs.report import build_report, render_json, render_text

        given = list(paths or [])
        if not (given or container or journal or kernel_log):
            raise UserError(
                "scan-logs needs a PATH, - (stdin), --container, --journal or --kernel-log"
            )
        if given.count("-") > 1:
            raise UserError("- (standard input) can be given only once")
        root = host_root or Path("/")
        if not root.is_dir():
            raise UserError(f"--host-root {root} is not a directory")
        facts = scan_sources(
            paths=given,
            containers=list(container or []),
            journal=journal,
            kernel_log=kernel_log,
            host_root=root,
            stdin=sys.stdin.buffer if "-" in given else None,
        )
        report = build_report(facts, fail_on=fail_on.value)
        text = render_json(report) if fmt is ScanFormat.json else render_text(report)
        _write(text, output)
        if report.exit_code == 2:
            errors = "; ".join(s.error or "unreadable" for s in report.sources)
            sys.stderr.write(f"blackwell-doctor: error: no log input could be read: {errors}\n")
        raise typer.Exit(report.exit_code)
