"""A hostile OpenAI-compatible server for ``bench``'s HTTP tests and memory measurements.

Each mode misbehaves in one way no real server does on demand (redirects, endless
streams, huge bodies, echoed credentials, absurd usage). Used in-process by
tests/test_bench_hostile_net.py (a thread running the server's loop, started before the
test goes on), and standalone to measure the CLI's peak memory against it:

    python tests/hostile_http.py MODE        # prints "port N" once listening

Binds 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
import zlib
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager

from tests.conftest import skip_without

try:
    from aiohttp import web
except ModuleNotFoundError as exc:
    skip_without(exc)

MB = 1 << 20
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def chunk(**delta: str) -> bytes:
    return json.dumps({"choices": [{"index": 0, "delta": delta}]}).encode()


def usage(completion: object = 7, prompt: object = 5) -> bytes:
    return json.dumps(
        {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}
    ).encode()


async def _sse(request: web.Request, *pieces: bytes) -> web.StreamResponse:
    await request.read()
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for piece in pieces:
        await response.write(piece)
    await response.write_eof()
    return response


def good_stream(completion: object = 7, prompt: object = 5) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await _sse(
            request,
            b"data: " + chunk(content="ok") + b"\n\n",
            b"data: " + usage(completion, prompt) + b"\n\n",
            b"data: [DONE]\n\n",
        )

    return handler


def queued_stream(slots: int, seconds: float) -> Handler:
    """A server that answers at most ``slots`` requests at once, each in ``seconds``; the
    others wait their turn: a real queue, so its latency rises as the load nears
    ``slots / seconds`` requests per second (bench --rate's tests)."""
    gate: asyncio.Semaphore | None = None
    good = good_stream()

    async def handler(request: web.Request) -> web.StreamResponse:
        nonlocal gate
        if gate is None:  # made on the server's own loop
            gate = asyncio.Semaphore(slots)
        await request.read()
        async with gate:
            await asyncio.sleep(seconds)
            return await good(request)

    return handler


async def _endless(
    request: web.Request, content_type: str, piece: bytes, head: bytes = b""
) -> web.StreamResponse:
    """A 200 of ``content_type`` that sends ``head``, then ``piece`` for ever."""
    await request.read()
    response = web.StreamResponse(headers={"Content-Type": content_type})
    await response.prepare(request)
    with contextlib.suppress(ConnectionError):  # the client gave up: the end
        if head:
            await response.write(head)
        while True:
            await response.write(piece)
    return response


async def endless_events(request: web.Request) -> web.StreamResponse:
    """Valid chat-completion chunks of 1 MB of content each, for ever."""
    event = b"data: " + chunk(content="x" * MB) + b"\n\n"
    return await _endless(request, "text/event-stream", event)


async def endless_line(request: web.Request) -> web.StreamResponse:
    """One SSE line that never ends: ``data: {"choices": ...xxxxx`` without a newline."""
    head = b'data: {"choices": [{"delta": {"content": "'
    return await _endless(request, "text/event-stream", b"x" * (64 * 1024), head)


async def endless_body(request: web.Request) -> web.StreamResponse:
    """A 200 whose body never ends (a /metrics, /v1/models or /tokenize answer)."""
    return await _endless(request, "application/json", b" " * MB)


async def endless_gzip(request: web.Request) -> web.StreamResponse:
    """A 200 whose gzip-compressed body never ends: 1 MiB of spaces per ~1 kB sent."""
    await request.read()
    response = web.StreamResponse(headers={"Content-Encoding": "gzip"})
    await response.prepare(request)
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: the gzip container
    await response.write(packer.compress(b" " * MB) + packer.flush(zlib.Z_SYNC_FLUSH))
    # Every later block is the same: spaces after spaces (the window holds only spaces).
    piece = packer.compress(b" " * MB) + packer.flush(zlib.Z_SYNC_FLUSH)
    with contextlib.suppress(ConnectionError):  # the client gave up: the end
        while True:
            await response.write(piece)
    return response


def models_of(*ids: str) -> Handler:
    async def handler(_: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": i, "max_model_len": 4096} for i in ids]})

    return handler


def redirect_to(location: str, status: int = 302) -> Handler:
    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=status, headers={"Location": location})

    return handler


def echo_auth(status: int = 401) -> Handler:
    """Answers with the Authorization header it received (its value, and decoded forms)."""

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        auth = request.headers.get("Authorization", "")
        return web.Response(status=status, text=f"bad credentials: {auth!s} / {auth.split()[-1]}")

    return handler


def app_with(routes: Mapping[tuple[str, str], Handler]) -> web.Application:
    """An app serving ``routes`` ((method, path) -> handler); /v1/models lists one model
    unless a route replaces it."""
    app = web.Application()
    routes = {("GET", "/v1/models"): models_of("fake"), **routes}
    for (method, path), handler in routes.items():
        app.router.add_route(method, path, handler)
    return app


@contextmanager
def serving(routes: Mapping[tuple[str, str], Handler]) -> Iterator[str]:
    """Serve ``routes`` on 127.0.0.1 in a thread; yields the base URL once listening."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    runner = web.AppRunner(app_with(routes))
    try:

        async def up() -> str:
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            return f"http://127.0.0.1:{runner.addresses[0][1]}"

        yield asyncio.run_coroutine_threadsafe(up(), loop).result(10)
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


MODES: dict[str, dict[tuple[str, str], Handler]] = {
    "good": {("POST", "/v1/chat/completions"): good_stream()},
    # Two requests at a time, 50 ms each: at most 40 requests/s.
    "queued": {("POST", "/v1/chat/completions"): queued_stream(2, 0.05)},
    "endless-events": {("POST", "/v1/chat/completions"): endless_events},
    "endless-line": {("POST", "/v1/chat/completions"): endless_line},
    "endless-metrics": {
        ("GET", "/metrics"): endless_body,
        ("POST", "/v1/chat/completions"): good_stream(),
    },
    "endless-models": {("GET", "/v1/models"): endless_body},
    "gzip-metrics": {
        ("GET", "/metrics"): endless_gzip,
        ("POST", "/v1/chat/completions"): good_stream(),
    },
    "endless-tokenize": {
        ("POST", "/tokenize"): endless_body,
        ("POST", "/v1/chat/completions"): good_stream(),
    },
}


def main() -> None:
    routes = MODES[sys.argv[1]]

    async def run() -> None:
        runner = web.AppRunner(app_with(routes))
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        print(f"port {runner.addresses[0][1]}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(run())


if __name__ == "__main__":
    main()
