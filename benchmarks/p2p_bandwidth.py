"""GPU peer-to-peer: blackwell-doctor's measurement next to a reference made another way.

Runs the P2P test (``measure_p2p``: one child per pair, cuMemcpyPeerAsync timed with CUDA
events) and prints its table and verdicts; then, in this process, times the same copies
through PyTorch (``dst.copy_(src, non_blocking=True)`` between devices, which is what
``tensor.to('cuda:1')`` does after allocating) with torch.cuda events: each direction alone
on the source GPU's stream, and both directions at once on separate streams. Both sides
time alike: one warm-up trial, then 3 trials of N copies issued back to back between two
CUDA events (so the host's launch latency is not counted), the median trial's rate.
Prints ours / reference per pair and direction (target: within 10%).

    PYTHONPATH=src python3 benchmarks/p2p_bandwidth.py [--size-mib 256] [--iterations 5]
        [--repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from blackwell_doctor.collect.probe.p2p import P2PRun, measure_p2p
from blackwell_doctor.collect.probe.p2p_protocol import P2PJob
from blackwell_doctor.facts.document import P2PProbeFacts, Unavailable
from blackwell_doctor.rules.p2p import pair_verdict

TRIALS = P2PJob(gpu_a=0, gpu_b=1, size_bytes=0).trials
Key = tuple[int, int, str]  # (gpu_a, gpu_b, "a-to-b" | "b-to-a" | "bidi")


def _as_probe(measured: P2PProbeFacts | Unavailable) -> str:
    """The run as ``probe --p2p`` shows it: p2p.transfer on this host's facts, the pair
    matrix under it."""
    import os
    import sys

    from blackwell_doctor.app.obtain import FactsRequest, obtain_facts
    from blackwell_doctor.render import Format, render
    from blackwell_doctor.rules.presets import judge_p2p

    host = obtain_facts(FactsRequest(probes=False), environ=os.environ, stdin=sys.stdin.buffer)
    return render(judge_p2p(host.facts, measured), Format.RICH, color=False)


def ours(run: P2PRun) -> dict[Key, float]:
    values: dict[Key, float] = {}
    for pair in run.runs:
        for (kind, direction), gbps in pair.bandwidth.items():
            if kind == "uni":
                values[(pair.gpu_a, pair.gpu_b, direction)] = gbps
            elif kind == "bidi":
                values[(pair.gpu_a, pair.gpu_b, "bidi")] = gbps
    return values


def torch_reference(
    pairs: list[tuple[int, int]], size: int, iterations: int, trials: int
) -> dict[Key, float]:
    torch: Any = importlib.import_module("torch")
    values: dict[Key, float] = {}
    for a, b in pairs:
        values.update(_reference_pair(torch, a, b, size, iterations, trials))
        torch.cuda.empty_cache()
    return values


def _reference_pair(
    torch: Any, a: int, b: int, size: int, iterations: int, trials: int
) -> dict[Key, float]:
    da, db = torch.device("cuda", a), torch.device("cuda", b)
    src = {
        a: torch.randint(0, 255, (size,), dtype=torch.uint8, device=da),
        b: torch.randint(0, 255, (size,), dtype=torch.uint8, device=db),
    }
    dst = {
        a: torch.empty(size, dtype=torch.uint8, device=da),
        b: torch.empty(size, dtype=torch.uint8, device=db),
    }
    a1, a2 = torch.cuda.Stream(da), torch.cuda.Stream(da)
    b1, b2 = torch.cuda.Stream(db), torch.cuda.Stream(db)

    def one_way(s: int, t: int, copy_stream: Any, other: Any) -> None:
        # copy_ between devices runs on the source device's current stream, after a
        # barrier with the destination device's current stream.
        with torch.cuda.stream(copy_stream), torch.cuda.stream(other):
            dst[t].copy_(src[s], non_blocking=True)

    def timed(stream: Any, issue: Callable[[Any], None], bytes_moved: int) -> float:
        # As the P2P child times: a warm-up trial, then `trials` trials of `iterations`
        # copies back to back between two events; the median trial's rate.
        samples = []
        for trial in range(trials + 1):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record(stream)
            for _ in range(iterations):
                issue(start)
            end.record(stream)
            end.synchronize()
            if trial:
                samples.append(float(start.elapsed_time(end)) / iterations)
        return round(bytes_moved / (statistics.median(samples) * 1e-3) / 1e9, 3)

    def both(start: Any) -> None:
        # One stream pair per direction, so PyTorch's cross-device barriers do not
        # serialise the two copies.
        b2.wait_event(start)
        one_way(a, b, a1, b1)
        one_way(b, a, b2, a2)
        a1.wait_stream(b2)

    values: dict[Key, float] = {
        (a, b, "a-to-b"): timed(a1, lambda _start: one_way(a, b, a1, b1), size),
        (a, b, "b-to-a"): timed(b1, lambda _start: one_way(b, a, b1, a1), size),
        (a, b, "bidi"): timed(a1, both, 2 * size),
    }
    torch.cuda.synchronize(da)
    torch.cuda.synchronize(db)
    # The reference's copies must be right too.
    assert torch.equal(dst[b].to(da), src[a]), "reference copy a->b wrong"
    assert torch.equal(dst[a].to(db), src[b]), "reference copy b->a wrong"
    return values


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3, help="alternate ours/reference runs")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--json", help="write every number here")
    args = parser.parse_args(argv)
    size = args.size_mib << 20

    ours_runs: list[dict[Key, float]] = []
    ref_runs: list[dict[Key, float]] = []
    facts_json: list[Any] = []
    pairs: list[tuple[int, int]] = []
    for repeat in range(args.repeat):
        started = time.monotonic()
        run = measure_p2p(timeout_s=args.timeout, size_bytes=size, iterations=args.iterations)
        if isinstance(run, Unavailable):
            print(_as_probe(run))
            return 3
        took = time.monotonic() - started
        print(f"== run {repeat + 1}: blackwell-doctor measure_p2p ({took:.1f} s)")
        print(_as_probe(run.facts))
        for pair_run, pair in zip(run.runs, run.facts.pairs, strict=True):
            if pair_verdict(pair).verdict != "works" and pair_run.stderr_tail:
                tail = pair_run.stderr_tail.decode("utf-8", "replace")
                print(f"-- GPU{pair.gpu_a}<->GPU{pair.gpu_b} child stderr (tail):\n{tail}")
        facts_json.append(json.loads(_encode(run.facts)))
        ours_runs.append(ours(run))
        pairs = [(p.gpu_a, p.gpu_b) for p in run.facts.pairs if p.can_access_peer is True]
        if not args.no_torch and pairs:
            ref_runs.append(torch_reference(pairs, size, args.iterations, TRIALS))

    keys = sorted({k for r in ours_runs for k in r})
    print(
        f"== ours vs PyTorch reference ({args.size_mib} MiB; per run the median of {TRIALS} "
        f"trials of {args.iterations} back-to-back copies; median over {args.repeat} runs)"
    )
    head = f"{'pair':<8} {'direction':<9} {'ours GB/s':>10} {'torch GB/s':>11} {'ratio':>7}"
    print(head + "  runs (ours / torch)")
    rows: list[dict[str, Any]] = []
    ratios: list[float] = []
    for key in keys:
        mine = [r[key] for r in ours_runs if key in r]
        ref = [r[key] for r in ref_runs if key in r]
        m = statistics.median(mine)
        t = statistics.median(ref) if ref else None
        ratio = m / t if t else None
        if ratio is not None:
            ratios.append(ratio)
        rows.append(
            {
                "pair": f"{key[0]}-{key[1]}",
                "direction": key[2],
                "ours_gbps": mine,
                "torch_gbps": ref,
                "ratio": ratio,
            }
        )
        direction = {"a-to-b": f"{key[0]}->{key[1]}", "b-to-a": f"{key[1]}->{key[0]}"}.get(
            key[2], "both"
        )
        runs = " ".join(f"{x:.1f}" for x in mine) + " / " + " ".join(f"{x:.1f}" for x in ref)
        print(
            f"{key[0]}-{key[1]:<6} {direction:<9} {m:>10.1f} "
            f"{(f'{t:.1f}' if t else '-'):>11} {(f'{ratio:.3f}' if ratio else '-'):>7}  {runs}"
        )
    worst = [abs(r - 1) for r in ratios]
    if worst:
        print(f"largest deviation from the reference: {max(worst) * 100:.1f}% (target 10%)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "size_bytes": size,
                    "iterations": args.iterations,
                    "facts": facts_json,
                    "comparison": rows,
                },
                f,
                indent=2,
            )
    return 0


def _encode(obj: Any) -> bytes:
    import msgspec

    return msgspec.json.encode(obj)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
