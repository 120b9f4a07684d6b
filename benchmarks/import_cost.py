"""What each command imports, and what its start-up costs against `python -c "import typer"`.

Two figures per command, both against the floor every typer CLI pays, `python -c "import
typer"`, run by this same process tree:

- modules: the modules the command imports that the floor does not (``-X importtime``'s
  list; this package's modules one by one, any other package by its top-level name).
  Deterministic: the same tree imports the same modules on a loaded machine or an idle
  one, so CI checks it (tests/test_import_cost.py: more than 20% over the committed
  figure fails). A command imports only what it runs (docs/performance.md).
- time: wall and CPU (user + system, from ``wait4``) of the whole run, and the sum of
  ``-X importtime``'s self times, each the median of ``--runs`` (>= 5) runs interleaved
  with the floor's (floor, command, command, floor, ...), as a ratio to the floor's median.
  CPU time is the steadier figure on a loaded machine: waiting for a core does not count.

``--write`` records both in ``benchmarks/figures/import-cost.json`` (the file the test
reads); without it the figures are printed only.

    python benchmarks/import_cost.py [--runs 7] [--write] [--only check-facts ...]

Each command runs as ``python -m blackwell_doctor ARGS`` from the repository root, with
``PYTHONPATH=src`` (or ``--src``: another checkout's, e.g. main's for a before figure;
then nothing is written) and byte-code written (a cold first run compiles; it is not timed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIGURES = REPO / "benchmarks" / "figures" / "import-cost.json"
FLOOR = ("-c", "import typer")
FACTS = "tests/fixtures/facts/b200-x8.json"
HELP_OF = (
    "check",
    "collect",
    "probe",
    "scan-logs",
    "recommend",
    "apply",
    "model",
    "fleet",
    "slurm-health",
    "bench",
)
# name -> arguments; offline inputs only, so that the module list is the same on any host.
COMMANDS: dict[str, tuple[str, ...]] = {
    "version": ("--version",),
    "help": ("--help",),
    "check-facts": ("check", "--facts", FACTS, "--format", "json"),
    "recommend-facts": ("recommend", "--facts", FACTS, "--format", "json"),
    "scan-logs": (
        "scan-logs",
        "tests/fixtures/logs/composed-vllm-marlin-auto.log",
        "--format",
        "json",
    ),
    "fleet": ("fleet", "tests/fixtures/facts", "--format", "json"),
    "model": ("model", "tests/fixtures/models/qwen3-235b-a22b-fp4", "--format", "json"),
    **{f"{c}-help": (c, "--help") for c in HELP_OF},
}
OK = (0, 1, 3)  # findings are fine; usage (2) and internal (4+) errors are not


def environment(src: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(src)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its .pyc files
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    return env


def argv_of(args: tuple[str, ...]) -> list[str]:
    return (
        [sys.executable, *FLOOR]
        if args == FLOOR
        else [sys.executable, "-m", "blackwell_doctor", *args]
    )


def counted(module: str) -> str:
    """What the figure counts of a module: this package's modules one by one, any other by
    its top-level name (``msgspec.json``: ``msgspec``), so that a dependency's or Python's
    version, which may split a package differently, does not move the figure."""
    return module if module.startswith("blackwell_doctor") else module.split(".")[0]


def imported(args: tuple[str, ...], env: dict[str, str]) -> tuple[list[str], int]:
    """The modules a run imports (``-X importtime``, as :func:`counted`) and the sum of
    their self times (us)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *argv_of(args)[1:]],
        capture_output=True,
        cwd=REPO,
        env=env,
        timeout=120,
        check=False,
    )
    if args != FLOOR and proc.returncode not in OK:
        sys.exit(f"{args} exited {proc.returncode}: {proc.stderr.decode()[-800:]}")
    names: set[str] = set()
    self_us = 0
    for line in proc.stderr.decode(errors="replace").splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        parts = line.split("|")
        self_us += int(parts[0].split(":")[1])
        names.add(counted(parts[2].strip()))
    return sorted(names), self_us


def timed(args: tuple[str, ...], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv_of(args), cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if args != FLOOR and proc.returncode not in OK:
        sys.exit(f"{args} exited {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


def measure(args: tuple[str, ...], env: dict[str, str], runs: int) -> dict[str, float]:
    """Median ratios to the floor over ``runs`` interleaved pairs (ABBA order)."""
    sides: dict[str, dict[str, list[float]]] = {
        s: {"wall": [], "cpu": [], "imp": []} for s in ("floor", "cmd")
    }
    for args_ in (FLOOR, args):  # compile and warm the page cache
        timed(args_, env)
    for i in range(runs):
        order = (
            (("floor", FLOOR), ("cmd", args)) if i % 2 == 0 else (("cmd", args), ("floor", FLOOR))
        )
        for side, a in order:
            wall, cpu = timed(a, env)
            sides[side]["wall"].append(wall)
            sides[side]["cpu"].append(cpu)
            sides[side]["imp"].append(imported(a, env)[1] / 1e6)
    out: dict[str, float] = {}
    for key in ("wall", "cpu", "imp"):
        floor = statistics.median(sides["floor"][key])
        cmd = statistics.median(sides["cmd"][key])
        out[f"{key}_ms"] = round(cmd * 1000, 1)
        out[f"floor_{key}_ms"] = round(floor * 1000, 1)
        out[f"{key}_ratio"] = round(cmd / floor, 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7, help="interleaved runs per command (>= 5)")
    ap.add_argument("--write", action="store_true", help=f"record into {FIGURES.relative_to(REPO)}")
    ap.add_argument("--only", nargs="*", choices=sorted(COMMANDS), help="these commands only")
    ap.add_argument("--src", type=Path, default=REPO / "src", help="the source tree to run")
    ap.add_argument("--no-time", action="store_true", help="module lists only (fast)")
    args = ap.parse_args()
    if args.runs < 5 and not args.no_time:
        sys.exit("--runs: at least 5")
    env = environment(args.src)
    floor_modules, _ = imported(FLOOR, env)
    old = json.loads(FIGURES.read_text()) if FIGURES.is_file() else {"commands": {}}
    figures: dict[str, object] = {
        "floor": "python -c 'import typer'",
        "floor_modules": len(floor_modules),
        "load_before": round(os.getloadavg()[0], 1),
        "runs": args.runs,
        "commands": old["commands"],
    }
    load = os.getloadavg()[0]
    print(f"floor: python -c 'import typer': {len(floor_modules)} modules; load {load:.1f}")
    print(f"{'command':<18} {'modules':>7}  {'wall':>14} {'cpu':>14} {'import self':>14}")
    for name in args.only or COMMANDS:
        command = COMMANDS[name]
        modules, _ = imported(command, env)
        extra = sorted(set(modules) - set(floor_modules))
        entry: dict[str, object] = {"argv": list(command), "modules": len(extra), "imports": extra}
        line = f"{name:<18} {len(extra):>7}"
        if not args.no_time:
            t = measure(command, env, args.runs)
            entry["time"] = t
            line += "".join(
                f"  {t[f'{k}_ms']:6.1f}ms {t[f'{k}_ratio']:4.2f}x" for k in ("wall", "cpu", "imp")
            )
        elif name in old["commands"] and "time" in old["commands"][name]:
            entry["time"] = old["commands"][name]["time"]
        figures["commands"][name] = entry  # type: ignore[index]
        print(line, flush=True)
    figures["load_after"] = round(os.getloadavg()[0], 1)
    print(f"load after: {os.getloadavg()[0]:.1f}")
    if args.write and args.src == REPO / "src":
        FIGURES.parent.mkdir(exist_ok=True)
        FIGURES.write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")
        print(f"wrote {FIGURES.relative_to(REPO)}")


if __name__ == "__main__":
    main()
