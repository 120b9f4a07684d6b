"""A fake OpenAI-compatible server for `bench` tests: a real aiohttp server on 127.0.0.1 in a
thread, whose /tokenize counts as a word-level tokenizer would (:func:`word_tokens`, plus a
chat template of TEMPLATE_TOKENS), whose chat completions answer ``max_tokens`` tokens of
"x" with usage, and whose /metrics keeps vLLM's generation counter."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web


def word_tokens(word: str) -> int:
    """A word-level tokenizer's count: a word of up to five letters is one token, longer
    words one token per three letters."""
    return 1 if len(word) <= 5 else -(-len(word) // 3)


TEMPLATE_TOKENS = 7  # the fake server's chat template: its own tokens around the message


@dataclass
class Fake:
    url: str = ""
    chats: list[dict[str, Any]] = field(default_factory=list)
    tokenized: int = 0
    generated: int = 0
    # A chat request for which this is true is answered HTTP 500.
    fail: Callable[[dict[str, Any]], bool] = lambda body: False


def count_text(text: str) -> int:
    return sum(word_tokens(w) for w in text.split())


@pytest.fixture
def fake() -> Iterator[Fake]:
    """A real aiohttp server: /v1/models, /tokenize counting as :func:`word_tokens` (plus
    TEMPLATE_TOKENS for chat messages), /v1/chat/completions answering max_tokens tokens
    with usage, and /metrics with its generation counter."""
    state = Fake()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def prompt_tokens(body: dict[str, Any]) -> int:
        if "messages" in body:
            return TEMPLATE_TOKENS + sum(count_text(m["content"]) for m in body["messages"])
        return count_text(body["prompt"])

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "fake", "max_model_len": 100000}]})

    async def tokenize(request: web.Request) -> web.Response:
        state.tokenized += 1
        return web.json_response({"count": prompt_tokens(await request.json())})

    async def metrics(_: web.Request) -> web.Response:
        text = (
            "# TYPE vllm:generation_tokens_total counter\n"
            f'vllm:generation_tokens_total{{model_name="fake"}} {state.generated}\n'
        )
        return web.Response(text=text)

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        state.chats.append(body)
        if state.fail(body):
            return web.Response(status=500, text="failed as told")
        n = int(body["max_tokens"])
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for _ in range(n):
            await response.write(
                b'data: {"choices": [{"index": 0, "delta": {"content": "x"}}]}\n\n'
            )
        usage = {"prompt_tokens": prompt_tokens(body), "completion_tokens": n}
        await response.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        state.generated += n
        return response

    async def up() -> web.AppRunner:
        app = web.Application(client_max_size=1 << 30)
        app.router.add_get("/v1/models", models)
        app.router.add_post("/tokenize", tokenize)
        app.router.add_get("/metrics", metrics)
        app.router.add_post("/v1/chat/completions", chat)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return runner

    runner = asyncio.run_coroutine_threadsafe(up(), loop).result(10)
    state.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield state
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
