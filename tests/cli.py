"""The one way the tests run the CLI in this process: ``run(argv, capsys)`` is
``blackwell-doctor ARGV`` through the real app and its one error boundary (``cli.main``),
giving the exit code and what it wrote to standard output and standard error.

(Tests that need a real process, for signals, file descriptors or the environment, run
``python -m blackwell_doctor`` themselves.)"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import pytest

from blackwell_doctor.cli import main


class Result(NamedTuple):
    code: int
    out: str
    err: str


def run(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> Result:
    """Run the CLI with ``argv``; what it printed is read (and cleared) from ``capsys``."""
    code = main(list(argv))
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)
