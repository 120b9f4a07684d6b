"""Peak RSS of the command on the hostile inputs of issue 15, each beside its baseline in
the same run (``/usr/bin/time -v``, a fresh process per case):

- a docker json-file log whose last record never ends (300 MB and 600 MB of one line)
  against a plain-text log of the same size with the same endless line (the issue measured
  964 MB and 1.89 GB RSS for the json-file case before the fix, 59 MB for plain text);
- a facts file listing 6,000 GPUs (refused: at most 64) against the largest host accepted
  (64 GPUs, every ordered pair's NVML status) and the 8-GPU fixture (the issue measured
  1.89 GB RSS and 10 to 42 s before the fix).

Targets: the json-file cases within 1.5x of plain text and flat from 300 to 600 MB; the
6,000-GPU case refused with exit 2 under 200 MB. Exit 1 when a target is missed.

    .venv/bin/python benchmarks/memory_hostile.py [--sizes 300,600] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "facts" / "b200-x8.json"
MB = 1_000_000


def measure(args: list[str]) -> tuple[int, float, int]:
    """Exit code, seconds and peak RSS (MB) of ``blackwell-doctor ARGS``."""
    command = ["/usr/bin/time", "-v", sys.executable, "-m", "blackwell_doctor", *args]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    took = time.monotonic() - started
    found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"no RSS from /usr/bin/time: {done.stderr[-500:]}")
    status = re.search(r"Exit status: (\d+)", done.stderr)
    code = int(status.group(1)) if status else done.returncode
    return code, took, int(found.group(1)) // 1000


def write_endless(path: Path, size: int, *, docker: bool) -> None:
    step = b"a" * (8 << 20)
    with path.open("wb") as fh:
        fh.write(
            b'{"log":"INFO starting\\n","stream":"stderr"}\n' if docker else b"INFO starting\n"
        )
        fh.write(b'{"log":"' if docker else b"")
        left = size
        while left > 0:
            fh.write(step[: min(left, len(step))])
            left -= len(step)


def gpus(n: int, *, pairs: bool) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(FIXTURE.read_text())
    nvml, cuda, pci = doc["nvml"], doc["cuda"], doc["pci"]
    nvml["gpus"] = [
        {**nvml["gpus"][i % 8], "index": i, "pci_bus_id": f"00000000:{i % 256:02X}:00.{i // 256}"}
        for i in range(n)
    ]
    cuda["devices"] = [{**cuda["devices"][i % 8], "ordinal": i} for i in range(n)]
    pci["gpus"] = [
        {**pci["gpus"][i % 8], "bdf": f"0000:{i % 256:02x}:{i // 256:02x}.0"} for i in range(n)
    ]
    template = copy.deepcopy(nvml["p2p"][0])
    nvml["p2p"] = (
        [{**template, "gpu_a": a, "gpu_b": b} for a in range(n) for b in range(n) if a != b]
        if pairs
        else []
    )
    return doc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="300,600", help="endless-line sizes in MB")
    parser.add_argument("--dir", default=tempfile.gettempdir())
    opts = parser.parse_args()
    ok = True
    with tempfile.TemporaryDirectory(dir=opts.dir) as tmp:
        root = Path(tmp)
        print("endless last line          size   exit   seconds   peak RSS")
        docker_rss: list[int] = []
        for size_mb in (int(s) for s in opts.sizes.split(",")):
            rss: dict[str, int] = {}
            for kind in ("plain", "docker-json"):
                path = root / f"{kind}.log"
                write_endless(path, size_mb * MB, docker=kind == "docker-json")
                code, took, peak = measure(["scan-logs", str(path), "-f", "json"])
                path.unlink()
                rss[kind] = peak
                print(f"  {kind:<22} {size_mb:>5} MB  {code:>4}  {took:>8.1f}  {peak:>6} MB")
            ratio = rss["docker-json"] / rss["plain"]
            print(f"  docker-json / plain: {ratio:.2f}x (target <= 1.5x)")
            ok &= ratio <= 1.5
            docker_rss.append(rss["docker-json"])
        if len(docker_rss) > 1:
            growth = docker_rss[-1] / docker_rss[0]
            print(f"  docker-json, largest / smallest size: {growth:.2f}x (target <= 1.25x)")
            ok &= growth <= 1.25
        print("\nfacts                               exit   seconds   peak RSS")
        cases = [
            ("8 GPUs (b200-x8 fixture)", json.loads(FIXTURE.read_text())),
            ("64 GPUs, 4,032 pairs (the limit)", gpus(64, pairs=True)),
            ("6,000 GPUs (refused)", gpus(6000, pairs=False)),
        ]
        for label, doc in cases:
            path = root / "facts.json"
            path.write_text(json.dumps(doc))
            code, took, peak = measure(["check", "--facts", str(path), "-f", "json"])
            print(f"  {label:<34} {code:>4}  {took:>8.1f}  {peak:>6} MB")
            if label.startswith("6,000"):
                ok &= code == 2 and peak < 200
    print("\ntargets met" if ok else "\nTARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
