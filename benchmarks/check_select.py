"""A live `check` on a GPU host: the full run against a selection and against --no-probe.

Three command lines, all `python -m blackwell_doctor check --format json` on this host:

- ``full``: every check; the baseline every ratio is to;
- ``preflight``: ``--select link,bar1,module,collective,memory`` (the host pre-flight,
  docs/preflight.md): NVML and CUDA facts, the links under load when one idles below its
  maximum, the collective test; no tile probes, no peer-transfer test;
- ``no-probe``: ``--no-probe``: the GPU facts child alone.

Each round runs the three once, in an order that alternates (forwards, then backwards), so
that a load change hits all alike; one warm-up run of each first (byte-code, NVRTC cache,
page cache), with ``--embed-facts``, says which sections of the facts each collected.
Printed: the median and minimum wall seconds, the median CPU seconds of the command and its
children (``wait4``), and the wall ratio to ``full`` (the median of the per-round ratios,
with their range). ``--json FILE`` writes the figures in benchmarks/interleaved.py's form
(``floor`` = the full check), which docs/performance.md's table reads.

    PYTHONPATH=src python3 benchmarks/check_select.py --rounds 5 [--json FILE]

Only the standard library here; the command itself needs the package's run-time imports.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

from interleaved import _once as timed_run  # this folder, run as a script

PREFLIGHT = "link,bar1,module,collective,memory"
BASE = [sys.executable, "-m", "blackwell_doctor", "check", "--format", "json"]
COMMANDS: list[tuple[str, list[str]]] = [
    ("full", BASE),
    ("preflight", [*BASE, "--select", PREFLIGHT]),
    ("no-probe", [*BASE, "--no-probe"]),
]
# What each section's status says (ok, or the reason's first word: not-collected, skipped).
SECTIONS = ("nvml", "cuda", "probes", "p2p_transfers", "link_load", "collective")
OK = {0, 1, 3}  # findings and --strict; usage (2) and internal (4) errors stop the run


def once(argv: list[str]) -> tuple[float, float, bytes]:
    """(wall seconds, CPU seconds of it and its children, standard output): interleaved.py's
    timed run, its output kept."""
    with tempfile.TemporaryFile() as sink:
        wall, cpu = timed_run(argv, OK, sink)
        sink.seek(0)
        return wall, cpu, sink.read()


def collected(out: bytes) -> tuple[str, dict[str, str]]:
    """The GPUs and what each section of the embedded facts holds."""
    facts = json.loads(out)["facts"]
    nvml = facts["nvml"]
    gpus = [g["name"] for g in nvml.get("gpus", [])] if nvml["status"] == "ok" else []
    state = {}
    for section in SECTIONS:
        value = facts.get(section)
        if value is None:
            state[section] = "absent"
        elif value.get("status") == "unavailable":
            state[section] = value["reason"]
        else:
            state[section] = "ok"
    return (f"{len(gpus)} x {gpus[0]}" if gpus else "no GPU via NVML"), state


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (>= 3)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    if args.rounds < 3:
        sys.exit("--rounds: at least 3")
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # time the byte-code an install has
    host = ""
    sections: dict[str, dict[str, str]] = {}
    for label, argv in COMMANDS:  # warm-up, and what each collects
        _, _, out = once([*argv, "--embed-facts"])
        host, sections[label] = collected(out)
    wall: dict[str, list[float]] = {label: [] for label, _ in COMMANDS}
    cpu: dict[str, list[float]] = {label: [] for label, _ in COMMANDS}
    load = [os.getloadavg()[0]]
    for i in range(args.rounds):
        for label, argv in COMMANDS if i % 2 == 0 else list(reversed(COMMANDS)):
            w, c, _ = once(argv)
            wall[label].append(w)
            cpu[label].append(c)
        load.append(os.getloadavg()[0])

    print(f"host: {host}; python {sys.version.split()[0]}")
    print(f"{args.rounds} interleaved rounds; 1-min load {min(load):.1f}-{max(load):.1f}")
    print(f"baseline: full = {shlex.join(BASE[1:])}")
    print(f"{'label':<10} {'wall s':>7} {'min s':>7} {'cpu s':>7} {'vs full':>8} {'(range)':>13}")
    rows = []
    for label, argv in COMMANDS:
        ratios = [w / f for w, f in zip(wall[label], wall["full"], strict=True)]
        w, c = statistics.median(wall[label]), statistics.median(cpu[label])
        r = statistics.median(ratios)
        print(
            f"{label:<10} {w:7.3f} {min(wall[label]):7.3f} {c:7.3f} {r:7.2f}x "
            f"({min(ratios):.2f}-{max(ratios):.2f})"
        )
        rows.append(
            {
                "label": label,
                "argv": argv[1:],
                "wall_s": round(w, 4),
                "wall_min_s": round(min(wall[label]), 4),
                "cpu_s": round(c, 4),
                "wall_ratio": round(r, 2),
                "cpu_ratio": round(c / statistics.median(cpu["full"]), 2),
                "sections": sections[label],
            }
        )
    print("what each collected (ok, or the reason it holds none):")
    for label, _ in COMMANDS:
        print(f"  {label:<10} " + ", ".join(f"{k} {v}" for k, v in sections[label].items()))
    if args.json:
        doc = {
            "floor": shlex.join(BASE[1:]),
            "host": host,
            "runs": args.rounds,
            "load": [min(load), max(load)],
            "rows": rows,
        }
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
