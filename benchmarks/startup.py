"""Start-up cost of the CI gate on a host without a GPU.

Times `blackwell-doctor check --no-probe --format json` (a live collection: procfs, sysfs,
the NVML/libcuda presence test) against `python -c "import typer"` in the same run, both
with the same interpreter. Target from issue 2: at most 3x the baseline.

    python benchmarks/startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def _time(argv: list[str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, timeout=120, check=False)
        out.append(time.perf_counter() - start)
        if proc.returncode not in (0, 1, 3):  # findings are fine; usage/internal are not
            sys.exit(f"{argv} exited {proc.returncode}: {proc.stderr.decode()[-500:]}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    py = sys.executable
    baseline_argv = [py, "-c", "import typer"]
    tool_argv = [py, "-m", "blackwell_doctor", "check", "--no-probe", "--format", "json"]
    _time(tool_argv, 2)  # warm the page cache and .pyc files for both
    _time(baseline_argv, 2)
    base = _time(baseline_argv, args.runs)
    tool = _time(tool_argv, args.runs)
    b, t = statistics.median(base), statistics.median(tool)
    print(f"runs per command: {args.runs} (medians; min in brackets)")
    print(
        f"baseline  python -c 'import typer'          {b * 1000:7.1f} ms  [{min(base) * 1000:.1f}]"
    )
    print(
        f"tool      check --no-probe --format json    {t * 1000:7.1f} ms  [{min(tool) * 1000:.1f}]"
    )
    print(f"ratio     {t / b:.2f}x   (target <= 3.00x: {'met' if t / b <= 3 else 'NOT met'})")


if __name__ == "__main__":
    main()
