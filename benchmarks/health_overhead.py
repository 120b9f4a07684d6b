"""What the hardware health facts (issue 39) add to a live `check`: interleaved, paired.

Four command lines, all `python -m blackwell_doctor check --format json --embed-facts` on
this host:

- ``probes``: the default check (GPU facts, health, tile probes with the clock readings
  taken during their timed launches, AER read before and after);
- ``probes-no-health``: the same with ``--ignore health``: no health check is selected, so
  none of the health facts is collected (no NVML health calls, no readings under load, no
  AER);
- ``no-probe`` and ``no-probe-no-health``: the same pair with ``--no-probe`` (the GPU facts
  child alone: what the health facts cost where no probe runs).

Each round runs the four once, in an order that alternates (forwards, then backwards), so a
load change hits all alike; one warm-up run of each first (byte-code, NVRTC cache). The
figure is the median of the per-round differences (with health minus without) in wall
seconds, beside its range and the medians of both; the budget is 100 ms (issue 39). The
probes' own wall time (``probes.wall_s`` of the facts) is printed for both probe variants:
the readings ride on the timed launches, so it should not move.

    PYTHONPATH=src python3 benchmarks/health_overhead.py --rounds 7 [--json FILE]

Only the standard library here; the command itself needs the package's run-time imports.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from interleaved import _once as timed_run  # this folder, run as a script

BUDGET_S = 0.100
BASE = [sys.executable, "-m", "blackwell_doctor", "check", "--format", "json", "--embed-facts"]
COMMANDS: list[tuple[str, list[str]]] = [
    ("probes", BASE),
    ("probes-no-health", [*BASE, "--ignore", "health"]),
    ("no-probe", [*BASE, "--no-probe"]),
    ("no-probe-no-health", [*BASE, "--no-probe", "--ignore", "health"]),
]
PAIRS = (("probes", "probes-no-health"), ("no-probe", "no-probe-no-health"))
OK = {0, 1, 3}  # findings and --strict; usage (2) and internal (4) errors stop the run


def once(argv: list[str]) -> tuple[float, float, dict[str, object]]:
    """(wall seconds, CPU seconds with children, the embedded facts)."""
    with tempfile.TemporaryFile() as sink:
        wall, cpu = timed_run(argv, OK, sink)
        sink.seek(0)
        facts: dict[str, object] = json.loads(sink.read())["facts"]
        return wall, cpu, facts


def _state(facts: dict[str, object], section: str) -> str:
    value = facts.get(section)
    if not isinstance(value, dict):
        return "absent"
    return str(value.get("reason", "ok")) if value.get("status") == "unavailable" else "ok"


def _probe_wall(facts: dict[str, object]) -> float | None:
    probes = facts.get("probes")
    if isinstance(probes, dict) and isinstance(probes.get("wall_s"), int | float):
        return float(probes["wall_s"])
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds (>= 3)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    if args.rounds < 3:
        sys.exit("--rounds: at least 3")
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # time the byte-code an install has
    states: dict[str, str] = {}
    for label, argv in COMMANDS:  # warm-up, and whether each collected the health facts
        _, _, facts = once(argv)
        states[label] = _state(facts, "health")
    wall: dict[str, list[float]] = {label: [] for label, _ in COMMANDS}
    cpu: dict[str, list[float]] = {label: [] for label, _ in COMMANDS}
    probe_wall: dict[str, list[float]] = {label: [] for label, _ in COMMANDS}
    load = [os.getloadavg()[0]]
    for i in range(args.rounds):
        for label, argv in COMMANDS if i % 2 == 0 else list(reversed(COMMANDS)):
            w, c, facts = once(argv)
            wall[label].append(w)
            cpu[label].append(c)
            pw = _probe_wall(facts)
            if pw is not None:
                probe_wall[label].append(pw)
        load.append(os.getloadavg()[0])

    print(
        f"python {sys.version.split()[0]}; {args.rounds} interleaved rounds; "
        f"1-min load {min(load):.1f}-{max(load):.1f}"
    )
    print(f"{'label':<20} {'wall s':>7} {'cpu s':>7} {'probes.wall_s':>14}  health facts")
    for label, _ in COMMANDS:
        pw = statistics.median(probe_wall[label]) if probe_wall[label] else None
        print(
            f"{label:<20} {statistics.median(wall[label]):7.3f} "
            f"{statistics.median(cpu[label]):7.3f} "
            f"{(f'{pw:.3f}' if pw is not None else '-'):>14}  {states[label]}"
        )
    rows = []
    verdict = "within"
    for with_, without in PAIRS:
        deltas = [a - b for a, b in zip(wall[with_], wall[without], strict=True)]
        d = statistics.median(deltas)
        cpu_d = statistics.median([a - b for a, b in zip(cpu[with_], cpu[without], strict=True)])
        ok = d <= BUDGET_S
        verdict = verdict if ok else "over"
        print(
            f"health adds ({with_}): {d * 1000:+.0f} ms wall (median of paired rounds; range "
            f"{min(deltas) * 1000:+.0f} to {max(deltas) * 1000:+.0f} ms), {cpu_d * 1000:+.0f} ms "
            f"CPU; budget {BUDGET_S * 1000:.0f} ms: {'within' if ok else 'OVER'}"
        )
        rows.append(
            {
                "with": with_,
                "without": without,
                "wall_delta_s": round(d, 4),
                "wall_delta_range_s": [round(min(deltas), 4), round(max(deltas), 4)],
                "cpu_delta_s": round(cpu_d, 4),
                "within_budget": ok,
            }
        )
    print(f"verdict: {verdict} the {BUDGET_S * 1000:.0f} ms budget")
    if args.json:
        doc = {
            "budget_s": BUDGET_S,
            "runs": args.rounds,
            "load": [min(load), max(load)],
            "medians": {
                label: {
                    "wall_s": round(statistics.median(wall[label]), 4),
                    "cpu_s": round(statistics.median(cpu[label]), 4),
                    "probes_wall_s": (
                        round(statistics.median(probe_wall[label]), 4)
                        if probe_wall[label]
                        else None
                    ),
                    "health": states[label],
                }
                for label, _ in COMMANDS
            },
            "pairs": rows,
        }
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
