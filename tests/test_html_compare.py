"""The HTML compare read in chromium at a narrow and a wide window (issue 40), on the
shipped A/B example (max-num-seqs-1: throughput -80%, TTFT p50 +1,940%):

- the exit code comes after the overall verdict, not above it in the subtitle;
- the change axis stops at +-200% (a +1,940% tail ended the axis at 4,000% and squashed the
  -80% drop against 0); a value past it ends in a triangle at the edge with its value;
- the axis' ticks say %;
- verdict cells are coloured as the figure colours them (svg.py GOOD and BAD);
- nothing runs past a 700 px window: a wide table scrolls inside the page.

Marker ``browser`` (tests/test_html_browser.py: Debian's chromium through Playwright)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from blackwell_doctor.render.svg import BAD
from tests.cli import run
from tests.conftest import REPO

pytestmark = pytest.mark.browser

ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


@pytest.fixture(scope="module")
def compare_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("compare") / "compare.html"
    argv = ["bench", "--example", "max-num-seqs-1", "--resamples", "200", "-f", "html"]
    with path.open("wb") as out:
        done = subprocess.run(
            [sys.executable, "-m", "blackwell_doctor", *argv],
            stdout=out,
            env={**os.environ, "PYTHONPATH": str(REPO / "src")},
            timeout=300,
            check=False,
        )
    assert done.returncode == 0
    return path


@pytest.fixture(scope="module")
def browser(chromium_bin: str) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_bin, headless=True, args=ARGS)
        try:
            yield b
        finally:
            b.close()


def _rgb(hex_colour: str) -> str:
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"


@pytest.mark.parametrize("width", [700, 1280])
def test_compare_page_reads_at_narrow_and_wide_windows(
    browser: Any, compare_page: Path, width: int
) -> None:
    page = browser.new_page(viewport={"width": width, "height": 900})
    try:
        page.goto(compare_page.as_uri())
        # Nothing runs past the window.
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        # exit after the overall verdict.
        order = page.evaluate(
            """() => {
              const cells = [...document.querySelectorAll('td')];
              const overall = cells.find(td => td.textContent === 'overall');
              const exit = document.querySelector('p.exit');
              return [!!overall, !!exit,
                      overall && exit
                        && !!(overall.compareDocumentPosition(exit)
                              & Node.DOCUMENT_POSITION_FOLLOWING)];
            }"""
        )
        assert order == [True, True, True]
        assert page.inner_text("p.exit") == "exit 0"
        assert "exit" not in page.inner_text("p.meta")
        ticks = page.evaluate(
            """() => [...document.querySelectorAll('figure[data-plot=forest] svg text')]
                 .map(t => t.textContent).filter(t => /^[-+0-9.,]+%?$/.test(t))"""
        )
        numeric = [t for t in ticks if t != "0"]
        assert numeric
        assert all(t.endswith("%") for t in numeric), ticks
        axis = [float(t.rstrip("%").replace(",", "")) for t in numeric if t[0] != "+"]
        assert min(axis) >= -200
        assert max(axis) <= 200
        assert "+1,940%" in ticks  # the TTFT p50 change, at the edge with its value
        assert page.locator("figure[data-plot=forest] polygon.clipped").count() >= 1
        worse = page.locator("td.v-worse").first
        assert worse.inner_text() == "worse"
        assert worse.evaluate("td => getComputedStyle(td).color") == _rgb(BAD)
    finally:
        page.close()


def test_the_shipped_example_is_what_the_page_shows(capsys: pytest.CaptureFixture[str]) -> None:
    # The figures the page is read against: -80% throughput, +1,940% TTFT p50, both worse.
    r = run(["bench", "--example", "max-num-seqs-1", "--resamples", "200", "-f", "json"], capsys)

    rows = {c["metric"]: c for c in json.loads(r.out)["comparisons"]}
    assert round(rows["output_tokens_per_s"]["change_pct"]) == -80
    assert round(rows["ttft_ms.p50"]["change_pct"]) == 1940
