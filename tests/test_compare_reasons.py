"""Issue 40: a "not comparable" row of ``bench --compare`` says why, with the figures found,
in every view: the row's ``reason`` in JSON, a line under the table in the terminal text
and Markdown, a note under the table in HTML. One compare per cause that rules/compare.py
tells apart."""

from __future__ import annotations

import html
import json
import re

import msgspec
import pytest

from blackwell_doctor.render.bench import render_bench
from blackwell_doctor.render.formats import BenchFormat
from blackwell_doctor.render.markdown import prose
from blackwell_doctor.report.bench import BenchRun, CompareDocument, EquivalenceOutput
from blackwell_doctor.rules.compare import _missing_reason, compare
from tests.test_bench_noise import A_AGAIN, A_LEVELS, _bursty, _doc, _tail_bursts


def _compare(before: BenchRun, after: BenchRun) -> CompareDocument:
    return compare(before, after, before_name="b", after_name="a", resamples=400)


def _views(doc: CompareDocument) -> dict[BenchFormat, str]:
    return {fmt: render_bench(doc, fmt) for fmt in BenchFormat}


def _assert_shown(doc: CompareDocument, metric: str, reason: str) -> None:
    """``reason`` is the row's: in the JSON field, and on the reason line of the rich text,
    Markdown (a list item) and HTML (a note paragraph) that names ``metric``."""
    views = _views(doc)
    rows = json.loads(views[BenchFormat.JSON])["comparisons"]
    found = [r for r in rows if r["metric"] == metric]
    assert found
    assert found[0]["verdict"] == "not comparable"
    assert found[0]["reason"] == reason
    head = re.compile(rf"^not comparable: concurrent [a-z0-9_., ]*\b{re.escape(metric)}\b")
    text = [ln for ln in views[BenchFormat.RICH].splitlines() if head.match(ln)]
    assert text == [text[0]]
    assert text[0].endswith(f": {reason}"), text
    md = views[BenchFormat.MARKDOWN].splitlines()
    items = [ln for ln in md if ln.startswith("- not comparable: concurrent ")]
    assert any(ln.endswith(f": {prose(reason)}") for ln in items), items
    # A blank line between the table and the list: a line right under a GFM table is a row.
    first = md.index(items[0])
    assert md[first - 1] == ""
    assert md[first - 2].startswith("|")
    page = html.unescape(views[BenchFormat.HTML])
    notes = re.findall(r'<p class="note">(not comparable: concurrent [^<]*)</p>', page)
    assert any(n.endswith(f": {reason}") and metric in n for n in notes), notes


def test_a_side_with_no_completed_request_says_so() -> None:
    after = _doc([10.0], 2)
    shape = after.shapes[0]
    failed = [msgspec.structs.replace(s, ok=False) for s in shape.samples]
    after = msgspec.structs.replace(
        after, shapes=[msgspec.structs.replace(shape, samples=failed)], repeats=[]
    )
    doc = _compare(_doc([10.0], 1), after)
    assert all(r.verdict == "not comparable" for r in doc.comparisons)
    _assert_shown(doc, "ttft_ms.p99", "none of after's 60 requests completed")
    # One line for the eight rows with the same reason.
    text = render_bench(doc, BenchFormat.RICH)
    assert text.count("none of after's 60 requests completed") == 1


def test_runs_with_figures_only_say_there_is_nothing_to_resample() -> None:
    def figures_only(run: BenchRun) -> BenchRun:
        return msgspec.structs.replace(
            run, shapes=[msgspec.structs.replace(s, samples=[]) for s in run.shapes]
        )

    doc = _compare(figures_only(_doc([10.0], 1)), figures_only(_doc([12.0], 2)))
    row = next(r for r in doc.comparisons if r.metric == "output_tokens_per_s")
    assert row.before is not None  # the figures are shown, only not resampled
    _assert_shown(
        doc,
        "output_tokens_per_s",
        "neither side has per-request samples to resample: their 60 and 60 requests are in "
        "their figures only",
    )


def test_a_run_with_no_completed_request_leaves_no_resample() -> None:
    after = _doc(A_AGAIN, 2)
    repeat = after.repeats[0]
    shape = repeat.shapes[0]
    failed = msgspec.structs.replace(
        shape, samples=[msgspec.structs.replace(s, ok=False) for s in shape.samples]
    )
    after = msgspec.structs.replace(
        after,
        repeats=[msgspec.structs.replace(repeat, shapes=[failed]), *after.repeats[1:]],
    )
    doc = _compare(_doc(A_LEVELS, 1), after)
    # The latencies are "too few samples" (no tail to draw from); throughput has no tail.
    _assert_shown(
        doc, "output_tokens_per_s", "after's run 2 completed no request: no resample can be drawn"
    )


def test_too_few_usable_resamples_give_the_count() -> None:
    # The figures when a side has its value but most resamples have none (or 0) before.
    runs = (_doc([10.0], 1).shapes, _doc([10.0], 2).shapes)
    reason = _missing_reason("tpot_ms.p50", (5.0, 6.0), runs, 37, 1000, 500)
    assert reason.startswith("37 of 1,000 resamples usable, 500 needed"), reason


def test_a_latency_below_the_resolution_gives_both_figures() -> None:
    doc = _compare(_bursty(_doc(A_LEVELS, 1)), _doc(A_AGAIN, 2))
    row = next(r for r in doc.comparisons if r.metric == "tpot_ms.p50")
    assert row.before is not None
    assert row.after is not None
    reason = f"below the timing resolution (0.1 ms): {row.before:,.2f} ms vs {row.after:,.2f} ms"
    assert reason.startswith("below the timing resolution (0.1 ms): 0.00 ms vs ")
    _assert_shown(doc, "tpot_ms.p50", reason)


def test_one_run_below_the_resolution_is_named() -> None:
    runs = _doc(A_LEVELS, 1, gaps=64)
    mixed = msgspec.structs.replace(runs, shapes=_bursty(runs).shapes)
    doc = _compare(mixed, _doc([level * 1.6 for level in A_AGAIN], 2, gaps=64))
    row = next(r for r in doc.comparisons if r.metric == "itl_ms.p99")
    assert isinstance(row.reason, str)
    assert row.reason.startswith(
        "below the timing resolution (0.1 ms) in before's run 1 of 3: 0.00 ms"
    ), row.reason
    _assert_shown(doc, "itl_ms.p99", row.reason)


def test_resamples_below_the_resolution_are_counted() -> None:
    doc = _compare(_tail_bursts(20.0, 1), _tail_bursts(20.0, 2))
    row = next(r for r in doc.comparisons if r.metric == "itl_ms.p99")
    assert isinstance(row.reason, str)
    found = re.fullmatch(
        r"([\d,]+) of 400 resamples fell below the timing resolution \(0\.1 ms\) on a side, "
        r"more than the ([\d.]+) a tail of the interval holds: 20\.00 ms vs 20\.00 ms",
        row.reason,
    )
    assert found, row.reason
    assert int(found[1].replace(",", "")) > float(found[2])
    _assert_shown(doc, "itl_ms.p99", row.reason)


def test_no_greedy_prompt_on_both_sides_gives_each_sides_count() -> None:
    before = _doc([10.0], 1)
    shape = before.shapes[0]
    unanswered = [EquivalenceOutput(prompt_id="p1", ok=False, text="")]
    before = msgspec.structs.replace(
        before, shapes=[msgspec.structs.replace(shape, equivalence=unanswered)]
    )
    doc = _compare(before, _doc([10.0], 2))
    reason = (
        "no greedy prompt answered on both sides (before 0 of 1 answered, after 1 of 1 answered)"
    )
    assert doc.equivalence[0].verdict == "not comparable"
    assert doc.equivalence[0].reason == reason
    views = _views(doc)
    assert json.loads(views[BenchFormat.JSON])["equivalence"][0]["reason"] == reason
    line = f"equivalence concurrent: - of 0 greedy prompts identical: not comparable: {reason}"
    assert line in views[BenchFormat.RICH].splitlines()
    assert prose(reason) in views[BenchFormat.MARKDOWN]
    page = html.unescape(views[BenchFormat.HTML])
    assert f'<p class="note">not comparable: concurrent: {reason}</p>' in page


@pytest.mark.parametrize("fmt", list(BenchFormat))
def test_a_comparable_row_has_no_reason(fmt: BenchFormat) -> None:
    doc = _compare(_doc([10.0], 1), _doc([10.0], 2))
    assert all(r.verdict != "not comparable" for r in doc.comparisons)
    out = render_bench(doc, fmt)
    assert '"reason"' not in out
    assert "not comparable:" not in out
