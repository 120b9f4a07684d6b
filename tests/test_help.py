"""--help read as a person reads it (issue 40), on a pseudo-terminal 80 columns wide
(tests/tty.py): the root help and every command's.

- The command list gives each command a whole sentence (click cut them at the width left
  beside the name, mid-sentence, with "...").
- No word is split across lines: before issue 40 `--fail-on` wrapped as `--fail-`/`on` and
  `blackwell-doctor` as `blackwell-`/`doctor` (textwrap breaks after hyphens).
- A metavar says what goes there: never typer's type names (`<str>`, `<float range>`).
- Each command ends with an Examples section; each example with `--example` runs.
- A misspelt --select/--ignore names the nearest check id or family.
"""

from __future__ import annotations

import re
import shlex
import sys

import pytest
import typer
from typer.core import TyperOption

from blackwell_doctor.cli import app
from blackwell_doctor.cli.commands import COMMANDS, command_name
from tests.cli import run
from tests.tty import shown

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="pseudo-terminals on Linux")

WIDTH = 80
# typer's metavars for its types (typer/core.py@0.28 TyperOption.make_metavar: the type's
# name in angle brackets), which say nothing of what goes there.
TYPE_METAVARS = re.compile(r"<(str|text|int|float|int range|float range|integer)>")


def _help(args: list[str]) -> str:
    result = shown([*args, "--help"], WIDTH)
    assert result.code == 0, result.text
    return result.text


def _options(name: str) -> list[str]:
    group = typer.main.get_group(app)
    command = group.commands[name]
    return [o for p in command.params if isinstance(p, TyperOption) for o in p.opts]


@pytest.mark.parametrize("name", [command_name(c) for c in COMMANDS])
def test_command_help_fits_and_splits_no_word(name: str) -> None:
    text = _help([name])
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= WIDTH, text
    hyphen_ends = [line for line in lines if re.search(r"\w-$", line)]
    assert hyphen_ends == [], hyphen_ends
    for option in _options(name):
        assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text), option
    assert TYPE_METAVARS.findall(text) == []
    examples = text.split("\nExamples:\n", 1)[1].strip().splitlines()
    assert examples, text
    assert all("blackwell-doctor " in line for line in examples), examples
    assert any(f"blackwell-doctor {name}" in line for line in examples), examples


def test_root_help_lists_each_command_in_a_whole_sentence() -> None:
    text = _help([])
    assert "--fail-on" in text  # the exit codes' paragraph, not "--fail-"/"on"
    listing = text.split("\nCommands:\n", 1)[1].splitlines()
    rows = [line.split(None, 1) for line in listing if line.strip()]
    assert [r[0] for r in rows] == [command_name(c) for c in COMMANDS]
    for _, summary in rows:
        assert summary.endswith("."), summary
        assert "..." not in summary, summary
    assert max(len(line) for line in text.splitlines()) <= WIDTH


def _runnable_examples() -> list[list[str]]:
    group = typer.main.get_group(app)
    cases = []
    for command in group.commands.values():
        for line in (command.epilog or "").splitlines():
            argv = shlex.split(line)
            if "--example" in argv and not {">", "|"} & set(argv):
                cases.append(argv[1:])
    return cases


@pytest.mark.parametrize("argv", _runnable_examples(), ids=" ".join)
def test_help_examples_run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run([*argv, *(["--resamples", "200"] if argv[0] == "bench" else [])], capsys)
    assert code in (0, 1), err


@pytest.mark.parametrize(
    ("option", "typo", "nearest"),
    [
        ("--select", "drvier.version", "driver.version"),
        ("--ignore", "platfrom", "platform"),
    ],
)
def test_misspelt_selection_names_the_nearest(
    option: str, typo: str, nearest: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["check", "--example", "h200x2", option, typo], capsys)
    assert (code, out) == (2, "")
    assert err == (
        f"blackwell-doctor: error: no check id or family matches {typo!r}; "
        f"did you mean {nearest!r}?\n"
    )


def test_selection_far_from_every_check_suggests_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run(["check", "--example", "h200x2", "--select", "zzzz"], capsys)
    assert code == 2
    assert "did you mean" not in err
