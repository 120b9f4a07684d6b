"""The ``apply`` command's flow: which facts it may act on, the plan, carrying it out, the
rollback, each ending as an :class:`Outcome` with its exit code.

Nothing here prints: progress and failures go through ``say`` (one line each; the CLI
writes them to standard error), what belongs on standard output is ``Outcome.output``.
"""

from __future__ import annotations

import enum
import functools
import socket
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from blackwell_doctor import TOOL_NAME
from blackwell_doctor.facts.errors import UserError
from blackwell_doctor.facts.redact import REDACTED
from blackwell_doctor.report import exitcodes
from blackwell_doctor.report.exitcodes import ExitCode
from blackwell_doctor.ruledata.rules import load_rule_data

if TYPE_CHECKING:
    from blackwell_doctor.app.obtain import FactsRequest
    from blackwell_doctor.app.verify import (
        VerifyRecord,
        VerifyRequest,
        VerifySettings,
        WriteFile,
    )
    from blackwell_doctor.apply.docker import PullEvent, Say
    from blackwell_doctor.facts.document import Facts, Unavailable
    from blackwell_doctor.facts.model import ModelFacts
    from blackwell_doctor.recommend.launch import LaunchSpec
    from blackwell_doctor.recommend.options import LaunchRequest
    from blackwell_doctor.recommend.plan import LaunchOptions
    from blackwell_doctor.report.bench import CompareDocument


class Ending(enum.Enum):
    DONE = "done"  # planned, applied, rolled back, or nothing to do
    FAILED = "failed"  # nothing changed, or every change undone
    INTERRUPTED = "interrupted"  # Ctrl-C; every change undone


@dataclass(frozen=True)
class Outcome:
    ending: Ending
    output: str = ""  # for standard output

    @property
    def exit_code(self) -> ExitCode:
        return exitcodes.action(
            failed=self.ending is Ending.FAILED, interrupted=self.ending is Ending.INTERRUPTED
        )


@dataclass(frozen=True, kw_only=True)
class ApplyRequest:
    """``apply``'s options as given: the launch, the facts it is derived from, what to do
    (plan, ``yes``, ``rollback``) and the verification."""

    launch: LaunchRequest
    facts: FactsRequest
    catalogue: Path | None = None
    facts_from_another_host: bool = False
    yes: bool = False
    rollback: bool = False
    health_timeout_s: float = 1800.0
    stop_timeout_s: int = 30
    verify: VerifyRequest
    # The terminal's width the plan and the verification are fitted to (None: not fitted).
    width: int | None = None


def apply(
    request: ApplyRequest,
    *,
    environ: Mapping[str, str],
    stdin: BinaryIO,
    say: Say,
    write: WriteFile,
    pull_progress: Callable[[], AbstractContextManager[PullEvent]] | None = None,
) -> Outcome:
    """The ``apply`` command: its options checked (UserError) before anything is touched,
    then the rollback, the plan, the change (``yes``) or the verified change (``yes`` and
    ``verify``); ``say`` narrates on standard error, ``write`` writes a verification's
    files, ``pull_progress`` shows the image pull."""
    from blackwell_doctor.app.obtain import finite_seconds
    from blackwell_doctor.app.verify import verify_settings
    from blackwell_doctor.recommend.options import launch_options

    check_name(request.launch.name)
    health_timeout_s = finite_seconds("--health-timeout", request.health_timeout_s)
    settings = verify_settings(
        request.verify,
        yes=request.yes,
        rollback=request.rollback,
        first_token_timeout_s=health_timeout_s,
    )
    if request.rollback:
        return rollback(
            request.launch.name, yes=request.yes, stop_timeout_s=request.stop_timeout_s, say=say
        )
    if request.launch.model_dir is None:
        raise UserError("apply needs --model-dir DIR (the model, mounted read-only)")
    spec, model = launch_spec(
        request.facts,
        launch_options(request.launch, environ=environ, on_this_host=True),
        catalogue=request.catalogue,
        facts_from_another_host=request.facts_from_another_host,
        environ=environ,
        stdin=stdin,
    )
    if request.yes:
        return carry_out(
            spec,
            settings if request.verify.verify else None,
            health_timeout_s=health_timeout_s,
            stop_timeout_s=request.stop_timeout_s,
            say=say,
            write=write,
            pull_progress=pull_progress,
            model=model,
            width=request.width,
        )
    return plan(spec, width=request.width)


def check_name(name: str) -> None:
    """``--name``: a container name the Docker engine accepts (UserError if not)."""
    from blackwell_doctor.ruledata.validate import ValidationError, container_name

    try:
        container_name(name)
    except ValidationError as exc:
        raise UserError(str(exc)) from None


def check_facts_host(facts: Facts, facts_file: Path, *, allowed: bool, hostname: str) -> None:
    """apply changes this host: refuse (UserError) a facts file that does not name it.

    The launch is derived from the file's GPU count and CPUs, so another node's file would
    start the wrong tensor-parallel size here. Only the hostname identifies a host: a
    redacted file has none, and PCI bus ids or GPU counts coincide on identical nodes of a
    cluster (they cannot tell node A from node B), so those need the explicit
    --facts-from-another-host (``allowed``), as does a different name."""
    if allowed:
        return
    theirs = facts.platform.hostname
    if isinstance(theirs, str) and theirs == hostname:
        return
    if not isinstance(theirs, str):
        what = f"does not say which host it describes ({theirs.reason})"
    elif theirs == REDACTED:
        what = "has its hostname redacted"
    else:
        what = f"describes host {theirs!r}, not this host ({hostname!r})"
    raise UserError(
        f"--facts {facts_file} {what}: apply would run a launch derived from that file's "
        "GPUs and CPUs on this host's engine. Collect this host's facts (or drop --facts), "
        "or pass --facts-from-another-host if that is what you mean"
    )


def launch_spec(
    request: FactsRequest,
    options: LaunchOptions,
    *,
    catalogue: Path | None,
    facts_from_another_host: bool,
    environ: Mapping[str, str],
    stdin: BinaryIO,
) -> tuple[LaunchSpec, ModelFacts | Unavailable | None]:
    """The launch apply would run on this host, from the facts ``request`` asks for, and
    the model directory's facts (the context the new container's log is judged in)."""
    from blackwell_doctor.app.advise import advise

    def vet(facts: Facts) -> None:
        if request.facts_file is not None:
            check_facts_host(
                facts,
                request.facts_file,
                allowed=facts_from_another_host,
                hostname=socket.gethostname(),
            )

    from blackwell_doctor.recommend.launch import is_placeholder

    advice = advise(request, options, catalogue=catalogue, environ=environ, stdin=stdin, vet=vet)
    spec = advice.spec
    if spec is None:
        from blackwell_doctor.app.examples import no_gpu_hint

        raise UserError(
            "these facts show no GPU: there is no runtime to launch; " + no_gpu_hint("apply")
        )
    if is_placeholder(spec):  # recommend's MODEL_DIR placeholder: never a container
        raise UserError("apply needs --model-dir DIR (the model, mounted read-only)")
    return spec, advice.facts.model


def plan(spec: LaunchSpec, *, width: int | None = None) -> Outcome:
    """What ``apply --yes`` would do, compared with the running container when the Docker
    engine answers (without the comparison when it does not). Changes nothing."""
    from blackwell_doctor.apply import docker as run

    try:
        client: Any = run.connect()
        engine_error: str | None = None
    except run.EngineUnavailable as exc:
        client, engine_error = None, str(exc)
    plan = run.make_plan(spec, client, engine_error)
    return Outcome(Ending.DONE, run.render_plan(plan, width=width))


def carry_out(
    spec: LaunchSpec,
    settings: VerifySettings | None,
    *,
    health_timeout_s: float,
    stop_timeout_s: int,
    say: Say,
    write: WriteFile,
    pull_progress: Callable[[], AbstractContextManager[PullEvent]] | None = None,
    model: ModelFacts | Unavailable | None = None,
    width: int | None = None,
) -> Outcome:
    """``apply --yes``: pull, create, swap, start, wait for health, scan the log; on any
    failure or Ctrl-C the previous container is restored. ``pull_progress`` makes the
    receiver of docker pull's progress events for the time of the apply.

    With ``settings`` (``apply --verify --yes``): bench the running container, apply,
    measure the warm start, bench the new one, and keep the change only if the gate holds
    (else roll back: FAILED, exit 5); see :func:`_verified`."""
    from blackwell_doctor.app import verify
    from blackwell_doctor.apply import docker as run

    try:
        client = run.connect()
    except run.EngineUnavailable as exc:
        say(load_rule_data().word("apply", "engine_unreachable", tool=TOOL_NAME, reason=str(exc)))
        return Outcome(Ending.FAILED)
    progress = nullcontext(None) if pull_progress is None else pull_progress()
    message = ""
    verified: tuple[str, VerifyRecord, Path, CompareDocument | None] | None = None
    try:
        with progress as on_pull_event:
            # The change itself, with or without --verify's hook.
            change = functools.partial(
                run.apply,
                spec,
                client,
                health_timeout_s=health_timeout_s,
                stop_timeout_s=stop_timeout_s,
                say=say,
                on_pull_event=on_pull_event,
                model=model,
            )
            if settings is None:
                message = change()
            else:
                verified = verify.run_verified(
                    spec,
                    client,
                    settings,
                    change,
                    stop_timeout_s=stop_timeout_s,
                    say=say,
                    write=write,
                )
    except run.ApplyFailed as exc:
        say(f"{TOOL_NAME}: {exc.message}")
        for finding in exc.findings:
            say(f"finding {finding}")
        say(f"rolled back: {_rolled(exc.rolled_back)}")
        return Outcome(Ending.FAILED)
    except run.ApplyInterrupted as exc:
        say(f"{TOOL_NAME}: interrupted during {exc.step}; rolled back: {_rolled(exc.rolled_back)}")
        return Outcome(Ending.INTERRUPTED)
    if settings is None or verified is None:
        return Outcome(Ending.DONE, message + "\n")
    return _verified(settings, *verified, say=say, write=write, width=width)


def _verified(
    settings: VerifySettings,
    ending: str,
    record: VerifyRecord,
    where: Path,
    doc: CompareDocument | None,
    *,
    say: Say,
    write: WriteFile,
    width: int | None = None,
) -> Outcome:
    """A verified change's outcome: the comparison for standard output (fitted to
    ``width``; and --report-md as Markdown); both runs and the record stay in the record
    directory."""
    from blackwell_doctor.app import verify

    if settings.report_md is not None:
        write(verify.render(record, doc, where, markdown=True), settings.report_md)
    text = verify.render(record, doc, where, markdown=False, width=width)
    if ending == "interrupted":
        say(f"{TOOL_NAME}: {record.message}; rolled back: {_rolled(record.rolled_back)}")
        return Outcome(Ending.INTERRUPTED, text)
    if ending in ("rolled back", "failed"):
        say(f"{TOOL_NAME}: {record.message}")
        say(f"rolled back: {_rolled(record.rolled_back)}")
        return Outcome(Ending.FAILED, text)
    return Outcome(Ending.DONE, text)


def rollback(name: str, *, yes: bool, stop_timeout_s: int, say: Say) -> Outcome:
    """``apply --rollback``: bring back ``<name>-previous``; without ``yes``, the plan."""
    from blackwell_doctor.apply import docker as run

    if not yes:
        try:
            engine = run.connect()
        except run.EngineUnavailable as exc:
            # Without --yes this is a plan, as plain apply's is: exit 0 whatever the engine.
            return Outcome(
                Ending.DONE,
                load_rule_data().word("apply", "rollback_plan_unreachable", reason=str(exc)) + "\n"
                f"  1. stop {name} (if running) and rename it to {name}{run.ROLLED_BACK_SUFFIX}\n"
                f"  2. rename {name}{run.PREVIOUS_SUFFIX} to {name} and start it\n"
                f"{load_rule_data().word('apply', 'nothing_changed')}\n",
            )
    try:
        engine = run.connect()
        if not yes:
            steps = run.rollback_plan(name, engine)
            return Outcome(
                Ending.DONE,
                "rollback plan:\n"
                + "".join(f"  {n}. {s}\n" for n, s in enumerate(steps, 1))
                + f"{load_rule_data().word('apply', 'nothing_changed')}\n",
            )
        message = run.rollback(name, engine, say=say, stop_timeout_s=stop_timeout_s)
    except run.EngineUnavailable as exc:
        say(load_rule_data().word("apply", "rollback_unreachable", tool=TOOL_NAME, reason=str(exc)))
        return Outcome(Ending.FAILED)
    except run.ApplyFailed as exc:
        say(f"{TOOL_NAME}: {exc.message}")
        return Outcome(Ending.FAILED)
    return Outcome(Ending.DONE, message + "\n")


def _rolled(steps: list[str]) -> str:
    return "; ".join(steps) or "nothing had been changed"
