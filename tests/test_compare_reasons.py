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
from blackwell_doctor.report.bench_metrics import shape_metrics
from blackwell_doctor.rules.compare import _missing_reason, compare
from tests.test_bench_noise import A_AGAIN, A_LEVELS, _bursty, _doc, _tail_bursts


def _compare(before: BenchRun, after: BenchRun) -> CompareDocument:
    return compare(before, after, before_name="b", after_name="a", resamples=400)


def _views(doc: CompareDocument) -> dict[BenchFormat, str]:
    return {fmt: render_bench(doc, fmt) for fmt in BenchFormat}


def _assert_shown(
    doc: CompareDocument, metric: str, reason: str, verdict: str = "not comparable"
) -> None:
    """``reason`` is the row's: in the JSON field, and on the reason line of the rich text,
    Markdown (a list item) and HTML (a note paragraph) that names ``metric``."""
    views = _views(doc)
    rows = json.loads(views[BenchFormat.JSON])["comparisons"]
    found = [r for r in rows if r["metric"] == metric]
    assert found
    assert found[0]["verdict"] == verdict
    assert found[0]["reason"] == reason
    head = re.compile(rf"^{verdict}: concurrent [a-z0-9_., ]*\b{re.escape(metric)}\b")
    text = [ln for ln in views[BenchFormat.RICH].splitlines() if head.match(ln)]
    assert text == [text[0]]
    assert text[0].endswith(f": {reason}"), text
    md = views[BenchFormat.MARKDOWN].splitlines()
    items = [ln for ln in md if ln.startswith(f"- {verdict}: concurrent ")]
    assert any(ln.endswith(f": {prose(reason)}") for ln in items), items
    # A blank line between the table and the list: a line right under a GFM table is a row.
    first = md.index(next(ln for ln in md if re.match(r"- (not comparable|too few samples): ", ln)))
    assert md[first - 1] == ""
    assert md[first - 2].startswith("|")
    page = html.unescape(views[BenchFormat.HTML])
    notes = re.findall(rf'<p class="note">({verdict}: concurrent [^<]*)</p>', page)
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
    for r in doc.comparisons:
        assert isinstance(r.reason, msgspec.UnsetType) == (r.verdict != "too few samples"), r
    out = render_bench(doc, fmt)
    assert "not comparable:" not in out
    if fmt == BenchFormat.JSON:
        rows = json.loads(out)["comparisons"]
        assert all(("reason" in r) == (r["verdict"] == "too few samples") for r in rows)
        assert "reasons" not in json.loads(out)["scorecard"]


# The tail rule: 10 samples beyond a percentile (checks/bench_samples.toml), so a p99 needs
# 1,000 and a p50 20. _doc's runs have 60 requests of 16 ITL gaps each (960 gaps).
_P99 = "1,000 needed for a p99 (10 beyond it: checks/bench_samples.toml)"


def test_too_few_requests_for_a_p99_give_both_sides_counts() -> None:
    doc = _compare(_doc([10.0], 1), _doc([10.0], 2))
    _assert_shown(
        doc, "ttft_ms.p99", f"requests: 60 on before and 60 on after, {_P99}", "too few samples"
    )


def test_too_few_itl_gaps_for_a_p99_count_gaps_not_requests() -> None:
    doc = _compare(_doc([10.0], 1), _doc([10.0], 2))
    _assert_shown(
        doc, "itl_ms.p99", f"ITL gaps: 960 on before and 960 on after, {_P99}", "too few samples"
    )


def test_several_runs_count_the_smallest_run() -> None:
    doc = _compare(_doc(A_LEVELS, 1), _doc(A_AGAIN, 2))
    _assert_shown(
        doc,
        "e2e_ms.p99",
        "requests: 60 on before (the smallest of 3 runs) and 60 on after (the smallest of 3 "
        f"runs), {_P99}",
        "too few samples",
    )


def _short(run: BenchRun, n: int) -> BenchRun:
    """``run`` (one run) with only its first ``n`` requests."""
    shape = run.shapes[0]
    kept = shape.samples[:n]
    metrics = shape_metrics(
        kept, duration_s=1.0, reasoning_estimates=[None] * n, server_generation_tokens=None
    )
    return msgspec.structs.replace(
        run,
        shapes=[msgspec.structs.replace(shape, samples=kept, metrics=metrics, requests=n)],
        calibration=None,
    )


def test_only_the_short_side_is_named() -> None:
    doc = _compare(_short(_doc([10.0], 1), 15), _doc([10.0], 2))
    _assert_shown(
        doc,
        "ttft_ms.p50",
        "requests: 15 on before, 20 needed for a p50 (10 beyond it: checks/bench_samples.toml)",
        "too few samples",
    )


def _assert_rollup(doc: CompareDocument, key: str, reason: str) -> None:
    """The scorecard's ``key`` is "not comparable" and says why in every view."""
    assert getattr(doc.scorecard, key) == "not comparable"
    views = _views(doc)
    assert json.loads(views[BenchFormat.JSON])["scorecard"]["reasons"][key] == reason
    line = f"{key}: not comparable: {reason}"
    text = views[BenchFormat.RICH].splitlines()
    assert line in text
    # Under the scorecard, before the metric table.
    assert text.index(line) < next(i for i, ln in enumerate(text) if ln.startswith("shape "))
    md = views[BenchFormat.MARKDOWN].splitlines()
    item = f"- {key}: not comparable: {prose(reason)}"
    assert item in md
    first = next(i for i, ln in enumerate(md) if re.match(r"- \w+: not comparable: ", ln))
    assert md[first - 1] == ""  # a list after the scorecard's table, not one more row
    assert md[first - 2].startswith("|")
    page = html.unescape(views[BenchFormat.HTML])
    assert f'<p class="note">{line}</p>' in page


def test_rollups_of_rows_none_could_be_judged_count_them() -> None:
    after = _doc([10.0], 2)
    shape = after.shapes[0]
    failed = [msgspec.structs.replace(s, ok=False) for s in shape.samples]
    after = msgspec.structs.replace(
        after, shapes=[msgspec.structs.replace(shape, samples=failed)], repeats=[]
    )
    doc = _compare(_doc([10.0], 1), after)
    _assert_rollup(doc, "latency", "none of its 7 rows could be judged: 7 not comparable")
    _assert_rollup(doc, "throughput", "none of its 1 row could be judged: 1 not comparable")


def test_a_rollup_of_too_few_and_not_comparable_rows_counts_each() -> None:
    doc = _compare(_bursty(_short(_doc([10.0], 1), 15)), _doc([10.0], 2))
    verdicts = [r.verdict for r in doc.comparisons if r.metric != "output_tokens_per_s"]
    few, nc = verdicts.count("too few samples"), verdicts.count("not comparable")
    assert few
    assert nc
    assert few + nc == 7
    _assert_rollup(
        doc,
        "latency",
        f"none of its 7 rows could be judged: {few} too few samples, {nc} not comparable",
    )


def test_the_equivalence_rollup_gives_the_shapes_reason() -> None:
    before = _doc([10.0], 1)
    shape = before.shapes[0]
    unanswered = [EquivalenceOutput(prompt_id="p1", ok=False, text="")]
    before = msgspec.structs.replace(
        before, shapes=[msgspec.structs.replace(shape, equivalence=unanswered)]
    )
    doc = _compare(before, _doc([10.0], 2))
    _assert_rollup(
        doc,
        "equivalence",
        "concurrent: no greedy prompt answered on both sides (before 0 of 1 answered, after 1 "
        "of 1 answered)",
    )
