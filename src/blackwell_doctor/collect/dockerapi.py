"""The one way to reach the Docker engine (the docker SDK, imported only when called):
``connect`` honours DOCKER_HOST (and the SDK's DOCKER_TLS_VERIFY / DOCKER_CERT_PATH) and
pings the engine under a timeout; ``engine_reason`` says in words why it did not answer.
Used by ``apply`` (which changes containers) and by ``audit --image`` (which reads an
image's files without starting it)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from blackwell_doctor.facts.redact import redact_text
from blackwell_doctor.ruledata.rules import load_rule_data

DEFAULT_TIMEOUT_S = 15.0


class EngineUnavailable(Exception):
    """No Docker engine answered (the reason is in words)."""


def connect(timeout_s: float = DEFAULT_TIMEOUT_S, environ: Mapping[str, str] | None = None) -> Any:
    """A docker client for DOCKER_HOST (or the default socket), after a ping."""
    import docker
    from docker.errors import DockerException

    env = os.environ if environ is None else environ
    try:
        client = docker.from_env(timeout=int(timeout_s), environment=dict(env))
        client.ping()
    except (DockerException, OSError) as exc:
        raise EngineUnavailable(engine_reason(exc, timeout_s, env)) from None
    return client


def engine_reason(
    exc: BaseException,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    environ: Mapping[str, str] | None = None,
) -> str:
    """Why the engine did not answer, in words: the SDK's message is an exception repr
    ("('Connection aborted.', FileNotFoundError(2, 'No such file or directory'))")."""
    env = os.environ if environ is None else environ
    host = env.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    where = host.removeprefix("unix://")
    text = str(exc)
    if "FileNotFoundError" in text or "No such file" in text:
        return load_rule_data().word("docker", "no_socket", where=where)
    if "PermissionError" in text or "Permission denied" in text:
        return load_rule_data().word("docker", "permission_denied", where=where)
    if "ConnectionRefused" in text or "Connection refused" in text:
        return f"connection refused at {where}"
    if "timed out" in text.lower() or "Timeout" in text:
        return f"no answer from {where} within {timeout_s:g} s"
    return one_line(exc)


def one_line(exc: BaseException) -> str:
    """An engine error as one line of at most 400 characters, secrets redacted."""
    # docker's APIError carries the engine's own message as ``explanation``.
    explanation = getattr(exc, "explanation", None)
    text = str(explanation) if explanation else str(exc)
    return redact_text(" ".join(text.split()))[:400]
