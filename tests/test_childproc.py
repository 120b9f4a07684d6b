"""collect.childproc: a child's exit awaited as an event once its output ends (issue 36),
the deadlines around it, a gate that holds children started ahead of their turn, and
collect.childexit's way out of a GPU child."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from blackwell_doctor.collect import childproc
from blackwell_doctor.collect.childexit import FLUSH_FAILED
from blackwell_doctor.collect.childproc import Gate, Rearm, run_child

REPO = Path(__file__).resolve().parents[1]
# A deadline that a child's interpreter start (and the parent's reading of its first line)
# never reaches, however loaded the machine: 2 s gave a loaded 2-core VM little room. A
# test that waits for a deadline waits this out once; the children hang for ever, so the
# deadline is still what ends them.
ROOM_S = 30.0

# Closes its standard output and error, then exits 5 once it reads its stdin's end: the
# parent sees the output end before the exit (as a GPU child's teardown used to follow its
# answer). Its stdin is /dev/null: the read returns at once.
_CLOSES_THEN_EXITS = textwrap.dedent(
    """
    import os, sys
    sys.stdout.write("answer\\n"); sys.stdout.flush()
    os.close(1); os.close(2)
    os.read(0, 1)
    os._exit(5)
    """
)
# Closes its output and never exits.
_CLOSES_THEN_HANGS = textwrap.dedent(
    """
    import os, threading
    os.close(1); os.close(2)
    threading.Event().wait()
    """
)


@pytest.fixture(params=["pidfd", "polled"])
def exit_watch(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways of awaiting an exit: the pidfd, and polling where there is none."""
    if request.param == "polled":
        monkeypatch.setattr(childproc, "_exit_watch", lambda pid: None)
    return str(request.param)


def test_a_child_that_ends_its_output_before_it_exits_gives_its_status(
    exit_watch: str,
) -> None:
    result = run_child([sys.executable, "-c", _CLOSES_THEN_EXITS], 60.0)

    assert (result.ending, result.returncode, result.stdout) == ("exited", 5, b"answer\n")


def test_a_child_that_ends_its_output_but_never_exits_is_killed_at_the_deadline(
    exit_watch: str,
) -> None:
    started = time.monotonic()

    result = run_child([sys.executable, "-c", _CLOSES_THEN_HANGS], 2.0)

    assert (result.ending, result.returncode) == ("timeout", None)
    assert time.monotonic() - started < 30  # it waits for ever: it was killed


def test_the_exit_is_watched_on_a_pidfd_where_the_system_has_one() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        fd = childproc._exit_watch(child.pid)
        if fd is None:
            pytest.skip("no pidfd here (Linux < 5.3)")
        import select

        assert select.select([fd], [], [], 60.0)[0] == [fd]  # readable: it exited
        os.close(fd)
    finally:
        child.wait()


# ---------------------------------------------------------------------------------- the gate

# Says it waits, reads the gate (its fd is the last argument) to its end, says it goes on,
# then does what the environment's GATED_THEN says: exit, or hang.
_GATED = textwrap.dedent(
    """
    import os, sys, threading
    gate = int(sys.argv[-1])
    print("waiting", flush=True)
    while os.read(gate, 64):
        pass
    print("going", flush=True)
    if os.environ.get("GATED_THEN") == "hang":
        threading.Event().wait()
    """
)


def _gated(gate: Gate, timeout_s: float, opened_with: Rearm) -> childproc.ChildResult:
    """The gated child, its gate opened with ``opened_with`` when it says it waits."""

    def on_line(line: bytes) -> None:
        if line == b"waiting":
            gate.open(opened_with)

    try:
        return run_child(
            [sys.executable, "-c", _GATED, str(gate.fd)], timeout_s, on_line=on_line, gate=gate
        )
    finally:
        gate.close()


def test_a_gated_child_waits_until_the_gate_opens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GATED_THEN", raising=False)

    result = _gated(Gate(), 60.0, Rearm(60.0))

    assert (result.ending, result.returncode) == ("exited", 0)
    assert result.stdout == b"waiting\ngoing\n"


def test_after_the_gate_the_deadline_is_the_gates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATED_THEN", "hang")
    started = time.monotonic()

    # 600 s before the gate; ROOM_S after it (for "going", then the hang).
    result = _gated(Gate(), 600.0, Rearm(ROOM_S))

    assert result.ending == "timeout"
    assert result.stdout == b"waiting\ngoing\n"
    assert time.monotonic() - started < 600 / 5  # the gate's deadline, not the 600 s


def test_a_gate_opened_with_no_time_ends_the_child_at_once() -> None:
    started = time.monotonic()

    result = _gated(Gate(), 600.0, Rearm(0.0))

    assert result.ending == "timeout"
    assert time.monotonic() - started < 60


def test_until_the_gate_opens_the_child_lives_under_its_timeout() -> None:
    gate = Gate()
    try:
        result = run_child([sys.executable, "-c", _GATED, str(gate.fd)], ROOM_S, gate=gate)
    finally:
        gate.close()

    assert result.ending == "timeout"
    assert result.stdout == b"waiting\n"


# ------------------------------------------------------------------------- childexit.leave


def _leaving(code: str) -> subprocess.CompletedProcess[bytes]:
    program = "from blackwell_doctor.collect.childexit import leave\n" + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        env={"PYTHONPATH": str(REPO / "src")},
        timeout=120,
        check=False,
    )


def test_leave_writes_what_was_buffered_and_runs_no_exit_handler() -> None:
    done = _leaving(
        """
        import atexit, sys
        atexit.register(lambda: print("exit handler ran", file=sys.stderr))
        sys.stdout.write("buffered, not flushed")
        leave(7)
        """
    )

    assert done.returncode == 7
    assert done.stdout == b"buffered, not flushed"
    assert b"exit handler ran" not in done.stderr


def test_leave_says_so_in_its_status_when_the_output_cannot_be_flushed() -> None:
    program = (
        "import sys\nfrom blackwell_doctor.collect.childexit import leave\n"
        "sys.stdout.write('x' * 10)\nleave(0)\n"
    )
    with open("/dev/full", "wb") as full:  # every write fails: ENOSPC
        done = subprocess.run(
            [sys.executable, "-c", program],
            stdout=full,
            stderr=subprocess.PIPE,
            env={"PYTHONPATH": str(REPO / "src")},
            timeout=120,
            check=False,
        )

    assert done.returncode == FLUSH_FAILED  # as the interpreter's own exit says it
