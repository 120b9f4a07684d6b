"""Between-run noise (issue 21): the two-stage bootstrap over runs of one configuration, the
A/A calibration's noise floor, and the gate that follows it. Synthetic runs: each run's
requests are tight around a level, and the level moves from run to run, as the host's load
moves it."""

from __future__ import annotations

import math
import random
import statistics

import msgspec
import pytest

from blackwell_doctor.render.bench import encode
from blackwell_doctor.report.bench import (
    BenchRun,
    EquivalenceOutput,
    RepeatRun,
    RequestSample,
    ShapeResult,
    decode_run,
)
from blackwell_doctor.report.bench_metrics import shape_metrics
from blackwell_doctor.rules import gate
from blackwell_doctor.rules.compare import (
    calibrate,
    compare,
    load_noise_rules,
    runs_of,
    widen_ratio_interval,
)
from tests.benchdocs import bench_run
from tests.conftest import FIXTURES

N = 60  # requests per run: enough that one run's own interval is narrow


def _shape(level: float, seed: int, gaps: int = 16) -> ShapeResult:
    rng = random.Random(seed)
    samples = []
    for _ in range(N):
        itl = [level * rng.uniform(0.97, 1.03) for _ in range(gaps)]
        samples.append(
            RequestSample(
                ok=True,
                ttft_ms=5 * level * rng.uniform(0.97, 1.03),
                e2e_ms=5 * level + sum(itl),
                itl_ms=itl,
                output_tokens=gaps + 1,
            )
        )
    metrics = shape_metrics(
        samples, duration_s=1.0, reasoning_estimates=[None] * N, server_generation_tokens=None
    )
    return ShapeResult(
        name="concurrent",
        description="",
        concurrency=8,
        input_tokens=48,
        input_tokens_requested=48,
        input_size_source="tokenize",
        output_tokens_max=17,
        requests=N,
        completed=N,
        errors={},
        duration_s=1.0,
        complete=True,
        metrics=metrics,
        server=None,
        equivalence=[EquivalenceOutput(prompt_id="p1", ok=True, text="the same answer")],
        samples=samples,
        notes=[],
    )


def _doc(levels: list[float], seed: int, gaps: int = 16) -> BenchRun:
    """A run document of ``len(levels)`` runs (bench --repeat), with its calibration."""
    shapes = [_shape(level, seed * 100 + i, gaps) for i, level in enumerate(levels)]
    run = bench_run(
        shapes[0],
        schema_version=3,
        repeats=[
            RepeatRun(index=i + 2, started_at="", complete=True, shapes=[s])
            for i, s in enumerate(shapes[1:])
        ],
    )
    return msgspec.structs.replace(run, calibration=calibrate(run))


def _rows(before: BenchRun, after: BenchRun) -> dict[str, object]:
    doc = compare(before, after, before_name="b", after_name="a", resamples=400)
    return {c.metric: c for c in doc.comparisons}


# The host moves each run's level by tens of percent; nothing else changes.
A_LEVELS = [10.0, 14.0, 8.0]
A_AGAIN = [14.0, 9.0, 11.0]


def test_two_single_runs_of_one_configuration_look_worse_without_the_floor() -> None:
    # The failure of issue 21: one run each, levels 10 and 14 (+40%). One run's requests
    # are tight, so its own interval excludes 0 and, without the floor, says "worse".
    one_b, one_a = _doc([10.0], 1), _doc([14.0], 2)
    doc = compare(one_b, one_a, before_name="b", after_name="a", resamples=400)
    itl = next(c for c in doc.comparisons if c.metric == "itl_ms.p50")
    assert itl.ci_low_pct is not None
    assert itl.ci_low_pct > 30  # the request-level interval: "significant"
    assert doc.runs == {"before": 1, "after": 1}
    assert doc.noise_floor_source == "default"
    assert doc.between_run_noise.startswith("unknown")
    # The default floor (checks/bench_noise.toml) is a stated number, and +40% is past it:
    # one run a side cannot tell this host's noise from a change.
    assert itl.noise_floor_pct == load_noise_rules().default_floor_pct
    assert itl.verdict == "worse"


def test_three_runs_a_side_resample_runs_and_see_no_change() -> None:
    before, after = _doc(A_LEVELS, 1), _doc(A_AGAIN, 2)
    assert len(runs_of(before)) == 3
    doc = compare(before, after, before_name="b", after_name="a", resamples=400)
    assert doc.runs == {"before": 3, "after": 3}
    assert doc.between_run_noise.startswith("measured: 3 runs before, 3 after")
    for c in doc.comparisons:
        assert c.verdict not in ("worse", "better"), c
    # The interval holds the runs' spread: far wider than one run's.
    itl = next(c for c in doc.comparisons if c.metric == "itl_ms.p50")
    assert itl.ci_low_pct is not None
    assert itl.ci_high_pct is not None
    assert itl.ci_low_pct < 0 < itl.ci_high_pct
    assert itl.ci_high_pct - itl.ci_low_pct > 30
    assert doc.scorecard.overall == "no significant change"
    assert doc.exit_code == 0


def test_three_runs_a_side_still_see_a_real_slowdown() -> None:
    before, after = _doc([10.0, 10.5, 9.5], 1), _doc([25.0, 26.0, 24.0], 2)
    rows = _rows(before, after)
    for metric in ("itl_ms.p50", "ttft_ms.p50", "output_tokens_per_s"):
        assert rows[metric].verdict == "worse", rows[metric]  # type: ignore[attr-defined]


def test_one_slow_run_in_three_leaves_a_fifty_fold_slowdown_unproven_and_five_runs_prove_it() -> (
    None
):
    # Clean-clone CI on 49ed3da: the default server's three runs had TTFT p50 52, 66 and
    # 1,335 ms (the host's load), the one-sequence server's about 2,700 ms: +4,862%. A third
    # of the resamples hold the slow run twice or more, and with the small-sample widening
    # three runs cannot exclude 0 at 99.4% (a t-test on the runs' logs agrees, p ~ 0.1):
    # "no significant change" is the honest answer, and in percent the widened bound fell
    # to -100%, now it stays above it. Five runs a side outvote one slow run.
    rows = _rows(_doc([10.0, 13.0, 260.0], 1), _doc([540.0, 500.0, 560.0], 2))
    ttft = rows["ttft_ms.p50"]
    assert ttft.verdict == "no significant change", ttft  # type: ignore[attr-defined]
    assert ttft.ci_low_pct > -100.0, ttft  # type: ignore[attr-defined]
    before = _doc([10.0, 13.0, 260.0, 11.0, 12.0], 1)
    after = _doc([540.0, 500.0, 560.0, 520.0, 530.0], 2)
    rows = _rows(before, after)
    for metric in ("ttft_ms.p50", "e2e_ms.p50"):
        row = rows[metric]
        assert row.ci_low_pct > 0, row  # type: ignore[attr-defined]
        assert row.verdict == "worse", row  # type: ignore[attr-defined]


def _bursty(run: BenchRun) -> BenchRun:
    """``run`` as a starved front end delivers it: every token in one burst at the end."""

    def burst(shape: ShapeResult) -> ShapeResult:
        samples = [
            msgspec.structs.replace(
                s, ttft_ms=(s.e2e_ms or 0.0) - 0.002, itl_ms=[0.0001] * len(s.itl_ms)
            )
            for s in shape.samples
        ]
        metrics = shape_metrics(
            samples,
            duration_s=1.0,
            reasoning_estimates=[None] * len(samples),
            server_generation_tokens=None,
        )
        return msgspec.structs.replace(shape, samples=samples, metrics=metrics)

    repeats = [msgspec.structs.replace(r, shapes=[burst(s) for s in r.shapes]) for r in run.repeats]
    bursty = msgspec.structs.replace(run, shapes=[burst(s) for s in run.shapes], repeats=repeats)
    return msgspec.structs.replace(bursty, calibration=calibrate(bursty))


def test_a_per_token_latency_below_the_resolution_is_not_compared() -> None:
    # An A/A compare on a starved 2-core host (vLLM CPU, VLLM_CPU_OMP_THREADS_BIND=nobind):
    # before, the front end delivered each answer in one burst (TPOT p50 0.00 ms), after it
    # streamed (18.24 ms): "+1,033,402.4%, worse", exit 1. Below 0.1 ms a ratio means
    # nothing: not comparable, no change shown, no regression.
    before, after = _bursty(_doc(A_LEVELS, 1)), _doc(A_AGAIN, 2)
    doc = compare(
        before, after, before_name="b", after_name="a", resamples=400, fail_on_regression_pct=10
    )
    rows = {c.metric: c for c in doc.comparisons}
    for metric in ("tpot_ms.p50", "itl_ms.p50"):
        row = rows[metric]
        assert row.before is not None
        assert row.before < 0.1, row
        assert row.verdict == "not comparable", row
        assert row.change_pct is None, row
    assert not [r for r in doc.regressions if "tpot_ms" in r or "itl_ms.p50" in r], doc.regressions


def test_one_bursty_run_makes_its_latency_not_comparable_not_worse() -> None:
    # Clean-clone CI on 15c4f13, an A/A of one vLLM CPU server, three runs a side: a run
    # whose front end delivered its answers in bursts measured ITL p99 below 0.1 ms, so
    # calibrate measured no floor for the row, and the pooled p99 (21 -> 118 ms, interval
    # [+26.8%, +11,076,470%]) was called "worse": exit 1. Runs of one configuration that
    # differ past the resolution leave no change of the row to tell from the noise.
    # 64 gaps a request: enough beyond a p99 for a verdict (checks/bench_samples.toml).
    runs = _doc(A_LEVELS, 1, gaps=64)
    mixed = msgspec.structs.replace(runs, shapes=_bursty(runs).shapes)
    mixed = msgspec.structs.replace(mixed, calibration=calibrate(mixed))
    slower = _doc([level * 1.6 for level in A_AGAIN], 2, gaps=64)
    doc = compare(
        mixed, slower, before_name="b", after_name="a", resamples=400, fail_on_regression_pct=10
    )
    rows = {c.metric: c for c in doc.comparisons}
    row = rows["itl_ms.p99"]
    # The pooled figures are well above the resolution; one run's is not.
    assert row.before is not None
    assert row.after is not None
    assert min(row.before, row.after) > 1.0, row
    assert row.verdict == "not comparable", row
    assert row.change_pct is None, row
    assert not [r for r in doc.regressions if "itl_ms.p99" in r], doc.regressions
    # The rows no run measured below the resolution keep their interval.
    assert rows["e2e_ms.p50"].ci_low_pct is not None, rows["e2e_ms.p50"]


def _tail_bursts(level: float, seed: int) -> BenchRun:
    """One run whose tokens come in bursts (gaps of 0.0001 ms) but for four gaps of
    ``level`` ms in every fifth request: 1.25% of the gaps, so the p99 sits on the edge
    between the two."""
    shape = _shape(level, seed, gaps=64)
    samples = [
        msgspec.structs.replace(s, itl_ms=[0.0001] * 60 + [level if i % 5 == 0 else 0.0001] * 4)
        for i, s in enumerate(shape.samples)
    ]
    metrics = shape_metrics(
        samples, duration_s=1.0, reasoning_estimates=[None] * N, server_generation_tokens=None
    )
    return bench_run(msgspec.structs.replace(shape, samples=samples, metrics=metrics))


def test_a_latency_whose_resamples_fall_below_the_resolution_is_not_compared() -> None:
    # Each run's own ITL p99 is the long gap (20 ms), but a resample that draws a few
    # fewer of the requests holding one reads it in the bursts (0.0001 ms): the interval
    # reaches below the resolution, and its ratio says nothing.
    before, after = _tail_bursts(20.0, 1), _tail_bursts(20.0, 2)
    doc = compare(
        before, after, before_name="b", after_name="a", resamples=400, fail_on_regression_pct=10
    )
    row = next(c for c in doc.comparisons if c.metric == "itl_ms.p99")
    assert row.before == pytest.approx(20.0)
    assert row.after == pytest.approx(20.0)
    assert row.verdict == "not comparable", row
    assert row.ci_low_pct is None, row
    # Streaming runs of the same level keep an interval and their verdict.
    steady = compare(
        _doc([20.0], 1, gaps=64),
        _doc([20.0], 2, gaps=64),
        before_name="b",
        after_name="a",
        resamples=400,
    )
    kept = next(c for c in steady.comparisons if c.metric == "itl_ms.p99")
    assert kept.verdict == "no significant change", kept
    assert kept.ci_low_pct is not None


def test_widening_keeps_the_bounds_of_a_ratio() -> None:
    # sqrt(3/2), the widening of three runs a side, about +100% with [+50%, +200%]: the
    # same factor on each side of log(2), never below -100%, a bound at -100% kept.
    f = math.sqrt(1.5)
    low, high = widen_ratio_interval(100.0, 50.0, 200.0, f)
    assert math.log(2.0) - math.log1p(low / 100) == pytest.approx(math.log(4 / 3) * f)
    assert math.log1p(high / 100) - math.log(2.0) == pytest.approx(math.log(1.5) * f)
    # In percent, +4,862% with a bound of +84% widened to -1,000%; here it stays a ratio.
    low, high = widen_ratio_interval(4862.0, 84.0, 5915.0, f)
    assert -100.0 < low < 84.0
    assert high > 5915.0
    assert widen_ratio_interval(-99.0, -100.0, -90.0, f)[0] == -100.0
    assert -100.0 < widen_ratio_interval(-90.0, -99.9, -50.0, 3.0)[0] < -99.9


def test_the_calibration_is_the_spread_of_the_runs() -> None:
    run = _doc(A_LEVELS, 1)
    cal = run.calibration
    assert cal is not None
    assert cal.runs == 3
    floor = next(f for f in cal.floors if f.metric == "itl_ms.p50")
    values = [v for v in floor.values if v is not None]
    assert len(values) == 3
    spread = (max(values) / min(values) - 1) * 100
    cv = statistics.stdev(values) / statistics.fmean(values) * 100
    assert floor.spread_pct == pytest.approx(spread)
    assert floor.cv_pct == pytest.approx(cv)
    assert floor.floor_pct == pytest.approx(max(spread, 2 * math.sqrt(2) * cv))
    # Levels 8 to 14: the runs differ by about 75%.
    assert floor.floor_pct is not None
    assert 60 < floor.floor_pct < 100
    # One run has no calibration.
    assert calibrate(_doc([10.0], 1)) is None


def test_a_latency_below_the_resolution_in_one_run_measures_no_floor() -> None:
    # The A/B example's calibration: one of the default server's runs delivered its answers
    # in bursts (ITL p99 0.0004 ms), the others streamed (~1.4 ms): a "floor" of 345,152%
    # that said every change of that row was within the noise. Such a row has no floor;
    # the others keep theirs.
    runs = _doc(A_LEVELS, 1)
    first_bursty = _bursty(runs)
    mixed = msgspec.structs.replace(runs, shapes=first_bursty.shapes)
    cal = calibrate(mixed)
    assert cal is not None
    floors = {f.metric: f for f in cal.floors}
    for metric in ("itl_ms.p50", "itl_ms.p99", "tpot_ms.p50"):
        values = [v for v in floors[metric].values if v is not None]
        assert min(values) < 0.1 <= max(values), floors[metric]
        assert floors[metric].floor_pct is None, floors[metric]
    assert floors["e2e_ms.p50"].floor_pct is not None
    assert floors["output_tokens_per_s"].floor_pct is not None
    assert "below 0.1 ms" in cal.method


def _calibrated_one_run(level: float, seed: int) -> BenchRun:
    """One run whose document carries the floor of an earlier A/A calibration (~75%)."""
    return msgspec.structs.replace(_doc([level], seed), calibration=_doc(A_LEVELS, 1).calibration)


def test_a_change_inside_the_measured_floor_is_not_significant() -> None:
    # A calibrated side (floor ~75%) against one run at +40%: significant by the
    # request-level interval, but smaller than two runs of one configuration differ.
    before, after = _calibrated_one_run(10.0, 1), _doc([14.0], 2)
    doc = compare(before, after, before_name="b", after_name="a", resamples=400)
    assert doc.noise_floor_source == "measured"
    itl = next(c for c in doc.comparisons if c.metric == "itl_ms.p50")
    assert itl.verdict == "within the noise floor"
    assert itl.noise_floor_pct is not None
    assert itl.noise_floor_pct > 60
    from blackwell_doctor.render.bench import render_compare

    text = render_compare(doc)
    assert f"within the noise floor ({itl.noise_floor_pct:.1f}%)" in text
    assert "between-run noise: unknown: 1 run(s) before, 1 after" in text
    assert "noise floor measured by bench --repeat" in text


def test_the_gate_follows_the_measured_floor_and_says_so() -> None:
    metrics = [gate.GateMetric(None, "itl_ms.p50")]
    one_b, one_a = _doc([10.0], 1), _doc([14.0], 2)
    doc = compare(one_b, one_a, before_name="b", after_name="a", resamples=400)
    unknown = gate.judge(doc, one_a, metrics=metrics, max_regression_pct=10)
    # Without a measurement the allowed 10% stands, and the gate says the noise is unknown.
    assert not unknown.holds
    assert any(n.startswith("between-run noise unknown") for n in unknown.notes)
    before = _calibrated_one_run(10.0, 1)
    doc = compare(before, one_a, before_name="b", after_name="a", resamples=400)
    held = gate.judge(doc, one_a, metrics=metrics, max_regression_pct=10)
    assert held.holds, held.failures
    row = held.rows[0]
    assert row.allowed_pct is not None
    assert row.allowed_pct > 60
    assert "noise floor measured by --repeat" in row.reason
    # A real slowdown beyond the floor still fails.
    slow = _doc([40.0], 3)
    doc = compare(before, slow, before_name="b", after_name="a", resamples=400)
    assert not gate.judge(doc, slow, metrics=metrics, max_regression_pct=10).holds


def test_a_repeated_run_round_trips_and_old_documents_still_read() -> None:
    run = _doc(A_LEVELS, 1)
    again = decode_run(encode(run).encode(), source="x")
    assert again == run
    old = decode_run((FIXTURES / "bench" / "run-v1.json").read_bytes(), source="v1")
    assert old.repeats == []
    assert old.calibration is None
    assert len(runs_of(old)) == 1


def test_one_run_a_side_draws_what_it_drew_before() -> None:
    # The two-stage bootstrap draws no run with one run a side: the intervals of a one-run
    # compare are the request bootstrap's, unchanged (pinned against the 300,000-request
    # test's seeds elsewhere; here: seeded and repeatable).
    b, a = _doc([10.0], 1), _doc([11.0], 2)
    first = compare(b, a, before_name="b", after_name="a", resamples=200)
    assert first == compare(b, a, before_name="b", after_name="a", resamples=200)


def test_the_floor_of_means_of_several_runs_is_scaled_down() -> None:
    # The floor is of one run against one; means of 3 runs a side differ sqrt(1/3) as much.
    before, after = _doc(A_LEVELS, 1), _doc(A_AGAIN, 2)
    assert before.calibration is not None
    assert after.calibration is not None
    doc = compare(before, after, before_name="b", after_name="a", resamples=200)
    itl = next(c for c in doc.comparisons if c.metric == "itl_ms.p50")
    widest = max(
        f.floor_pct or 0.0
        for cal in (before.calibration, after.calibration)
        for f in cal.floors
        if f.metric == "itl_ms.p50"
    )
    assert itl.noise_floor_pct == pytest.approx(widest * math.sqrt(1 / 3))


def test_repeated_runs_become_one_document_with_their_floor() -> None:
    from blackwell_doctor.app.repeat import combine
    from blackwell_doctor.render.bench import render_run

    singles = [
        msgspec.structs.replace(_doc([level], i), findings=[f"note {i}"])
        for i, level in enumerate(A_LEVELS)
    ]
    doc = combine(singles, interleaved_with="http://b")
    assert doc.shapes == singles[0].shapes
    assert [r.index for r in doc.repeats] == [2, 3]
    assert [r.shapes for r in doc.repeats] == [singles[1].shapes, singles[2].shapes]
    assert doc.findings == ["run 1: note 0", "run 2: note 1", "run 3: note 2"]
    assert doc.calibration is not None
    assert doc.calibration.runs == 3
    assert doc.calibration.interleaved_with == "http://b"
    text = render_run(doc)
    assert "noise floor: 3 runs of one configuration" in text
    assert "taking turns with http://b" in text
    assert combine(singles[:1]) == singles[0]


def test_a_fall_is_held_to_the_floor_as_a_ratio() -> None:
    from blackwell_doctor.rules.compare import fold_pct

    # A floor is larger over smaller: -50% and +100% are the same distance from no change,
    # so a throughput fall can pass a floor above 100% (a fall of 60% is 150%).
    assert fold_pct(100.0) == pytest.approx(100.0)
    assert fold_pct(-50.0) == pytest.approx(100.0)
    assert fold_pct(-60.0) == pytest.approx(150.0)
    assert fold_pct(-100.0) == math.inf
