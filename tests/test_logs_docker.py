"""Container logs through the Docker API, against the real test engine (marker `docker`).

The container prints a real FlashInfer failure line (flashinfer#2077) outside the autotuner
and a healthy line; the scan must find the first as a fail and nothing for the second.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from blackwell_doctor.collect.logs.scan import collect_logs
from blackwell_doctor.facts.document import LogFacts
from blackwell_doctor.rules.logs import judge_findings

pytestmark = pytest.mark.docker

IMAGE = os.environ.get("BLACKWELL_DOCTOR_TEST_IMAGE", "bd-test:latest")
FAILURE = (
    "(Worker_PP0 pid=38385) ERROR 11-11 06:43:10 [multiproc_executor.py:671] RuntimeError: "
    "[TensorRT-LLM][ERROR] Assertion failed: Failed to initialize cutlass TMA WS grouped gemm. "
    "Error: Error Internal"
)
HEALTHY = "(APIServer pid=1) INFO 11-11 06:40:01 [api_server.py:1885] Starting vLLM API server"


@pytest.fixture
def logging_container(docker_host: str) -> Iterator[str]:
    import docker

    client = docker.DockerClient(base_url=docker_host)
    name = f"bd-logs-{uuid.uuid4().hex[:8]}"
    container = client.containers.run(
        IMAGE,
        # both on stderr, where vLLM logs: one stream keeps their order
        ["sh", "-c", f"echo '{HEALTHY}' >&2; echo '{FAILURE}' >&2"],
        name=name,
        detach=True,
    )
    try:
        container.wait(timeout=30)
        yield name
    finally:
        container.remove(force=True)
        client.close()


def test_a_container_log_is_scanned_through_the_docker_api(
    docker_host: str, logging_container: str
) -> None:
    facts = collect_logs(
        paths=[],
        containers=[logging_container],
        journal=False,
        kernel_log=False,
        host_root=Path("/"),
        docker_host=docker_host,
    )
    assert isinstance(facts, LogFacts)
    [source] = facts.sources
    assert source.name == f"container:{logging_container}"
    assert source.error is None
    assert source.lines == 2
    [finding] = [f for f in judge_findings(facts) if f.signature == "moe.tma_ws_init_failed"]
    assert finding.severity == "fail"
    assert finding.line == 2
    assert "Failed to initialize cutlass TMA WS grouped gemm" in finding.excerpt


def test_an_unknown_container_is_a_source_error_not_a_crash(docker_host: str) -> None:
    facts = collect_logs(
        paths=[],
        containers=["bd-no-such-container"],
        journal=False,
        kernel_log=False,
        host_root=Path("/"),
        docker_host=docker_host,
    )
    # nothing could be read: Unavailable with the reason, never an exception
    assert not isinstance(facts, LogFacts)
    assert "bd-no-such-container" in facts.reason or "not-found" in facts.reason


def test_a_tty_container_log_has_no_frames_and_is_read_whole(docker_host: str) -> None:
    # With a TTY the engine sends one raw stream, not multiplexed frames: read as it is.
    import docker

    client = docker.DockerClient(base_url=docker_host)
    name = f"bd-logs-tty-{uuid.uuid4().hex[:8]}"
    container = client.containers.run(
        IMAGE, ["sh", "-c", f"echo '{HEALTHY}'; echo '{FAILURE}'"], name=name, tty=True,
        detach=True,
    )  # fmt: skip
    try:
        container.wait(timeout=30)
        facts = collect_logs(
            paths=[], containers=[name], journal=False, kernel_log=False, host_root=Path("/"),
            docker_host=docker_host,
        )  # fmt: skip
    finally:
        container.remove(force=True)
        client.close()
    assert isinstance(facts, LogFacts)
    assert facts.sources[0].error is None
    # The failure is the container's last line: the log ends in an error (issue 22's
    # log-end rule), read through the raw TTY stream as through a file.
    assert [f.signature for f in facts.findings] == [
        "moe.tma_ws_init_failed",
        "runtime.log_ends_in_error",
    ]
