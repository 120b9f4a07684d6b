"""scan-logs of 10 MB of hits as ONE line against the same bytes as lines (issue 33: "a 10 MB
line of hits in about the time of the same bytes in lines"), in the same run, interleaved,
best of ``--repeat``, a fresh CLI process each (``python -m blackwell_doctor scan-logs
--format json``). The hit texts are what the vocabularies of issue 33 added to the
prefilter: a fatal vocabulary message, an enum name glued to other text, a generic
error-level record, and a mined fallback warning.

Baseline: the same bytes with a newline after each hit (every hit its own line). The goal
is a ratio near 1: a long line is searched in pieces with a small overlap, and only a
window around each hit is decoded (collect/logs/matcher.py), so its cost grows with its
bytes and hits, as lines do.

    .venv/bin/python benchmarks/scan_logs_long_line.py [--mb 10] [--repeat 3]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HITS = (
    "CUDA error: an illegal memory access was encountered ",
    "model output glued cudaErrorIllegalAddress ",
    "ERROR 06-01 21:52:09 [core.py:1] could not open the shard ",
    "warning: no usable GPU found, --gpu-layers option will be ignored ",
)


def write(path: Path, mb: int, newline: bool) -> None:
    unit = "".join(h + ("\n" if newline else "") for h in HITS).encode()
    count = mb * 1_000_000 // len(unit)
    path.write_bytes(unit * count + b"\n")


def once(path: Path) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "blackwell_doctor", "scan-logs", "--format", "json", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        lines, line = Path(tmp, "lines.log"), Path(tmp, "one-line.log")
        write(lines, args.mb, newline=True)
        write(line, args.mb, newline=False)
        best = {lines: float("inf"), line: float("inf")}
        for _ in range(args.repeat):
            for path in (lines, line):
                best[path] = min(best[path], once(path))
        size = line.stat().st_size / 1e6
        print(f"{size:.1f} MB of hits ({len(HITS)} texts), best of {args.repeat}, interleaved")
        print(f"  as lines (baseline)  {best[lines]:6.2f} s   1.00x")
        print(f"  as one line          {best[line]:6.2f} s   {best[line] / best[lines]:5.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
