"""What the collective test (issue 26) costs on this host: wall time of
``run_collective`` (NCCL all-reduce over every pair and all GPUs, one child per run, then
per pair the peer-write tests: CUDA IPC, symmetric memory and atomics, in two children
started together) and of
``run_link_load`` (each GPU's link read under host-to-device copies), once cold and then
``--repeat`` times warm, with the bus bandwidth each run measured. Goal on 2 GPUs: the
collective test under 3 s warm. Runs against whichever blackwell_doctor is on PYTHONPATH
(the device script also points it at the code before a change, for the baseline).

    PYTHONPATH=src python3 benchmarks/collective_cost.py [--gpus N] [--repeat 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from blackwell_doctor.collect.nccl import find_nccl_library
from blackwell_doctor.collect.probe.collective import run_collective, run_link_load
from blackwell_doctor.facts.document import CollectiveFacts, LinkLoadFacts

GOAL_S = 3.0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    print(f"NCCL library: {find_nccl_library()}")
    rows: list[dict[str, object]] = []
    for i in range(args.repeat + 1):
        started = time.monotonic()
        facts = run_collective(args.gpus, run_timeout_s=60, timeout_s=240)
        wall = time.monotonic() - started
        if not isinstance(facts, CollectiveFacts):
            print(f"collective test did not run: {facts.reason}")
            return 1
        started = time.monotonic()
        links = run_link_load(args.gpus)
        link_wall = time.monotonic() - started
        row = {
            "run": "cold" if i == 0 else f"warm {i}",
            "collective_s": round(wall, 3),
            "link_load_s": round(link_wall, 3),
            "nccl": facts.nccl_version,
            "runs": [
                {
                    "path": r.path,
                    "gpus": r.gpus,
                    "correct": r.correct,
                    "failure": r.failure,
                    "time_ms": None if r.time_s is None else round(r.time_s * 1e3, 3),
                    "busbw_gbps": r.busbw_gbps,
                    "atomic": getattr(r, "atomic", None),  # absent before the atomics test
                }
                for r in facts.runs
            ],
            "links": [
                {"gpu": g.gpu, "gen": g.current_gen, "width": g.current_width, "h2d": g.h2d_gbps}
                for g in links.gpus
            ]
            if isinstance(links, LinkLoadFacts)
            else links.reason,
        }
        rows.append(row)
        runs = ", ".join(
            f"{r.path} {'-'.join(map(str, r.gpus))}: "
            + (f"{r.busbw_gbps} GB/s bus, {r.time_s * 1e3:.3f} ms" if r.time_s else str(r.failure))
            for r in facts.runs
        )
        print(f"{row['run']:>7}: collective {wall:.3f} s, link load {link_wall:.3f} s ({runs})")
    # What the symmetric-memory pair test adds: one more warm run without it.
    started = time.monotonic()
    without = run_collective(args.gpus, run_timeout_s=60, timeout_s=240, symm=False)
    without_s = round(time.monotonic() - started, 3)
    if isinstance(without, CollectiveFacts):
        print(f"warm, without the symmetric-memory pair test: collective {without_s:.3f} s")
    # What the pair tests add in all: one more warm run of the NCCL runs alone.
    started = time.monotonic()
    nccl_only = run_collective(args.gpus, run_timeout_s=60, timeout_s=240, ipc=False, symm=False)
    nccl_only_s = round(time.monotonic() - started, 3)
    if isinstance(nccl_only, CollectiveFacts):
        print(f"warm, NCCL runs only (no pair test): collective {nccl_only_s:.3f} s")
    walls = [(float(str(r["collective_s"])), float(str(r["link_load_s"]))) for r in rows]
    warm = [c for c, _ in walls[1:]]
    if warm:
        median = statistics.median(warm)
        verdict = "meets" if median < GOAL_S else "misses"
        print(
            f"warm median: collective {median:.3f} s on {args.gpus} GPUs "
            f"({verdict} the {GOAL_S:g} s goal); link load "
            f"{statistics.median(w for _, w in walls[1:]):.3f} s"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(
                {"runs": rows, "without_symm_s": without_s, "nccl_only_s": nccl_only_s},
                fh,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
