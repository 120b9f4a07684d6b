"""apply --verify's gate arithmetic on planted comparisons (the real loop: test_apply_verify_vllm).

The gate holds unless a gated metric's whole bootstrap interval lies beyond the allowed
regression; a point estimate past it with an interval reaching back is noise. Planted runs
go through the real bench.compare where the interval matters, so the figures the gate reads
are the ones a user gets.
"""

from __future__ import annotations

import random
from pathlib import Path

import msgspec
import pytest

from blackwell_doctor.app.verify import VerifyRecord, WarmStart, render
from blackwell_doctor.facts.document import ToolInfo
from blackwell_doctor.report.bench import (
    BenchRun,
    CompareDocument,
    Comparison,
    EquivalenceComparison,
    EquivalenceOutput,
    LogprobDrift,
    RequestSample,
    Scorecard,
    ShapeMetrics,
    ShapeResult,
    Stats,
)
from blackwell_doctor.rules import gate
from blackwell_doctor.rules.compare import LATENCY_METRICS, compare
from tests.benchdocs import bench_run

KNOWN = frozenset({*LATENCY_METRICS, "output_tokens_per_s"})
DEFAULT = [gate.GateMetric(None, m) for m in gate.DEFAULT_METRICS]


def _metrics() -> ShapeMetrics:
    # The gate reads the resampled requests (samples), never these summaries.
    return ShapeMetrics(
        ttft_ms=Stats(),
        tpot_ms=Stats(),
        itl_ms=Stats(),
        e2e_ms=Stats(),
        output_tokens=0,
        reasoning_tokens=0,
        answer_tokens=0,
        output_tokens_per_s=None,
        answer_tokens_per_s=None,
        output_tokens_per_s_per_user=Stats(),
        requests_per_s=None,
        token_source="usage",
        reasoning_source="none",
        prompt_tokens_mean=None,
        server_generation_tokens=None,
    )


def _shape(
    name: str,
    itl_ms: float,
    *,
    concurrency: int = 8,
    n: int = 40,
    seed: int = 1,
    errors: dict[str, int] | None = None,
    text: str = "the same answer",
) -> ShapeResult:
    rng = random.Random(seed)
    samples = []
    for _ in range(n):
        itl = [itl_ms * rng.uniform(0.95, 1.05) for _ in range(16)]
        samples.append(
            RequestSample(
                ok=True, ttft_ms=50.0, e2e_ms=50.0 + sum(itl), itl_ms=itl, output_tokens=17
            )
        )
    return ShapeResult(
        name=name,
        description="",
        concurrency=concurrency,
        input_tokens=48,
        input_tokens_requested=48,
        input_size_source="tokenize",
        output_tokens_max=17,
        requests=n,
        completed=n,
        errors=errors or {},
        duration_s=1.0,
        complete=True,
        metrics=_metrics(),
        server=None,
        equivalence=[EquivalenceOutput(prompt_id="p0", ok=True, text=text)],
        samples=samples,
        notes=[],
    )


def _run(*shapes: ShapeResult, server_error: str | None = None) -> BenchRun:
    return bench_run(*shapes, server_error=server_error)


def _judge(before: BenchRun, after: BenchRun, pct: float = 10.0, **kw: object) -> gate.GateResult:
    doc = compare(before, after, before_name="b", after_name="a", resamples=400)
    return gate.judge(doc, after, metrics=DEFAULT, max_regression_pct=pct, **kw)  # type: ignore[arg-type]


def test_the_same_server_holds_the_gate() -> None:
    result = _judge(
        _run(_shape("concurrent", 7.0, seed=1)), _run(_shape("concurrent", 7.0, seed=2))
    )
    assert result.holds, result.failures
    assert [(r.shape, r.metric) for r in result.rows] == [
        ("concurrent", "itl_ms.p50"),
        ("concurrent", "output_tokens_per_s"),
    ]
    for r in result.rows:
        assert r.ci_low_pct is not None
        assert r.ci_high_pct is not None
        assert r.ci_low_pct <= 0.0 <= r.ci_high_pct


def test_a_clearly_slower_server_fails_on_both_default_metrics() -> None:
    result = _judge(_run(_shape("concurrent", 7.0)), _run(_shape("concurrent", 14.0)))
    assert not result.holds
    itl, tps = result.rows
    assert itl.regression_pct is not None
    assert itl.regression_pct > 90
    assert tps.regression_pct is not None
    assert tps.regression_pct > 40
    assert len(result.failures) == 2
    assert "significantly slower" in result.failures[0]


def test_a_regression_within_the_allowance_holds() -> None:
    # ~+8% ITL, ~-7% tokens/s: significant, but inside an allowed 10%.
    result = _judge(_run(_shape("concurrent", 7.0)), _run(_shape("concurrent", 7.6)))
    assert result.holds, result.failures
    itl = result.rows[0]
    assert itl.ci_low_pct is not None
    assert itl.ci_low_pct > 0
    assert itl.regression_pct is not None
    assert itl.regression_pct <= 10
    # ...and beyond 3%: the same comparison fails a stricter gate.
    assert not _judge(_run(_shape("concurrent", 7.0)), _run(_shape("concurrent", 7.6)), 3).holds


def _row(metric: str, change: float, low: float, high: float) -> Comparison:
    return Comparison(
        shape="concurrent",
        metric=metric,
        better="higher" if metric == "output_tokens_per_s" else "lower",
        before=100.0,
        after=100.0 * (1 + change / 100),
        change_pct=change,
        ci_low_pct=low,
        ci_high_pct=high,
        verdict="",
    )


def _doc(rows: list[Comparison], eq: list[EquivalenceComparison] | None = None) -> CompareDocument:
    return CompareDocument(
        schema_version=1,
        tool=ToolInfo(name="t", version="0"),
        before="b",
        after="a",
        confidence=0.95,
        per_comparison_confidence=0.99,
        resamples=100,
        seed=0,
        threshold_pct=10,
        fail_on_regression_pct=None,
        comparisons=rows,
        equivalence=eq
        or [
            EquivalenceComparison(
                shape="concurrent",
                prompts=3,
                exact_match_rate=1.0,
                first_divergence={},
                verdict="equivalent",
            )
        ],
        errors={"before": {}, "after": {}},
        scorecard=Scorecard(latency="", throughput="", equivalence="", errors="", overall=""),
        regressions=[],
        exit_code=0,
    )


@pytest.mark.parametrize(
    ("metric", "change", "low", "high", "holds"),
    [
        # The point estimate is past 10%, the interval reaches back inside: noise.
        ("itl_ms.p50", 14.0, 6.0, 22.0, True),
        ("output_tokens_per_s", -14.0, -22.0, -6.0, True),
        # The whole interval beyond 10%: a significant regression.
        ("itl_ms.p50", 14.0, 10.5, 18.0, False),
        ("output_tokens_per_s", -14.0, -18.0, -10.5, False),
        # Exactly at the allowance still holds.
        ("itl_ms.p50", 12.0, 10.0, 14.0, True),
        # An improvement never fails.
        ("output_tokens_per_s", 40.0, 30.0, 50.0, True),
        ("itl_ms.p50", -40.0, -50.0, -30.0, True),
    ],
)
def test_significance_is_the_whole_interval_beyond_the_threshold(
    metric: str, change: float, low: float, high: float, holds: bool
) -> None:
    after = _run(_shape("concurrent", 7.0))
    result = gate.judge(
        _doc([_row(metric, change, low, high)]),
        after,
        metrics=[gate.GateMetric("concurrent", metric)],
        max_regression_pct=10.0,
    )
    assert result.holds is holds, result.failures


def test_a_metric_without_an_interval_fails_the_gate() -> None:
    row = msgspec.structs.replace(
        _row("itl_ms.p50", 0, 0, 0), ci_low_pct=None, ci_high_pct=None, verdict="too few samples"
    )
    result = gate.judge(
        _doc([row]),
        _run(_shape("concurrent", 7.0)),
        metrics=[gate.GateMetric(None, "itl_ms.p50")],
        max_regression_pct=10,
    )
    assert not result.holds
    assert "too few samples" in result.failures[0]


def test_drift_fails_unless_past_the_allowed_prefix() -> None:
    drift = [
        EquivalenceComparison(
            shape="concurrent",
            prompts=3,
            exact_match_rate=2 / 3,
            first_divergence={"p1": 40},
            verdict="drift",
        )
    ]
    after = _run(_shape("concurrent", 7.0))
    rows = [_row("itl_ms.p50", 0, -1, 1), _row("output_tokens_per_s", 0, -1, 1)]
    strict = gate.judge(_doc(rows, drift), after, metrics=DEFAULT, max_regression_pct=10)
    assert not strict.holds
    assert "p1 at char 40" in strict.failures[0]
    loose = gate.judge(
        _doc(rows, drift), after, metrics=DEFAULT, max_regression_pct=10, divergence_after=40
    )
    assert loose.holds
    assert "after their first 40 characters" in loose.notes[0]
    early = gate.judge(
        _doc(rows, drift), after, metrics=DEFAULT, max_regression_pct=10, divergence_after=41
    )
    assert not early.holds


def test_log_probabilities_beyond_tolerance_fail_the_gate() -> None:
    # rules/drift.py: p1's token at its divergence was not in the other run's top 5.
    beyond = LogprobDrift(
        prompt_id="p1",
        tokens=12,
        first_divergent_token=10,
        token_before="a",
        token_after="zz",
        mean_abs_logprob_diff=0.0,
        max_abs_logprob_diff=0.0,
        topk_kl_mean=0.5,
        topk_kl_max=3.0,
        verdict="beyond tolerance",
        why="token 10 differs: 'zz' is not in the before run's top 5",
    )
    eq = [
        EquivalenceComparison(
            shape="concurrent",
            prompts=3,
            exact_match_rate=2 / 3,
            first_divergence={"p1": 40},
            verdict="drift",
            logprobs=[beyond],
            numerics="beyond tolerance",
        )
    ]
    after = _run(_shape("concurrent", 7.0))
    rows = [_row("itl_ms.p50", 0, -1, 1), _row("output_tokens_per_s", 0, -1, 1)]
    strict = gate.judge(_doc(rows, eq), after, metrics=DEFAULT, max_regression_pct=10)
    assert not strict.holds
    assert strict.failures[1] == (
        "concurrent: greedy log-probabilities of p1: token 10 differs: 'zz' is not in the "
        "before run's top 5"
    )
    # A divergence --divergence-after allows is allowed in its log-probabilities too.
    loose = gate.judge(
        _doc(rows, eq), after, metrics=DEFAULT, max_regression_pct=10, divergence_after=40
    )
    assert loose.holds
    within = msgspec.structs.replace(beyond, verdict="within tolerance")
    near = [msgspec.structs.replace(eq[0], logprobs=[within], numerics="within tolerance")]
    result = gate.judge(_doc(rows, near), after, metrics=DEFAULT, max_regression_pct=10)
    assert result.failures == [strict.failures[0]]


def test_failed_requests_and_an_unreachable_server_fail_the_gate() -> None:
    before = _run(_shape("concurrent", 7.0))
    failing = _run(_shape("concurrent", 7.0, errors={"http_5xx": 2}))
    result = _judge(before, failing)
    assert not result.holds
    assert result.failures == ["concurrent: 2 failed request(s) (http_5xx 2)"]
    gone = _run(server_error="unreachable: cannot connect")
    assert gate.errors_of(gone) == [
        "the new container could not be measured: unreachable: cannot connect"
    ]


def test_the_default_metrics_fall_back_to_the_most_concurrent_shape() -> None:
    run = _run(_shape("one", 7.0, concurrency=1), _shape("many", 7.0, concurrency=16))
    assert gate.default_shape(run) == "many"
    result = _judge(run, run)
    assert {r.shape for r in result.rows} == {"many"}
    assert (
        gate.default_shape(
            _run(_shape("concurrent", 7, concurrency=2), _shape("x", 7, concurrency=64))
        )
        == "concurrent"
    )


@pytest.mark.parametrize(
    ("text", "shape", "metric"),
    [("itl_ms.p50", None, "itl_ms.p50"), ("short:ttft_ms.p99", "short", "ttft_ms.p99")],
)
def test_gate_metric_parsing(text: str, shape: str | None, metric: str) -> None:
    assert gate.parse_gate_metric(text, KNOWN) == gate.GateMetric(shape, metric)


@pytest.mark.parametrize("text", ["itl", "short:", ":itl_ms.p50", "short:tokens"])
def test_gate_metric_errors(text: str) -> None:
    with pytest.raises(gate.GateSpecError):
        gate.parse_gate_metric(text, KNOWN)


def test_the_ticket_is_sanitised_and_says_what_was_rolled_back(tmp_path: Path) -> None:
    before = _run(_shape("concurrent", 7.0))
    after = _run(_shape("concurrent", 14.0))
    doc = compare(before, after, before_name="b\x1b[2J", after_name="a", resamples=200)
    result = gate.judge(doc, after, metrics=DEFAULT, max_regression_pct=10)
    record = VerifyRecord(
        schema_version=1,
        container="vllm",
        image="img\x1b]0;owned\x07",
        runtime="r",
        started_at="now",
        changes=["command: a -> a --max-num-seqs 1"],
        baseline="baseline.json",
        baseline_note="baseline: the running vllm",
        after="after.json",
        compare="compare.json",
        gate=None,
        warm_start=WarmStart(
            jit_cache_volume="v",
            first_start_s=41.0,
            first_start_kind="cold",
            why="new",
            restart_s=30.0,
        ),
        outcome="rolled back",
        message="apply failed during verify: the gate failed",
        rolled_back=["removed the new container", "started the previous vllm again"],
        previous_serving_s=35.2,
    )
    from blackwell_doctor.app.verify import GateRecord

    record.gate = GateRecord(
        max_regression_pct=10,
        divergence_after=None,
        holds=result.holds,
        rows=result.rows,
        failures=result.failures,
        notes=[],
    )
    md = render(record, doc, tmp_path, markdown=True)
    assert "\x1b" not in md
    assert "\x07" not in md
    assert "img\\x1b]0;owned\\x07" in md
    assert "**Verdict: ROLLED BACK" in md
    assert "- rolled back: started the previous vllm again" in md
    assert "| concurrent | output_tokens_per_s |" in md
    assert "FAILS: significantly lower" in md
    assert "| first start (cold) | 41.0 |" in md
    text = render(record, doc, tmp_path, markdown=False)
    assert "ROLLED BACK" in text
    assert "|" not in text.splitlines()[0]
