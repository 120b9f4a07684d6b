"""Peak RSS of ``bench`` against the hostile servers and shapes of issue 19, each a fresh
process under ``/usr/bin/time -v`` (and an address-space limit, so that a case that grows
without bound stops with MemoryError instead of taking the machine):

- ``count1``: /tokenize always answers {"count": 1} (the issue measured 3.3 GB, MemoryError,
  exit 4), beside ``honest``: the same shape against a /tokenize that counts;
- ``huge``: a shape of input_tokens 10,000,000 x concurrency 10,000 against a server whose
  max_model_len is 10^30 (the issue: 2.8 GB and 100 MemoryError tracebacks); ``huge100``
  the same with 100 requests;
- ``limit``: the largest shape the limits accept at that size (10,000,000 tokens x
  concurrency 5 = 50,000,000 tokens in flight) against the same server, 5 requests.

The server runs in this process (a thread); ``--src`` picks the tree whose CLI is measured,
e.g. an export of the revision before the fix:

    git archive bbb580d src | tar -x -C /tmp/old
    .venv/bin/python benchmarks/bench_inputs_memory.py --src /tmp/old/src
    .venv/bin/python benchmarks/bench_inputs_memory.py
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from aiohttp import web

REPO = Path(__file__).resolve().parents[1]
SHAPES = {
    "count1": "[shape.s]\ninput_tokens = 128\noutput_tokens = 16\nrequests = 2\n",
    "honest": "[shape.s]\ninput_tokens = 128\noutput_tokens = 16\nrequests = 2\n",
    "huge": "[shape.s]\ninput_tokens = 10000000\noutput_tokens = 16\nconcurrency = 10000\n",
    "huge100": (
        "[shape.s]\ninput_tokens = 10000000\noutput_tokens = 16\nconcurrency = 10000\n"
        "requests = 100\n"
    ),
    "limit": (
        "[shape.s]\ninput_tokens = 10000000\noutput_tokens = 16\nconcurrency = 5\n"
        "requests = 5\nwarmup = 0\n"
    ),
}


def serve(counting: dict[str, bool]) -> int:
    """A server on 127.0.0.1 (a thread); /tokenize answers 1 while counting["one"]."""

    async def models(_: web.Request) -> web.Response:
        text = '{"data": [{"id": "m", "max_model_len": 1000000000000000000000000000000}]}'
        return web.Response(text=text, content_type="application/json")

    async def tokenize(request: web.Request) -> web.Response:
        body = await request.read()
        count = 1 if counting["one"] else len(body) // 6
        return web.json_response({"count": count})

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(
            b'data: {"choices": [{"index": 0, "delta": {"content": "ok"}}]}\n\n'
            b'data: {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 1}}\n\n'
            b"data: [DONE]\n\n"
        )
        return response

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    async def up() -> int:
        app = web.Application(client_max_size=1 << 31)
        app.router.add_get("/v1/models", models)
        app.router.add_post("/tokenize", tokenize)
        app.router.add_post("/v1/chat/completions", chat)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return int(runner.addresses[0][1])

    return asyncio.run_coroutine_threadsafe(up(), loop).result(10)


def measure(src: Path, args: list[str], limit: int) -> tuple[int, float, int, int]:
    """Exit code, seconds, peak RSS (MB) and tracebacks printed of ``bench ARGS``."""
    command = [
        "prlimit",
        f"--as={limit}",
        "/usr/bin/time",
        "-v",
        sys.executable,
        "-m",
        "blackwell_doctor",
        *args,
    ]
    env = {**os.environ, "PYTHONPATH": str(src)}
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    took = time.monotonic() - started
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    status = re.search(r"Exit status: (\d+)", done.stderr)
    if rss is None:
        raise SystemExit(f"no RSS from /usr/bin/time: {done.stderr[-500:]}")
    code = int(status.group(1)) if status else done.returncode
    tracebacks = done.stderr.count("Traceback")
    return code, took, int(rss.group(1)) // 1000, tracebacks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", type=Path, default=REPO / "src")
    parser.add_argument("--cases", default="honest,count1,huge,huge100,limit")
    parser.add_argument("--limit-gb", type=float, default=4.0, help="address-space limit")
    args = parser.parse_args()
    counting = {"one": False}
    port = serve(counting)
    workdir = Path(tempfile.mkdtemp())
    print(f"CLI from {args.src}; address space limited to {args.limit_gb:g} GB")
    for case in args.cases.split(","):
        counting["one"] = case == "count1"
        shapes = workdir / f"{case}.toml"
        shapes.write_text(SHAPES[case])
        argv = ["bench", "--url", f"http://127.0.0.1:{port}", "--shapes", str(shapes)]
        argv += ["--shape", "s", "--no-equivalence", "-f", "json"]
        code, took, rss, tracebacks = measure(args.src, argv, int(args.limit_gb * 1e9))
        print(
            f"{case:>8}: exit {code}, {took:6.1f} s, peak RSS {rss:>5} MB, "
            f"{tracebacks} tracebacks on stderr",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
