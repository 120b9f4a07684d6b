"""What a person at a terminal sees: colour and unicode marks on a TTY, plain text otherwise."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import pytest

from tests.conftest import FACTS_FIXTURES

FACTS = str(FACTS_FIXTURES / "sm120-driver580.json")


def _run_on_a_tty(extra_env: dict[str, str]) -> tuple[int, str]:
    """Run the CLI with stdout on a pseudo-terminal and return (exit code, what it showed)."""
    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env.update({"COLUMNS": "100", "TERM": "xterm-256color", **extra_env})
    proc = subprocess.Popen(
        [sys.executable, "-m", "blackwell_doctor", "check", "--facts", FACTS],
        stdout=follower,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(follower)
    chunks: list[bytes] = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    code = proc.wait(timeout=60)
    return code, b"".join(chunks).decode("utf-8", errors="replace")


@pytest.mark.skipif(sys.platform != "linux", reason="pty semantics tested on Linux")
def test_a_terminal_gets_colour_and_unicode_marks() -> None:
    code, shown = _run_on_a_tty({})
    assert code == 1
    assert "\x1b[" in shown
    assert "[✗]" in shown
    assert "driver.version" in shown


@pytest.mark.skipif(sys.platform != "linux", reason="pty semantics tested on Linux")
def test_no_color_on_a_terminal_gives_plain_text() -> None:
    code, shown = _run_on_a_tty({"NO_COLOR": "1"})
    assert code == 1
    assert "\x1b[" not in shown
    assert "[FAIL]          driver.version" in shown


def test_a_pipe_gets_plain_text() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "blackwell_doctor", "check", "--facts", FACTS],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert b"\x1b[" not in proc.stdout
    assert b"[FAIL]          driver.version" in proc.stdout
