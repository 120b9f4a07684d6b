"""The first run on a box with no GPU, as a person sees it on a terminal 80 columns wide
(issue 40): it was ~110 lines, 34 of them skipped rows (13 "blocked by gpu.present").
The skipped checks are grouped by reason (--verbose lists each), and the report ends with
the way forward: the first command of the worst finding's remedy, here a shipped example."""

from __future__ import annotations

import re
import shlex
import sys

import pytest

from tests.cli import run
from tests.conftest import FACTS_FIXTURES
from tests.tty import shown

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="pseudo-terminals on Linux")

NO_GPU = str(FACTS_FIXTURES / "no-gpu.json")


def test_no_gpu_groups_the_skips_and_ends_with_the_way_forward(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, text = shown(["check", "--facts", NO_GPU], 80)
    assert code == 1
    lines = text.splitlines()
    assert len(lines) <= 50, len(lines)
    # No skipped row: each skip is counted under its reason.
    assert not [line for line in lines if re.match(r"\s+\[(–|skip)\]", line)]
    assert "skipped: 42 checks (--verbose lists each)" in lines
    assert "  20 checks: blocked by gpu.present" in lines
    # The way forward closes the report, and it runs without a GPU.
    after = lines[lines.index("Next (gpu.present):") + 1 :]
    # (At 80 columns the command's comment goes on the line above it.)
    assert [line.strip()[:1] for line in after] in (["$"], ["#", "$"])
    assert lines[-1].lstrip().startswith("$ blackwell-doctor check --example ")
    argv = shlex.split(lines[-1].split("$", 1)[1], comments=True)[1:]
    assert run(argv, capsys).code in (0, 1)


def test_verbose_lists_every_skipped_check() -> None:
    code, text = shown(["check", "--facts", NO_GPU, "--verbose"], 80)
    assert code == 1
    skipped = [line for line in text.splitlines() if re.match(r"\s+\[–\]", line)]
    assert len(skipped) == 42
    assert "(--verbose lists each)" not in text
