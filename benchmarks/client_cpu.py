"""CPU time one streaming client spends per output token, measured in its own process.

    python benchmarks/client_cpu.py ours URL STREAMS REQUESTS OUTPUT [SRC]
    VLLM_PYTHON benchmarks/client_cpu.py vllm URL STREAMS REQUESTS OUTPUT

``STREAMS`` users each send their next chat completion (streamed, OUTPUT tokens asked, the
server's answer read to its end) when their last one ended, REQUESTS in all, over one
session. ``ours`` is bench's request path (collect/bench/client.py: stream_chat through its
keep-alive Pool; SRC: the source tree, default this checkout's); ``vllm`` is vLLM's
(vllm/benchmarks/lib/endpoint_request_func.py's async_request_openai_chat_completions,
through the connector vllm/benchmarks/serve.py's benchmark() makes), run by the Python of a
vLLM install. Printed: one JSON line with the process CPU time (time.process_time) over the
sending alone, the output tokens the server reported, and microseconds of CPU per token.

Process time, not wall time, so that a busy machine (the shared 2-core VM, whose other
work takes the client's core for most of each second) does not change the figure: it says
how much work each client does per token, which is what decides how many tokens/s one core
can keep up with. benchmarks/bench_client.py --cpu runs both side by side.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp


def ours(
    url: str, streams: int, output: int, src: str
) -> tuple[Any, Callable[[Any], Awaitable[int]]]:
    sys.path.insert(0, src)
    from blackwell_doctor.collect.bench import client

    body = client.request_body(model="m", prompt="word " * 24, max_tokens=output, ignore_eos=True)
    session = aiohttp.ClientSession(
        connector=client.Pool(streams),
        timeout=aiohttp.ClientTimeout(total=None),
        read_bufsize=1 << 20,
    )

    async def one(s: Any) -> int:
        o = await client.stream_chat(s, url, body, {}, deadline_s=600, max_tokens=output)
        return int(o.completion_tokens or 0) if o.ok else 0

    return session, one


def vllm(url: str, streams: int, output: int) -> tuple[Any, Callable[[Any], Awaitable[int]]]:
    from vllm.benchmarks.lib.endpoint_request_func import (  # type: ignore[import-not-found]
        RequestFuncInput,
        async_request_openai_chat_completions,
    )

    # As vllm/benchmarks/serve.py's benchmark() makes it (vLLM 0.32.0).
    connector = aiohttp.TCPConnector(
        limit=streams,
        limit_per_host=streams,
        ttl_dns_cache=300,
        use_dns_cache=True,
        keepalive_timeout=60,
        enable_cleanup_closed=True,
        force_close=False,
    )
    session = aiohttp.ClientSession(
        connector=connector, trust_env=True, timeout=aiohttp.ClientTimeout(total=6 * 60 * 60)
    )
    request = RequestFuncInput(
        prompt="word " * 24,
        api_url=url,
        prompt_len=32,
        output_len=output,
        model="m",
        ignore_eos=True,
    )

    async def one(s: Any) -> int:
        o = await async_request_openai_chat_completions(request, s)
        return int(o.output_tokens or 0) if o.success else 0

    return session, one


async def main() -> None:
    which, base, streams, requests, output = sys.argv[1:6]
    url = base.rstrip("/") + "/v1/chat/completions"
    src = sys.argv[6] if len(sys.argv) > 6 else str(Path(__file__).resolve().parents[1] / "src")
    session, one = (
        ours(url, int(streams), int(output), src)
        if which == "ours"
        else vllm(url, int(streams), int(output))
    )
    left = iter(range(int(requests)))
    tokens = 0

    async def user() -> None:
        nonlocal tokens
        for _ in left:
            got = await one(session)
            tokens += got

    async with session:
        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.gather(*(user() for _ in range(int(streams))))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(
        json.dumps(
            {
                "client": which,
                "cpu_s": cpu,
                "wall_s": wall,
                "tokens": tokens,
                "cpu_us_per_token": cpu / max(tokens, 1) * 1e6,
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
