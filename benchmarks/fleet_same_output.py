"""Two trees' ``fleet`` outputs over one fleet, compared byte for byte (issue 36).

The speed work on the fleet (remembered helpers, the memo) must not change a byte of
what the fleet shows: this runs ``python -m blackwell_doctor fleet DIR --format F`` with each
tree's ``src`` on ``PYTHONPATH`` for every format (the JSON document, markdown, HTML,
Prometheus; rich written to a file, so without colours), and compares the bytes. The fleet is
``benchmarks/fleet_varied.py``'s (every node differs), written to ``--cache`` when absent.
Two things are not the fleet's judgment and are left out of the comparison: the tool's
version (each tree's own, from where it lies: replaced by ``VERSION`` in every format), and
the Prometheus run's timestamp and duration (the clock's). Exit status 0 when all are
equal, 1 otherwise (with the first difference).

    python benchmarks/fleet_same_output.py --tree main=MAIN/src --tree this=src \
        [--nodes 1000] [--formats json markdown ...] [--cache /tmp/fleet-varied]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

FORMATS = ("json", "markdown", "html", "prometheus", "rich")
HERE = Path(__file__).resolve().parent


def fleet_dir(cache: Path, nodes: int, seed: int) -> Path:
    """The varied fleet of ``nodes`` nodes, written by fleet_varied.py when not there yet."""
    directory = cache / f"seed{seed}" / str(nodes)
    if not directory.is_dir() or len(os.listdir(directory)) != nodes:
        subprocess.run(
            [
                *(sys.executable, str(HERE / "fleet_varied.py"), "write", str(directory)),
                *("--nodes", str(nodes), "--seed", str(seed)),
            ],
            check=True,
        )
    return directory


# The Prometheus lines that are the clock's, not the fleet's (render/fleet.py).
CLOCK = (
    b"blackwell_doctor_fleet_last_run_timestamp_seconds ",
    b"blackwell_doctor_fleet_last_run_duration_seconds ",
)


def version(src: str) -> bytes:
    """The version ``src``'s package reports (each checkout its own)."""
    env = {**os.environ, "PYTHONPATH": src}
    code = "import blackwell_doctor; print(blackwell_doctor.__version__)"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=True)
    return done.stdout.strip()


def output(src: str, directory: Path, fmt: str, scratch: Path) -> tuple[int, bytes]:
    """The exit status and the bytes of ``fleet DIR --format fmt`` with ``src``'s package,
    its version replaced by VERSION and the clock's lines left out."""
    env = {**os.environ, "PYTHONPATH": src, "COLUMNS": "120", "NO_COLOR": "1"}
    out = scratch / f"out.{fmt}"
    argv = [sys.executable, "-m", "blackwell_doctor", "fleet", str(directory), "-f", fmt]
    done = subprocess.run([*argv, "-o", str(out)], env=env, capture_output=True, check=False)
    data = out.read_bytes() if out.exists() else done.stdout + done.stderr
    v = version(src)
    for before, after in (
        (b'"version": "', b'"'),
        (b"blackwell-doctor ", b" "),
        (b'version="', b'"'),
    ):
        data = data.replace(before + v + after, before + b"VERSION" + after)
    lines = data.splitlines(keepends=True)
    return done.returncode, b"".join(line for line in lines if not line.startswith(CLOCK))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", required=True, help="LABEL=SRC (two)")
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=36)
    ap.add_argument("--formats", nargs="+", default=list(FORMATS), choices=FORMATS)
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "fleet-varied")
    args = ap.parse_args()
    trees = [t.split("=", 1) for t in args.tree]
    if len(trees) != 2 or any(len(t) != 2 for t in trees):
        ap.error("give two --tree LABEL=SRC")
    directory = fleet_dir(args.cache, args.nodes, args.seed)
    same = True
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in args.formats:
            got = []
            for label, src in trees:
                scratch = Path(tmp) / label
                scratch.mkdir(exist_ok=True)
                got.append(output(src, directory, fmt, scratch))
            (code_a, a), (code_b, b) = got
            equal = code_a == code_b and a == b
            same = same and equal
            print(
                f"{fmt:10} {args.nodes} nodes: exit {code_a} / {code_b}, "
                f"{len(a):,} / {len(b):,} bytes: {'equal' if equal else 'DIFFERENT'}"
            )
            if not equal:
                at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
                at = min(len(a), len(b)) if at is None else at
                print(f"  first difference at byte {at}:")
                print(f"  {trees[0][0]}: {a[max(0, at - 80) : at + 80]!r}")
                print(f"  {trees[1][0]}: {b[max(0, at - 80) : at + 80]!r}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
