"""Where `bench --trace`'s memory grows: its resident set sampled every 0.1 s while it replays
N evenly spaced requests against benchmarks/bench_client.py's instant server (issue 35,
"memory flat in the number of requests").

Printed per N: the RSS at each tenth of the process's life (on a quiet machine the send
window, N / RATE s, is nearly all of it: start-up before, the document after), the peak and
when it came, and the growth per request sent between 20% and 80% of its life (what the
requests in flight and what is kept of each add while sending); then the peak RSS of each
process below it (its client processes: ``bench_client.py --memory`` reads the peak of the
bench process and its descendants together, ``wait4``'s ru_maxrss).

    python benchmarks/memory_phases.py [--rate 1000] [--requests 40000 160000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_client  # this folder's: the instant server and the trace writer


def rss_kib(pid: int, field: str = "VmRSS") -> int | None:
    """``field`` of /proc/PID/status in KiB (VmRSS: now; VmHWM: the peak so far)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (Linux: /proc/PID/task/*/children)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except (OSError, ValueError):
                continue
            out += kids
            todo += kids
    return out


def one(url: str, rate: float, n: int, work: Path) -> None:
    trace = work / f"even-{n}.jsonl"
    bench_client.write_trace(trace, rate, n, 16)
    argv = [sys.executable, "-m", "blackwell_doctor", "bench", "--url", url, "--model", "m"]
    argv += ["--trace", str(trace), "--client-processes", "1", "-f", "json"]
    argv += ["-o", str(work / f"run-{n}.json")]
    start = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    series: list[tuple[float, int]] = []
    clients: dict[int, int] = {}  # its client processes' peak RSS (KiB), by pid
    hwm = 0  # the bench process's own peak (VmHWM), read until it exits
    while True:
        kib = rss_kib(child.pid)
        if kib is not None:
            series.append((time.perf_counter() - start, kib))
        hwm = max(hwm, rss_kib(child.pid, "VmHWM") or 0)
        for pid in descendants(child.pid):
            kib = rss_kib(pid)
            if kib is not None:
                clients[pid] = max(clients.get(pid, 0), kib)
        # Not reaped yet: a zombie's /proc/PID/status keeps no memory lines, so the peak
        # is read while it runs; wait4 gives the tree's (ru_maxrss) at the end.
        done, status, usage = os.wait4(child.pid, os.WNOHANG)
        if done:
            child.returncode = os.waitstatus_to_exitcode(status)
            break
        time.sleep(0.1)
    end = series[-1][0]

    def at(t: float) -> float:
        before = [k for s, k in series if s <= t]
        return (before[-1] if before else series[0][1]) / 1024

    peak_t, peak = max(series, key=lambda p: p[1])
    tenths = [at(end * f / 10) for f in range(1, 11)]
    # Between 20% and 80% of its life the process is sending (the window is N / RATE s of
    # a life that is it plus the start-up and the document: ~95% on a quiet machine).
    slope = (tenths[7] - tenths[1]) * 1048576 / (0.6 * end * rate)
    print(
        f"{n:>7} requests, rc {child.returncode}, {end:.1f} s (the window {n / rate:.1f} s): "
        f"RSS MiB at each tenth of its life {' '.join(f'{m:.1f}' for m in tenths)}; peak "
        f"{peak / 1024:.1f} at {peak_t:.1f} s; {slope:.0f} B a request sent between 20% and 80%"
    )
    print(
        f"{'':>9}bench's own peak (VmHWM, last read) {hwm / 1024:.1f} MiB; with its "
        f"descendants (wait4 ru_maxrss) {usage.ru_maxrss / 1024:.1f} MiB"
    )
    shown = ", ".join(f"{kib / 1024:.1f}" for kib in sorted(clients.values(), reverse=True)[:4])
    print(f"{'':>9}its {len(clients)} child process(es), peak RSS MiB: {shown or '-'}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--requests", type=int, nargs="+", default=[40000, 160000])
    args = ap.parse_args()
    port = bench_client.free_port()
    server = subprocess.Popen([sys.executable, "-c", bench_client.SERVER, str(port), "16", "8"])
    try:
        bench_client.wait_up(port)
        with tempfile.TemporaryDirectory() as tmp:
            for n in args.requests:
                one(f"http://127.0.0.1:{port}", args.rate, n, Path(tmp))
    finally:
        server.terminate()
        server.wait(10)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
