"""The HTML reports in a real browser: Debian's chromium, headless, driven by Playwright
(``executable_path``; never ``playwright install``). Each page (a run, a soak, a compare, a
fleet, and the same with hostile model ids, file, shape and node names) loads from a file
with no console message, no script error and no request but its own; every figure lays out
an SVG with the expected number of series, each of which draws something; the hostile
strings show as text and run nothing. A control page proves the detector sees a script run
and the pages' policy stop one.

Marker ``browser``: skipped without chromium or Playwright, an error under CI=true
(.ci/run installs chromium)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from blackwell_doctor.render.html import page as html_page
from tests.htmldocs import IMG, Page, pages

pytestmark = pytest.mark.browser

ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# Per figure: its kind, its SVG's laid-out size, its series and how many of them have a
# non-empty bounding box, and the rows of the table that follows it.
FIGURES = """() => [...document.querySelectorAll('figure.plot')].map(f => {
  const svg = f.querySelector('svg');
  const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
  const series = [...f.querySelectorAll('svg g.series')];
  const next = f.nextElementSibling;
  return {
    plot: f.dataset.plot, width: box.width, height: box.height, series: series.length,
    drawn: series.filter(g => { const b = g.getBBox(); return b.width || b.height; }).length,
    table: (next && (next.tagName === 'TABLE' ? next : next.querySelector('table')) || {rows: []})
      .rows.length,
  };
})"""


@cache
def _pages() -> dict[str, Page]:
    return {p.name: p for p in pages()}


@pytest.fixture(scope="module")
def context(chromium_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")  # a fresh user-data-dir
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(profile), executable_path=chromium_bin, headless=True, args=ARGS
        )
        try:
            yield ctx
        finally:
            ctx.close()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("html")
    out = {}
    for name, p in _pages().items():
        path = folder / f"{name}.html"
        path.write_text(p.html, encoding="utf-8")
        out[name] = path
    return out


class _Watch:
    """What a page said and asked for while loading."""

    def __init__(self, page: Any) -> None:
        self.console: list[str] = []
        self.errors: list[str] = []
        self.requests: list[str] = []
        page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("request", lambda r: self.requests.append(r.url))


@pytest.mark.parametrize("name", sorted(_pages()))
def test_the_report_renders_in_chromium(name: str, context: Any, files: dict[str, Path]) -> None:
    expected = _pages()[name]
    page = context.new_page()
    watch = _Watch(page)
    url = files[name].as_uri()
    page.goto(url, wait_until="load")
    figures = page.evaluate(FIGURES)
    assert [(f["plot"], f["series"]) for f in figures] == list(expected.plots)
    for f in figures:
        assert f["width"] > 300, f
        assert f["height"] > 100, f
        assert f["drawn"] == f["series"], f
        assert f["table"] >= 2, f
    assert watch.console == []
    assert watch.errors == []
    assert watch.requests == [url]
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.evaluate("document.querySelectorAll('script, img, iframe, object').length") == 0
    text = page.evaluate("document.body.textContent")
    title = page.title()
    for shown in expected.shown:
        assert shown in text
        assert shown in title or name.startswith("fleet")  # the run's and compare's titles
    page.close()


def test_the_detector_sees_a_script_run_and_the_policy_stop_it(
    context: Any, tmp_path: Path
) -> None:
    """Unescaped, the hostile model id runs (so ``__pwned`` would catch it); under the
    pages' Content-Security-Policy, the same markup is refused."""
    plain = tmp_path / "plain.html"
    plain.write_text(f"<!DOCTYPE html><html><body>{IMG}</body></html>", encoding="utf-8")
    page = context.new_page()
    page.goto(plain.as_uri())
    page.wait_for_function("window.__pwned === 1")
    guarded = tmp_path / "guarded.html"
    guarded.write_text(html_page("control", [IMG]), encoding="utf-8")  # deliberately raw
    page = context.new_page()
    with page.expect_console_message(lambda m: "Content Security Policy" in m.text):
        page.goto(guarded.as_uri())
    assert page.evaluate("typeof window.__pwned") == "undefined"
    page.close()
