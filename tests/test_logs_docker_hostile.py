"""Container logs from a hostile Docker API peer: a small fake engine on a unix socket.

The real engine (tests/test_logs_docker.py) shows the happy path; a fake is what can stall
after one frame, send garbage frame headers or announce a 4 GB frame. Each case must end
within the read deadline with a reason that says what happened, and memory must not follow
the size a peer announces.
"""

from __future__ import annotations

import contextlib
import io
import json
import socketserver
import struct
import threading
import time
import tracemalloc
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from blackwell_doctor.collect.logs import sources
from blackwell_doctor.collect.logs.scan import scan_sources
from blackwell_doctor.collect.logs.sources import SourceError, container_chunks

DEADLINE_S = 2.0
STALL_S = 30.0  # far longer than the deadline: only the deadline can end the read
LINE = b"INFO 11-11 06:40:01 [api_server.py:1885] Starting vLLM API server\n"


def frame(stream: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxL", stream, len(payload)) + payload


class _Engine(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False
    stop = threading.Event()


class _Handler(BaseHTTPRequestHandler):
    server: _Engine

    def log_message(self, format: str, *args: object) -> None:
        pass

    def address_string(self) -> str:
        return "unix"

    def _json(self, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stall(self) -> None:
        self.wfile.flush()
        self.server.stop.wait(STALL_S)

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path.endswith("/version"):
            self._json({"ApiVersion": "1.43", "Version": "24.0.0", "MinAPIVersion": "1.12"})
            return
        name = path.split("/containers/", 1)[-1].split("/", 1)[0]
        if path.endswith("/json"):
            self._json({"Id": name, "Name": f"/{name}", "Config": {"Tty": name == "tty"}})
            return
        if name == "stall-before-headers":
            self._stall()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.docker.raw-stream")
        self.end_headers()
        if name == "one-frame-then-stall":
            self.wfile.write(frame(2, LINE))
            self._stall()
        elif name == "garbage":
            self.wfile.write(frame(2, LINE) + b"\x89PNG\r\n\x1a\n" + b"\xff" * 64)
            self._stall()
        elif name == "huge-frame":
            self.wfile.write(struct.pack(">BxxxL", 1, 0xFFFFFFF0))
            for _ in range(64):  # 64 MiB of a frame that says it holds 4 GiB, then a stall
                self.wfile.write(b"x" * (1 << 20))
            self._stall()
        elif name == "trickle":  # a byte now and then: every read succeeds, the whole never ends
            self.wfile.write(struct.pack(">BxxxL", 1, 1 << 20))
            while not self.server.stop.wait(0.2):
                self.wfile.write(b"y")
                self.wfile.flush()
        elif name == "huge-frame-then-close":  # 4 GiB announced, 13 bytes sent, closed
            self.wfile.write(frame(2, LINE) + struct.pack(">BxxxL", 1, 0xFFFFFFF0) + LINE[:13])
        elif name == "half-a-header-then-close":
            self.wfile.write(frame(2, LINE) + struct.pack(">BxxxL", 1, 64)[:5])
        elif name == "endless":  # valid frames as fast as they are read, never an end
            block = frame(1, LINE) * 1000
            with contextlib.suppress(OSError):
                while not self.server.stop.is_set():
                    self.wfile.write(block)
        elif name == "tty":
            self.wfile.write(LINE * 3)
        elif name == "clean":
            self.wfile.write(frame(1, LINE) + frame(2, LINE))


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[str]:
    path = tmp_path / "docker.sock"
    server = _Engine(str(path), _Handler)
    server.stop = threading.Event()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"unix://{path}"
    finally:
        server.stop.set()
        server.shutdown()
        server.server_close()


def read_all(name: str, engine: str) -> tuple[bytes, str | None, float, int]:
    """What the source yielded, its error reason, the seconds it took, the largest chunk."""
    started = time.monotonic()
    data = bytearray()
    largest = 0
    try:
        _, chunks = container_chunks(name, engine, deadline_s=DEADLINE_S)
        for chunk in chunks:
            largest = max(largest, len(chunk))
            data += chunk[:4096]  # keep little: the test must not hold what it checks for
        reason = None
    except SourceError as exc:
        reason = exc.reason
    return bytes(data), reason, time.monotonic() - started, largest


def test_a_frame_then_a_stall_ends_at_the_deadline_with_what_came_before(engine: str) -> None:
    data, reason, took, _ = read_all("one-frame-then-stall", engine)
    assert data == LINE
    assert reason == f"timeout-{DEADLINE_S:g}s:container:one-frame-then-stall"
    assert took < DEADLINE_S + 3


def test_a_stall_before_the_headers_is_a_timeout_not_an_io_error(engine: str) -> None:
    _, reason, took, _ = read_all("stall-before-headers", engine)
    assert reason == f"timeout-{DEADLINE_S:g}s:container:stall-before-headers"
    assert took < DEADLINE_S + 3


def test_garbage_frame_headers_end_the_read_with_a_named_reason(engine: str) -> None:
    data, reason, took, _ = read_all("garbage", engine)
    assert data == LINE
    assert reason == "docker-bad-frame:container:garbage"
    assert took < DEADLINE_S


def test_an_announced_4gb_frame_is_streamed_in_bounded_memory_until_the_deadline(
    engine: str,
) -> None:
    tracemalloc.start()
    try:
        _, reason, took, largest = read_all("huge-frame", engine)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert reason == f"timeout-{DEADLINE_S:g}s:container:huge-frame"
    assert took < DEADLINE_S + 3
    assert largest <= sources.DOCKER_READ_BYTES
    # 64 MiB went through; what was held at once stays a few read buffers.
    assert peak < 8 * sources.DOCKER_READ_BYTES + (4 << 20)


def test_a_trickling_peer_cannot_outlast_the_deadline(engine: str) -> None:
    _, reason, took, _ = read_all("trickle", engine)
    assert reason == f"timeout-{DEADLINE_S:g}s:container:trickle"
    assert took < DEADLINE_S + 3


def test_a_tty_container_log_is_read_raw_and_a_clean_one_in_full(engine: str) -> None:
    assert read_all("tty", engine)[:2] == (LINE * 3, None)
    assert read_all("clean", engine)[:2] == (LINE * 2, None)


# A stream that broke off is not a stream read to its end (issue 19: both were exit 0).


@pytest.mark.parametrize("name", ["huge-frame-then-close", "half-a-header-then-close"])
def test_a_frame_cut_short_by_the_peer_is_a_truncated_frame(engine: str, name: str) -> None:
    data, reason, took, _ = read_all(name, engine)
    assert data.startswith(LINE)
    assert reason == f"docker-truncated-frame:container:{name}"
    assert took < DEADLINE_S


def test_an_endless_stream_cut_by_the_deadline_is_a_timeout(engine: str) -> None:
    # The reader is busy all the time: the clock passes the deadline before the watchdog's
    # timer thread has run, and the read that sees it must not end as a clean end of stream.
    for _ in range(3):
        data, reason, took, _ = read_all("endless", engine)
        assert data
        assert reason == f"timeout-{DEADLINE_S:g}s:container:endless"
        assert took < DEADLINE_S + 3


def test_the_deadline_passed_before_the_timer_fired_is_a_timeout_not_an_end() -> None:
    # Deterministic form of the race above: the deadline has passed, the timer has not run.
    watchdog = sources._Watchdog(0.0, "container:x")
    assert not watchdog.fired
    with pytest.raises(SourceError, match=r"^timeout-0s:container:x$"):
        list(sources._frames(io.BytesIO(frame(1, LINE) * 3), watchdog))
    with pytest.raises(SourceError, match=r"^timeout-0s:container:x$"):
        list(sources._raw_stream(io.BytesIO(LINE), watchdog))


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("huge-frame-then-close", "docker-truncated-frame:container:huge-frame-then-close"),
        ("endless", f"timeout-{DEADLINE_S:g}s:container:endless"),
        ("clean", None),
    ],
)
def test_a_stream_that_broke_off_is_the_logs_inputs_partially_read_finding(
    engine: str, name: str, reason: str | None
) -> None:
    facts = scan_sources(
        paths=[], containers=[name], journal=False, kernel_log=False, host_root=Path("/"),
        docker_host=engine, container_deadline_s=DEADLINE_S,
    )  # fmt: skip
    (source,) = facts.sources
    assert source.error == reason
    assert source.lines >= 1
    partial = [f for f in facts.findings if f.signature == "input.partially_read"]
    if reason is None:
        assert partial == []
    else:
        assert [(f.path, f.excerpt) for f in partial] == [(f"container:{name}", reason)]
