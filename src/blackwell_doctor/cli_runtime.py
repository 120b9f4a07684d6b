"""The `recommend` and `apply` commands (issue 6), registered on the main app.

Declarations and exit codes only; the work is in ``recommend`` and ``apply``. Helpers of
``cli`` (UserError, _write, ...) are imported when a command runs, so this module can be
imported from anywhere in cli.py.
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from blackwell_doctor import TOOL_NAME
from blackwell_doctor.exitcodes import ExitCode
from blackwell_doctor.recommend.formats import RecommendFormat
from blackwell_doctor.redact import REDACTED

if TYPE_CHECKING:
    from blackwell_doctor.facts import Facts
    from blackwell_doctor.recommend.launch import LaunchSpec
    from blackwell_doctor.recommend.plan import LaunchOptions
    from blackwell_doctor.report import Report

FactsFile = Annotated[
    Path | None,
    typer.Option(
        "--facts",
        help="Recommend from a facts file written by `collect` (or - for stdin) instead of "
        "this host.",
    ),
]
HostRoot = Annotated[
    Path | None,
    typer.Option("--host-root", help="Read /proc, /sys, ... under this directory. Default: /."),
]
GpuTimeout = Annotated[
    float | None,
    typer.Option("--gpu-timeout", min=1.0, max=3600.0, help="Seconds NVML/CUDA get to answer."),
]
NoProbe = Annotated[
    bool, typer.Option("--no-probe", help="Do not run the probe kernels on the GPU.")
]
ModelDir = Annotated[
    Path | None,
    typer.Option(
        "--model-dir",
        help="The model directory on this host, mounted read-only at /model (required for "
        "the run command, shell, compose and apply).",
    ),
]
RuntimeId = Annotated[
    str | None,
    typer.Option("--runtime", help="A runtime id from the catalogue (default: the preferred one)."),
]
CatalogueFile = Annotated[
    Path | None,
    typer.Option(
        "--catalogue", help="Your own runtime catalogue (format of checks/runtimes.toml)."
    ),
]
Name = Annotated[str, typer.Option("--name", help="The container's name.")]
Bind = Annotated[
    str,
    typer.Option("--bind", help="Address to publish the port on (0.0.0.0: every interface)."),
]
Port = Annotated[int, typer.Option("--port", help="Host port for the API.")]
ShmSize = Annotated[
    str | None, typer.Option("--shm-size", help="Shared memory (default: the catalogue's).")
]
Logs = Annotated[
    list[str] | None,
    typer.Option(
        "--logs",
        help="Scan these runtime logs too (files, .gz, directories, globs; - for stdin). "
        "Repeatable.",
    ),
]
Containers = Annotated[
    list[str] | None,
    typer.Option("--container", help="Scan this container's logs (Docker API). Repeatable."),
]
Journal = Annotated[bool, typer.Option("--journal", help="Scan the systemd journal of this boot.")]
KernelLog = Annotated[
    bool,
    typer.Option("--kernel-log", help="Scan the kernel log for Xid and IOMMU faults."),
]
FactsFromAnotherHost = Annotated[
    bool,
    typer.Option(
        "--facts-from-another-host",
        help="Apply although --facts does not show this host's name (redacted, or another "
        "host's): the launch (tensor-parallel size, threads, P2P setting) is derived from "
        "that file's GPUs and CPUs, not this host's.",
    ),
]


@dataclass(frozen=True)
class LogOptions:
    """--logs/--container/--journal/--kernel-log, as `check` takes them."""

    logs: list[str] | None = None
    containers: list[str] | None = None
    journal: bool = False
    kernel_log: bool = False


EnvVars = Annotated[
    list[str] | None,
    typer.Option(
        "--env",
        "-e",
        help="Extra environment NAME=VALUE, or NAME to take it from this environment "
        "(repeatable). Secret-looking values are never printed.",
    ),
]


def _facts_and_report(
    facts_file: Path | None,
    host_root: Path | None,
    gpu_timeout: float | None,
    no_probe: bool,
    log_options: LogOptions,
) -> tuple[Facts, Report]:
    from blackwell_doctor import cli
    from blackwell_doctor.evaluate import evaluate
    from blackwell_doctor.facts import FactsError, decode_facts

    if facts_file is not None:
        for name, given in (("--host-root", host_root), ("--gpu-timeout", gpu_timeout)):
            if given is not None:
                raise cli.UserError(f"{name} applies to collecting on this host, not to --facts")
        try:
            facts = decode_facts(cli._read_facts(facts_file), source=str(facts_file))
        except FactsError as exc:
            raise cli.UserError(str(exc)) from None
        source = str(facts_file)
    else:
        from blackwell_doctor.collect import collect_facts

        facts = collect_facts(
            host_root=cli._host_root(host_root),
            environ=os.environ,
            gpu_timeout_s=cli._gpu_timeout(gpu_timeout),
            probes=not no_probe,
        )
        source = "live"
    facts = cli.with_logs(
        facts,
        facts_file=facts_file,
        logs=log_options.logs,
        containers=log_options.containers,
        journal=log_options.journal,
        kernel_log=log_options.kernel_log,
        host_root=host_root,
    )
    return facts, evaluate(facts, source=source)


def check_facts_host(facts: Facts, facts_file: Path, *, allowed: bool) -> None:
    """apply changes this host: refuse (exit 2) a facts file that does not name it.

    The launch is derived from the file's GPU count and CPUs, so another node's file would
    start the wrong tensor-parallel size here. Only the hostname identifies a host: a
    redacted file has none, and PCI bus ids or GPU counts coincide on identical nodes of a
    cluster (they cannot tell node A from node B), so those need the explicit
    --facts-from-another-host, as does a different name."""
    from blackwell_doctor import cli

    if allowed:
        return
    theirs = facts.platform.hostname
    mine = socket.gethostname()
    if isinstance(theirs, str) and theirs == mine:
        return
    if not isinstance(theirs, str):
        what = f"does not say which host it describes ({theirs.reason})"
    elif theirs == REDACTED:
        what = "has its hostname redacted"
    else:
        what = f"describes host {theirs!r}, not this host ({mine!r})"
    raise cli.UserError(
        f"--facts {facts_file} {what}: apply would run a launch derived from that file's "
        "GPUs and CPUs on this host's engine. Collect this host's facts (or drop --facts), "
        "or pass --facts-from-another-host if that is what you mean"
    )


def _env_pairs(values: list[str] | None) -> tuple[tuple[str, str], ...]:
    from blackwell_doctor import cli

    pairs: list[tuple[str, str]] = []
    for item in values or []:
        name, sep, value = item.partition("=")
        if not sep:
            if name not in os.environ:
                raise cli.UserError(f"--env {name}: not set in this environment")
            value = os.environ[name]
        pairs.append((name, value))
    return tuple(pairs)


def _options(
    model_dir: Path | None,
    runtime: str | None,
    name: str,
    bind: str,
    port: int,
    shm_size: str | None,
    env: list[str] | None,
    *,
    on_this_host: bool,
) -> LaunchOptions:
    """``on_this_host``: the launch is for this machine, so the model directory must exist
    here. With --facts from another node it lives there: only its form can be checked."""
    from blackwell_doctor import cli
    from blackwell_doctor.recommend.plan import LaunchOptions

    model: str | None = None
    if model_dir is not None:
        if on_this_host:
            if not model_dir.is_dir():
                raise cli.UserError(f"--model-dir {model_dir} is not a directory")
            model = str(model_dir.resolve())
        elif not model_dir.is_absolute():
            raise cli.UserError(
                f"--model-dir {model_dir}: with --facts give the absolute path on that host"
            )
        else:
            model = str(model_dir)
    return LaunchOptions(
        model_dir=model,
        runtime_id=runtime,
        name=name,
        bind=bind,
        port=port,
        shm_size=shm_size,
        extra_env=_env_pairs(env),
    )


def _build(
    facts_file: Path | None,
    host_root: Path | None,
    gpu_timeout: float | None,
    no_probe: bool,
    catalogue: Path | None,
    options: LaunchOptions,
    log_options: LogOptions,
    *,
    other_host_ok: bool = True,
) -> tuple[Any, LaunchSpec | None]:
    from blackwell_doctor import cli
    from blackwell_doctor.recommend.catalogue import CatalogueError, load_catalogue
    from blackwell_doctor.recommend.plan import build_recommendation
    from blackwell_doctor.recommend.validate import ValidationError

    try:
        cat = load_catalogue(catalogue)
    except CatalogueError as exc:
        raise cli.UserError(str(exc)) from None
    facts, report = _facts_and_report(facts_file, host_root, gpu_timeout, no_probe, log_options)
    if facts_file is not None:
        check_facts_host(facts, facts_file, allowed=other_host_ok)
    try:
        return build_recommendation(facts, report, cat, options)
    except (CatalogueError, ValidationError) as exc:
        raise cli.UserError(str(exc)) from None


class _PullBar:
    """docker pull progress as a rich bar on a terminal (stderr)."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self._tasks: dict[str, Any] = {}

    def __enter__(self) -> _PullBar:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def __call__(self, event: dict[str, Any]) -> None:
        layer = event.get("id")
        detail = event.get("progressDetail") or {}
        if not layer or "total" not in detail:
            return
        if layer not in self._tasks:
            self._tasks[layer] = self._progress.add_task(str(layer), total=detail["total"])
        self._progress.update(
            self._tasks[layer],
            completed=detail.get("current", 0),
            description=f"{layer} {event.get('status', '')}",
        )


def register(app: typer.Typer) -> None:
    """Add `recommend` and `apply` to ``app``."""

    @app.command()
    def recommend(
        facts_file: FactsFile = None,
        fmt: Annotated[
            RecommendFormat, typer.Option("--format", "-f", help="Output format.")
        ] = RecommendFormat.markdown,
        output: Annotated[
            Path | None,
            typer.Option("--output", "-o", help="Write to this file instead of standard output."),
        ] = None,
        model_dir: ModelDir = None,
        runtime: RuntimeId = None,
        catalogue: CatalogueFile = None,
        name: Name = "blackwell-doctor-vllm",
        bind: Bind = "127.0.0.1",
        port: Port = 8000,
        shm_size: ShmSize = None,
        env: EnvVars = None,
        no_probe: NoProbe = False,
        host_root: HostRoot = None,
        gpu_timeout: GpuTimeout = None,
        logs: Logs = None,
        containers: Containers = None,
        journal: Journal = False,
        kernel_log: KernelLog = False,
    ) -> None:
        """Turn the findings into ordered actions and a runtime launch derived from this host
        (markdown, json, shell, compose). Never promises a speed-up: measure after."""
        from blackwell_doctor import cli
        from blackwell_doctor.recommend.render import NeedsLaunch, render_recommendation

        options = _options(
            model_dir, runtime, name, bind, port, shm_size, env, on_this_host=facts_file is None
        )
        log_options = LogOptions(logs, containers, journal, kernel_log)
        rec, spec = _build(
            facts_file, host_root, gpu_timeout, no_probe, catalogue, options, log_options
        )
        try:
            text = render_recommendation(rec, fmt, spec)
        except NeedsLaunch as exc:
            raise cli.UserError(f"--format {fmt.value}: {exc}") from None
        cli._write(text, output)
        raise typer.Exit(int(ExitCode.OK))

    @app.command()
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
        facts_file: FactsFile = None,
        runtime: RuntimeId = None,
        catalogue: CatalogueFile = None,
        name: Name = "blackwell-doctor-vllm",
        bind: Bind = "127.0.0.1",
        port: Port = 8000,
        shm_size: ShmSize = None,
        env: EnvVars = None,
        no_probe: NoProbe = False,
        host_root: HostRoot = None,
        gpu_timeout: GpuTimeout = None,
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
        from blackwell_doctor import cli
        from blackwell_doctor.apply import run as ap
        from blackwell_doctor.recommend.validate import ValidationError, container_name

        def say(line: str) -> None:
            sys.stderr.write(f"{line}\n")
            sys.stderr.flush()

        try:
            container_name(name)
        except ValidationError as exc:
            raise cli.UserError(str(exc)) from None
        health_timeout = cli._finite("--health-timeout", health_timeout)
        if rollback:
            try:
                engine = ap.connect()
                if not yes:
                    steps = ap.rollback_plan(name, engine)
                    cli._write(
                        "rollback plan:\n"
                        + "".join(f"  {n}. {s}\n" for n, s in enumerate(steps, 1))
                        + "Nothing was changed. Run again with --yes to carry it out.\n",
                        None,
                    )
                    raise typer.Exit(int(ExitCode.OK))
                message = ap.rollback(name, engine, say=say, stop_timeout_s=stop_timeout)
            except ap.EngineUnavailable as exc:
                say(f"{TOOL_NAME}: rollback failed: Docker engine not reachable ({exc})")
                raise typer.Exit(int(ExitCode.APPLY_FAILED)) from None
            except ap.ApplyFailed as exc:
                say(f"{TOOL_NAME}: {exc.message}")
                raise typer.Exit(int(ExitCode.APPLY_FAILED)) from None
            cli._write(message + "\n", None)
            raise typer.Exit(int(ExitCode.OK))
        if model_dir is None:
            raise cli.UserError("apply needs --model-dir DIR (the model, mounted read-only)")
        options = _options(model_dir, runtime, name, bind, port, shm_size, env, on_this_host=True)
        log_options = LogOptions(logs, containers, journal, kernel_log)
        _, spec = _build(
            facts_file,
            host_root,
            gpu_timeout,
            no_probe,
            catalogue,
            options,
            log_options,
            other_host_ok=facts_from_another_host,
        )
        if spec is None:
            raise cli.UserError("these facts show no GPU: there is no runtime to launch")
        try:
            client: Any = ap.connect()
            engine_error: str | None = None
        except ap.EngineUnavailable as exc:
            client, engine_error = None, str(exc)
        if not yes:
            cli._write(ap.render_plan(ap.make_plan(spec, client, engine_error)), None)
            raise typer.Exit(int(ExitCode.OK))
        if client is None:
            say(
                f"{TOOL_NAME}: apply failed: Docker engine not reachable ({engine_error}); "
                "nothing was changed"
            )
            raise typer.Exit(int(ExitCode.APPLY_FAILED))
        try:
            if sys.stderr.isatty():
                with _PullBar() as bar:
                    message = ap.apply(
                        spec,
                        client,
                        health_timeout_s=health_timeout,
                        stop_timeout_s=stop_timeout,
                        say=say,
                        on_pull_event=bar,
                    )
            else:
                message = ap.apply(
                    spec,
                    client,
                    health_timeout_s=health_timeout,
                    stop_timeout_s=stop_timeout,
                    say=say,
                )
        except ap.ApplyFailed as exc:
            say(f"{TOOL_NAME}: {exc.message}")
            for finding in exc.findings:
                say(f"finding {finding}")
            rolled = "; ".join(exc.rolled_back) or "nothing had been changed"
            say(f"rolled back: {rolled}")
            raise typer.Exit(int(ExitCode.APPLY_FAILED)) from None
        except ap.ApplyInterrupted as exc:
            rolled = "; ".join(exc.rolled_back) or "nothing had been changed"
            say(f"{TOOL_NAME}: interrupted during {exc.step}; rolled back: {rolled}")
            raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
        cli._write(message + "\n", None)
        raise typer.Exit(int(ExitCode.OK))
