"""The HTML reports (``bench -f html``, ``bench --compare -f html``, a soak, ``fleet -f html``)
read by Python's own HTML parser: no script, no event handler, nothing fetched; each figure
has the series it must have and its numbers as a table; hostile strings arrive as text. The
same pages in a real browser: tests/test_html_browser.py."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from functools import cache
from html.parser import HTMLParser

import pytest

from blackwell_doctor.render.bench_html import CDF_POINTS, LOG_FLOOR_MS, _cdf_series
from blackwell_doctor.render.html import CSP
from blackwell_doctor.render.svg import Axis, _range, tick_label
from tests.htmldocs import Page, pages, soaked


class _Reader(HTMLParser):
    """Tags, attributes, text, and per figure its series and the table after it."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.figures: list[list[object]] = []  # [data-plot, series count, table rows]
        self._in_figure = False
        self._after_figure = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "figure":
            self.figures.append([a.get("data-plot"), 0, 0])
            self._in_figure = True
        elif tag == "g" and self._in_figure and a.get("class") == "series":
            self.figures[-1][1] = int(str(self.figures[-1][1])) + 1
        elif tag == "tr" and self._after_figure:
            self.figures[-1][2] = int(str(self.figures[-1][2])) + 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "figure":
            self._in_figure, self._after_figure = False, True
        elif tag == "table":
            self._after_figure = False

    def handle_data(self, data: str) -> None:
        self.text.append(data)


@cache
def _pages() -> dict[str, Page]:
    return {p.name: p for p in pages()}


def _read(page: Page) -> _Reader:
    reader = _Reader()
    reader.feed(page.html)
    reader.close()
    return reader


NAMES = [p.name for p in pages()]


@pytest.mark.parametrize("name", NAMES)
def test_the_page_has_no_script_and_fetches_nothing(name: str) -> None:
    page = _pages()[name]
    reader = _read(page)
    tags = {t for t, _ in reader.tags}
    assert not tags & {"script", "img", "iframe", "object", "embed", "link", "base", "form"}
    for tag, attrs in reader.tags:
        assert not [k for k in attrs if k.startswith("on")], (tag, attrs)
        assert not {"src", "href", "action", "srcset"} & set(attrs), (tag, attrs)
    policy = [
        a.get("content") for t, a in reader.tags if a.get("http-equiv") == "Content-Security-Policy"
    ]
    assert policy == [CSP]
    assert "default-src 'none'" in CSP
    assert "script-src" not in CSP


@pytest.mark.parametrize("name", NAMES)
def test_every_figure_has_its_series_and_a_table(name: str) -> None:
    page = _pages()[name]
    reader = _read(page)
    assert [(f[0], f[1]) for f in reader.figures] == list(page.plots)
    assert page.plots
    for plot, _, rows in reader.figures:
        assert int(str(rows)) >= 2, plot  # a head row and at least one of numbers


@pytest.mark.parametrize("name", [n for n in NAMES if "hostile" in n])
def test_a_hostile_string_is_text(name: str) -> None:
    page = _pages()[name]
    text = "".join(_read(page).text)
    for shown in page.shown:
        assert shown in text
        assert shown not in page.html  # only ever escaped
    assert "\u2028" not in page.html
    assert "\u2029" not in page.html


def test_the_compare_draws_the_changes_and_the_regression() -> None:
    page = _pages()["compare"]
    assert "vermillion worse" in page.html
    # The slower run's TTFT rows are worse: each is drawn in the "worse" colour.
    rows = re.findall(r'<g class="series" data-series="([^"]*)"><title>([^<]*)</title>', page.html)
    worse = [label for label, tip in rows if "(worse;" in tip]
    assert any("ttft_ms" in label for label in worse)


def test_the_soak_fit_line_has_the_document_slope() -> None:
    run = soaked()
    assert run.soak is not None
    trend = next(t for t in run.soak.trends if t.quantity == "kv_cache_usage_pct")
    assert trend.slope_per_hour is not None
    html = _pages()["soak"].html
    section = html.split('data-plot="soak-trend"', 1)[1].split("</table>", 1)[0]
    fits = [
        float(v.replace(",", ""))
        for v in re.findall(r"<td class=\"text\">yes</td><td>([-0-9.,]+)</td>", section)
    ]
    assert len(fits) == trend.intervals
    step_h = run.soak.interval_s / 3600.0
    for a, b in itertools.pairwise(fits):
        assert b - a == pytest.approx(trend.slope_per_hour * step_h, abs=0.011)


def test_a_cdf_runs_from_0_to_1_through_at_most_its_point_budget() -> None:
    values = [float(i % 97) for i in range(5000)]
    series, below = _cdf_series("ITL", values, "#000")
    assert below == values.count(0.0)
    assert series.points[0] == (LOG_FLOOR_MS, 0.0)
    assert series.points[-1] == (96.0, 1.0)
    assert len(series.points) <= CDF_POINTS + 1
    ys = [y for _, y in series.points]
    assert ys == sorted(ys)


def test_axis_ranges_and_ticks() -> None:
    lo, hi, ticks = _range([0.3, 620.0], Axis("ms", log=True), 6)
    assert (lo, hi) == (0.1, 1000.0)
    assert ticks[0] == 0.1
    assert ticks[-1] == 1000.0
    lo, hi, ticks = _range([3.0, 97.0], Axis("n"), 5)
    assert lo == 0.0
    assert hi >= 97.0
    assert ticks == sorted(ticks)
    assert [tick_label(v) for v in (0.0, 0.05, 2.5, 1500.0)] == ["0", "0.05", "2.5", "1,500"]


def test_bench_and_fleet_write_html_from_the_command_line(tmp_path: object) -> None:
    """The CLI takes ``-f html`` (the format enums) and writes one page on stdout."""
    from tests.htmldocs import CAPTURED

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "blackwell_doctor",
            "bench",
            "--compare",
            str(CAPTURED),
            str(CAPTURED),
            "-f",
            "html",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode in (0, 1), out.stderr
    assert out.stdout.startswith("<!DOCTYPE html>")
    assert 'data-plot="forest"' in out.stdout
