"""Command-line interface: declares commands and options, maps outcomes to exit codes.

Everything that reads the host lives in ``collect``, every verdict in ``rules``, every
output format in ``render``. This module is the only one that prints, and ``main`` is the
one error boundary: usage errors are one line and exit 2, Ctrl-C is 130, a bug is exit 4
with the path of a crash log, never a bare traceback.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import tempfile
import traceback
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from blackwell_doctor import TOOL_NAME, __version__
from blackwell_doctor.exitcodes import ExitCode


class UserError(Exception):
    """Bad input from the user: printed as one line, exit 2."""


class FormatChoice(StrEnum):
    # Mirrors render.Format; kept here so --help does not import the renderers.
    rich = "rich"
    json = "json"
    junit = "junit"
    markdown = "markdown"


class FailOnChoice(StrEnum):
    warn = "warn"
    fail = "fail"


app = typer.Typer(
    name=TOOL_NAME,
    help=(
        "Is this GPU inference host on the fast path for NVFP4 mixture-of-experts serving "
        "on NVIDIA workstation Blackwell (SM 12.x)? If not, why, and what fixes it.\n\n"
        "Exit codes: 0 nothing at or above the gate; 1 findings at or above --fail-on; "
        "2 usage error or unreadable input; 3 --strict and something could not be evaluated; "
        "4 internal error; 5 apply failed; 130 interrupted."
    ),
    invoke_without_command=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"{TOOL_NAME} {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _root(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Diagnose a GPU inference host (see the commands below)."""
    if ctx.invoked_subcommand is None:
        sys.stdout.write(ctx.get_help() + "\n")
        raise typer.Exit(0)


HostRoot = Annotated[
    Path,
    typer.Option(
        "--host-root",
        help="Read /proc, /sys, /dev, /etc and /usr/lib/wsl under this directory "
        "(e.g. /host when the host is mounted into a container).",
    ),
]
NoProbe = Annotated[
    bool, typer.Option("--no-probe", help="Do not run the probe kernels on the GPU.")
]
GpuTimeout = Annotated[
    float,
    typer.Option(
        "--gpu-timeout",
        min=1.0,
        help="Seconds NVML and the CUDA driver get to answer; a hung GPU becomes a finding.",
    ),
]
Output = Annotated[
    Path | None,
    typer.Option("--output", "-o", help="Write to this file instead of standard output."),
]


def _split(values: list[str] | None) -> list[str]:
    return [v.strip() for item in values or [] for v in item.split(",") if v.strip()]


def _read_facts(path: Path) -> bytes:
    try:
        if str(path) == "-":
            return sys.stdin.buffer.read()
        return path.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read facts file {path}: {exc.strerror or exc}") from None


def _check_host_root(host_root: Path) -> None:
    if not host_root.is_dir():
        raise UserError(f"--host-root {host_root} is not a directory")


def _write(text: str, output: Path | None) -> None:
    """Standard output, or the file written whole (temp file + rename: nothing half-written)."""
    if output is None or str(output) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    target = output.resolve()
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except OSError as exc:
        raise UserError(f"cannot write {output}: {exc.strerror or exc}") from None


@app.command()
def check(
    facts_file: Annotated[
        Path | None,
        typer.Option(
            "--facts",
            help="Judge a facts file written by `collect` (or - for stdin) instead of this host.",
        ),
    ] = None,
    fmt: Annotated[
        FormatChoice, typer.Option("--format", "-f", help="Output format.")
    ] = FormatChoice.rich,
    output: Output = None,
    fail_on: Annotated[
        FailOnChoice,
        typer.Option("--fail-on", help="Lowest status that makes the exit code 1."),
    ] = FailOnChoice.fail,
    strict: Annotated[
        bool,
        typer.Option("--strict", help="Exit 3 when a check could not be evaluated."),
    ] = False,
    select: Annotated[
        list[str] | None,
        typer.Option("--select", help="Only these check ids or families (prefixes, repeatable)."),
    ] = None,
    ignore: Annotated[
        list[str] | None,
        typer.Option("--ignore", help="Skip these check ids or families (prefixes, repeatable)."),
    ] = None,
    no_probe: NoProbe = False,
    host_root: HostRoot = Path("/"),
    gpu_timeout: GpuTimeout = 20.0,
    embed_facts: Annotated[
        bool, typer.Option("--embed-facts", help="Include the judged facts in JSON output.")
    ] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show evidence for passing checks too.")
    ] = False,
) -> None:
    """Collect facts (or read --facts), run every check, and report. The CI gate."""
    from blackwell_doctor.evaluate import evaluate
    from blackwell_doctor.facts import FactsError, decode_facts
    from blackwell_doctor.render import Format, render
    from blackwell_doctor.rules.engine import SelectionError

    if facts_file is not None:
        try:
            facts = decode_facts(_read_facts(facts_file), source=str(facts_file))
        except FactsError as exc:
            raise UserError(str(exc)) from None
        source = str(facts_file)
    else:
        from blackwell_doctor.collect import collect_facts

        _check_host_root(host_root)
        facts = collect_facts(
            host_root=host_root, environ=os.environ, gpu_timeout_s=gpu_timeout, probes=not no_probe
        )
        source = "live"
    try:
        report = evaluate(
            facts,
            select=_split(select),
            ignore=_split(ignore),
            fail_on=fail_on.value,
            strict=strict,
            source=source,
            embed_facts=embed_facts,
        )
    except SelectionError as exc:
        raise UserError(str(exc)) from None
    to_terminal = output is None and sys.stdout.isatty()
    color = to_terminal and fmt is FormatChoice.rich and "NO_COLOR" not in os.environ
    text = render(report, Format(fmt.value), color=color, verbose=verbose)
    _write(text, output)
    if output is not None:
        s = report.summary
        sys.stderr.write(
            f"wrote {output}: {s.fail} failed, {s.warn} warnings, {s.error} not evaluated "
            f"(exit {report.exit_code})\n"
        )
    raise typer.Exit(report.exit_code)


@app.command()
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
    host_root: HostRoot = Path("/"),
    gpu_timeout: GpuTimeout = 20.0,
) -> None:
    """Write the facts document: everything read from this host, for `check --facts`."""
    from blackwell_doctor.collect import collect_facts
    from blackwell_doctor.facts import encode_facts

    _check_host_root(host_root)
    facts = collect_facts(
        host_root=host_root,
        environ=os.environ,
        gpu_timeout_s=gpu_timeout,
        probes=not no_probe,
        redact=redact,
    )
    _write(encode_facts(facts).decode("utf-8"), output)


def _crash_log(exc: BaseException) -> Path:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    fd, name = tempfile.mkstemp(prefix=f"{TOOL_NAME}-crash-{stamp}-", suffix=".log")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(f"{TOOL_NAME} {__version__}\nargv: {sys.argv!r}\n\n")
        fh.write("".join(traceback.format_exception(exc)))
    return Path(name)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI and turn every outcome into a documented exit code."""
    command = typer.main.get_command(app)
    try:
        # Not standalone: click returns an Exit's code instead of calling sys.exit.
        returned = command.main(args=argv, prog_name=TOOL_NAME, standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.TyperException as exc:  # click's usage errors: bad flag, bad value
        sys.stderr.write(f"{TOOL_NAME}: error: {' '.join(exc.format_message().split())}\n")
        return int(ExitCode.USAGE)
    except UserError as exc:
        sys.stderr.write(f"{TOOL_NAME}: error: {exc}\n")
        return int(ExitCode.USAGE)
    except (KeyboardInterrupt, typer.Abort):
        sys.stderr.write(f"{TOOL_NAME}: interrupted\n")
        return int(ExitCode.INTERRUPTED)
    except Exception as exc:
        path = _crash_log(exc)
        sys.stderr.write(
            f"{TOOL_NAME}: internal error: {type(exc).__name__}: {exc}\n"
            f"This is a bug in {TOOL_NAME}; the details are in {path}\n"
        )
        return int(ExitCode.INTERNAL)
    if returned == ExitCode.INTERRUPTED:  # typer turns Ctrl-C into a silent Exit(130)
        sys.stderr.write(f"{TOOL_NAME}: interrupted\n")
    return returned if isinstance(returned, int) else int(ExitCode.OK)


if __name__ == "__main__":
    raise SystemExit(main())
