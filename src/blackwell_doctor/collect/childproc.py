"""Child processes under a hard deadline: the part of the GPU collector and the probes that
must never hang.

A wedged GPU or driver can block a call forever, even in uninterruptible sleep. So GPU work
runs in a child that leads its own process group; at the deadline the whole group gets
SIGKILL and the parent moves on without waiting for a process stuck in the driver.

:func:`run_child` reads the child's stdout as it comes, hands every complete line to a
callback (so a child that streams one JSON line per finished step loses nothing when it
later hangs or dies), and can cut the child off when no line has arrived for a while
(``idle_timeout_s``) as well as at an overall deadline. A child that works in phases (the
GPU facts, then the probes) gets each phase's deadlines: the callback returns a
:class:`Rearm` when a line ends a phase. What it keeps of standard output can be capped
(``max_stdout_bytes``): past the cap the child is killed, and the result says so. Standard
error is read from its pipe alongside, its last 4 kB kept: nothing the child writes goes
to disk. After its output ends, the child's exit is awaited as an event (a pidfd, Linux
5.3+), not polled: a GPU child's exit is on the critical path of ``check`` (issue 36).

Children started ahead of their turn (the collective's pair, beside the all-reduce) wait at
a :class:`Gate`: a pipe whose read end they inherit, and whose end (the parent closes its
write end) tells them to go on. Their deadlines start there: until the gate opens a child
lives under ``timeout_s`` alone, from then under the deadlines the gate was opened with.

A binary that is not ours (an audited environment's interpreter, its Triton's ptxas, an
nvcc) runs through :func:`run_isolated`: in a fresh temporary directory (its working
directory, HOME and TMPDIR, removed afterwards) with an environment of a few named
variables (:func:`isolated_env`), never ours: no token, credential or proxy reaches it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import selectors
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

# After SIGKILL at the deadline, how long to wait for the child to go. A process stuck in
# the driver (uninterruptible sleep) does not die; it is then left behind, not waited for.
REAP_GRACE_S = 2.0
# What is kept of the child's stderr (for diagnostics; never parsed).
_STDERR_TAIL_BYTES = 4096
# After stdout's end, while stderr stays open: how often to ask whether the child exited
# (where no pidfd can be had: before Linux 5.3, or elsewhere).
_EXIT_POLL_S = 0.05
# After the end: the most reads of what is left in the stderr pipe.
_DRAIN_READS = 64

Ending = Literal["exited", "timeout", "idle-timeout", "output-limit", "start-failed"]

# What a binary that is not ours gets of our environment: where to find programs (a
# `#!/usr/bin/env python3` script, a pyenv shim) and shared libraries (an interpreter built
# with a shared libpython, found through an environment module's LD_LIBRARY_PATH). Nothing
# else: not a token, credential or proxy, nor the variables that choose what is run (the
# TRITON_*_PATH ones are read by the collector itself).
ISOLATED_PASSED = ("PATH", "LD_LIBRARY_PATH")


@dataclass(frozen=True)
class Rearm:
    """What an ``on_line`` callback returns to start the next phase's clocks: the overall
    deadline becomes ``timeout_s`` from now, and the idle timeout ``idle_timeout_s``."""

    timeout_s: float
    idle_timeout_s: float | None = None


@dataclass(frozen=True)
class ChildResult:
    """How a child ended and what it printed.

    ``ending``: "exited" (``returncode`` is set: negative for a signal, as Popen gives it),
    "timeout" (the overall deadline passed), "idle-timeout" (no line for ``idle_timeout_s``),
    "start-failed" (``start_error`` names the exception type, ``start_errno`` its errno).
    """

    ending: Ending
    stdout: bytes
    returncode: int | None = None
    start_error: str | None = None
    start_errno: int | None = None  # the OSError's errno when it could not be started
    stderr_tail: bytes = b""
    elapsed_s: float = 0.0

    def crash(self) -> str | None:
        """How an exited child failed, as the reason tokens say it: ``signal-9`` (killed by
        a signal), ``rc=3`` (a non-zero status); None where it exited 0 or did not exit."""
        code = self.returncode
        if code is None or code == 0:
            return None
        return f"signal-{-code}" if code < 0 else f"rc={code}"


class Gate:
    """A start signal for children started ahead of their turn: the read end of a pipe
    (``fd``) that each inherits (:func:`run_child`'s ``gate``) and reads until its end,
    which comes when :meth:`open` closes the write end here. The deadlines the gate was
    opened with (:class:`Rearm`) then start in :func:`run_child`; a gate opened with
    ``Rearm(0.0)`` ends the children at once (their turn did not come)."""

    def __init__(self) -> None:
        self.fd, self._write = os.pipe()
        self.rearm: Rearm | None = None

    def open(self, rearm: Rearm) -> None:
        """Let the children go on, under ``rearm``'s deadlines from now."""
        if self.rearm is None:
            self.rearm = rearm
            os.close(self._write)

    def close(self) -> None:
        """Both ends closed here (open first: a child still waiting goes on)."""
        self.open(Rearm(0.0))
        with contextlib.suppress(OSError):
            os.close(self.fd)


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The parent's environment, with this package importable by ``python -m``.

    The child must import this same package, also when the parent found it through a
    sys.path entry the child would not inherit (a test runner's rootdir, say).
    """
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    paths = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = package_root + (os.pathsep + paths if paths else "")
    if extra:
        env.update(extra)
    return env


def run_child(
    argv: Sequence[str],
    timeout_s: float,
    *,
    on_line: Callable[[bytes], Rearm | None] | None = None,
    idle_timeout_s: float | None = None,
    env: Mapping[str, str] | None = None,
    pass_fds: Sequence[int] = (),
    cwd: str | Path | None = None,
    max_stdout_bytes: int | None = None,
    end_group: bool = False,
    gate: Gate | None = None,
) -> ChildResult:
    """Run ``argv`` (no shell) with stdin closed; never raises for the child's behaviour.

    ``on_line`` gets each complete stdout line (without its newline) as it arrives; what it
    returns, a :class:`Rearm` or None, replaces the deadlines or keeps them. Past
    ``max_stdout_bytes`` of standard output the child is killed ("output-limit"). With
    ``gate``, the child inherits its ``fd`` (it waits there), and when the gate opens the
    deadlines become those it was opened with.
    """
    started = time.monotonic()
    deadline = started + timeout_s
    if gate is not None:
        pass_fds = (*pass_fds, gate.fd)
    # Popen rather than subprocess.run: run() waits without limit for a killed child to
    # exit, and one stuck in the driver never does.
    try:
        child = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else child_env(),
            cwd=cwd,
            start_new_session=True,
            pass_fds=tuple(pass_fds),  # what the child inherits: a socket pair's end
        )
    except OSError as exc:
        return ChildResult(
            ending="start-failed",
            stdout=b"",
            start_error=type(exc).__name__,
            start_errno=exc.errno,
        )
    assert child.stderr is not None
    tail = _Tail(child.stderr.fileno())
    exits = _exit_watch(child.pid)
    try:
        ending, stdout, deadline = _read_until_eof(
            child, deadline, idle_timeout_s, on_line, max_stdout_bytes, tail, gate
        )
        returncode: int | None = None
        if ending == "exited":
            returncode = _await_exit(child, exits, tail, deadline)
            if returncode is None:
                ending = "timeout"  # closed its stdout but did not exit in time
        if ending != "exited":
            kill_group(child, exits)
        elif end_group:
            # What it left running in its process group (a daemonised helper) goes too.
            with contextlib.suppress(OSError):
                os.killpg(child.pid, signal.SIGKILL)
        tail.drain()
    finally:
        child.stderr.close()
        if exits is not None:
            os.close(exits)
    return ChildResult(
        ending=ending,
        stdout=stdout,
        returncode=returncode,
        stderr_tail=tail.kept(),
        elapsed_s=time.monotonic() - started,
    )


def _exit_watch(pid: int) -> int | None:
    """A pidfd of the child ``pid``: readable once it has exited (Linux 5.3+, Python 3.9+);
    None where there is none (the exit is then polled)."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        fd: int = opener(pid)
    except OSError:
        return None
    return fd


def _await_exit(
    child: subprocess.Popen[bytes], exits: int | None, tail: _Tail, deadline: float
) -> int | None:
    """After stdout's end: the child's exit status once it has exited, reading its stderr
    meanwhile; None when the deadline passed first. Waits on the pidfd ``exits`` (no
    polling); without one, as before pidfds: stderr to its end, then polls."""
    if exits is None:
        if not tail.until_exit(child, deadline):
            return None
        try:
            return child.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return None
    with selectors.DefaultSelector() as selector:
        selector.register(exits, selectors.EVENT_READ)
        if tail.open:
            selector.register(tail.fd, selectors.EVENT_READ)
        while True:
            wait = deadline - time.monotonic()
            if wait <= 0:
                return None
            ready = {key.fd for key, _ in selector.select(wait)}
            if tail.fd in ready:
                tail.read()
                if not tail.open:
                    selector.unregister(tail.fd)
            if exits in ready:
                return child.wait()  # exited: waitpid returns at once


def _exited_within(child: subprocess.Popen[bytes], exits: int | None, timeout_s: float) -> bool:
    """Whether the child exits (and is reaped) within ``timeout_s``."""
    if exits is not None:
        with selectors.DefaultSelector() as selector:
            selector.register(exits, selectors.EVENT_READ)
            if not selector.select(timeout_s):
                return False
    try:
        child.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False
    return True


class _Tail:
    """The last :data:`_STDERR_TAIL_BYTES` of the child's stderr, read from its pipe as it
    comes (a file would grow without bound: a child that floods its stderr filled $TMPDIR
    until its deadline)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.open = True
        self.data = b""

    def read(self) -> int:
        """One read of the pipe (readable, or at its end): how many bytes came."""
        try:
            chunk = os.read(self.fd, 65536)
        except BlockingIOError:
            return 0
        if not chunk:
            self.open = False
        self.data = (self.data + chunk)[-_STDERR_TAIL_BYTES:]
        return len(chunk)

    def until_exit(self, child: subprocess.Popen[bytes], deadline: float) -> bool:
        """After stdout's end: read stderr until its end, or until the child has exited
        (a process it left behind may hold stderr open); False when the deadline passed
        first."""
        with selectors.DefaultSelector() as selector:
            selector.register(self.fd, selectors.EVENT_READ)
            while self.open:
                wait = deadline - time.monotonic()
                if wait <= 0:
                    return False
                if selector.select(min(wait, _EXIT_POLL_S)):
                    self.read()
                if self.open and child.poll() is not None:
                    return True
        return True

    def drain(self) -> None:
        """What is in the pipe now, without waiting for more (bounded: a process left
        behind may still write)."""
        if not self.open:
            return
        os.set_blocking(self.fd, False)
        for _ in range(_DRAIN_READS):
            if not self.read():
                return

    def kept(self) -> bytes:
        return self.data


def _read_until_eof(
    child: subprocess.Popen[bytes],
    deadline: float,
    idle_timeout_s: float | None,
    on_line: Callable[[bytes], Rearm | None] | None,
    max_stdout_bytes: int | None,
    tail: _Tail,
    gate: Gate | None = None,
) -> tuple[Ending, bytes, float]:
    """How the child's stdout ended, all of it (up to ``max_stdout_bytes``), and the overall
    deadline then in force; its stderr read into ``tail`` meanwhile, and the deadlines
    rearmed when ``gate`` opens."""
    assert child.stdout is not None
    fd = child.stdout.fileno()
    chunks: list[bytes] = []
    kept = 0
    pending = b""
    last_line = time.monotonic()
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        selector.register(tail.fd, selectors.EVENT_READ)
        if gate is not None:
            selector.register(gate.fd, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            wait = deadline - now
            ending: Ending = "timeout"
            if idle_timeout_s is not None and last_line + idle_timeout_s - now < wait:
                wait = last_line + idle_timeout_s - now
                ending = "idle-timeout"
            if wait <= 0:
                return ending, b"".join(chunks), deadline
            ready = {key.fd for key, _ in selector.select(wait)}
            if tail.fd in ready:
                tail.read()
                if not tail.open:
                    selector.unregister(tail.fd)
            if gate is not None and gate.fd in ready:
                # Opened (its write end closed): the child goes on, its deadlines start.
                selector.unregister(gate.fd)
                assert gate.rearm is not None  # set before the write end is closed
                last_line = time.monotonic()
                deadline = last_line + gate.rearm.timeout_s
                idle_timeout_s = gate.rearm.idle_timeout_s
            if fd not in ready:
                continue  # the loop re-evaluates which deadline passed
            data = os.read(fd, 65536)
            if not data:
                if pending and on_line is not None:
                    on_line(pending)  # a last line without its newline
                return "exited", b"".join(chunks), deadline
            chunks.append(data)
            kept += len(data)
            if max_stdout_bytes is not None and kept > max_stdout_bytes:
                return "output-limit", b"".join(chunks)[:max_stdout_bytes], deadline
            pending += data
            *lines, pending = pending.split(b"\n")
            if lines:
                last_line = time.monotonic()
                if on_line is not None:
                    for line in lines:
                        rearm = on_line(line)
                        if rearm is not None:
                            deadline = last_line + rearm.timeout_s
                            idle_timeout_s = rearm.idle_timeout_s


def isolated_env(home: str | Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a binary that is not ours: :data:`ISOLATED_PASSED` from
    ``environ`` (default: ours), ``home`` as HOME and TMPDIR, the C locale."""
    source = os.environ if environ is None else environ
    env = {name: source[name] for name in ISOLATED_PASSED if name in source}
    env.update(HOME=str(home), TMPDIR=str(home), LANG="C", LC_ALL="C")
    return env


def run_isolated(
    argv: Sequence[str],
    timeout_s: float,
    *,
    max_stdout_bytes: int,
    environ: Mapping[str, str] | None = None,
) -> ChildResult:
    """:func:`run_child` for a binary that is not ours: in a fresh temporary directory (its
    working directory, HOME and TMPDIR; removed afterwards) with :func:`isolated_env`, and
    what it prints capped at ``max_stdout_bytes``; whatever it left running in its process
    group is killed when it exits."""
    with tempfile.TemporaryDirectory(prefix="bd-child-", ignore_cleanup_errors=True) as home:
        return run_child(
            argv,
            timeout_s,
            env=isolated_env(home, environ),
            cwd=home,
            max_stdout_bytes=max_stdout_bytes,
            end_group=True,
        )


def kill_group(child: subprocess.Popen[bytes], exits: int | None = None) -> None:
    """SIGKILL the child's process group, then reap it if it goes within the grace (seen
    on the pidfd ``exits`` where there is one)."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except OSError:
        child.kill()
    if child.stdout is not None:
        child.stdout.close()
    # Unkillable (uninterruptible sleep in the driver): left behind.
    _exited_within(child, exits, REAP_GRACE_S)


def can_dlopen(name: str) -> bool:
    """Whether a native library loads: the no-driver fast path, asked before any child is
    started or any binding imported. ctypes.util.find_library would run ldconfig/gcc in a
    subprocess; dlopen is the question the bindings ask anyway."""
    try:
        ctypes.CDLL(name)
    except OSError:
        return False
    return True
