"""Judging with changed rule data: a copy of checks/ edited by a test, loaded fresh."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from blackwell_doctor.ruledata import checkdata
from blackwell_doctor.ruledata.logs import load_catalogue
from blackwell_doctor.ruledata.resources import data_dir
from blackwell_doctor.ruledata.rules import clear_caches


def _clear() -> None:
    clear_caches()
    load_catalogue.cache_clear()


@contextmanager
def edited_checks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, edit: Callable[[str], str]
) -> Iterator[None]:
    """Within the block, the tool reads a copy of checks/ whose ``name`` went through
    ``edit`` (which must change it)."""
    copy = tmp_path / "checks"
    shutil.copytree(str(data_dir("checks")), copy)
    before = (copy / name).read_text(encoding="utf-8")
    after = edit(before)
    assert after != before, f"the edit left checks/{name} unchanged"
    (copy / name).write_text(after, encoding="utf-8")
    _clear()
    monkeypatch.setattr(checkdata, "data_dir", lambda _name: copy)
    try:
        yield
    finally:
        monkeypatch.undo()
        _clear()
