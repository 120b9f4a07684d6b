"""A command under test as a child process that a test can interrupt and never leaves behind.

:func:`cli_child` starts ``python -m blackwell_doctor ARGS`` in its own process group, reads
its standard error line by line in a thread (so a test waits for a line with a deadline,
never on a sleep), and on leaving the block kills the whole group if it still runs: a test
that fails or times out does not leave a soak running for the rest of the suite.

SIGINT reaches the child at its default disposition even when pytest itself ignores SIGINT:
a shell that starts a job in the background without job control (``.ci/run &`` in a script,
nohup) ignores SIGINT for it, a child inherits an ignored signal, and Python started that way
never raises KeyboardInterrupt: the Ctrl-C tests would then see the command run to its end.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence


class Child:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.err_lines: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._out: list[str] = []
        self.sigint_at: float | None = None
        self.exited_after_sigint_s: float | None = None
        assert proc.stdout is not None
        assert proc.stderr is not None
        self._readers = [
            threading.Thread(target=self._pump, args=(proc.stderr, True), daemon=True),
            threading.Thread(target=self._pump, args=(proc.stdout, False), daemon=True),
        ]
        for t in self._readers:
            t.start()

    def _pump(self, stream: object, is_err: bool) -> None:
        for line in stream:  # type: ignore[attr-defined]
            if is_err:
                self.err_lines.append(line)
                self._lines.put(line)
            else:
                self._out.append(line)
        if is_err:
            self._lines.put(None)

    def wait_for_line(self, matches: Callable[[str], bool], *, deadline_s: float) -> str:
        """The first standard-error line that ``matches``; fails when the child ends or the
        deadline passes first."""
        end = time.monotonic() + deadline_s
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"no such line within {deadline_s:g} s:\n" + "".join(self.err_lines[-20:])
                )
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(
                    f"the command ended (exit {self.proc.wait()}) before that line:\n"
                    + "".join(self.err_lines[-20:])
                )
            if matches(line):
                return line

    def interrupt(self) -> None:
        """SIGINT, as Ctrl-C sends it (to the command's process only)."""
        self.sigint_at = time.monotonic()
        self.proc.send_signal(signal.SIGINT)

    def finish(self, timeout_s: float) -> tuple[int, str, str]:
        """Wait for the exit (the block's end kills it if this times out): (code, stdout,
        stderr)."""
        code = self.proc.wait(timeout=timeout_s)
        if self.sigint_at is not None:
            self.exited_after_sigint_s = time.monotonic() - self.sigint_at
        for t in self._readers:
            t.join(timeout=10)
        return code, "".join(self._out), "".join(self.err_lines)

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


@contextlib.contextmanager
def sigint_not_ignored() -> Iterator[None]:
    """While starting a child: a SIGINT this process ignores is caught for a moment, so the
    child gets it at its default (exec resets caught signals, not ignored ones)."""
    ignored = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    )
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def child(argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> Iterator[Child]:
    """``argv`` as a :class:`Child`; killed, with its process group, when the block ends."""
    with sigint_not_ignored():
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=None if env is None else dict(env),
            start_new_session=True,
        )
    c = Child(proc)
    try:
        yield c
    finally:
        c.kill()


def cli_child(
    *args: str, env: Mapping[str, str] | None = None
) -> contextlib.AbstractContextManager[Child]:
    """``python -m blackwell_doctor ARGS`` as a :class:`Child`."""
    return child([sys.executable, "-m", "blackwell_doctor", *args], env=env)
