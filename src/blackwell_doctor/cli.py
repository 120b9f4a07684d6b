"""Command-line interface: declares commands and options, maps outcomes to exit codes.

Everything that reads the host lives in ``collect``, every verdict in ``rules``, every
output format in ``render``. This module is the only one that prints, and ``main`` is the
one error boundary: usage errors are one line and exit 2, Ctrl-C is 130, a bug is exit 4
with the path of a crash log, never a bare traceback.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import os
import stat
import sys
import tempfile
import time
import traceback
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from blackwell_doctor import TOOL_NAME, __version__
from blackwell_doctor.exitcodes import ExitCode

if TYPE_CHECKING:
    from blackwell_doctor.facts import Facts


class UserError(Exception):
    """Bad input from the user: printed as one line, exit 2."""


class FormatChoice(StrEnum):
    # Mirrors render.Format; kept here so --help does not import the renderers.
    rich = "rich"
    json = "json"
    junit = "junit"
    markdown = "markdown"
    prometheus = "prometheus"


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
    Path | None,
    typer.Option(
        "--host-root",
        help="Read /proc, /sys, /dev, /etc and /usr/lib/wsl under this directory "
        "(e.g. /host when the host is mounted into a container). Default: /.",
    ),
]
NoProbe = Annotated[
    bool, typer.Option("--no-probe", help="Do not run the probe kernels on the GPU.")
]
GpuTimeout = Annotated[
    float | None,
    typer.Option(
        "--gpu-timeout",
        min=1.0,
        max=3600.0,
        help="Seconds NVML and the CUDA driver get to answer; a hung GPU becomes a finding "
        "(default 20).",
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


_DEFAULT_GPU_TIMEOUT_S = 20.0


def _host_root(host_root: Path | None) -> Path:
    root = host_root or Path("/")
    if not root.is_dir():
        raise UserError(f"--host-root {root} is not a directory")
    return root


def _gpu_timeout(value: float | None) -> float:
    return _finite("--gpu-timeout", _DEFAULT_GPU_TIMEOUT_S if value is None else value)


def _write(text: str, output: Path | None) -> None:
    """Standard output, or the file ``output``.

    A regular file (or a new one) is written whole: a temporary file beside it, then a
    rename, so a reader never sees half a report; the old file's permissions are kept.
    Anything else (a device such as /dev/null, a FIFO, a terminal) is written in place and
    never replaced: renaming over /dev/null as root would destroy it.
    """
    if output is None or str(output) in ("-", "/dev/stdout"):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        try:
            st: os.stat_result | None = os.stat(output)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            with open(output, "w", encoding="utf-8") as fh:
                fh.write(text)
            return
        target = output.resolve()
        if st is not None:
            mode = stat.S_IMODE(st.st_mode)
        else:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise UserError(f"cannot write {output}: {exc.strerror or exc}") from None


def _writes_to_file(output: Path | None) -> bool:
    return output is not None and str(output) not in ("-", "/dev/stdout")


def _finite(option: str, value: float) -> float:
    # typer's min=/max= let NaN through (every comparison with NaN is false).
    if not math.isfinite(value):
        raise UserError(f"{option} must be a finite number of seconds, got {value}")
    return value


def with_logs(
    facts: Facts,
    *,
    facts_file: Path | None,
    logs: list[str] | None,
    containers: list[str] | None,
    journal: bool,
    kernel_log: bool,
    host_root: Path | None,
) -> Facts:
    """``facts`` with the logs given by --logs/--container/--journal/--kernel-log scanned in
    (unchanged when none is given); the usage errors of those options. Shared by every
    command that takes them (check, recommend, apply)."""
    if not (logs or containers or journal or kernel_log):
        return facts
    if facts_file is not None and (containers or journal or kernel_log):
        raise UserError(
            "--container, --journal and --kernel-log read this host; with --facts, "
            "pass that host's log files with --logs"
        )
    if logs and "-" in logs and facts_file is not None and str(facts_file) == "-":
        raise UserError("--facts - and --logs - cannot both read standard input")
    import msgspec

    from blackwell_doctor.logs.collect import collect_logs

    paths = logs or []
    scanned = collect_logs(
        paths=paths,
        containers=containers or [],
        journal=journal,
        kernel_log=kernel_log,
        host_root=host_root or Path("/"),
        stdin=sys.stdin.buffer if "-" in paths else None,
    )
    return msgspec.structs.replace(facts, logs=scanned)


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
    host_root: HostRoot = None,
    gpu_timeout: GpuTimeout = None,
    logs: Annotated[
        list[str] | None,
        typer.Option(
            "--logs",
            help="Scan these runtime logs too (files, .gz, directories, globs; - for stdin). "
            "Repeatable.",
        ),
    ] = None,
    containers: Annotated[
        list[str] | None,
        typer.Option("--container", help="Scan this container's logs (Docker API). Repeatable."),
    ] = None,
    journal: Annotated[
        bool, typer.Option("--journal", help="Scan the systemd journal of this boot.")
    ] = False,
    kernel_log: Annotated[
        bool,
        typer.Option("--kernel-log", help="Scan the kernel log for Xid and IOMMU faults."),
    ] = False,
    embed_facts: Annotated[
        bool, typer.Option("--embed-facts", help="Include the judged facts in JSON output.")
    ] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show evidence for passing checks too.")
    ] = False,
) -> None:
    """Collect facts (or read --facts), run every check, and report. The CI gate."""
    started_at, clock = time.time(), time.monotonic()
    from blackwell_doctor.evaluate import evaluate
    from blackwell_doctor.facts import FactsError, decode_facts
    from blackwell_doctor.render import Format, render
    from blackwell_doctor.rules.engine import SelectionError

    if facts_file is not None:
        for name, given in (("--host-root", host_root), ("--gpu-timeout", gpu_timeout)):
            if given is not None:
                raise UserError(f"{name} applies to collecting on this host, not to --facts")
        try:
            facts = decode_facts(_read_facts(facts_file), source=str(facts_file))
        except FactsError as exc:
            raise UserError(str(exc)) from None
        source = str(facts_file)
    else:
        from blackwell_doctor.collect import collect_facts

        facts = collect_facts(
            host_root=_host_root(host_root),
            environ=os.environ,
            gpu_timeout_s=_gpu_timeout(gpu_timeout),
            probes=not no_probe,
        )
        source = "live"
    facts = with_logs(
        facts,
        facts_file=facts_file,
        logs=logs,
        containers=containers,
        journal=journal,
        kernel_log=kernel_log,
        host_root=host_root,
    )
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
    to_terminal = not _writes_to_file(output) and sys.stdout.isatty()
    # no-color.org: NO_COLOR set to a non-empty value disables colour.
    color = to_terminal and fmt is FormatChoice.rich and not os.environ.get("NO_COLOR")
    from blackwell_doctor.render.prometheus import RunTiming

    timing = RunTiming(started_at=started_at, duration_s=time.monotonic() - clock)
    text = render(report, Format(fmt.value), color=color, verbose=verbose, timing=timing)
    _write(text, output)
    if _writes_to_file(output):
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
    host_root: HostRoot = None,
    gpu_timeout: GpuTimeout = None,
) -> None:
    """Write the facts document: everything read from this host, for `check --facts`."""
    from blackwell_doctor.collect import collect_facts
    from blackwell_doctor.facts import encode_facts

    facts = collect_facts(
        host_root=_host_root(host_root),
        environ=os.environ,
        gpu_timeout_s=_gpu_timeout(gpu_timeout),
        probes=not no_probe,
        redact=redact,
    )
    _write(encode_facts(facts).decode("utf-8"), output)


class ProbeFormat(StrEnum):
    rich = "rich"
    json = "json"


# Bounds for --smem-limit: below the 48 KB default nothing is interesting; no GPU grants 1 MiB.
_SMEM_LIMIT_RANGE = (1024, 1 << 20)


@app.command()
def probe(
    plan: Annotated[
        bool,
        typer.Option(
            "--plan",
            help="Arithmetic only, no GPU needed: what CUTLASS would choose and need for each "
            "tile under --smem-limit.",
        ),
    ] = False,
    smem_limit: Annotated[
        int | None,
        typer.Option(
            "--smem-limit",
            help="Shared memory per block for --plan, in bytes: 101376 for SM 12.x, 232448 for "
            "SM 9.0/10.x.",
        ),
    ] = None,
    fmt: Annotated[
        ProbeFormat, typer.Option("--format", "-f", help="Output format.")
    ] = ProbeFormat.rich,
    output: Output = None,
    p2p: Annotated[
        bool,
        typer.Option(
            "--p2p",
            help="Test peer-to-peer between every GPU pair: verified copies and peer writes, "
            "bandwidth against a copy staged through host memory.",
        ),
    ] = False,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            min=1.0,
            max=3600.0,
            help="Seconds each probe child gets; a hang is a named failure.",
        ),
    ] = 60.0,
) -> None:
    """Measure this GPU's shared-memory limit and run the block-scaled tile probes."""
    from blackwell_doctor.probe import report as probe_report
    from blackwell_doctor.probe.catalogue import plan_catalogue

    if p2p:
        if plan or smem_limit is not None:
            raise UserError("--p2p measures transfers; it does not combine with --plan")
        from blackwell_doctor.probe.p2p import run_p2p_probes
        from blackwell_doctor.probe.p2p_report import render_p2p_text

        facts = run_p2p_probes(timeout_s=_finite("--timeout", timeout))
        result = probe_report.build_p2p(facts)
        _write(
            probe_report.render_json(result) if fmt is ProbeFormat.json else render_p2p_text(facts),
            output,
        )
        raise typer.Exit(result.exit_code)
    if plan:
        if smem_limit is None:
            raise UserError(
                "--plan needs --smem-limit BYTES (101376 for SM 12.x, 232448 for SM 9.0/10.x)"
            )
        low, high = _SMEM_LIMIT_RANGE
        if not low <= smem_limit <= high:
            raise UserError(f"--smem-limit {smem_limit} is outside {low}..{high} bytes")
        result = probe_report.build_plan(smem_limit, plan_catalogue(smem_limit))
    else:
        if smem_limit is not None:
            raise UserError("--smem-limit applies to --plan; a measured probe uses the GPU's own")
        from blackwell_doctor.probe.catalogue import load_catalogue
        from blackwell_doctor.probe.runner import run_probes

        _, tiles = load_catalogue()
        result = probe_report.build_measured(
            run_probes(tiles=tiles, timeout_s=_finite("--timeout", timeout))
        )
    if fmt is ProbeFormat.json:
        text = probe_report.render_json(result)
    else:
        text = probe_report.render_text(result)
    _write(text, output)
    raise typer.Exit(result.exit_code)


def _register_subcommands() -> None:
    # Commands that live in their own modules (imported here, run lazily).
    from blackwell_doctor.cli_logs import register as register_scan_logs
    from blackwell_doctor.cli_runtime import register as register_runtime

    register_scan_logs(app)
    register_runtime(app)


_register_subcommands()


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
