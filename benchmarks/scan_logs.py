"""scan-logs against ``grep -E -f`` on the same generated runtime log, in the same run.

Generates a vLLM-like log (default 256 MiB: request, throughput, scheduler lines with a
sprinkling of catalogue signatures), writes the catalogue's literals as an ERE pattern
file, then times ``blackwell-doctor scan-logs --format json`` and ``grep -E -n -f`` (output
to a file: grep stops at the first match when writing to /dev/null) and prints both times,
the ratio and each child's peak RSS. Run twice with different sizes to see memory stay flat.

    .venv/bin/python benchmarks/scan_logs.py [--mib 256] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from blackwell_doctor.logs.catalogue import load_catalogue

_TEMPLATES = [
    "(EngineCore pid={p}) INFO {mm:02d}-{dd:02d} {h:02d}:{m:02d}:{s:02d} [loggers.py:{l}] "
    "Engine 000: Avg prompt throughput: {a:.1f} tokens/s, Avg generation throughput: {b:.1f} "
    "tokens/s, Running: {r} reqs, Waiting: 0 reqs, GPU KV cache usage: {c:.1f}%, Prefix cache "
    "hit rate: {d:.1f}%",
    '(APIServer pid={p}) INFO:     172.17.0.{r}:{l} - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    "(APIServer pid={p}) INFO {mm:02d}-{dd:02d} {h:02d}:{m:02d}:{s:02d} [logger.py:{l}] Received "
    "request chatcmpl-{x:032x}: prompt: '<|im_start|>user\\nSummarise the following text in {r} "
    "words', params: SamplingParams(n=1, temperature={a:.2f}, top_p=0.95, max_tokens={l}), "
    "lora_request: None.",
    "(EngineCore pid={p}) DEBUG {mm:02d}-{dd:02d} {h:02d}:{m:02d}:{s:02d} [core.py:{l}] "
    "EngineCore loop active, {r} requests scheduled, {c:.3f} ms step",
    "\x1b[32m(Worker_TP{r} pid={p})\x1b[0m INFO {mm:02d}-{dd:02d} {h:02d}:{m:02d}:{s:02d} "
    "[gpu_model_runner.py:{l}] Graph capturing finished in {a:.0f} secs, took {c:.2f} GiB",
]
_BLOCK_BYTES = 4 << 20
_SIGNATURE_RATE = 1e-4  # about one signature line per 10,000 lines


def _literals() -> list[str]:
    cat = load_catalogue()
    found = {lit for s in cat.signatures for lit in s.literals}
    return sorted(found | {lit for m in cat.markers for lit in m.literals})


def generate(path: Path, mib: int, seed: int = 1) -> int:
    """Write ``mib`` MiB built from 8 distinct 4 MiB blocks; returns signature lines."""
    rng = random.Random(seed)
    literals = _literals()
    blocks: list[tuple[bytes, int]] = []
    for _ in range(8):
        out: list[str] = []
        size = hits = 0
        while size < _BLOCK_BYTES:
            if rng.random() < _SIGNATURE_RATE:
                line = (
                    "(EngineCore pid=282) WARNING 06-01 21:52:09 [nvfp4.py:231] "
                    + rng.choice(literals)
                    + " (benchmark)"
                )
                hits += 1
            else:
                line = rng.choice(_TEMPLATES).format(
                    p=rng.randint(100, 99999), mm=6, dd=1, h=rng.randint(0, 23),
                    m=rng.randint(0, 59), s=rng.randint(0, 59), l=rng.randint(10, 9999),
                    a=rng.random() * 1000, b=rng.random() * 1000, r=rng.randint(0, 7),
                    c=rng.random() * 100, d=rng.random() * 100, x=rng.getrandbits(128),
                )  # fmt: skip
            out.append(line)
            size += len(line) + 1
        blocks.append((("\n".join(out) + "\n").encode(), hits))
    total = 0
    with open(path, "wb") as fh:
        for _ in range(mib // 4):
            data, hits = blocks[rng.randrange(len(blocks))]
            fh.write(data)
            total += hits
    return total


def write_patterns(path: Path) -> None:
    escaped = [re.sub(r"([][\\.^$*+?(){}|])", r"\\\1", lit) for lit in _literals()]
    path.write_text("\n".join(escaped) + "\n", encoding="utf-8")


# The installed CLI, with scan-logs registered if cli.py does not do it yet.
_RUN_CLI = (
    "import sys; from blackwell_doctor import cli; from blackwell_doctor.cli_logs import register;"
    "names = [c.name for c in cli.app.registered_commands];"
    "'scan-logs' in names or register(cli.app);"
    "sys.exit(cli.main(sys.argv[1:]))"
)


def measure(args: list[str], out: Path) -> tuple[float, int, int]:
    """Run in a fresh interpreter so RUSAGE_CHILDREN covers only this command."""
    code = (
        "import resource,subprocess,sys,time,json;"
        "t=time.perf_counter();"
        f"p=subprocess.run({args!r},stdout=open({str(out)!r},'wb'),stderr=subprocess.DEVNULL);"
        "w=time.perf_counter()-t;"
        "print(json.dumps([w,resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,p.returncode]))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, text=True)
    wall, rss, rc = json.loads(res.stdout)
    return float(wall), int(rss), int(rc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256, help="log size in MiB (multiple of 4)")
    parser.add_argument("--keep", type=Path, help="directory to keep the log and outputs in")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the best is kept")
    ns = parser.parse_args()
    work = ns.keep or Path(tempfile.mkdtemp(prefix="scan-logs-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    log, patterns = work / "runtime.log", work / "patterns.txt"
    t0 = time.perf_counter()
    planted = generate(log, ns.mib)
    write_patterns(patterns)
    print(f"generated {log.stat().st_size / 2**20:.0f} MiB, {planted} signature lines, "
          f"in {time.perf_counter() - t0:.1f} s")  # fmt: skip
    doctor = [sys.executable, "-c", _RUN_CLI, "scan-logs", "--format", "json", str(log)]
    grep_env = ["env", f"LC_ALL={os.environ.get('BENCH_GREP_LOCALE', 'C.UTF-8')}"]
    grep = [*grep_env, "grep", "-E", "-n", "-f", str(patterns), str(log)]
    subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)  # warm the cache
    best: dict[str, tuple[float, int, int]] = {}
    for _ in range(ns.repeat):
        for name, args, out in (
            ("grep", grep, work / "grep.out"),
            ("scan-logs", doctor, work / "scan.json"),
        ):
            result = measure(args, out)
            if name not in best or result[0] < best[name][0]:
                best[name] = result
    report = json.loads((work / "scan.json").read_text(encoding="utf-8"))
    found = sum(f["count"] for f in report["findings"])
    with open(work / "grep.out", "rb") as fh:
        grep_lines = sum(1 for _ in fh)
    g, s = best["grep"], best["scan-logs"]
    print(f"grep -E -n -f : {g[0]:6.2f} s  peak RSS {g[1] / 1024:7.1f} MiB  ({grep_lines} lines)")
    print(f"scan-logs     : {s[0]:6.2f} s  peak RSS {s[1] / 1024:7.1f} MiB  "
          f"({found} occurrences, exit {s[2]})")  # fmt: skip
    print(f"ratio scan-logs / grep: {s[0] / g[0]:.2f}x (target <= 1.5x)")
    if ns.keep is None:
        for p in work.iterdir():
            p.unlink()
        work.rmdir()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
