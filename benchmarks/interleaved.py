"""Commands timed against a floor command in the same process tree, interleaved.

Each round runs the floor and every command once, in an order that alternates (forwards,
then backwards), so that a load change hits all alike. Printed per command: the median
wall and CPU (user + system of the child, from ``wait4``) seconds over ``--runs`` rounds,
and each as a ratio to the floor's median. CPU time is the steadier figure on a loaded
machine (waiting for a core does not count); wall time is what a user waits.

    python benchmarks/interleaved.py --runs 7 --floor "python -c 'import typer'" \\
        "check=python -m blackwell_doctor check --facts F --format json" ...

``--json FILE`` writes the figures (docs/performance.md's table is made from them).
A command that exits 2 or more (a usage or internal error) stops the run; ``--ok`` lists
more exit codes to accept (``grep -c`` exits 1 when it counts nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO


def once(argv: list[str], ok: set[int]) -> tuple[float, float]:
    # Output to a file, not /dev/null: GNU grep stops at the first match when its output
    # is /dev/null, even with -c.
    with tempfile.TemporaryFile() as sink:
        return _once(argv, ok, sink)


def _once(argv: list[str], ok: set[int], sink: IO[bytes]) -> tuple[float, float]:
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code
    if code not in ok or b"Traceback (most recent call last)" in err:
        sys.exit(f"{shlex.join(argv)} exited {code}: {err.decode(errors='replace')[-800:]}")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7, help="rounds (>= 5)")
    ap.add_argument("--floor", required=True, help="the floor command line")
    ap.add_argument("--ok", type=int, nargs="*", default=[0, 1, 3], help="exit codes accepted")
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("commands", nargs="+", help="LABEL=COMMAND LINE")
    args = ap.parse_args()
    if args.runs < 5:
        sys.exit("--runs: at least 5")
    ok = set(args.ok)
    # The warm-up run below writes the byte-code an installed package has (pip compiles it):
    # with PYTHONDONTWRITEBYTECODE set, every timed run would compile this package's source.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    named = [("floor", shlex.split(args.floor))]
    for item in args.commands:
        label, sep, line = item.partition("=")
        if not sep:
            sys.exit(f"{item!r}: give LABEL=COMMAND")
        named.append((label, shlex.split(line)))
    for _, argv in named:  # warm the page cache, compile byte-code
        once(argv, ok)
    wall: dict[str, list[float]] = {label: [] for label, _ in named}
    cpu: dict[str, list[float]] = {label: [] for label, _ in named}
    load = [os.getloadavg()[0]]
    for i in range(args.runs):
        for label, argv in named if i % 2 == 0 else reversed(named):
            w, c = once(argv, ok)
            wall[label].append(w)
            cpu[label].append(c)
        load.append(os.getloadavg()[0])
    floor_w, floor_c = statistics.median(wall["floor"]), statistics.median(cpu["floor"])
    rows = []
    print(f"floor: {args.floor}")
    print(f"{args.runs} interleaved rounds; 1-min load {min(load):.1f}-{max(load):.1f}")
    print(f"{'label':<22} {'wall s':>8} {'ratio':>6} {'cpu s':>8} {'ratio':>6}")
    for label, argv in named:
        w, c = statistics.median(wall[label]), statistics.median(cpu[label])
        rows.append(
            {
                "label": label,
                "argv": argv,
                "wall_s": round(w, 4),
                "cpu_s": round(c, 4),
                "wall_ratio": round(w / floor_w, 2),
                "cpu_ratio": round(c / floor_c, 2),
            }
        )
        print(f"{label:<22} {w:8.3f} {w / floor_w:6.2f} {c:8.3f} {c / floor_c:6.2f}")
    if args.json:
        doc = {"floor": args.floor, "runs": args.runs, "load": [min(load), max(load)], "rows": rows}
        args.json.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
