"""What a new user can throw at the command line: bytes that are not UTF-8 (in the
environment, in file names, in options), an output that cannot be written, a terminal
that only takes ASCII. Each is handled (exit 0 with the bytes shown escaped) or a one-line
usage error (exit 2), never a crash (exit 4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli import run
from tests.conftest import FACTS_FIXTURES, FIXTURES, REPO

B200 = str(FACTS_FIXTURES / "b200-x8.json")
ESCAPED_LOG = (FIXTURES / "logs" / "flashinfer-2077-tma-escaped.log").read_bytes()
UNDECODABLE = os.fsdecode(b"\xff\xfe")  # what Python makes of them: lone surrogates


def cli(
    args: list[str], *, env: dict[str, str] | None = None, stdout: int | None = None
) -> subprocess.CompletedProcess[bytes]:
    """The installed command in a child, as a user runs it (real argv and environment)."""
    return subprocess.run(
        [sys.executable, "-m", "blackwell_doctor", *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE if stdout is None else stdout,
        stderr=subprocess.PIPE,
        timeout=120,
        check=False,
    )


# --------------------------------------------------------------------------- not UTF-8


def test_an_environment_value_that_is_not_utf8_is_collected_escaped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("NCCL_DEBUG", UNDECODABLE)
    code, out, err = run(["collect", "--no-probe", "--host-root", str(tmp_path)], capsys)
    assert (code, err) == (0, "")
    assert json.loads(out)["env"]["NCCL_DEBUG"] == "\\xff\\xfe"


@pytest.mark.parametrize("fmt", ["json", "rich"])
def test_a_log_file_name_that_is_not_utf8_is_shown_escaped(
    fmt: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / f"vllm-{UNDECODABLE}.log").write_bytes(ESCAPED_LOG)
    code, out, err = run(["scan-logs", str(tmp_path), "-f", fmt], capsys)
    assert code == 1, err
    assert "vllm-\\xff\\xfe.log" in (
        json.loads(out)["sources"][0]["name"] if fmt == "json" else out
    )
    code, out, err = run(["check", "--facts", B200, "--logs", str(tmp_path), "-f", fmt], capsys)
    assert code in (0, 1), err
    out.encode("utf-8")
    if fmt == "json":
        json.loads(out)


def test_a_model_dir_that_is_not_utf8_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    model = tmp_path / f"model-{UNDECODABLE}"
    model.mkdir()
    code, _, err = run(["recommend", "--model-dir", str(model), "--facts", B200], capsys)
    assert code == 2
    assert "UTF-8" in err
    assert err.count("\n") == 1


def test_an_env_option_that_is_not_utf8_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    args = ["recommend", "--facts", B200, "--model-dir", "/models/x", "-e", f"X={UNDECODABLE}"]
    code, _, err = run(args, capsys)
    assert code == 2
    assert "UTF-8" in err
    code, _, err = run(["recommend", "--facts", B200, "-e", f"{UNDECODABLE}=1"], capsys)
    assert code == 2


def test_the_real_command_line_with_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    env = {"NCCL_DEBUG": UNDECODABLE}
    done = cli(["collect", "--no-probe", "--host-root", str(tmp_path)], env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["env"]["NCCL_DEBUG"] == "\\xff\\xfe"


# --------------------------------------------------------------------------- output


# Every writer of standard output: our documents, the version, click's and typer's help.
UNWRITABLE = [
    ["check", "--facts", B200],
    ["--version"],
    ["--help"],
    ["check", "--help"],
    ["scan-logs", str(FIXTURES / "logs")],
    ["fleet", str(FACTS_FIXTURES)],
]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
@pytest.mark.parametrize("args", UNWRITABLE, ids=" ".join)
def test_standard_output_that_cannot_be_written_is_exit_2(args: list[str]) -> None:
    with open("/dev/full", "wb") as full:
        done = cli(args, stdout=full.fileno())
    assert done.returncode == 2, done.stderr
    lines = done.stderr.decode().splitlines()
    assert lines == [
        "blackwell-doctor: error: cannot write standard output: No space left on device"
    ]


@pytest.mark.parametrize("args", UNWRITABLE, ids=" ".join)
def test_a_closed_pipe_is_exit_2(args: list[str]) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody reads: every write is EPIPE
    try:
        done = cli(args, stdout=write_end)
    finally:
        os.close(write_end)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.decode().splitlines()
    assert lines == ["blackwell-doctor: error: cannot write standard output: Broken pipe"]


def _closed(fd: int) -> list[str]:
    """``sh -c 'exec "$@" N>&-'``: the command started with file descriptor ``fd`` closed
    (an argument list, no shell string built from input)."""
    return ["sh", "-c", f'exec "$@" {fd}>&-', "sh", sys.executable, "-m", "blackwell_doctor"]


@pytest.mark.parametrize("args", [*UNWRITABLE, ["slurm-health", "--dry-run"]], ids=" ".join)
def test_a_closed_standard_output_is_exit_2_before_anything_runs(args: list[str]) -> None:
    """Issue 19 (audit): started with standard output closed (``>&-``) every command
    crashed, exit 4 (``sys.stdout`` is None). It is a usage error, said before the command
    runs (slurm-health never reaches Slurm)."""
    done = subprocess.run(
        [*_closed(1), *args], cwd=REPO, stderr=subprocess.PIPE, timeout=120, check=False
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.decode().splitlines() == [
        "blackwell-doctor: error: standard output is closed; redirect it to a file or "
        "/dev/null to discard it"
    ]


def test_a_closed_standard_error_drops_the_messages_not_the_exit_code() -> None:
    done = subprocess.run(
        [*_closed(2), "check", "--facts", "/nonexistent.json"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, b"")


@pytest.mark.parametrize(
    "args",
    [
        ["check", "--facts", B200],
        ["check", "--facts", B200, "-f", "markdown"],
        ["scan-logs", str(FIXTURES / "logs")],
        ["recommend", "--facts", B200],
    ],
)
def test_an_ascii_only_output_gets_ascii_glyphs(args: list[str]) -> None:
    done = cli(args, env={"PYTHONIOENCODING": "ascii"})
    assert done.returncode in (0, 1), done.stderr
    assert done.stderr == b""
    done.stdout.decode("ascii")
