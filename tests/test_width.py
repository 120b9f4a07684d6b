"""Every command's terminal view fits the terminal (issue 40), tried as a person would: each
command on every shipped example and on the fixtures, run on a pseudo-terminal 80 and 120
columns wide (tests/tty.py), in colour as a terminal gets it.

- No line is wider than the terminal, except one that is a single word (a path, a URL)
  or a single command, and then only when it cannot fit even 4 columns in.
- Nothing is broken to fit: the words of the view at 80 columns are the words of the same
  view on a terminal too wide to wrap anything, and every command shown there is shown
  whole at 80 (a trailing shell comment may go on the line above it).
- The width changes nothing else: the exit code is the same at every width.

The widths measured on main before issue 40 (COLUMNS=80): fleet 486 columns, model 425,
recommend 867, apply 203, bench 235, examples 130, check 146 (its commands), and check
broke paths inside a word in colour.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from functools import cache
from pathlib import Path

import pytest

from blackwell_doctor.ruledata.examples import load_examples
from tests.conftest import FACTS_FIXTURES, FIXTURES
from tests.tty import Shown, shown

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="pseudo-terminals on Linux")

# Wide enough that nothing is wrapped nor split: the view as laid out.
UNFITTED = 10_000
# A word or command is left wider than the terminal only when it cannot fit this far in.
HANG = 4
BENCH = FIXTURES / "bench"
RESAMPLES = ["--resamples", "200"]  # bench's bootstrap at its smallest: layout, not intervals


def _example_cases() -> list[list[str]]:
    """Each command the examples listing offers (`try:`), in its terminal view."""
    cases = []
    for e in load_examples().example:
        for command in e.commands:
            verb, *rest = command.split()
            if "-f" in rest or "--format" in rest:
                continue  # a machine format (shell): not a terminal view
            argv = [verb, "--example", e.name, *rest]
            cases.append(argv + RESAMPLES if verb == "bench" else argv)
    return cases


def _fixture_cases() -> list[list[str]]:
    facts = sorted(FACTS_FIXTURES.glob("*.json"))
    models = FIXTURES / "models"
    logs = FIXTURES / "logs"
    return [
        ["examples"],
        *[
            ["check", "--facts", str(FACTS_FIXTURES / f"{name}.json")]
            for name in ("rtxpro6000x4-preflight", "rtx5090-xid79-riser", "h200x2-row-remap")
        ],
        ["fleet", *map(str, facts)],
        ["fleet", "--verbose", *map(str, facts)],
        *[
            ["model", str(models / name)]
            for name in (
                "deepseek-r1",
                "glm-4.5-air",
                "minimax-m2",
                "olmoe-1b-7b",
                "jamba-1.5-mini",
            )
        ],
        [
            "recommend",
            "--facts",
            str(FACTS_FIXTURES / "rtxpro6000x4-threadripper-iommu.json"),
            "--model-dir",
            str(models / "qwen3-235b-a22b-fp4"),
        ],
        [
            "bench",
            "--compare",
            str(BENCH / "article-wsl2-55tps.json"),
            str(BENCH / "article-native-119tps.json"),
            *RESAMPLES,
        ],
        [
            "bench",
            "--compare",
            str(BENCH / "tiny-moe-vllm-cpu-sweep.json"),
            str(BENCH / "tiny-moe-vllm-cpu-sweep-seqs1.json"),
            *RESAMPLES,
        ],
        [
            "bench",
            "--compare",
            str(BENCH / "sm120-moe-bench-stock-mtp0.json"),
            str(BENCH / "sm120-moe-bench-stock-mtp3.json"),
            str(BENCH / "article-native-119tps.json"),
            *RESAMPLES,
        ],
        [
            "scan-logs",
            *[
                str(logs / name)
                for name in (
                    "composed-xid-13.log",
                    "art-201-worker-died.log",
                    "composed-sglang-custom-ar-v2-docker-json.log",
                    "flashinfer-3134-unsupported-tile.log",
                    "composed-persistenced-killed.log",
                    "composed-vllm-56128-custom-allreduce-pcie.log",
                )
            ],
        ],
        ["probe", "--plan", "--smem-limit", "101376"],
    ]


CASES = _example_cases() + _fixture_cases()


def _id(argv: list[str]) -> str:
    return " ".join(a.rsplit("/", 1)[-1] for a in argv if a not in RESAMPLES)


@cache
def _view(argv: tuple[str, ...], columns: int) -> Shown:
    result = shown(list(argv), columns)
    assert result.code in (0, 1), result.text[-2000:]
    return result


def _commands(text: str) -> set[str]:
    """The commands a view shows (``$ ...`` lines), as shown."""
    return {line.strip()[2:] for line in text.splitlines() if line.strip().startswith("$ ")}


def _without_comment(command: str) -> str:
    """``command`` without its trailing shell comment (the catalogue writes one as
    ``cmd    # why``)."""
    return re.sub(r"\s+#\s.*$", "", command)


@cache
def _whole_lines(argv: tuple[str, ...]) -> frozenset[str]:
    """Lines the view shows whole that are no shell command: apply's container command
    and entrypoint, as recommend's JSON has the container (the same example)."""
    if argv[0] != "apply":
        return frozenset()
    import contextlib
    import io

    from blackwell_doctor.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["recommend", *argv[1:], "-f", "json"]) == 0
    container = json.loads(out.getvalue())["launch"]["container"]
    return frozenset(shlex.join(p) for p in (container["command"], container["entrypoint"]) if p)


def _words(text: str) -> set[str]:
    return set(text.split())


def _assert_fits(argv: tuple[str, ...], text: str, columns: int) -> None:
    unfitted = _view(argv, UNFITTED).text
    commands = _commands(unfitted) | {_without_comment(c) for c in _commands(unfitted)}
    whole = _whole_lines(argv)
    for line in text.splitlines():
        if len(line) <= columns:
            continue
        item = line.strip()
        single = len(item.split()) == 1 or (item.startswith("$ ") and item[2:] in commands)
        assert single or item in whole, f"{len(line)} columns: {line!r}"
        assert len(item) > columns - HANG, f"fits {HANG} columns in, but is not: {line!r}"


@pytest.mark.parametrize("columns", [80, 120])
@pytest.mark.parametrize("argv", CASES, ids=_id)
def test_no_line_is_wider_than_the_terminal(argv: list[str], columns: int) -> None:
    code, text = _view(tuple(argv), columns)
    assert code == _view(tuple(argv), UNFITTED).code
    _assert_fits(tuple(argv), text, columns)


@pytest.mark.parametrize("argv", CASES, ids=_id)
def test_nothing_is_broken_to_fit(argv: list[str]) -> None:
    _, narrow = _view(tuple(argv), 80)
    _, wide = _view(tuple(argv), UNFITTED)
    words, wide_words = _words(narrow), _words(wide)
    # A word cut in two would show as two words the unfitted view does not have. (A table
    # too wide even for its name column shows each row as a record, `column: value;`.)
    broken = {w for w in words - wide_words if w.rstrip(":;") not in wide_words}
    assert not broken, sorted(broken)[:20]
    lost = {w for w in wide_words - words if not {f"{w}:", f"{w};"} & words}
    assert not lost, sorted(lost)[:20]
    # Every command whole on a line of its own (its comment, if any, on the line above).
    shown_commands = _commands(narrow)
    for command in _commands(wide):
        assert command in shown_commands or _without_comment(command) in shown_commands, command


def test_a_path_is_never_broken_in_colour() -> None:
    # rich's own wrapping folded a long word: on main, `check` in colour at 80 columns cut
    # NVIDIA/NVSentinel@...:distros/kubernete|s/nvsentinel/... in two (scan-logs' source).
    log = str(FIXTURES / "logs" / "composed-xid-13.log")
    _, text = _view(("scan-logs", log), 80)
    source = next(w for w in _words(_view(("scan-logs", log), UNFITTED)[1]) if "NVSentinel" in w)
    assert source in _words(text)


def test_plain_text_on_a_terminal_fits_as_colour_does() -> None:
    # NO_COLOR: the plain writer (ASCII marks), fitted by the same rules.
    argv = ("check", "--example", "wsl2-rtxpro6000x4")
    plain = shown(list(argv), 80, {"NO_COLOR": "1"})
    assert plain.code == 1
    assert "[FAIL]" in plain.text
    _assert_fits(argv, plain.text.replace("[FAIL]", "[✗]"), 80)


def test_a_table_too_wide_for_the_terminal_is_split_by_columns() -> None:
    argv = ("bench", "--example", "max-num-seqs-1", *RESAMPLES)
    _, text = _view(argv, 80)
    lines = text.splitlines()
    # The comparison and the greedy log-probabilities, each in two parts, each part led
    # by the table's key columns (shape, metric; shape, prompt) and its own header.
    assert sum(line.startswith("shape               metric") for line in lines) == 2
    assert sum(line.startswith("shape   prompt") for line in lines) == 2
    assert all(len(line) <= 80 for line in lines)


def test_recommend_is_its_terminal_view_on_a_terminal_and_markdown_on_request(
    tmp_path: Path,
) -> None:
    argv = ("recommend", "--example", "wsl2-rtxpro6000x4")
    code, text = _view(argv, 80)
    assert code == 0
    assert text.startswith("blackwell-doctor recommendation\n")
    for markdown_syntax in ("## ", "```", "**"):
        assert markdown_syntax not in text
    assert "    $ blackwell-doctor check --select platform.wsl\n" in text
    # Markdown when asked for, on a terminal too; and in a file.
    markdown = shown([*argv, "-f", "markdown"], 80)
    assert markdown.text.startswith("## blackwell-doctor recommendation\n")
    out = tmp_path / "rec.md"
    assert shown([*argv, "-o", str(out)], 80).code == 0
    assert out.read_text().startswith("## blackwell-doctor recommendation\n")
