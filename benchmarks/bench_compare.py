"""``bench --compare`` cost: the bounded bootstrap against the implementation before it
(``git show REV:src/blackwell_doctor/bench/compare.py``, default bbb580d), side by side on
the same two generated runs, in this process.

Issue 19 measured the old one at 104 s for 300,000 samples at 100 resamples. Each case
prints both times and the ratio; the old one is run at ``--old-resamples`` (default 100)
and, when that differs from ``--resamples``, its time is also scaled linearly (its cost is
linear in the resamples) to the new one's count.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_compare.py
    PYTHONPATH=src .venv/bin/python benchmarks/bench_compare.py --cases 300000x4 --old-resamples 100
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

from blackwell_doctor.facts.document import ToolInfo
from blackwell_doctor.report.bench import (
    BenchRun,
    EquivalenceOutput,
    RequestSample,
    ServerInfo,
    ShapeResult,
)
from blackwell_doctor.report.bench_metrics import shape_metrics
from blackwell_doctor.rules import compare as new

REPO = Path(__file__).resolve().parents[1]


def old_module(rev: str) -> ModuleType:
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{rev}:src/blackwell_doctor/bench/compare.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "old_compare.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("old_compare", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(n: int, gaps: int, scale: float, seed: int) -> BenchRun:
    rng = random.Random(seed)
    samples = [
        RequestSample(
            ok=True,
            ttft_ms=scale * rng.lognormvariate(4.0, 0.3),
            e2e_ms=scale * rng.lognormvariate(7.0, 0.2),
            itl_ms=[scale * rng.lognormvariate(2.3, 0.4) for _ in range(gaps)],
            output_tokens=gaps + 1,
        )
        for _ in range(n)
    ]
    metrics = shape_metrics(
        samples, duration_s=10.0, reasoning_estimates=[None] * n, server_generation_tokens=None
    )
    shape = ShapeResult(
        name="s",
        description="",
        concurrency=32,
        input_tokens=128,
        input_tokens_requested=128,
        input_size_source="tokenize",
        output_tokens_max=gaps + 1,
        requests=n,
        completed=n,
        errors={},
        duration_s=10.0,
        complete=True,
        metrics=metrics,
        server=None,
        equivalence=[EquivalenceOutput(prompt_id="count", ok=True, text="x")],
        samples=samples,
        notes=[],
    )
    server = ServerInfo(
        url="u", model="m", models=["m"], max_model_len=None,
        metrics_endpoint=False, tokenize_endpoint=False,
    )  # fmt: skip
    return BenchRun(
        schema_version=2,
        tool=ToolInfo(name="t", version="0"),
        started_at="",
        seed=0,
        server=server,
        complete=True,
        interrupted=False,
        findings=[],
        shapes=[shape],
        exit_code=0,
    )


def timed(module: ModuleType, before: BenchRun, after: BenchRun, resamples: int) -> float:
    started = time.perf_counter()
    module.compare(before, after, before_name="a", after_name="b", resamples=resamples)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", default="bbb580d")
    parser.add_argument(
        "--cases",
        default="64x127,1000x127,300000x4",
        help="REQUESTSxGAPS per run, comma-separated",
    )
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--old-resamples", type=int, default=100)
    args = parser.parse_args()
    old = old_module(args.rev)
    print(
        f"new: at most {new.MAX_BOOTSTRAP_REQUESTS} requests and {new.MAX_BOOTSTRAP_GAPS} "
        f"ITL gaps per run and shape; old: {args.rev}"
    )
    for case in args.cases.split(","):
        n, gaps = (int(x) for x in case.split("x"))
        before, after = run(n, gaps, 1.0, 1), run(n, gaps, 1.1, 2)
        t_new = timed(new, before, after, args.resamples)
        t_old = timed(old, before, after, args.old_resamples)
        scaled = t_old * args.resamples / args.old_resamples
        print(
            f"{n:>7} requests x {gaps:>3} gaps: new {t_new:7.2f} s at {args.resamples} "
            f"resamples; old {t_old:7.2f} s at {args.old_resamples}"
            + (
                f" (~{scaled:.1f} s at {args.resamples})"
                if args.old_resamples != args.resamples
                else ""
            )
            + f"; old/new {scaled / t_new:.1f}x at equal resamples",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
