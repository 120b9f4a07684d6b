"""Issue 40, the examples as a new user meets them: the soak-60s example is shown by a
command (`bench --example soak-60s`; before, every command refused it), and the examples
listing says where the files are without this machine's prefix (it printed an absolute
site-packages path in an install)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import blackwell_doctor
from blackwell_doctor.cli.examples import _shown
from blackwell_doctor.ruledata.examples import example_path, load_examples
from tests.cli import run


def test_every_example_is_shown_by_a_command() -> None:
    # Bar the trace (replayed against a server: bench --url URL --example NAME).
    silent = [e.name for e in load_examples().example if not e.commands and not e.trace]
    assert silent == []


def test_the_soak_example_is_shown_as_its_run(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["bench", "--example", "soak-60s"], capsys)
    assert (code, err) == (0, "")
    assert "soak: 60 of 60 s, 12 intervals of 5 s" in out
    assert "kv_cache_usage_pct" in out
    code, out, _ = run(["bench", "--example", "soak-60s", "-f", "json"], capsys)
    shipped = json.loads(example_path("bench/soak-60s.json").read_text(encoding="utf-8"))
    assert code == 0
    assert json.loads(out)["soak"] == shipped["soak"]


def test_the_example_folder_is_said_without_the_machine_prefix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    package = Path(blackwell_doctor.__file__).resolve().parent
    assert _shown(package / "_data" / "examples") == "blackwell_doctor/_data/examples"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").mkdir()
    assert _shown(tmp_path / "examples") == "examples"
