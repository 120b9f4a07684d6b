"""A process timeline for profiling whole commands (issue 36): every Python process that
imports this (put this folder first on PYTHONPATH, set BD_TIMELINE to a log file) appends
one line per event to that file: its start, each child it spawns, each wait on a child
and its exit (``os._exit`` included), with wall-clock time (time.time(), shared across
processes) and its pid. With BD_CPROFILE_DIR set, every such process also profiles itself
into DIR/PID.prof. Read the log with ``benchmarks/timeline/show.py LOG``. Never imported by
the package."""

from __future__ import annotations

import atexit
import os
import sys
import time
from collections.abc import Callable
from typing import NoReturn

_LOG = os.environ.get("BD_TIMELINE")


def _write(event: str, detail: str = "") -> None:
    if not _LOG:
        return
    detail = detail.replace("\n", " ").replace("\r", " ")
    line = f"{time.time():.6f} {os.getpid()} {os.getppid()} {event} {detail}\n"
    fd = os.open(_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode("utf-8", "replace"))
    finally:
        os.close(fd)


def _hook(event: str, args: tuple[object, ...]) -> None:
    if event == "subprocess.Popen":
        exe, argv = args[0], args[1]
        words = list(argv) if isinstance(argv, (list, tuple)) else [exe]
        _write("spawn", " ".join(str(a) for a in words)[:200])
    elif event == "os.posix_spawn":
        argv = args[1]
        words = list(argv) if isinstance(argv, (list, tuple)) else []
        _write("posix_spawn", " ".join(str(a) for a in words)[:200])
    elif event == "os.fork":
        _write("fork")


if _LOG:
    # The interpreter's own start (before site): the process's start time from /proc.
    try:
        with open(f"/proc/{os.getpid()}/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            btime = next(int(x.split()[1]) for x in f if x.startswith("btime"))
        _write("exec", f"{btime + ticks / os.sysconf('SC_CLK_TCK'):.2f}")
    except (OSError, ValueError, StopIteration):
        pass
    _write("site", " ".join(sys.argv)[:200] or sys.executable)
    sys.addaudithook(_hook)
    # Run at exit, and also before os._exit, which skips atexit: the GPU children end so
    # (collect/childexit.py). Once each.
    _at_exit: list[Callable[[], None]] = [lambda: _write("exit", "")]

    def _run_at_exit() -> None:
        while _at_exit:
            _at_exit.pop()()

    atexit.register(_run_at_exit)
    _real_exit = os._exit

    def _exit(status: int) -> NoReturn:
        _run_at_exit()
        _real_exit(status)

    os._exit = _exit
    _PROF = os.environ.get("BD_CPROFILE_DIR")
    if _PROF:
        # Every process profiles itself; the file is written at exit (pid in its name).
        import cProfile

        _profile = cProfile.Profile()

        def _dump(folder: str = _PROF) -> None:
            _profile.disable()
            _profile.dump_stats(os.path.join(folder, f"{os.getpid()}.prof"))

        _at_exit.append(_dump)  # before the exit line (popped last-in first)
        _profile.enable()
