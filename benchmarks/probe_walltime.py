"""Cold and warm wall time of the probes for the whole tile catalogue, and what they measured.

Cold: an empty NVRTC cache (a fresh BLACKWELL_DOCTOR_CACHE_DIR), so the probe kernels are
compiled. Warm: the same cache again (median of --warm-runs). Each is one ``run_probes``
call as ``probe`` makes it: a child process that imports cuda-python, initialises the
driver, loads (or compiles) the module, bisects the shared-memory limit and launches and
times every tile. Targets from issue 3: warm <= 2 s, cold <= 5 s.

Then, warm and interleaved (--warm-runs rounds), the GPU facts and the probes as ``check``
reads them: two children (``collect_gpu``, then ``run_probes``: before issue 24) against
one (``collect_gpu_and_probes``: one process, one CUDA initialisation), and whether both
read the same devices.

    python benchmarks/probe_walltime.py [--warm-runs 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import msgspec

from blackwell_doctor.collect.gpu import collect_gpu
from blackwell_doctor.collect.probe.runner import collect_gpu_and_probes, run_probes
from blackwell_doctor.facts.document import CudaFacts, ProbeFacts, TileProbe, Unavailable
from blackwell_doctor.ruledata.tiles import load_catalogue


def _once(timeout_s: float) -> tuple[float, ProbeFacts | Unavailable]:
    _fmt, tiles = load_catalogue()
    start = time.perf_counter()
    facts = run_probes(tiles=tiles, timeout_s=timeout_s)
    return time.perf_counter() - start, facts


def _facts_and_probes(timeout_s: float, *, one_child: bool) -> tuple[float, object, object]:
    """check's GPU reads: (seconds, the CUDA devices, the probes' outcome)."""
    _fmt, tiles = load_catalogue()
    start = time.perf_counter()
    if one_child:
        _nvml, cuda, probes = collect_gpu_and_probes(tiles=tiles, probe_timeout_s=timeout_s)
    else:
        _nvml, cuda = collect_gpu()
        probes = run_probes(tiles=tiles, timeout_s=timeout_s)
    seconds = time.perf_counter() - start
    devices = (
        [(d.ordinal, d.name, d.compute_capability) for d in cuda.devices]
        if isinstance(cuda, CudaFacts)
        else cuda
    )
    outcome = (
        [(d.ordinal, d.smem_launch_limit, [t.launched for t in d.tiles]) for d in probes.devices]
        if isinstance(probes, ProbeFacts)
        else probes
    )
    return seconds, devices, outcome


def _one_child_vs_two(rounds: int, timeout_s: float) -> list[str]:
    times: dict[bool, list[float]] = {False: [], True: []}
    seen: dict[bool, set[str]] = {False: set(), True: set()}
    for i in range(rounds):
        for one in (False, True) if i % 2 == 0 else (True, False):
            seconds, devices, outcome = _facts_and_probes(timeout_s, one_child=one)
            times[one].append(seconds)
            seen[one].add(repr((devices, outcome)))
    two_s, one_s = statistics.median(times[False]), statistics.median(times[True])
    return [
        f"check's GPU facts + probes, warm, {rounds} interleaved rounds:",
        f"  two children (collect_gpu, run_probes): median {two_s:.3f} s",
        f"  one child (collect_gpu_and_probes):     median {one_s:.3f} s  ({one_s / two_s:.2f}x)",
        f"  same devices and outcomes: {seen[False] == seen[True] and len(seen[True]) == 1}",
        *(f"  read: {r}" for r in sorted(seen[False] | seen[True])),
    ]


def _fmt(value: object, spec: str = "") -> str:
    if value is None:
        return "-"
    return format(value, spec)


def _table(facts: ProbeFacts) -> list[str]:
    lines = []
    for device in facts.devices:
        lines.append(
            f"device {device.ordinal}: {device.name} cc={device.compute_capability} "
            f"compiled_as={device.compiled_as}"
        )
        lines.append(
            f"  opt-in attribute {device.smem_optin_attribute}  "
            f"bisected launch limit {device.smem_launch_limit}"
        )
        lines.append(
            f"  {'tile MxNxK':<14}{'K bytes':>8}{'stages':>7}{'smem B':>9}{'fits':>6}"
            f"{'launched':>9}{'k_iter':>7}{'time us':>10}{'GMAC/s':>9}  error"
        )
        for t in device.tiles:
            gmacs = t.macs_per_s / 1e9 if t.macs_per_s else None
            lines.append(
                f"  {f'{t.m}x{t.n}x{t.k}':<14}{t.k_bytes:>8}{t.stages:>7}{t.smem_bytes:>9,}"
                f"{t.fits!s:>6}{_fmt(t.launched):>9}{_fmt(t.k_iterations):>7}"
                f"{_fmt(t.time_us, '.1f'):>10}{_fmt(gmacs, '.0f'):>9}  {t.launch_error or ''}"
            )
        ratio = _k64_vs_k128(device.tiles)
        if ratio is not None:
            lines.append(f"  K=64 / K=128 throughput (128x128 tiles): {ratio:.3f}")
    return lines


def _k64_vs_k128(tiles: list[TileProbe]) -> float | None:
    rate = {(t.m, t.n, t.k): t.macs_per_s for t in tiles}
    k64, k128 = rate.get((128, 128, 64)), rate.get((128, 128, 128))
    if not k64 or not k128:
        return None
    return k64 / k128


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--warm-runs", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--json", type=Path, help="write the cold and last warm ProbeFacts here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bwd-nvrtc-") as cache:
        os.environ["BLACKWELL_DOCTOR_CACHE_DIR"] = cache
        cold_s, cold = _once(args.timeout)
        warm = [_once(args.timeout) for _ in range(args.warm_runs)]
        merged = _one_child_vs_two(args.warm_runs, args.timeout)
    if isinstance(cold, Unavailable):
        print(f"probes unavailable: {cold.reason}")
        return 1
    warm_s = [w for w, _ in warm]
    last = warm[-1][1]
    print(f"cold  (empty cache): {cold_s:.3f} s  cache={cold.cache}  child wall_s={cold.wall_s}")
    for i, (seconds, facts) in enumerate(warm):
        cache = facts.cache if isinstance(facts, ProbeFacts) else facts.reason
        print(f"warm #{i + 1}: {seconds:.3f} s  cache={cache}")
    print(f"warm median: {statistics.median(warm_s):.3f} s  (targets: warm <= 2 s, cold <= 5 s)")
    print("\n".join(merged))
    print(f"nvrtc {cold.nvrtc_version}")
    print("\n".join(_table(cold)))
    if isinstance(last, ProbeFacts):
        print("warm run:")
        print("\n".join(_table(last)))
    if args.json:
        args.json.write_bytes(
            msgspec.json.format(msgspec.json.encode({"cold": cold, "warm": last}), indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
