"""``fleet`` against reading and parsing the same facts files with msgspec alone, in the
same run, at several fleet sizes (default 1,000 to 10,000 nodes).

It writes N facts files, one per node (``node00001.json`` ...), cycling through every facts
fixture (1 to 8 GPUs; the 8-GPU B200 node carries all 28 P2P pairs), each with its own
hostname, collection time and GPU UUIDs: a fleet of the fixtures' kinds of machine (with
``--distinct``, each also its own ``host_root``: no two nodes judge alike, so none takes
another's verdict, as in a fleet collected with its probes' or bench runs' figures). The
fleet judges each distinct configuration once (``fleet.judge.IDENTITY_FIELDS``: what no
check reads) and every file is still read and decoded; the pool's workers each judge the
configurations of their chunks again. Then, alternating, ``--repeat`` times each:

- baseline: for each file, ``read_bytes`` and ``msgspec.json.decode(data, type=Facts)``,
  the least any judge of these files must do;
- fleet: what ``blackwell-doctor fleet DIR --format json`` does after start-up, in-process:
  expand the inputs, judge every node through ``evaluate``, group, render the JSON; once in
  this process (serial, the default ``--jobs 1``) and once with ``--jobs 0`` (one worker
  process per CPU).

It prints the median of each (``--repeat`` runs, default 5, interleaved; wall time, or
with ``--cpu`` CPU time, the steadier on a loaded machine), the ratio (goal: <= 1.5),
and the per-node cost at each size: flat per-node figures mean linear growth. Also, once,
the whole command as a child process at the largest size (start-up included).
Correctness, untimed: the fleet must judge all N nodes and no file may be unjudged;
otherwise it exits 1.

    .venv/bin/python benchmarks/fleet_scale.py [--nodes 1000 5000 10000] [--repeat 3]
        [--cpu] [--no-pool] [--distinct]

``--against OTHER/src`` compares two trees on the same files: each round runs, for each size,
one child process per tree (``PYTHONPATH`` the other tree's ``src``, then this one's), which
judges the fleet once to warm up, then times the baseline and the serial fleet once; the
medians over ``--repeat`` rounds are printed per tree (before = OTHER, after = this tree).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec

from blackwell_doctor.app.fleet import default_jobs, expand_inputs, judge_fleet
from blackwell_doctor.facts.document import Facts, NvmlFacts, decode_facts, encode_facts
from blackwell_doctor.render.fleet import render_fleet
from blackwell_doctor.render.formats import FleetFormat

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "facts"


def generate(directory: Path, nodes: int, distinct: bool = False) -> list[Path]:
    """``distinct``: every node's facts differ in a field the judgment key holds (its own
    ``host_root``), as in a fleet collected with its probes' figures: no verdict is reused."""
    templates = [decode_facts(p.read_bytes()) for p in sorted(FIXTURES.glob("*.json"))]
    paths = []
    for i in range(nodes):
        facts = templates[i % len(templates)]
        name = f"node{i + 1:05d}"
        # What differs between two machines of one kind: name, collection time, GPU UUIDs.
        nvml = facts.nvml
        if isinstance(nvml, NvmlFacts):
            gpus = [
                msgspec.structs.replace(g, uuid=f"GPU-{i:05d}-{g.index:02d}") for g in nvml.gpus
            ]
            nvml = msgspec.structs.replace(nvml, gpus=gpus)
        facts = msgspec.structs.replace(
            facts,
            redacted=False,
            collected_at=f"2026-11-23T04:{i // 60 % 60:02d}:{i % 60:02d}Z",
            platform=msgspec.structs.replace(facts.platform, hostname=name),
            nvml=nvml,
            host_root=f"/nodes/{name}" if distinct else facts.host_root,
        )
        path = directory / f"{name}.json"
        path.write_bytes(encode_facts(facts))
        paths.append(path)
    return paths


def _cpu() -> float:
    """CPU seconds of this process and its finished children (a pool's workers)."""
    t = os.times()  # children: 10 ms ticks; this process: process_time's finer clock
    return time.process_time() + t.children_user + t.children_system


def baseline(paths: list[Path]) -> tuple[float, float]:
    t, c = time.perf_counter(), _cpu()
    decoder = msgspec.json.Decoder(Facts)
    for p in paths:
        decoder.decode(p.read_bytes())
    return time.perf_counter() - t, _cpu() - c


def fleet(directory: Path, nodes: int, jobs: int) -> tuple[float, float]:
    t, c = time.perf_counter(), _cpu()
    paths, missing = expand_inputs([str(directory)])
    report = judge_fleet(paths, missing, jobs=jobs)
    render_fleet(report, FleetFormat.JSON)
    elapsed = time.perf_counter() - t, _cpu() - c
    if report.summary.nodes != nodes or report.unjudged:
        sys.exit(f"fleet judged {report.summary.nodes} of {nodes}; unjudged: {report.unjudged}")
    return elapsed


def child(directory: Path, nodes: int, pick: int) -> int:
    """One round in this process (``--child``): a warm-up fleet, then baseline and fleet."""
    fleet(directory, nodes, 1)
    b = baseline(sorted(directory.glob("*.json")))[pick]
    f = fleet(directory, nodes, 1)[pick]
    print(json.dumps({"baseline": b, "fleet": f}))
    return 0


def against(
    other_src: Path,
    sizes: list[int],
    repeat: int,
    cpu: bool,
    json_out: Path | None = None,
    distinct: bool = False,
) -> int:
    """Interleaved rounds of the other tree and this one on the same files (see above)."""
    this_src = Path(__file__).resolve().parents[1] / "src"
    trees = {"before": other_src.resolve(), "after": this_src}
    print(
        f"{'CPU' if cpu else 'wall'} seconds, median of {repeat} interleaved rounds; "
        f"before = {trees['before']}, after = {trees['after']}; load {os.getloadavg()[0]:.1f}"
    )
    with tempfile.TemporaryDirectory(prefix="bd-fleet-bench-") as tmp:
        dirs = {}
        for n in sizes:
            dirs[n] = Path(tmp) / str(n)
            dirs[n].mkdir()
            generate(dirs[n], n, distinct)
        runs: dict[tuple[str, int], list[dict[str, float]]] = {}
        for _ in range(repeat):
            for n in sizes:
                for label, src in trees.items():
                    cmd = [sys.executable, __file__, "--child", str(dirs[n]), str(n)]
                    env = {**os.environ, "PYTHONPATH": str(src)}
                    out = subprocess.run(
                        [*cmd, *(["--cpu"] if cpu else [])],
                        capture_output=True,
                        text=True,
                        env=env,
                        timeout=600,
                        check=True,
                    ).stdout
                    runs.setdefault((label, n), []).append(json.loads(out.splitlines()[-1]))
    print(f"{'nodes':>6} {'tree':>6} {'parse s':>8} {'fleet s':>8} {'ratio':>6} {'us/node':>8}")
    table = []
    for n in sizes:
        for label in trees:
            rows = runs[(label, n)]
            b = statistics.median(r["baseline"] for r in rows)
            f = statistics.median(r["fleet"] for r in rows)
            print(f"{n:>6} {label:>6} {b:>8.3f} {f:>8.3f} {f / b:>6.2f} {f / n * 1e6:>8.1f}")
            table.append(
                {
                    "label": f"{label} {n}",
                    "nodes": n,
                    "parse_s": round(b, 3),
                    "fleet_s": round(f, 3),
                    "ratio": round(f / b, 2),
                    "us_per_node": round(f / n * 1e6, 1),
                }
            )
    if json_out is not None:
        # One file holds every measure (cpu, wall, each also -distinct): this run's replaces
        # its own.
        doc = json.loads(json_out.read_text(encoding="utf-8")) if json_out.exists() else {}
        doc.update(floor="msgspec-decoding the same files", runs=repeat)
        measure = ("cpu" if cpu else "wall") + ("-distinct" if distinct else "")
        doc[measure] = {"load": round(os.getloadavg()[0], 1), "rows": table}
        json_out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 2000, 5000, 10000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cpu", action="store_true", help="CPU time instead of wall time")
    parser.add_argument("--no-pool", action="store_true", help="serial only")
    parser.add_argument(
        "--distinct", action="store_true", help="every node's facts differ (no verdict reused)"
    )
    parser.add_argument("--against", type=Path, help="another tree's src: before/after")
    parser.add_argument("--json", type=Path, help="with --against: write the figures here")
    parser.add_argument("--child", nargs=2, metavar=("DIR", "NODES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(Path(args.child[0]), int(args.child[1]), 1 if args.cpu else 0)
    if args.against:
        return against(args.against, args.nodes, args.repeat, args.cpu, args.json, args.distinct)
    jobs = default_jobs()
    pick = 1 if args.cpu else 0
    print(
        f"{'CPU' if args.cpu else 'wall'} seconds, median of {args.repeat} interleaved runs; "
        f"load {os.getloadavg()[0]:.1f}{'; every node distinct' if args.distinct else ''}"
    )
    print(
        f"python {sys.version.split()[0]}, msgspec {msgspec.__version__}, "
        f"{os.cpu_count()} CPUs, fleet workers: {jobs}"
    )
    print(
        f"{'nodes':>6} {'parse s':>8} {'serial s':>9} {'ratio':>6} {'pool s':>7} {'ratio':>6}"
        f" {'parse us/node':>14} {'serial us/node':>15} {'pool us/node':>13}"
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="bd-fleet-bench-") as tmp:
        for n in args.nodes:
            directory = Path(tmp) / str(n)
            directory.mkdir()
            paths = generate(directory, n, args.distinct)
            base, serial, pool = [], [], []
            for _ in range(args.repeat):
                base.append(baseline(paths)[pick])
                serial.append(fleet(directory, n, 1)[pick])
                if not args.no_pool:
                    pool.append(fleet(directory, n, jobs)[pick])
            b, f = statistics.median(base), statistics.median(serial)
            p = statistics.median(pool) if pool else float("nan")
            rows.append((n, b, f, p))
            print(
                f"{n:>6} {b:>8.3f} {f:>9.3f} {f / b:>6.2f} {p:>7.3f} {p / b:>6.2f}"
                f" {b / n * 1e6:>14.1f} {f / n * 1e6:>15.1f} {p / n * 1e6:>13.1f}"
            )
        n = rows[-1][0]
        cmd = [sys.executable, "-m", "blackwell_doctor", "fleet", str(Path(tmp) / str(n))]
        t = time.perf_counter()
        proc = subprocess.run([*cmd, "-f", "json"], capture_output=True, timeout=600, check=False)
        whole = time.perf_counter() - t
        print(
            f"whole command, {n} nodes, start-up included: {whole:.3f} s (exit {proc.returncode})"
        )
    first, last = rows[0], rows[-1]
    for label, col in (("serial", 2), ("pool", 3)):
        growth = (last[col] / last[0]) / (first[col] / first[0])
        print(
            f"{label} per-node cost at {last[0]} / at {first[0]} nodes: {growth:.2f} "
            "(1.00 = linear)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
