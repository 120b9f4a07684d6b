"""A docker json-file log whose last line never ends is read in bounded memory, like plain
text: what is held at once does not grow with the line (the issue's 600 MB line took
1.89 GB). Sizes here are small enough for a unit test and still several times the
bound; benchmarks/memory_hostile.py measures the issue's sizes as RSS."""

from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path

from blackwell_doctor.collect.logs.scan import scan_sources
from tests.conftest import FIXTURES

ESCAPED = (FIXTURES / "logs" / "flashinfer-2077-tma-escaped.log").read_bytes()
LONG = 64 << 20


def scan_peak(path: Path) -> tuple[int, list[str]]:
    tracemalloc.start()
    try:
        facts = scan_sources(
            paths=[str(path)], containers=[], journal=False, kernel_log=False, host_root=Path("/")
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The log-end rule's record (a source that ends in an error line) is not counted here.
    return peak, [f.signature for f in facts.findings if f.signature != "runtime.log_ends_in_error"]


def docker_lines(text: str) -> bytes:
    return b"".join(
        json.dumps({"log": line, "stream": "stderr"}).encode() + b"\n"
        for line in text.splitlines(keepends=True)
    )


def test_a_docker_json_line_that_never_ends_is_bounded_like_plain_text(tmp_path: Path) -> None:
    docker = tmp_path / "abc-json.log"
    plain = tmp_path / "plain.log"
    with docker.open("wb") as fh:
        fh.write(docker_lines(ESCAPED.decode()))
        fh.write(b'{"log":"' + b"a" * LONG)  # never closed, never ends
    with plain.open("wb") as fh:
        fh.write(ESCAPED)
        fh.write(b"a" * LONG)
    started = time.monotonic()
    docker_peak, docker_found = scan_peak(docker)
    docker_s = time.monotonic() - started
    plain_peak, plain_found = scan_peak(plain)
    # What was before the long line is still judged, and as in plain text.
    assert docker_found == plain_found == ["moe.tma_ws_init_failed"]
    assert docker_peak < plain_peak * 1.5 + (4 << 20), (docker_peak, plain_peak)
    assert docker_peak < LONG  # before: about three times the line
    assert docker_s < 30


def test_records_after_a_runaway_line_are_decoded_again(tmp_path: Path) -> None:
    path = tmp_path / "abc-json.log"
    with path.open("wb") as fh:
        fh.write(docker_lines("first line\n"))
        fh.write(b'{"log":"' + b"b" * (12 << 20) + b'\\n"}\n')
        fh.write(docker_lines(ESCAPED.decode()))
    _, found = scan_peak(path)
    assert found == ["moe.tma_ws_init_failed"]
