"""Peak memory of what `bench` does with a run's measured requests once they are in: the
columns (report/sample_table.py), the metrics (report/bench_metrics.py: every percentile
exact) and the JSON written a batch at a time, N requests of 16 answer tokens, each N in a
fresh process. No network and no server: what the bench process adds per request, apart
from sending (benchmarks/bench_client.py --memory measures a whole `bench --trace`).

    python benchmarks/build_memory.py [10000 40000 160000]

Printed per N: the process's peak RSS (ru_maxrss), tracemalloc's peak of what Python
allocated after the imports, and the growth per request between the smallest and largest N.
"""

from __future__ import annotations

import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import tracemalloc
from collections.abc import Sequence
from typing import overload


class _NoEstimates(Sequence[None]):
    """``n`` requests without a reasoning estimate (no list of them)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    @overload
    def __getitem__(self, index: int) -> None: ...

    @overload
    def __getitem__(self, index: slice) -> list[None]: ...

    def __getitem__(self, index: int | slice) -> list[None] | None:
        if isinstance(index, slice):
            return [None] * len(range(*index.indices(self.n)))
        if not -self.n <= index < self.n:
            raise IndexError("estimate index out of range")
        return None


def one(n: int) -> dict[str, float]:
    from pathlib import Path

    import msgspec

    from blackwell_doctor.app.bench import spill_sorted
    from blackwell_doctor.cli.output import write
    from blackwell_doctor.render.bench import encode_parts
    from blackwell_doctor.report.bench import BenchRun, RequestSample
    from blackwell_doctor.report.bench_metrics import shape_metrics, stats_ms
    from blackwell_doctor.report.sample_table import SampleTable
    from blackwell_doctor.report.stats import rank_points

    real = Path(__file__).resolve().parents[1] / "tests/fixtures/bench/tiny-moe-vllm-cpu.json"
    base = msgspec.json.decode(real.read_bytes(), type=BenchRun)
    rng = random.Random(n)
    tracemalloc.start()
    # As a replay keeps them (app/replay.py): past their first values, columns in one
    # unnamed temporary file.
    table = SampleTable(tempfile.TemporaryFile)
    lateness = table.floats()
    for k in range(n):
        gaps = [rng.uniform(0.001, 0.01) for _ in range(15)]
        table.append(
            RequestSample(
                ok=True,
                start_ms=k * 1.0,
                ttft_ms=rng.uniform(0.1, 1.0),
                e2e_ms=rng.uniform(1.0, 2.0),
                itl_ms=gaps,
                prompt_tokens=32,
                output_tokens=16,
            )
        )
        lateness.append(rng.uniform(0.0, 0.001))
    with spill_sorted():  # as a bench run takes them
        metrics = shape_metrics(
            table,
            duration_s=n / 1000.0,
            reasoning_estimates=_NoEstimates(n),  # (the replay's: a column of the file)
            server_generation_tokens=None,
        )
        stats_ms(lateness)
        rank_points(lateness, 201)
    shape = msgspec.structs.replace(base.shapes[0], samples=table, metrics=metrics)
    doc = msgspec.structs.replace(base, shapes=[shape])
    write(encode_parts(doc), Path(os.devnull))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {
        "n": n,
        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "traced_peak_mib": peak / 1048576.0,
    }


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(one(int(sys.argv[2]))))
        return 0
    sizes = [int(a) for a in sys.argv[1:]] or [10_000, 40_000, 160_000]
    rows = []
    for n in sizes:
        run = subprocess.run(
            [sys.executable, __file__, "--one", str(n)], capture_output=True, text=True, check=True
        )
        rows.append(json.loads(run.stdout.splitlines()[-1]))
        r = rows[-1]
        print(
            f"{n:>8} requests: peak RSS {r['rss_mib']:7.1f} MiB, traced peak "
            f"{r['traced_peak_mib']:7.1f} MiB",
            flush=True,
        )
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        for key, what in (("rss_mib", "RSS"), ("traced_peak_mib", "traced peak")):
            per = (b[key] - a[key]) * 1048576 / (b["n"] - a["n"])
            print(f"{what}: {per:.0f} bytes a request ({a['n']}..{b['n']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
