"""docs/performance.md's table is what the recorded figures say (benchmarks/perf_table.py)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("perf_table", ROOT / "benchmarks/perf_table.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["perf_table"] = module
    spec.loader.exec_module(module)
    return module


def test_the_page_shows_the_recorded_figures() -> None:
    pt = _module()
    page = (ROOT / "docs/performance.md").read_text(encoding="utf-8")
    assert pt.page_with(page, pt.table()) == page, (
        "docs/performance.md's table is not what benchmarks/figures say: "
        "run `python benchmarks/perf_table.py --write`"
    )


def _figures(tmp: Path, after_cpu: float) -> None:
    rows = [
        {"label": "floor", "wall_ratio": 1.0, "cpu_ratio": 1.0},
        {"label": "main: x", "wall_ratio": 2.0, "cpu_ratio": 2.5},
        {"label": "this: x", "wall_ratio": 1.2, "cpu_ratio": after_cpu},
    ]
    (tmp / "f.json").write_text(json.dumps({"rows": rows}), encoding="utf-8")
    (tmp / "table.toml").write_text(
        "[[row]]\nfigure = 'x'\nfloor = 'y'\n"
        "goal = { op = '<=', value = 1.5, field = 'cpu_ratio', unit = 'x' }\n"
        "before = { file = 'f.json', labels = ['main: x'], fields = ['wall_ratio', 'cpu_ratio'] }\n"
        "after = { file = 'f.json', labels = ['this: x'], fields = ['wall_ratio', 'cpu_ratio'] }\n",
        encoding="utf-8",
    )


@pytest.mark.parametrize(("after_cpu", "met"), [(1.5, "yes"), (1.51, "**no**")])
def test_met_is_the_goal_checked_on_the_figure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, after_cpu: float, met: str
) -> None:
    pt = _module()
    monkeypatch.setattr(pt, "FIGURES", tmp_path)
    _figures(tmp_path, after_cpu)
    row = pt.table().splitlines()[2]
    assert (
        row
        == f"| x | y | <= 1.5x | 2.00x wall, 2.50x CPU | 1.20x wall, {after_cpu:.2f}x CPU | {met} |"
    )


def test_a_cell_naming_a_missing_row_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pt = _module()
    monkeypatch.setattr(pt, "FIGURES", tmp_path)
    _figures(tmp_path, 1.0)
    (tmp_path / "f.json").write_text(json.dumps({"rows": []}), encoding="utf-8")
    with pytest.raises(pt.TableError, match="no row main: x"):
        pt.table()
