"""Print a timeline log (benchmarks/timeline/sitecustomize.py) as a tree of processes with
milliseconds from the first event: when each started Python (site), spawned, exited."""

from __future__ import annotations

import sys
from collections import defaultdict


def main(path: str) -> None:
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split(" ", 4)
            if len(parts) < 4:
                continue
            try:
                t, pid, ppid, event = float(parts[0]), parts[1], parts[2], parts[3]
            except ValueError:
                continue
            rows.append((t, pid, ppid, event, parts[4] if len(parts) > 4 else ""))
    if not rows:
        print("(empty timeline)")
        return
    t0 = min(r[0] for r in rows)
    depth: dict[str, int] = defaultdict(int)
    for t, pid, ppid, event, detail in sorted(rows):
        if event == "site":
            depth[pid] = depth.get(ppid, -1) + 1
        if event == "exec":
            continue
        print(f"{(t - t0) * 1000:9.1f} ms {'  ' * depth[pid]}[{pid}] {event} {detail[:150]}")


if __name__ == "__main__":
    main(sys.argv[1])
