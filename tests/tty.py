"""The CLI as a person at a terminal runs it: ``shown(argv, columns)`` runs
``python -m blackwell_doctor ARGV`` in a child whose standard output and error are a
pseudo-terminal of ``columns`` columns (its window size set with TIOCSWINSZ, and ``COLUMNS``
as a shell exports it), and returns the exit code and what the terminal showed at the
end: the bytes played on a screen model that moves the cursor as a terminal does (carriage
return, line feed, erase line, cursor up: a live progress line that is redrawn and then
cleared leaves nothing), colours dropped, and lines never wrapped at the right margin, so
a line wider than the terminal is measured as one line.

(tests/cli.py runs the CLI in this process, where standard output is a pipe.)"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from collections.abc import Mapping
from typing import NamedTuple

from tests.conftest import REPO

# A control sequence (CSI ... final byte), an OSC string (rich's hyperlinks), or another
# two-byte escape.
_ESCAPE = re.compile(r"\x1b\[([0-9;?]*)([@-~])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[^\[\]]")
_TOKEN = re.compile(rf"{_ESCAPE.pattern}|[\r\n]|[^\x1b\r\n]+")


def screen(output: str) -> str:
    """What a terminal shows after ``output``: its lines, as long as they were written."""
    lines: list[list[str]] = [[]]
    row = col = 0
    for m in _TOKEN.finditer(output):
        token = m.group()
        if token == "\r":
            col = 0
        elif token == "\n":
            row += 1
            if row == len(lines):
                lines.append([])
        elif m.group(2) == "K":  # erase in line: 2 the whole line, else from the cursor
            lines[row] = [] if m.group(1) == "2" else lines[row][:col]
        elif m.group(2) == "A":  # cursor up
            row = max(0, row - int(m.group(1) or 1))
        elif not token.startswith("\x1b"):
            line = lines[row]
            line.extend(" " * (col - len(line)))
            line[col : col + len(token)] = list(token)
            col += len(token)
    return "\n".join("".join(line).rstrip() for line in lines)


class Shown(NamedTuple):
    code: int
    text: str


def shown(
    argv: list[str], columns: int, env: Mapping[str, str] | None = None, timeout: float = 300
) -> Shown:
    """Run the CLI on a pseudo-terminal ``columns`` wide; what it showed."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    environ = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "LINES")}
    environ.update(
        {
            "COLUMNS": str(columns),
            "LINES": "50",
            "TERM": "xterm-256color",
            "PYTHONPATH": str(REPO / "src"),
            **(env or {}),
        }
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "blackwell_doctor", *argv],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        cwd=REPO,
        env=environ,
    )
    os.close(follower)
    chunks: list[bytes] = []
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], timeout)
            if not ready:  # the child wrote nothing for `timeout` seconds: stop it
                proc.kill()
                raise TimeoutError(f"blackwell-doctor {' '.join(argv)}: silent for {timeout} s")
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(leader)
    code = proc.wait(timeout=timeout)
    return Shown(code, screen(b"".join(chunks).decode("utf-8", errors="replace")))
