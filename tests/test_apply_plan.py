"""apply without a reachable engine, its usage errors, the facts-of-this-host rule and the
post-start log scan (no Docker needed: a fake client where one is used)."""

from __future__ import annotations

import io
import json
import socket
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from blackwell_doctor import cli
from blackwell_doctor.app import obtain
from blackwell_doctor.apply import docker as ap
from blackwell_doctor.facts.document import Unavailable
from tests.conftest import FACTS_FIXTURES

LOGS = FACTS_FIXTURES.parent / "logs"
SECRET = "hf_abcdefghijklmnopqrstuvwxyz0123"

FACTS = FACTS_FIXTURES / "sm120-driver580.json"  # hostname redacted
OTHER = "--facts-from-another-host"


# Every command is registered when blackwell_doctor.cli is imported.
_main = cli.main


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/absent.sock")


@pytest.mark.usefixtures("no_engine")
def test_plan_prints_without_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["apply", "--facts", str(FACTS), OTHER, "--model-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Docker engine: not reachable" in out
    assert "pull docker.io/vllm/vllm-openai:latest" in out
    assert "127.0.0.1:8000:8000" in out


@pytest.mark.usefixtures("no_engine")
def test_yes_without_engine_fails_with_nothing_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["apply", "--facts", str(FACTS), OTHER, "--model-dir", str(tmp_path), "--yes"]
    assert _main(args) == 5
    assert "nothing was changed" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--name", "bad name"], "not a valid container name"),
        (["--bind", "example.org"], "--bind must be an IP address"),
        (["--shm-size", "lots"], "not a size docker understands"),
        (["-e", "1BAD=x"], "not a valid environment variable name"),
    ],
)
@pytest.mark.usefixtures("no_engine")
def test_apply_validates_inputs(
    args: list[str], error: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _main(["apply", "--facts", str(FACTS), OTHER, "--model-dir", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert error in err
    assert err.count("\n") == 1


def test_apply_needs_model_dir(capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["apply", "--facts", str(FACTS), OTHER]) == 2
    assert "--model-dir" in capsys.readouterr().err


# --------------------------------------------------------------------------- facts of a host


def _facts_named(tmp_path: Path, hostname: str) -> Path:
    doc = json.loads(FACTS.read_text())
    doc["platform"]["hostname"] = hostname
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.usefixtures("no_engine")
def test_apply_refuses_redacted_facts_without_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for extra in ([], ["--yes"]):
        assert _main(["apply", "--facts", str(FACTS), "--model-dir", str(tmp_path), *extra]) == 2
        err = capsys.readouterr().err
        assert "hostname redacted" in err
        assert "--facts-from-another-host" in err
        assert err.count("\n") == 1


@pytest.mark.usefixtures("no_engine")
def test_apply_refuses_facts_of_another_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = _facts_named(tmp_path, "gpu-node-17-not-this-one")
    assert _main(["apply", "--facts", str(other), "--model-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "describes host 'gpu-node-17-not-this-one'" in err
    assert socket.gethostname() in err
    assert _main(["apply", "--facts", str(other), OTHER, "--model-dir", str(tmp_path)]) == 0


@pytest.mark.usefixtures("no_engine")
def test_apply_accepts_facts_of_this_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = _facts_named(tmp_path, socket.gethostname())
    assert _main(["apply", "--facts", str(mine), "--model-dir", str(tmp_path)]) == 0
    assert "apply plan" in capsys.readouterr().out


def test_recommend_takes_facts_of_any_host(capsys: pytest.CaptureFixture[str]) -> None:
    # recommend changes nothing: a facts file from another node is what it is for.
    assert _main(["recommend", "--facts", str(FACTS)]) == 0


# --------------------------------------------------------------------------- the plan


@pytest.mark.usefixtures("no_engine")
def test_plan_without_engine_shows_the_container(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["apply", "--facts", str(FACTS), OTHER, "--model-dir", str(tmp_path)]
    assert _main([*args, "-e", f"HF_TOKEN={SECRET}", "-e", "LOG_LEVEL=debug"]) == 0
    out = capsys.readouterr().out
    assert SECRET not in out
    assert "HF_TOKEN=<redacted>" in out
    assert "LOG_LEVEL=debug" in out
    assert "OMP_NUM_THREADS=14" in out
    assert "VLLM_WORKER_MULTIPROC_METHOD=spawn" in out
    assert f"bind:{tmp_path.resolve()}->/model:ro" in out
    assert "volume:blackwell-doctor-jit-vllm-upstream->/root/.cache" in out
    assert "ports: 127.0.0.1:8000->8000/tcp" in out
    assert "command: --model /model" in out
    assert "--tensor-parallel-size 1" in out
    assert "gpus: all" in out


# --------------------------------------------------------------------------- logs options


@pytest.mark.parametrize("command", ["recommend", "apply"])
@pytest.mark.parametrize(
    ("extra", "error"),
    [
        (["--container", "vllm"], "--container, --journal and --kernel-log read this host"),
        (["--journal"], "--container, --journal and --kernel-log read this host"),
        (["--kernel-log"], "--container, --journal and --kernel-log read this host"),
    ],
)
@pytest.mark.usefixtures("no_engine")
def test_log_options_usage_errors_as_check(
    command: str,
    extra: list[str],
    error: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = [command, "--facts", str(FACTS), *extra]
    if command == "apply":
        args += [OTHER, "--model-dir", str(tmp_path)]
    assert _main(args) == 2
    err = capsys.readouterr().err
    assert error in err
    assert err.count("\n") == 1
    assert _main(["check", "--facts", str(FACTS), *extra]) == 2
    assert error in capsys.readouterr().err


@pytest.mark.parametrize("command", ["recommend", "apply"])
@pytest.mark.usefixtures("no_engine")
def test_facts_and_logs_cannot_both_be_stdin(
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(FACTS.read_bytes())))
    args = [command, "--facts", "-", "--logs", "-"]
    if command == "apply":
        args += [OTHER, "--model-dir", str(tmp_path)]
    assert _main(args) == 2
    assert "cannot both read standard input" in capsys.readouterr().err


@pytest.mark.usefixtures("no_engine")
def test_apply_scans_given_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[list[str]] = []
    real = obtain.with_logs

    def spy(facts: Any, logs: Any, **kw: Any) -> Any:
        seen.append(list(logs.paths))
        return real(facts, logs, **kw)

    monkeypatch.setattr(obtain, "with_logs", spy)
    log = LOGS / "composed-xid-13.log"
    args = ["apply", "--facts", str(FACTS), OTHER, "--model-dir", str(tmp_path)]
    assert _main([*args, "--logs", str(log)]) == 0
    assert seen == [[str(log)]]


# --------------------------------------------------------------------------- log scan


def test_scan_finds_a_fallback_signature() -> None:
    scan = ap.scan_container_log(b"INFO start\nFailed to initialize cutlass TMA WS grouped gemm\n")
    assert any(f.startswith("moe.tma_ws_init_failed") for f in scan.failures)
    assert scan.note.startswith("log scanned")


def test_the_container_log_gets_checks_verdict_with_the_model_directory(tmp_path: Path) -> None:
    """One log, one model directory: apply judges the new container's log as ``check --logs
    LOG --model-dir DIR`` does. vLLM's Marlin line is the W4A16 checkpoint's own kernel
    (info, no finding) for check; apply judged it without the model and warned."""
    from blackwell_doctor.app.obtain import FactsRequest, LogRequest, obtain_facts
    from blackwell_doctor.report.results import Status
    from blackwell_doctor.rules.evaluate import evaluate
    from tests.modeldirs import make_model

    model_dir = make_model(tmp_path / "m", moe=True, fmt="gptq", shards=1)
    log = LOGS / "club-3090-617-marlin-fp4-warning.log"
    request = FactsRequest(facts_file=FACTS, logs=LogRequest(paths=[str(log)]), model_dir=model_dir)
    facts = obtain_facts(request, environ={}, stdin=io.BytesIO()).facts
    checked = evaluate(facts, select=["logs"])
    assert not isinstance(facts.model, Unavailable | None)
    assert all(r.status in (Status.PASS, Status.SKIP) for r in checked.results)

    scan = ap.scan_container_log(log.read_bytes(), facts.model)
    assert (scan.failures, scan.warnings) == ([], [])
    assert [(r.id, r.status) for r in scan.results] == [(r.id, r.status) for r in checked.results]
    # Without the model, the same line is vLLM's slow path: a warning, as check says too.
    alone = ap.scan_container_log(log.read_bytes())
    assert [w.split(" ", 1)[0] for w in alone.warnings] == ["vllm.fp4_weight_only_marlin"]


def test_scan_that_cannot_run_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ap, "collect_logs", lambda **kw: Unavailable("no-log-readable:boom"))
    with pytest.raises(ap.LogScanFailed, match="could not be scanned"):
        ap.scan_container_log(b"anything\n")


class _FakeContainer:
    def __init__(self, client: _FakeClient, name: str, log: bytes) -> None:
        self.client, self.name, self._log = client, name, log
        self.id = f"{len(client.containers.made):064x}"
        self.status = "created"
        self.labels: dict[str, str] = {}
        self.attrs: dict[str, Any] = {"State": {}}

    def rename(self, name: str) -> None:
        self.name = name

    def start(self) -> None:
        self.status = "running"

    def reload(self) -> None:
        pass

    def logs(self, **kw: Any) -> bytes:
        return self._log

    def remove(self, force: bool = False) -> None:
        self.client.containers.made.remove(self)


class _FakeContainers:
    def __init__(self, client: _FakeClient, log: bytes) -> None:
        self.client, self.log = client, log
        self.made: list[_FakeContainer] = []

    def get(self, key: str) -> _FakeContainer:
        from docker.errors import NotFound

        for c in self.made:
            if key in (c.id, c.name):
                return c
        raise NotFound(key)

    def create(self, image: str, **kw: Any) -> _FakeContainer:
        c = _FakeContainer(self.client, kw["name"], self.log)
        self.made.append(c)
        return c


class _FakeImages:
    def get(self, ref: str) -> Any:
        return SimpleNamespace(id="sha256:" + "1" * 64, attrs={"Config": {}})


class _FakeClient:
    def __init__(self, log: bytes) -> None:
        self.containers = _FakeContainers(self, log)
        self.images = _FakeImages()


def _spec(tmp_path: Path) -> Any:
    from blackwell_doctor.facts.document import decode_facts
    from blackwell_doctor.recommend.launch import build_launch
    from blackwell_doctor.recommend.settings import derive
    from blackwell_doctor.ruledata.runtimes import load_catalogue
    from blackwell_doctor.rules.evaluate import evaluate

    facts = decode_facts(FACTS.read_bytes())
    derived = derive(facts, evaluate(facts))
    assert derived is not None
    runtime = load_catalogue().by_id("vllm-upstream")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])  # nothing listens: health comes from the ready line
    return build_launch(runtime, derived, model_dir=str(tmp_path), name="bd-fake", port=port)


def test_apply_fails_and_rolls_back_when_the_log_scan_cannot_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = _FakeClient(b"Application startup complete\n")
    monkeypatch.setattr(ap, "collect_logs", lambda **kw: Unavailable("no-log-readable:boom"))
    said: list[str] = []
    with pytest.raises(ap.ApplyFailed) as info:
        ap.apply(_spec(tmp_path), client, health_timeout_s=5, say=said.append)
    assert "apply failed during logs" in info.value.message
    assert "could not be scanned (no-log-readable:boom)" in info.value.message
    assert "removed the new container" in info.value.rolled_back
    assert client.containers.made == []


def test_apply_succeeds_when_the_log_scan_is_clean(tmp_path: Path) -> None:
    client = _FakeClient(b"Application startup complete\n")
    said: list[str] = []
    message = ap.apply(_spec(tmp_path), client, health_timeout_s=5, say=said.append)
    assert "healthy" in message
    assert any(s.startswith("log scanned: 0 failure") for s in said)
    assert [c.name for c in client.containers.made] == ["bd-fake"]


def test_a_start_without_a_gpu_runtime_is_the_catalogues_finding() -> None:
    from blackwell_doctor.rules.apply import start_finding

    error = '500 Server Error: could not select device driver "" with capabilities: [[gpu]]'
    assert start_finding(error, shown="engine said so") == (
        "docker.nvidia_runtime: the Docker engine has no NVIDIA runtime (engine said so). "
        "Remedy: sudo nvidia-ctk runtime configure --runtime=docker && "
        "sudo systemctl restart docker"
    )
    assert start_finding("500 Server Error: port is already allocated") is None
