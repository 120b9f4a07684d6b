"""A local Hugging Face Hub for ``model ORG/NAME --hub`` and for building a real cache.

It speaks the paths ``huggingface_hub`` calls (2.4; hf_api.py, file_download.py):

- ``GET /api/models/{org}/{name}/revision/{rev}[?blobs=True]``: the model info, with its
  commit (``sha``) and each file's ``size``; ``.../tree/{rev}``: the file listing
  ``snapshot_download`` reads;
- ``HEAD``/``GET /{org}/{name}/resolve/{rev}/{file}``: a file, with the headers the
  library's downloads read (``X-Repo-Commit``, ``ETag``, ``Content-Length``) and ``Range``
  answered with 206 and ``Content-Range`` (``ranges=False``: Range ignored, as a server
  that does not support it);

and the errors it maps (``X-Error-Code``: RepoNotFound, RevisionNotFound, EntryNotFound).
With ``token`` set, a request without ``Authorization: Bearer <token>`` is refused (401),
and ``echo_auth`` makes every refusal and every 404 repeat the Authorization header it got
(a hostile server, for the tests that the token is never printed).

Every request is recorded (method, path, Range, bytes of body sent). The server is a real
``http.server.ThreadingHTTPServer`` on 127.0.0.1 in a thread; :func:`serve` yields it once
its loop runs (an event it sets, never a sleep) and stops it on the way out, failure or not.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

_RANGE = re.compile(r"bytes=(\d+)-(\d*)")


def _oid(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Repo:
    files: dict[str, bytes]
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    branches: tuple[str, ...] = ("main",)


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    range: str | None
    authorization: str | None
    status: int
    body_bytes: int


@dataclass
class HubServer:
    repos: dict[str, Repo]
    token: str | None = None
    echo_auth: bool = False
    ranges: bool = True
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""
    # Notified (under ``lock``) each time a response is recorded: a test waits on it for a
    # request whose response the server is still writing after the client has gone.
    recorded: threading.Condition = field(init=False)
    started: int = 0  # requests taken (each is recorded in seen once answered)

    def __post_init__(self) -> None:
        self.recorded = threading.Condition(self.lock)

    def file_requests(self, name: str) -> list[Seen]:
        return [s for s in self.requests() if s.path.endswith("/" + name)]

    def body_bytes(self, name: str) -> int:
        return sum(s.body_bytes for s in self.file_requests(name))

    def requests(self, timeout: float = 120.0) -> list[Seen]:
        """Every request so far, once each one the server took has been answered and
        recorded: a response is recorded after its body is written (or the write fails,
        for a client that left early), which may be after the client has returned. An
        observed event (the record), never a sleep; AssertionError past ``timeout``."""
        with self.recorded:
            done = self.recorded.wait_for(lambda: len(self.seen) >= self.started, timeout)
            assert done, f"{self.started - len(self.seen)} request(s) unanswered in {timeout} s"
            return list(self.seen)

    def reset(self) -> None:
        """Forget the requests so far (once they are all recorded)."""
        self.requests()
        with self.lock:
            self.seen.clear()
            self.started = 0


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_HEAD(self) -> None:
        self._answer(head=True)

    def do_GET(self) -> None:
        self._answer(head=False)

    def _send(
        self, status: int, body: bytes, headers: dict[str, str], *, head: bool = False
    ) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        sent = 0
        if not head:
            # In pieces, counting what the client took before it closed the connection
            # (what a server that ignores Range manages to send).
            view = memoryview(body)
            try:
                while sent < len(body):
                    self.wfile.write(view[sent : sent + (1 << 16)])
                    sent += len(view[sent : sent + (1 << 16)])
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
        hub = self.server.hub
        with hub.lock:
            hub.seen.append(
                Seen(
                    self.command,
                    urlsplit(self.path).path,
                    self.headers.get("Range"),
                    self.headers.get("Authorization"),
                    status,
                    sent,
                )
            )
            hub.recorded.notify_all()

    def _error(self, status: int, code: str, *, head: bool) -> None:
        body = f"{code}".encode()
        if self.server.hub.echo_auth:
            body += f" (you sent Authorization: {self.headers.get('Authorization')})".encode()
        self._send(status, body, {"X-Error-Code": code, "X-Error-Message": code}, head=head)

    def _answer(self, *, head: bool) -> None:
        hub = self.server.hub
        with hub.lock:
            hub.started += 1
        path = unquote(urlsplit(self.path).path)
        if hub.token is not None and self.headers.get("Authorization") != f"Bearer {hub.token}":
            self._error(401, "RepoNotFound", head=head)
            return
        if path.startswith("/api/models/"):
            m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/(revision|tree)/(.+)", path)
            repo = hub.repos.get(m.group(1)) if m else None
            if m is None or repo is None:
                self._error(404, "RepoNotFound", head=head)
                return
            if m.group(3) not in (*repo.branches, repo.commit):
                self._error(404, "RevisionNotFound", head=head)
                return
            if m.group(2) == "tree":  # snapshot_download's listing (one page)
                tree = [
                    {"type": "file", "path": n, "size": len(b), "oid": _oid(b)}
                    for n, b in repo.files.items()
                ]
                self._send(200, json.dumps(tree).encode(), {"Content-Type": "application/json"})
                return
            info = {
                "id": m.group(1),
                "sha": repo.commit,
                "siblings": [{"rfilename": n, "size": len(b)} for n, b in repo.files.items()],
            }
            self._send(200, json.dumps(info).encode(), {"Content-Type": "application/json"})
            return
        m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        repo = hub.repos.get(m.group(1)) if m else None
        if m is None or repo is None:
            self._error(404, "RepoNotFound", head=head)
            return
        if m.group(2) not in (*repo.branches, repo.commit):
            self._error(404, "RevisionNotFound", head=head)
            return
        data = repo.files.get(m.group(3))
        if data is None:
            self._error(404, "EntryNotFound", head=head)
            return
        headers = {
            "X-Repo-Commit": repo.commit,
            "ETag": f'"{_oid(data)}"',
            "Accept-Ranges": "bytes" if hub.ranges else "none",
        }
        r = _RANGE.fullmatch(self.headers.get("Range") or "")
        if r is not None and hub.ranges:
            start = int(r.group(1))
            end = min(int(r.group(2)) if r.group(2) else len(data) - 1, len(data) - 1)
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            self._send(206, data[start : end + 1], headers, head=head)
            return
        self._send(200, data, headers, head=head)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    hub: HubServer
    running: threading.Event

    def service_actions(self) -> None:
        self.running.set()  # called by serve_forever's loop: it is answering


@contextmanager
def serve(hub: HubServer) -> Iterator[HubServer]:
    """``hub`` served on 127.0.0.1 (``hub.url``) while the block runs."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.hub = hub
    server.running = threading.Event()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        if not server.running.wait(timeout=30):
            raise RuntimeError("the local Hub server did not start")
        hub.url = f"http://127.0.0.1:{server.server_address[1]}"
        yield hub
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)
