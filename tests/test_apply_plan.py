"""apply without a reachable engine, and its usage errors (no Docker needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from blackwell_doctor import cli
from blackwell_doctor.cli_runtime import register
from tests.conftest import FACTS_FIXTURES

FACTS = FACTS_FIXTURES / "sm120-driver580.json"


def _main(args: list[str]) -> int:
    if not any(
        c.name == "apply" or getattr(c.callback, "__name__", "") == "apply"
        for c in cli.app.registered_commands
    ):
        register(cli.app)
    return cli.main(args)


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/absent.sock")


@pytest.mark.usefixtures("no_engine")
def test_plan_prints_without_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["apply", "--facts", str(FACTS), "--model-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Docker engine: not reachable" in out
    assert "pull docker.io/vllm/vllm-openai:latest" in out
    assert "127.0.0.1:8000:8000" in out


@pytest.mark.usefixtures("no_engine")
def test_yes_without_engine_fails_with_nothing_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _main(["apply", "--facts", str(FACTS), "--model-dir", str(tmp_path), "--yes"]) == 5
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
    assert _main(["apply", "--facts", str(FACTS), "--model-dir", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert error in err
    assert err.count("\n") == 1


def test_apply_needs_model_dir(capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["apply", "--facts", str(FACTS)]) == 2
    assert "--model-dir" in capsys.readouterr().err
