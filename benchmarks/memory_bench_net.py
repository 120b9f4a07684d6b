"""Peak RSS of ``bench`` against the hostile servers of issue 19 (tests/hostile_http.py),
each beside a well-behaved server in the same run (``/usr/bin/time -v``, a fresh process
per case, one shape of one request, ``--request-timeout`` 5 s so that a case without a
bound ends at the deadline instead of running for 300 s):

- endless-events: valid chat-completion chunks of 1 MB of content each, for ever (the
  issue measured 1.0-1.2 GB in 5 s);
- endless-line: one SSE line that never ends (quadratic copying before the fix);
- endless-metrics / endless-models / endless-tokenize: a probe's 200 answer that never
  ends (the issue measured 4 GB within the 15 s probe deadline);
- gzip-metrics: the same as a gzip stream (1 MiB of spaces per ~1 kB sent).

Target: every hostile case within 100 MB of the well-behaved one. Exit 1 when missed.

    PYTHONPATH=src .venv/bin/python benchmarks/memory_bench_net.py [--src DIR] [--timeout S]

``--src`` runs another source tree (e.g. an export of the commit before the fix).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SERVER = REPO / "tests" / "hostile_http.py"
CASES = (
    "good",
    "endless-events",
    "endless-line",
    "endless-metrics",
    "endless-models",
    "endless-tokenize",
    "gzip-metrics",
)
SHAPES = "[shape.one]\ninput_tokens = 8\noutput_tokens = 7\nrequests = 1\nwarmup = 0\n"


def start_server(mode: str) -> tuple[subprocess.Popen[str], int]:
    """The hostile server of ``mode`` in a child process, once it listens: (child, port)."""
    child = subprocess.Popen(
        [sys.executable, str(SERVER), mode],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert child.stdout is not None
    line = child.stdout.readline()  # "port N" once listening (or EOF when it died)
    found = re.fullmatch(r"port (\d+)\n", line)
    if found is None:
        child.kill()
        child.wait(10)
        raise SystemExit(f"the {mode} server did not start: {line!r}")
    return child, int(found.group(1))


def measure(src: Path, url: str, shapes: Path, timeout: float) -> tuple[int, float, int]:
    """Exit code, seconds and peak RSS (MB) of ``bench --url URL``."""
    command = [
        "/usr/bin/time",
        "-v",
        sys.executable,
        "-m",
        "blackwell_doctor",
        "bench",
        "--url",
        url,
        "--shapes",
        str(shapes),
        "--shape",
        "one",
        "--no-equivalence",
        "--request-timeout",
        f"{timeout:g}",
        "-f",
        "json",
    ]
    started = time.monotonic()
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(src)},
    )
    took = time.monotonic() - started
    found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"no RSS from /usr/bin/time: {done.stderr[-500:]}")
    status = re.search(r"Exit status: (\d+)", done.stderr)
    code = int(status.group(1)) if status else done.returncode
    return code, took, int(found.group(1)) // 1000


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--src", type=Path, default=REPO / "src")
    parser.add_argument("--timeout", type=float, default=5.0)
    args = parser.parse_args()
    results: dict[str, tuple[int, float, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        shapes = Path(tmp) / "one.toml"
        shapes.write_text(SHAPES)
        for mode in CASES:
            child, port = start_server(mode)
            try:
                results[mode] = measure(args.src, f"http://127.0.0.1:{port}", shapes, args.timeout)
            finally:
                child.kill()
                child.wait(10)
            code, took, rss = results[mode]
            print(f"{mode:18} exit {code}  {took:5.1f} s  peak RSS {rss:5d} MB", flush=True)
    base = results["good"][2]
    missed = [m for m, (_, _, rss) in results.items() if rss > base + 100]
    if missed:
        print(f"over the target (good + 100 MB = {base + 100} MB): {', '.join(missed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
