"""Carry out a launch spec through the Docker API: plan, apply with rollback, roll back.

The only code that changes the host (DESIGN.md "Apply"). The previous container is never
removed by an apply: it is stopped and renamed ``<name>-previous`` so that it can come
back, and any failure or Ctrl-C restores it (renamed back and started) and removes the new
one. Messages go to a ``say`` callback: nothing here prints.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import shlex
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from blackwell_doctor.apply.state import Change, diff, spec_mounts, spec_ports

# The engine is reached as audit --image reaches it (collect.dockerapi); re-exported here.
from blackwell_doctor.collect.dockerapi import EngineUnavailable as EngineUnavailable
from blackwell_doctor.collect.dockerapi import connect as connect
from blackwell_doctor.collect.dockerapi import engine_reason as engine_reason
from blackwell_doctor.collect.dockerapi import one_line as _one_line
from blackwell_doctor.collect.logs.scan import collect_logs
from blackwell_doctor.facts.document import Unavailable
from blackwell_doctor.facts.model import ModelFacts
from blackwell_doctor.facts.redact import redact_text
from blackwell_doctor.recommend.launch import LABEL_MANAGED, LaunchSpec, reachable_host
from blackwell_doctor.ruledata import validate
from blackwell_doctor.ruledata.rules import load_rule_data
from blackwell_doctor.rules.apply import LogVerdict, judge_container_log, start_finding

if TYPE_CHECKING:
    from blackwell_doctor.render.terminal import Item

Say = Callable[[str], None]
StepHook = Callable[[str], None]
# apply --verify: called with the new container, healthy and log-scanned, and the
# time.perf_counter() of its start; an exception rolls the change back.
VerifyHook = Callable[[Any, float], None]
PullEvent = Callable[[dict[str, Any]], None]

PREVIOUS_SUFFIX = "-previous"
NEXT_SUFFIX = "-next"
ROLLED_BACK_SUFFIX = "-rolled-back"


class ApplyFailed(Exception):
    """The change did not take; ``rolled_back`` says what was restored."""

    def __init__(self, message: str, rolled_back: list[str], findings: list[str]) -> None:
        super().__init__(message)
        self.message = message
        self.rolled_back = rolled_back
        self.findings = findings


class ApplyInterrupted(Exception):
    """Ctrl-C during apply; the previous state was restored."""

    def __init__(self, step: str, rolled_back: list[str]) -> None:
        super().__init__(f"interrupted during {step}")
        self.step = step
        self.rolled_back = rolled_back


def _get_container(client: Any, name: str) -> Any | None:
    from docker.errors import NotFound

    try:
        return client.containers.get(name)
    except NotFound:
        return None


def _get_image(client: Any, ref: str) -> Any | None:
    from docker.errors import ImageNotFound

    try:
        return client.images.get(ref)
    except ImageNotFound:
        return None


# --------------------------------------------------------------------------- plan


@dataclass
class Plan:
    spec: LaunchSpec
    engine_error: str | None = None
    image_present: bool | None = None
    current_status: str | None = None  # None: no container of that name
    previous_exists: bool = False
    changes: list[Change] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)

    @property
    def up_to_date(self) -> bool:
        return self.current_status == "running" and not self.changes and bool(self.image_present)


def make_plan(spec: LaunchSpec, client: Any | None, engine_error: str | None = None) -> Plan:
    plan = Plan(spec=spec, engine_error=engine_error)
    name, previous = spec.name, spec.name + PREVIOUS_SUFFIX
    if client is None:
        plan.steps = [
            f"pull {spec.image} unless present",
            f"create {name} (as above) and start it; on success the current {name} (if any) "
            f"is stopped and kept as {previous}",
        ]
        return plan
    image = _get_image(client, spec.image)
    plan.image_present = image is not None
    current = _get_container(client, name)
    plan.previous_exists = _get_container(client, previous) is not None
    if current is not None:
        plan.current_status = str(current.status)
        plan.changes = diff(
            spec,
            current.attrs,
            image.id if image is not None else None,
            image.attrs if image is not None else None,
        )
    if plan.up_to_date:
        plan.steps = [f"nothing: {name} is running and matches the spec (up to date)"]
        return plan
    steps = []
    if image is None:
        steps.append(f"pull {spec.image}")
    else:
        steps.append(f"use local image {spec.image} ({str(image.id)[:19]}): not pulled")
    steps.append(f"create {name}{NEXT_SUFFIX} from {spec.image} with all GPUs")
    if current is not None:
        if plan.current_status == "running":
            steps.append(f"stop {name} ({plan.current_status})")
        if plan.previous_exists:
            steps.append(f"remove the older {previous} (the last rollback point)")
        steps.append(f"rename {name} to {previous} (kept, stopped, for rollback)")
    steps.append(f"rename {name}{NEXT_SUFFIX} to {name} and start it")
    where = f"http://{reachable_host(spec.bind)}:{spec.host_port}{spec.health_path}"
    ready = f" or the log line {spec.ready_log!r}" if spec.ready_log else ""
    steps.append(f"wait for health: GET {where} answering 200{ready}")
    steps.append("scan its log for fallback signatures")
    steps.append(f"on any failure: remove the new container, restore {name} as it was")
    plan.steps = steps
    return plan


def render_plan(plan: Plan, *, width: int | None = None) -> str:
    """The plan for a terminal, fitted to ``width`` (None: not fitted): the container's
    command and entrypoint are never broken, however narrow the terminal."""
    from blackwell_doctor.render.terminal import Line, write_plain

    spec = plan.spec
    out: list[Item] = [f"apply plan for container {spec.name} (runtime {spec.runtime})"]
    if plan.engine_error is not None:
        out.append(
            f"  Docker engine: not reachable ({plan.engine_error}); the plan below is what "
            "would happen, without the comparison with a running container"
        )
    out.append(f"  image: {spec.image}" + ("" if spec.pinned else " (unpinned)"))
    out.append(f"  publish: {spec.published}")
    if plan.engine_error is None:
        if plan.current_status is None:
            out.append(f"  current: no container named {spec.name}")
        else:
            out.append(f"  current: {spec.name} ({plan.current_status})")
    if plan.changes:
        out.append("  changes:")
        out += [f"    {c.field}: {c.current or '(none)'} -> {c.wanted}" for c in plan.changes]
    if not plan.up_to_date:
        out += _container_lines(spec)
    out.append("  steps:")
    out += [Line(4, ((s, ""),), lead=((f"{n}. ", ""),)) for n, s in enumerate(plan.steps, 1)]
    if not plan.up_to_date:
        out.append(load_rule_data().word("apply", "nothing_changed"))
    return write_plain(out, width)


def _container_lines(spec: LaunchSpec) -> list[Item]:
    """The container apply would create, as the engine will get it (secrets redacted)."""
    from blackwell_doctor.render.terminal import whole

    out: list[Item] = ["  container to create:"]
    if spec.entrypoint:
        out.append(whole(4, shlex.join(spec.entrypoint), lead=(("entrypoint: ", ""),)))
    if spec.command:
        out.append(whole(4, shlex.join(spec.command), lead=(("command: ", ""),)))
    else:
        out.append("    command: (the image default)")
    out.append("    env:" if spec.env else "    env: (none)")
    out += [f"      {k}={v}" for k, v in spec.shown_env().items()]
    out.append(f"    ports: {', '.join(spec_ports(spec))}")
    out.append("    mounts:")
    out += [f"      {m}" for m in spec_mounts(spec)]
    out.append(
        "    gpus: all (device request: count -1, capabilities [[gpu]])"
        if spec.gpus
        else "    gpus: none"
    )
    shm = "the host's /dev/shm" if spec.sized_shm is None else spec.sized_shm
    out.append(f"    ipc: {spec.ipc_mode}; shm: {shm}; restart: {spec.restart}")
    return out


# --------------------------------------------------------------------------- apply


@contextlib.contextmanager
def _no_interrupts() -> Iterator[None]:
    """Ctrl-C waits while the previous state is being restored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


@dataclass
class _Journal:
    """What apply has done so far, for rollback."""

    new_id: str | None = None
    old_id: str | None = None
    old_was_running: bool = False
    old_stopped: bool = False
    old_renamed: bool = False


def _pull(client: Any, spec: LaunchSpec, on_pull_event: PullEvent | None) -> None:
    for event in client.api.pull(spec.image, stream=True, decode=True):
        if "error" in event:
            raise RuntimeError(str(event["error"]))
        if on_pull_event is not None:
            on_pull_event(event)


def _create(client: Any, spec: LaunchSpec, name: str) -> Any:
    from docker.types import DeviceRequest, Mount

    mounts = [
        Mount(target=m.target, source=m.source, type=m.type, read_only=m.read_only)
        for m in spec.mounts
    ]
    return client.containers.create(
        spec.image,
        command=spec.command or None,
        entrypoint=spec.entrypoint or None,
        name=name,
        environment=dict(spec.env),
        ports={f"{spec.container_port}/tcp": (spec.bind, spec.host_port)},
        mounts=mounts,
        ipc_mode=spec.ipc_mode,
        shm_size=spec.sized_shm,
        device_requests=[DeviceRequest(count=-1, capabilities=[["gpu"]])] if spec.gpus else [],
        restart_policy={"Name": spec.restart},
        labels=dict(spec.labels),
        detach=True,
    )


def _http_ok(host: str, port: int, path: str) -> bool:
    conn = http.client.HTTPConnection(host.strip("[]"), port, timeout=2)
    try:
        conn.request("GET", path)
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def _tail(container: Any, lines: int = 15) -> str:
    try:
        text = container.logs(tail=lines).decode("utf-8", "replace")
    except Exception:  # a tail is a courtesy; never mask the real failure
        return ""
    return redact_text(text.strip())


def _wait_healthy(
    container: Any, spec: LaunchSpec, timeout_s: float, on_step: StepHook | None
) -> None:
    host = reachable_host(spec.bind)
    deadline = time.monotonic() + timeout_s
    while True:
        if on_step is not None:
            on_step("health-poll")
        container.reload()
        if container.status in ("exited", "dead"):
            code = container.attrs.get("State", {}).get("ExitCode")
            tail = _tail(container)
            raise RuntimeError(
                f"the new container exited (code {code}) before it was healthy"
                + (f"; its last log lines:\n{tail}" if tail else "")
            )
        if _http_ok(host, spec.host_port, spec.health_path):
            return
        if spec.ready_log and spec.ready_log.encode() in container.logs():
            return
        if time.monotonic() >= deadline:
            tail = _tail(container)
            raise RuntimeError(
                f"not healthy within {timeout_s:g} s (GET {spec.health_path} on "
                f"{host}:{spec.host_port} never answered 200)"
                + (f"; its last log lines:\n{tail}" if tail else "")
            )
        time.sleep(0.5)


class LogScanFailed(Exception):
    """The new container's log could not be scanned: verification did not happen."""


def scan_container_log(data: bytes, model: ModelFacts | Unavailable | None = None) -> LogVerdict:
    """The new container's log read (the same scanner as ``scan-logs``) and judged as
    ``check --logs`` judges it, with ``model`` (``--model-dir``'s facts) beside it
    (:func:`blackwell_doctor.rules.apply.judge_container_log`).

    Raises LogScanFailed when the log could not be scanned, in whole or in part: a scan
    that did not run verifies nothing, so apply fails and rolls back rather than report a
    success it has not checked."""
    result = collect_logs(
        paths=["-"],
        containers=[],
        journal=False,
        kernel_log=False,
        host_root=Path("/"),
        stdin=io.BytesIO(data),
    )
    if isinstance(result, Unavailable):
        raise LogScanFailed(f"the new container's log could not be scanned ({result.reason})")
    unread = [f"{s.name}: {s.error}" for s in result.sources if s.error is not None]
    if unread:
        raise LogScanFailed(
            "the new container's log could not be scanned in full (" + "; ".join(unread) + ")"
        )
    return judge_container_log(result, model)


def _rollback(client: Any, spec: LaunchSpec, journal: _Journal, say: Say) -> list[str]:
    """Undo what the journal says was done; each step independent of the others."""
    done: list[str] = []
    with _no_interrupts():
        if journal.new_id is not None:
            try:
                client.containers.get(journal.new_id).remove(force=True)
                done.append("removed the new container")
            except Exception as exc:  # rollback goes on; the failure is said
                done.append(
                    f"could NOT remove the new container {journal.new_id[:12]}: {_one_line(exc)}"
                )
        if journal.old_id is not None:
            old = client.containers.get(journal.old_id)
            if journal.old_renamed:
                try:
                    old.rename(spec.name)
                    done.append(f"renamed {spec.name}{PREVIOUS_SUFFIX} back to {spec.name}")
                except Exception as exc:
                    done.append(f"could NOT rename the previous container back: {_one_line(exc)}")
            if journal.old_stopped and journal.old_was_running:
                try:
                    old.start()
                    done.append(f"started the previous {spec.name} again")
                except Exception as exc:
                    done.append(f"could NOT start the previous container: {_one_line(exc)}")
    for line in done:
        say(f"rollback: {line}")
    return done


def apply(
    spec: LaunchSpec,
    client: Any,
    *,
    health_timeout_s: float = 1200.0,
    stop_timeout_s: int = 30,
    say: Say,
    on_pull_event: PullEvent | None = None,
    on_step: StepHook | None = None,
    verify: VerifyHook | None = None,
    model: ModelFacts | Unavailable | None = None,
) -> str:
    """Make ``spec.name`` run ``spec``; returns the success message. ``model``: the model
    directory's facts, the context the new container's log is judged in.

    Raises ApplyFailed (exit 5) or ApplyInterrupted (exit 130) after restoring the
    previous container. ``on_step`` is called with each step's name before it runs (tests
    use it to interrupt at a step)."""
    from docker.errors import APIError

    name, previous = spec.name, spec.name + PREVIOUS_SUFFIX
    validate.container_name(name)
    journal = _Journal()
    step = "plan"
    findings: list[str] = []

    def enter(next_step: str) -> None:
        nonlocal step
        step = next_step
        if on_step is not None:
            on_step(next_step)

    try:
        enter("pull")
        image = _get_image(client, spec.image)
        if image is None:
            say(f"pulling {spec.image}")
            _pull(client, spec, on_pull_event)
            image = client.images.get(spec.image)
        else:
            say(f"image {spec.image} is present locally: not pulled")
        current = _get_container(client, name)
        if current is not None:
            changes = diff(spec, current.attrs, image.id, image.attrs)
            if not changes and current.status == "running":
                return f"{name} is up to date: nothing changed"
        enter("create")
        stale = _get_container(client, name + NEXT_SUFFIX)
        if stale is not None and stale.labels.get(LABEL_MANAGED) == "true":
            stale.remove(force=True)  # left by an apply that was killed outright
        new = _create(client, spec, name + NEXT_SUFFIX)
        journal.new_id = new.id
        say(f"created {name}{NEXT_SUFFIX} ({new.id[:12]})")
        if current is not None:
            journal.old_id = current.id
            journal.old_was_running = current.status == "running"
            enter("stop")
            if journal.old_was_running:
                journal.old_stopped = True
                current.stop(timeout=stop_timeout_s)
                say(f"stopped {name}")
            enter("rename")
            older = _get_container(client, previous)
            if older is not None:
                older.remove(force=True)
                say(f"removed the older {previous}")
            current.rename(previous)
            journal.old_renamed = True
            say(f"kept the current container as {previous}")
        new.rename(name)
        enter("start")
        started = time.perf_counter()
        try:
            new.start()
        except APIError as exc:
            finding = start_finding(str(exc), shown=_one_line(exc))
            if finding is not None:
                findings.append(finding)
            raise
        say(f"started {name}; waiting for health (up to {health_timeout_s:g} s)")
        enter("health")
        _wait_healthy(new, spec, health_timeout_s, on_step)
        enter("logs")
        scan = scan_container_log(new.logs(), model)
        say(scan.note)
        for w in scan.warnings:
            say(f"log warning: {w}")
        if scan.failed:
            findings += [f"log: {f}" for f in scan.failures]
            raise RuntimeError("the new container's log shows fallback/failure signatures")
        if verify is not None:
            enter("verify")
            verify(new, started)
    except KeyboardInterrupt:
        if journal.new_id is None and journal.old_id is None:
            raise ApplyInterrupted(step, []) from None
        raise ApplyInterrupted(step, _rollback(client, spec, journal, say)) from None
    except Exception as exc:  # every failure rolls back, then is reported
        rolled = _rollback(client, spec, journal, say)
        raise ApplyFailed(
            f"apply failed during {step}: "
            + (str(exc) if step in ("health", "verify") else _one_line(exc)),
            rolled,
            findings,
        ) from None
    kept = f"; the previous container is kept stopped as {previous}" if journal.old_id else ""
    return f"{name} is running {spec.image} and healthy{kept}"


def rollback_plan(spec_name: str, client: Any) -> list[str]:
    previous = spec_name + PREVIOUS_SUFFIX
    if _get_container(client, previous) is None:
        raise ApplyFailed(f"nothing to roll back to: no container named {previous}", [], [])
    steps = []
    current = _get_container(client, spec_name)
    if current is not None:
        steps.append(f"stop {spec_name} and rename it to {spec_name}{ROLLED_BACK_SUFFIX}")
    steps.append(f"rename {previous} to {spec_name} and start it")
    return steps


def rollback(spec_name: str, client: Any, *, say: Say, stop_timeout_s: int = 30) -> str:
    """``apply --rollback --yes``: bring ``<name>-previous`` back as ``<name>``.

    The container it replaces is kept, stopped, as ``<name>-rolled-back``."""
    validate.container_name(spec_name)
    previous_name = spec_name + PREVIOUS_SUFFIX
    previous = _get_container(client, previous_name)
    if previous is None:
        raise ApplyFailed(f"nothing to roll back to: no container named {previous_name}", [], [])
    current = _get_container(client, spec_name)
    with _no_interrupts():
        try:
            if current is not None:
                if current.status == "running":
                    current.stop(timeout=stop_timeout_s)
                    say(f"stopped {spec_name}")
                aside = _get_container(client, spec_name + ROLLED_BACK_SUFFIX)
                if aside is not None:
                    aside.remove(force=True)
                current.rename(spec_name + ROLLED_BACK_SUFFIX)
                say(f"kept {spec_name} as {spec_name}{ROLLED_BACK_SUFFIX}")
            previous.rename(spec_name)
            previous.start()
        except Exception as exc:
            raise ApplyFailed(f"rollback failed: {_one_line(exc)}", [], []) from None
    return f"rolled back: {spec_name} is the previous container again, started"
