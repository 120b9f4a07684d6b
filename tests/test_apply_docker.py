"""apply against a real Docker engine (ci/docker-engine.sh; marker `docker`).

The test image is busybox: `httpd -f -p 8000 -h /www` answers GET /health with 200 (the
engine script puts /www/health in the image); `-h /nowhere` answers 404, a failed health.
The engine has a fake NVIDIA hook, so GPU device requests are accepted; the second engine
(BLACKWELL_DOCTOR_TEST_DOCKER_HOST_NO_GPU) has none, for the missing-runtime finding.
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from blackwell_doctor import cli
from blackwell_doctor.apply import docker as ap
from blackwell_doctor.facts.document import Unavailable, decode_facts
from blackwell_doctor.recommend.launch import LaunchSpec, build_launch
from blackwell_doctor.recommend.settings import derive
from blackwell_doctor.ruledata.runtimes import parse_catalogue
from blackwell_doctor.rules.evaluate import evaluate
from tests.conftest import FACTS_FIXTURES

pytestmark = pytest.mark.docker

FACTS = FACTS_FIXTURES / "sm120-driver580.json"
IMAGE = os.environ.get("BLACKWELL_DOCTOR_TEST_IMAGE", "bd-test:latest")
CATALOGUE = """
schema_version = 1
[[runtime]]
id = "test-httpd"
title = "busybox httpd"
preference = 1
image = "{image}"
command = ["httpd", "-f", "-p", "{{port}}", "-h", "{www}"]
container_port = 8000
jit_cache = "/root/.cache"
shm_size = "64m"
source = "tests"
effect = "serves /health"
confidence = "test"
"""


# Every command is registered when blackwell_doctor.cli is imported.
_main = cli.main


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def client(docker_host: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("DOCKER_HOST", docker_host)
    return ap.connect()


@pytest.fixture
def name(client: Any) -> Iterator[str]:
    base = f"bdtest-{uuid.uuid4().hex[:8]}"
    yield base
    for suffix in ("", ap.PREVIOUS_SUFFIX, ap.NEXT_SUFFIX, ap.ROLLED_BACK_SUFFIX):
        with contextlib.suppress(Exception):
            client.containers.get(base + suffix).remove(force=True)


# Healthy, but its log shows the NVFP4 MoE kernel failing outside the autotuner.
FALLBACK_COMMAND = (
    'command = ["sh", "-c", "echo Failed to initialize cutlass TMA WS grouped gemm; '
    'exec httpd -f -p 8000 -h /www"]'
)


def _catalogue(tmp_path: Path, www: str = "/www", fallback: bool = False) -> Path:
    path = tmp_path / f"cat-{www.strip('/')}{'-fallback' if fallback else ''}.toml"
    text = CATALOGUE.format(image=IMAGE, www=www)
    if fallback:
        [line] = [x for x in text.splitlines() if x.startswith("command = ")]
        text = text.replace(line, FALLBACK_COMMAND)
    path.write_text(text)
    return path


def _args(
    name: str, tmp_path: Path, port: int, *extra: str, www: str = "/www", fallback: bool = False
) -> list[str]:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    return [
        "apply",
        "--facts",
        str(FACTS),
        "--facts-from-another-host",  # the fixture's hostname is redacted
        "--catalogue",
        str(_catalogue(tmp_path, www, fallback)),
        "--model-dir",
        str(model),
        "--name",
        name,
        "--port",
        str(port),
        "--health-timeout",
        "4",
        "--stop-timeout",
        "1",
        *extra,
    ]


def _spec(name: str, tmp_path: Path, port: int, www: str = "/www", **env: str) -> LaunchSpec:
    facts = decode_facts(FACTS.read_bytes())
    derived = derive(facts, evaluate(facts))
    assert derived is not None
    runtime = parse_catalogue(CATALOGUE.format(image=IMAGE, www=www), source="t").runtime[0]
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    return build_launch(runtime, derived, model_dir=str(model), name=name, port=port, extra_env=env)


def _running(client: Any, name: str) -> Any:
    c = client.containers.get(name)
    assert c.status == "running", c.status
    return c


def _gone(client: Any, name: str) -> bool:
    return not any(c.name == name for c in client.containers.list(all=True))


def test_first_apply_then_idempotent_reapply(
    client: Any, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = _free_port()
    assert _main(_args(name, tmp_path, port)) == 0  # plan only
    assert "Nothing was changed" in capsys.readouterr().out
    assert _gone(client, name)

    assert _main(_args(name, tmp_path, port, "--yes")) == 0
    first = _running(client, name)
    assert "healthy" in capsys.readouterr().out
    attrs = first.attrs
    assert attrs["HostConfig"]["PortBindings"] == {
        "8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(port)}]
    }
    assert attrs["HostConfig"]["DeviceRequests"][0]["Capabilities"] == [["gpu"]]
    assert attrs["HostConfig"]["IpcMode"] == "host"
    mounts = {m["Target"]: m for m in attrs["HostConfig"]["Mounts"]}
    assert mounts["/model"]["ReadOnly"] is True
    assert mounts["/root/.cache"]["Type"] == "volume"
    assert "OMP_NUM_THREADS=14" in attrs["Config"]["Env"]

    assert _main(_args(name, tmp_path, port, "--yes")) == 0
    assert "up to date" in capsys.readouterr().out
    assert _running(client, name).id == first.id
    assert _gone(client, name + ap.PREVIOUS_SUFFIX)

    assert _main(_args(name, tmp_path, port)) == 0
    assert "up to date" in capsys.readouterr().out


def test_failed_health_rolls_back_to_previous(
    client: Any, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = _free_port()
    assert _main(_args(name, tmp_path, port, "--yes")) == 0
    good = _running(client, name)
    capsys.readouterr()

    assert _main(_args(name, tmp_path, port, "--yes", www="/nowhere")) == 5
    err = capsys.readouterr().err
    assert "apply failed during health" in err
    assert "rolled back" in err
    assert "started the previous" in err
    assert _running(client, name).id == good.id
    assert _gone(client, name + ap.PREVIOUS_SUFFIX)
    assert _gone(client, name + ap.NEXT_SUFFIX)
    assert len(client.containers.list(all=True, filters={"name": name})) == 1


def test_manual_rollback(
    client: Any, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = _free_port()
    assert _main(_args(name, tmp_path, port, "--yes")) == 0
    first = _running(client, name)
    assert _main(_args(name, tmp_path, port, "--yes", "-e", "EXTRA=1")) == 0
    second = _running(client, name)
    assert second.id != first.id
    assert client.containers.get(name + ap.PREVIOUS_SUFFIX).id == first.id
    capsys.readouterr()

    assert _main(["apply", "--rollback", "--name", name]) == 0  # plan only
    assert "Nothing was changed" in capsys.readouterr().out
    assert _running(client, name).id == second.id

    assert _main(["apply", "--rollback", "--yes", "--name", name, "--stop-timeout", "1"]) == 0
    assert _running(client, name).id == first.id
    assert client.containers.get(name + ap.ROLLED_BACK_SUFFIX).status == "exited"

    assert _main(["apply", "--rollback", "--yes", "--name", name]) == 5  # nothing left to restore
    assert "nothing to roll back to" in capsys.readouterr().err


def test_missing_nvidia_runtime_is_a_finding_and_container_removed(
    docker_host_no_gpu: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("DOCKER_HOST", docker_host_no_gpu)
    client = ap.connect()
    name = f"bdtest-{uuid.uuid4().hex[:8]}"
    try:
        assert _main(_args(name, tmp_path, _free_port(), "--yes")) == 5
        err = capsys.readouterr().err
        assert "docker.nvidia_runtime" in err
        assert 'could not select device driver "" with capabilities: [[gpu]]' in err
        assert "sudo nvidia-ctk runtime configure --runtime=docker" in err
        assert client.containers.list(all=True, filters={"name": name}) == []
    finally:
        for c in client.containers.list(all=True, filters={"name": name}):
            c.remove(force=True)


@pytest.mark.parametrize("step", ["create", "stop", "rename", "start", "health"])
def test_interrupt_leaves_previous_running(
    client: Any, name: str, tmp_path: Path, step: str
) -> None:
    port = _free_port()
    said: list[str] = []
    ap.apply(
        _spec(name, tmp_path, port), client, health_timeout_s=4, stop_timeout_s=1, say=said.append
    )
    old = _running(client, name)

    def interrupt(at: str) -> None:
        if at == step:
            raise KeyboardInterrupt

    with pytest.raises(ap.ApplyInterrupted) as info:
        ap.apply(
            _spec(name, tmp_path, port, EXTRA="2"),
            client,
            health_timeout_s=4,
            stop_timeout_s=1,
            say=said.append,
            on_step=interrupt,
        )
    assert info.value.step == step
    assert _running(client, name).id == old.id
    assert len(client.containers.list(all=True, filters={"name": name})) == 1


def test_interrupt_through_cli_exits_130(
    client: Any,
    name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    port = _free_port()
    assert _main(_args(name, tmp_path, port, "--yes")) == 0
    old = _running(client, name)
    real_wait = ap._wait_healthy

    def ctrl_c(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(ap, "_wait_healthy", ctrl_c)
    assert _main(_args(name, tmp_path, port, "--yes", "-e", "EXTRA=3")) == 130
    assert "interrupted during health" in capsys.readouterr().err
    monkeypatch.setattr(ap, "_wait_healthy", real_wait)
    assert _running(client, name).id == old.id


def test_log_scan_that_cannot_run_fails_and_rolls_back(
    client: Any,
    name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    port = _free_port()
    assert _main(_args(name, tmp_path, port, "--yes")) == 0
    good = _running(client, name)
    capsys.readouterr()

    monkeypatch.setattr(ap, "collect_logs", lambda **kw: Unavailable("no-log-readable:boom"))
    assert _main(_args(name, tmp_path, port, "--yes", "-e", "EXTRA=4")) == 5
    err = capsys.readouterr().err
    assert "apply failed during logs" in err
    assert "could not be scanned (no-log-readable:boom)" in err
    assert "started the previous" in err
    assert _running(client, name).id == good.id
    assert len(client.containers.list(all=True, filters={"name": name})) == 1


def test_fallback_signature_in_the_new_log_rolls_back(
    client: Any, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = _free_port()
    assert _main(_args(name, tmp_path, port, "--yes")) == 0
    good = _running(client, name)
    capsys.readouterr()

    assert _main(_args(name, tmp_path, port, "--yes", fallback=True)) == 5
    err = capsys.readouterr().err
    assert "apply failed during logs" in err
    assert "finding log: moe.tma_ws_init_failed" in err
    assert _running(client, name).id == good.id
    assert len(client.containers.list(all=True, filters={"name": name})) == 1
