"""Start-up cost of the CLI: this checkout against a baseline, measured interleaved.

Each command runs as `python -m blackwell_doctor ...` with PYTHONPATH set to a source tree
(``src/`` of a checkout), the same interpreter for both sides. The runs alternate, baseline
then candidate, then candidate then baseline (ABBA), so that a busy machine slows both sides
alike. Printed per command: the median of each side (min in brackets) and the ratio
candidate/baseline: the median of the per-pair ratios (each pair ran back to back, so a
load change between pairs cancels), with their quartiles.

The baseline is either another source tree (``--baseline-src``: e.g. a `git worktree add
/tmp/before <commit>`; its ``src``) or, without it, `python -c "import typer"`, the floor
every typer CLI pays (issue 2's target: `check --no-probe` at most 3x that).

    python benchmarks/startup.py [--runs 15] [--src PATH] [--baseline-src PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FACTS = REPO / "tests" / "fixtures" / "facts" / "b200-x8.json"
COMMANDS = (
    ("--version",),
    ("check", "--no-probe", "--format", "json"),  # a live collection: procfs, sysfs, NVML test
    ("check", "--facts", str(FACTS), "--format", "json"),  # the rules alone
)
OK = (0, 1, 3)  # findings are fine; usage (2) and internal (4+) errors are not
ISSUE_2_TARGET = 3.0


def _once(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, timeout=120, check=False, env=env)
    elapsed = time.perf_counter() - start
    if proc.returncode not in OK:
        sys.exit(f"{argv} exited {proc.returncode}: {proc.stderr.decode()[-500:]}")
    return elapsed


def _side(src: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    return env


def _interleaved(
    base: tuple[list[str], dict[str, str]], cand: tuple[list[str], dict[str, str]], runs: int
) -> tuple[list[float], list[float]]:
    for side in (base, cand, base, cand):  # warm the page cache and the .pyc files
        _once(*side)
    b: list[float] = []
    c: list[float] = []
    for i in range(runs):
        if i % 2 == 0:
            b.append(_once(*base))
            c.append(_once(*cand))
        else:
            c.append(_once(*cand))
            b.append(_once(*base))
    return b, c


def _ms(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1000:7.1f} ms [{min(xs) * 1000:6.1f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=15, help="runs per side and command")
    ap.add_argument("--src", type=Path, default=REPO / "src", help="the candidate source tree")
    ap.add_argument("--baseline-src", type=Path, help="the baseline source tree")
    args = ap.parse_args()
    for tree in (args.src, args.baseline_src):
        if tree is not None and not (tree / "blackwell_doctor" / "__init__.py").is_file():
            sys.exit(f"{tree}: no blackwell_doctor package here (give a checkout's src/)")
    py = sys.executable
    cand_env = _side(args.src)
    print(f"candidate: {args.src}")
    baseline = args.baseline_src or "python -c 'import typer'"
    print(f"baseline:  {baseline}")
    print(f"runs per side and command: {args.runs}, interleaved (median, min in brackets)")
    print(f"{'command':<62} {'baseline':>20} {'candidate':>20}  ratio [quartiles]")
    for command in COMMANDS:
        cand_argv = [py, "-m", "blackwell_doctor", *command]
        if args.baseline_src is not None:
            base = (cand_argv, _side(args.baseline_src))
        else:
            base = ([py, "-c", "import typer"], _side(None))
        b, c = _interleaved(base, (cand_argv, cand_env), args.runs)
        ratios = sorted(y / x for x, y in zip(b, c, strict=True))
        q1, ratio, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
        label = " ".join(command).replace(str(REPO) + "/", "")
        note = ""
        if args.baseline_src is None and command[:2] == ("check", "--no-probe"):
            met = "met" if ratio <= ISSUE_2_TARGET else "NOT met"
            note = f"  (issue 2 target <= {ISSUE_2_TARGET:.2f}x: {met})"
        print(f"{label:<62} {_ms(b)} {_ms(c)}  {ratio:.2f}x [{q1:.2f}-{q3:.2f}]{note}")


if __name__ == "__main__":
    main()
