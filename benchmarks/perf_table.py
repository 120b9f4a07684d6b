"""The performance table of docs/performance.md, from the figures the benchmarks recorded.

    python benchmarks/perf_table.py           # print the table (Markdown)
    python benchmarks/perf_table.py --write   # replace it in docs/performance.md

What each row shows is in ``benchmarks/figures/table.toml``: a figures file and what to take
from it, and the goal, which is checked on the figures ("met"). The page keeps the table
between ``<!-- perf-table -->`` and ``<!-- /perf-table -->``; ``tests/test_perf_table.py``
fails when it says anything else than these files.
"""

from __future__ import annotations

import argparse
import json
import operator
import statistics
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "benchmarks" / "figures"
PAGE = ROOT / "docs" / "performance.md"
START, END = "<!-- perf-table -->", "<!-- /perf-table -->"
OPS: dict[str, Callable[[float, float], bool]] = {"<=": operator.le, "<": operator.lt}
NAMES = {
    "wall_ratio": "wall",
    "cpu_ratio": "CPU",
    "ratio": "CPU",
    "in_process_ratio": "CPU",
    "whole_cpu_ratio": "CPU",
    "whole_wall_ratio": "wall",
}


class TableError(Exception):
    """A cell names a file, row or field that is not there."""


def _load(name: str) -> Any:
    path = (FIGURES / name).resolve()
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise TableError(f"{name}: {e}") from e


def _rows(cell: dict[str, Any]) -> list[dict[str, Any]]:
    doc = _load(cell["file"])
    rows = doc[cell["measure"]]["rows"] if "measure" in cell else doc["rows"]
    by_label = {r["label"]: r for r in rows}
    missing = [label for label in cell["labels"] if label not in by_label]
    if missing:
        raise TableError(f"{cell['file']}: no row {', '.join(missing)}")
    return [by_label[label] for label in cell["labels"]]


def values(cell: dict[str, Any], field: str) -> list[float]:
    """The cell's figures of ``field`` (one per row it names, or its one number)."""
    if "labels" in cell:
        return [float(r[field]) for r in _rows(cell)]
    doc = _load(cell["file"])
    if "key" in cell:
        value: Any = doc
        for part in cell["key"].split("."):
            value = value[part]
        return [float(value)]
    if "median_of" in cell:
        items = doc[cell["median_of"]][int(cell.get("skip", 0)) :]
        return [statistics.median(float(item[cell["field"]]) for item in items)]
    raise TableError(f"a cell of {cell.get('file')} names no figure")


def cell_text(cell: dict[str, Any]) -> str:
    if "text" in cell:
        return str(cell["text"])
    if "labels" in cell:
        parts = []
        for field in cell["fields"]:
            figures = values(cell, field)
            if field.endswith("_s"):
                parts.append(" / ".join(f"{v:.2f} s" for v in figures) + " wall")
            else:
                parts.append(" / ".join(f"{v:.2f}x" for v in figures) + f" {NAMES[field]}")
        return ", ".join(parts)
    (value,) = values(cell, cell.get("field", ""))
    text = f"{value:.2f} {cell.get('unit', '')}".rstrip()
    return f"{text} {cell['suffix']}" if "suffix" in cell else text


def met(row: dict[str, Any]) -> str:
    goal = row.get("goal")
    if goal is None:
        return ""
    figures = values(row["after"], goal["field"])
    return "yes" if all(OPS[goal["op"]](v, goal["value"]) for v in figures) else "**no**"


def table() -> str:
    spec = tomllib.loads((FIGURES / "table.toml").read_text(encoding="utf-8"))
    lines = [
        "| figure | floor | goal | before | after | met |",
        "|---|---|---|---|---|---|",
    ]
    for row in spec["row"]:
        goal = row.get("goal")
        goal_text = ""
        if goal:
            unit = goal["unit"] if goal["unit"] == "x" else " " + goal["unit"]
            goal_text = f"{goal['op']} {goal['value']:g}{unit}"
        lines.append(
            f"| {row['figure']} | {row['floor']} | {goal_text} | {cell_text(row['before'])} "
            f"| {cell_text(row['after'])} | {met(row)} |"
        )
    return "\n".join(lines) + "\n"


def page_with(text: str, new_table: str) -> str:
    head, sep, rest = text.partition(START + "\n")
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise TableError(f"{PAGE.name} has no {START} ... {END} block")
    return head + START + "\n" + new_table + END + tail


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="replace the table in the page")
    args = ap.parse_args()
    try:
        new = table()
        if args.write:
            PAGE.write_text(page_with(PAGE.read_text(encoding="utf-8"), new), encoding="utf-8")
        else:
            sys.stdout.write(new)
    except TableError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
