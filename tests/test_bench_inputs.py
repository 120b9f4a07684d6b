"""`bench`'s inputs of issue 19: a /tokenize that lies, shapes and a max_model_len that would
fill the memory, documents nested too deeply, a compare of runs with nothing in common, and
the bootstrap's cost on large runs. Servers are real aiohttp servers on 127.0.0.1 in a
thread of the test (test_bench_unit.py's ``serve`` pattern)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from blackwell_doctor.cli import main

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def one_line_error(err: str, *words: str) -> None:
    assert err.startswith("blackwell-doctor: error: "), err
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    for word in words:
        assert word in err, err


# --- documents nested too deeply ------------------------------------------------------------


def test_a_shapes_file_nested_2000_deep_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = tmp_path / "deep.toml"
    deep.write_text(
        "[shape.x]\ninput_tokens = 8\noutput_tokens = 8\nextra_body = "
        + "{ a = " * 2000
        + "1"
        + " }" * 2000
        + "\n"
    )
    assert main(["bench", "--url", "http://127.0.0.1:1", "--shapes", str(deep)]) == 2
    one_line_error(capsys.readouterr().err, "nested too deeply")


def test_a_run_file_nested_2000_deep_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text('{"schema_version": 2, "x": ' + "[" * 2000 + "]" * 2000 + "}")
    out = tmp_path / "out.json"
    out.write_text("kept")
    assert main(["bench", "--compare", str(deep), str(deep), "-o", str(out)]) == 2
    one_line_error(capsys.readouterr().err, "nested too deeply")
    assert out.read_text() == "kept"
