"""Issue 40: what an ``--example`` command prints holds no absolute path of this machine.
The examples folder (``blackwell_doctor/_data/examples`` in an install, ``examples/`` in a
checkout) was printed whole: log sources, the model directory, the launch's bind mounts.
It is written ``<examples>`` in every format, escaped as the format needs, and where a
command to paste is shown one line says what it stands for. Display only: the facts and
the mounts keep the real path (the goldens' launch spec hash is taken over it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import blackwell_doctor
from blackwell_doctor.app.examples import SHOWN, shown
from blackwell_doctor.render.formats import (
    BenchFormat,
    FleetFormat,
    Format,
    ModelFormat,
    RecommendFormat,
)
from blackwell_doctor.ruledata.examples import example_path, load_examples
from tests.cli import run

HOST = "wsl2-rtxpro6000x4"
NO_DOCKER = "unix:///nonexistent/blackwell-doctor-test/docker.sock"


def _cases() -> list[list[str]]:
    cases = [["check", "--example", HOST, "-f", f] for f in Format]
    cases += [["recommend", "--example", HOST, "-f", f] for f in RecommendFormat]
    cases += [["apply", "--example", HOST]]
    cases += [["model", "--example", HOST, "-f", f] for f in ModelFormat]
    cases += [["fleet", "--example", ex, "-f", f] for ex in ("lab", HOST) for f in FleetFormat]
    cases += [["bench", "--example", "max-num-seqs-1", "-f", f] for f in BenchFormat]
    return cases


def _forbidden() -> list[str]:
    """The package's folder and the examples folder, as found and resolved."""
    root = example_path("")
    package = os.path.dirname(blackwell_doctor.__file__)
    return sorted({package, str(root), str(root.resolve())})


@pytest.mark.parametrize("argv", _cases(), ids=lambda a: "-".join(a[::2][:1] + a[2::2]))
def test_an_example_prints_no_path_of_this_install(
    argv: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DOCKER_HOST", NO_DOCKER)
    monkeypatch.delenv("COLUMNS", raising=False)
    res = run(argv, capsys)
    assert res.code in (0, 1), res.err
    for path in _forbidden():
        assert path not in res.out, f"{' '.join(argv)} prints {path}"
        assert path not in res.err, f"{' '.join(argv)} says {path}"


def _with_paths(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    res = run(argv, capsys)
    assert res.code in (0, 1), res.err
    return res.out


def test_the_paths_are_shown_under_examples_in_each_formats_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DOCKER_HOST", NO_DOCKER)
    log = "/logs/vllm-1084-wsl-pin-memory.log:1"
    stands_for = load_examples().words.stands_for
    text = _with_paths(["check", "--example", HOST], capsys)
    assert f"{SHOWN}{log}" in text
    assert stands_for not in text  # no command to paste
    # Markdown: escaped in prose (alone, <examples> is a raw HTML tag a ticket drops).
    md = _with_paths(["check", "--example", HOST, "-f", "markdown"], capsys)
    assert f"first at \\{SHOWN}{log})" in md
    page = _with_paths(["fleet", "--example", "lab", "-f", "html"], capsys)
    assert f"first at &lt;examples&gt;{log})" in page
    assert "<examples>" not in page
    junit = _with_paths(["check", "--example", HOST, "-f", "junit"], capsys)
    assert f"&lt;examples&gt;{log}" in junit
    # A command to paste: its mount as <examples>/..., and one line says what it stands for.
    model = f"{SHOWN}/models/qwen3.5-397b-a17b-nvfp4"
    for fmt, line in (
        ("rich", stands_for),
        ("markdown", "\\" + stands_for),
        ("shell", "# " + stands_for),
        ("compose", "# " + stands_for),
    ):
        out = _with_paths(["recommend", "--example", HOST, "-f", fmt], capsys)
        assert model in out, fmt
        assert out.splitlines().count(line) == 1, fmt
    plan = _with_paths(["apply", "--example", HOST], capsys)
    assert f"bind:{model}->/model:ro" in plan
    assert plan.splitlines()[-1] == stands_for


def test_shown_leaves_a_code_span_and_a_fenced_block_as_typed() -> None:
    root = str(example_path(""))
    md = f"a {root}/x `{root}/y`\n```\ndocker run -v {root}/m:/model\n```\n"
    assert shown(md, "markdown") == (
        f"a \\{SHOWN}/x `{SHOWN}/y`\n```\ndocker run -v {SHOWN}/m:/model\n```\n"
    )
    # Nothing of the examples folder, nothing changed, no line added.
    assert shown("nothing here\n", "rich", command=True) == "nothing here\n"
