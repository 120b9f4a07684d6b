"""``bench --compare before.json after.json``: every change with a bootstrap interval and a
verdict, output equivalence, and a scorecard that never calls a trade-off a win.

The interval: both runs' successful requests are resampled with replacement (seeded, so
the same files always give the same answer) and each metric recomputed on the resample;
ITL is pooled over the resampled requests (a cluster bootstrap, since the tokens of one
request are not independent). Throughput's change and interval come from the closed-loop
estimator sum(output tokens) / sum(E2E latency), which is proportional to output tokens/s
at a fixed concurrency (Little's law) and, unlike the run's single tokens/s figure, can be
resampled request by request.

The intervals are simultaneous: with m metrics compared over all shapes, each interval is
taken at confidence 1 - (1 - confidence) / m (Bonferroni), so the chance that the scorecard
calls anything better or worse when nothing changed is at most 1 - confidence overall, not
per row.

A verdict is "better" or "worse" only when the interval excludes zero *and* the change is
at least ``threshold_pct`` *and*, for a latency, at least 0.1 ms: run-to-run noise of a few
percent is real on any server, and a latency of a few microseconds (two SSE events read in
one socket read, as from a server that coalesces its writes) has no meaningful ratio.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from blackwell_doctor import TOOL_NAME, __version__
from blackwell_doctor.bench.metrics import output_tokens_of, tpot_s
from blackwell_doctor.bench.report import (
    COMPARE_SCHEMA_VERSION,
    BenchRun,
    CompareDocument,
    Comparison,
    EquivalenceComparison,
    RequestSample,
    Scorecard,
    ShapeMetrics,
    ShapeResult,
)
from blackwell_doctor.bench.stats import percentile
from blackwell_doctor.exitcodes import ExitCode
from blackwell_doctor.facts import ToolInfo

BETTER = "better"
WORSE = "worse"
SAME = "no significant change"
NOT_COMPARABLE = "not comparable"
TOO_FEW = "too few samples"

_Stat = Callable[[Sequence[RequestSample]], float | None]


def _pct(values: list[float], q: float) -> float | None:
    return percentile(sorted(values), q) if values else None


def _ttft(q: float) -> _Stat:
    return lambda ss: _pct([s.ttft_ms for s in ss if s.ttft_ms is not None], q)


def _e2e(q: float) -> _Stat:
    return lambda ss: _pct([s.e2e_ms for s in ss if s.e2e_ms is not None], q)


def _tpot(q: float) -> _Stat:
    def stat(ss: Sequence[RequestSample]) -> float | None:
        values = [t * 1000.0 for t in (tpot_s(s) for s in ss) if t is not None]
        return _pct(values, q)

    return stat


def _itl(q: float) -> _Stat:
    return lambda ss: _pct([v for s in ss for v in s.itl_ms], q)


def _throughput(ss: Sequence[RequestSample]) -> float | None:
    seconds = sum(s.e2e_ms for s in ss if s.e2e_ms) / 1000.0
    return sum(output_tokens_of(s) for s in ss) / seconds if seconds > 0 else None


# A percentile gets a verdict only when each run has at least this many samples above it:
# a p99 of 48 requests is an interpolation between its two largest values, and no
# bootstrap interval around that means anything (the bootstrap is inconsistent for
# extreme quantiles of small samples).
MIN_TAIL_SAMPLES = 10


def _requests(ss: Sequence[RequestSample]) -> int:
    return len(ss)


def _tokens(ss: Sequence[RequestSample]) -> int:
    return sum(len(s.itl_ms) for s in ss)


# (metric name, lower is better, resampled statistic, the run's own value, percentile,
#  number of samples the percentile is taken over)
_METRICS: tuple[
    tuple[
        str,
        bool,
        _Stat,
        Callable[[ShapeMetrics], float | None],
        float | None,
        Callable[[Sequence[RequestSample]], int],
    ],
    ...,
] = (
    ("ttft_ms.p50", True, _ttft(50), lambda m: m.ttft_ms.p50, 50, _requests),
    ("ttft_ms.p99", True, _ttft(99), lambda m: m.ttft_ms.p99, 99, _requests),
    ("tpot_ms.p50", True, _tpot(50), lambda m: m.tpot_ms.p50, 50, _requests),
    ("itl_ms.p50", True, _itl(50), lambda m: m.itl_ms.p50, 50, _tokens),
    ("itl_ms.p99", True, _itl(99), lambda m: m.itl_ms.p99, 99, _tokens),
    ("e2e_ms.p50", True, _e2e(50), lambda m: m.e2e_ms.p50, 50, _requests),
    ("e2e_ms.p99", True, _e2e(99), lambda m: m.e2e_ms.p99, 99, _requests),
    ("output_tokens_per_s", False, _throughput, lambda m: m.output_tokens_per_s, None, _requests),
)
LATENCY_METRICS = frozenset(m[0] for m in _METRICS if m[1])


# Latency differences below this are not called a change, whatever their ratio.
MIN_LATENCY_CHANGE_MS = 0.1


def _verdict(
    lower_better: bool,
    change: float,
    low: float,
    high: float,
    threshold: float,
    absolute: float,
) -> str:
    if low <= 0.0 <= high or abs(change) < threshold:
        return SAME
    if lower_better and absolute < MIN_LATENCY_CHANGE_MS:
        return SAME
    worse = change > 0 if lower_better else change < 0
    return WORSE if worse else BETTER


def _compare_shape(
    before: ShapeResult,
    after: ShapeResult,
    *,
    resamples: int,
    seed: int,
    confidence: float,
    threshold: float,
) -> list[Comparison]:
    b = [s for s in before.samples if s.ok]
    a = [s for s in after.samples if s.ok]
    rng = random.Random(f"{seed}:{before.name}")  # noqa: S311 (statistics, not secrets)
    boot: dict[str, list[float]] = {m[0]: [] for m in _METRICS}
    points: dict[str, tuple[float | None, float | None]] = {
        m[0]: (m[2](b), m[2](a)) for m in _METRICS
    }
    if b and a:
        for _ in range(resamples):
            rb = rng.choices(b, k=len(b))
            ra = rng.choices(a, k=len(a))
            for name, _, stat, *_ in _METRICS:
                vb, va = stat(rb), stat(ra)
                if vb and va is not None:
                    boot[name].append((va / vb - 1.0) * 100.0)
    alpha = (1.0 - confidence) / 2.0 * 100.0  # already adjusted by the caller
    rows = []
    for name, lower, _, own, q, count in _METRICS:
        pb, pa = points[name]
        shown_b, shown_a = own(before.metrics), own(after.metrics)
        changes = sorted(boot[name])
        tail = min(count(b), count(a)) * (1.0 - q / 100.0) if q is not None else None
        if tail is not None and tail < MIN_TAIL_SAMPLES and pb and pa is not None:
            verdict = TOO_FEW
        elif not pb or pa is None or len(changes) < max(10, resamples // 2):
            verdict = NOT_COMPARABLE
        else:
            verdict = ""
        if verdict:
            rows.append(
                Comparison(
                    shape=before.name,
                    metric=name,
                    better="lower" if lower else "higher",
                    before=shown_b,
                    after=shown_a,
                    change_pct=None if not pb or pa is None else (pa / pb - 1.0) * 100.0,
                    ci_low_pct=None,
                    ci_high_pct=None,
                    verdict=verdict,
                )
            )
            continue
        assert pb
        assert pa is not None
        change = (pa / pb - 1.0) * 100.0
        low, high = percentile(changes, alpha), percentile(changes, 100.0 - alpha)
        rows.append(
            Comparison(
                shape=before.name,
                metric=name,
                better="lower" if lower else "higher",
                before=shown_b,
                after=shown_a,
                change_pct=change,
                ci_low_pct=low,
                ci_high_pct=high,
                verdict=_verdict(lower, change, low, high, threshold, abs(pa - pb)),
            )
        )
    return rows


def _first_difference(x: str, y: str) -> int:
    for i, (cx, cy) in enumerate(zip(x, y, strict=False)):
        if cx != cy:
            return i
    return min(len(x), len(y))


def _equivalence(before: ShapeResult, after: ShapeResult) -> EquivalenceComparison:
    b = {e.prompt_id: e for e in before.equivalence if e.ok}
    a = {e.prompt_id: e for e in after.equivalence if e.ok}
    common = sorted(set(b) & set(a))
    if not common:
        return EquivalenceComparison(
            shape=before.name,
            prompts=0,
            exact_match_rate=None,
            first_divergence={},
            verdict=NOT_COMPARABLE,
        )
    divergence: dict[str, int] = {}
    for pid in common:
        x = b[pid].reasoning + "\n" + b[pid].text
        y = a[pid].reasoning + "\n" + a[pid].text
        if x != y:
            divergence[pid] = _first_difference(x, y)
    rate = (len(common) - len(divergence)) / len(common)
    return EquivalenceComparison(
        shape=before.name,
        prompts=len(common),
        exact_match_rate=rate,
        first_divergence=divergence,
        verdict="equivalent" if not divergence else "drift",
    )


def _fold(verdicts: Sequence[str]) -> str:
    if WORSE in verdicts and BETTER in verdicts:
        return "mixed"
    if WORSE in verdicts:
        return WORSE
    if BETTER in verdicts:
        return BETTER
    if verdicts and all(v in (NOT_COMPARABLE, TOO_FEW) for v in verdicts):
        return NOT_COMPARABLE
    return SAME


def _error_count(run: BenchRun) -> dict[str, int]:
    total: dict[str, int] = {}
    for shape in run.shapes:
        for kind, n in shape.errors.items():
            total[kind] = total.get(kind, 0) + n
    return total


def compare(
    before: BenchRun,
    after: BenchRun,
    *,
    before_name: str,
    after_name: str,
    resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
    threshold_pct: float = 5.0,
    fail_on_regression_pct: float | None = None,
) -> CompareDocument:
    after_shapes = {s.name: s for s in after.shapes}
    common = [s for s in before.shapes if s.name in after_shapes]
    per_row = 1.0 - (1.0 - confidence) / max(1, len(common) * len(_METRICS))
    rows: list[Comparison] = []
    equivalence: list[EquivalenceComparison] = []
    for shape in before.shapes:
        other = after_shapes.get(shape.name)
        if other is None:
            continue
        rows += _compare_shape(
            shape,
            other,
            resamples=resamples,
            seed=seed,
            confidence=per_row,
            threshold=threshold_pct,
        )
        equivalence.append(_equivalence(shape, other))
    errors_b, errors_a = _error_count(before), _error_count(after)
    requests_b = sum(s.requests for s in before.shapes) or 1
    requests_a = sum(s.requests for s in after.shapes) or 1
    rate_b, rate_a = sum(errors_b.values()) / requests_b, sum(errors_a.values()) / requests_a
    missing = [s.name for s in before.shapes if s.name not in after_shapes]
    if after.server.error is not None or missing or rate_a > rate_b:
        # An after run that reached nothing, or lost a shape, is not an improvement.
        errors_verdict = WORSE
    elif rate_a < rate_b:
        errors_verdict = BETTER
    else:
        errors_verdict = SAME
    latency = _fold([r.verdict for r in rows if r.metric in LATENCY_METRICS])
    throughput = _fold([r.verdict for r in rows if r.metric not in LATENCY_METRICS])
    eq_verdicts = [e.verdict for e in equivalence]
    if "drift" in eq_verdicts:
        eq = "drift"
    elif eq_verdicts and all(v == "equivalent" for v in eq_verdicts):
        eq = "equivalent"
    else:
        eq = NOT_COMPARABLE
    bad = [latency, throughput, errors_verdict]
    broken = WORSE in bad or "mixed" in bad or eq == "drift"
    improved = BETTER in bad or "mixed" in bad
    if broken and improved:
        overall = "mixed: not a win"
    elif broken:
        overall = WORSE
    elif improved:
        overall = BETTER
    elif not rows:
        overall = NOT_COMPARABLE
    else:
        overall = SAME
    regressions: list[str] = []
    if fail_on_regression_pct is not None:
        for r in rows:
            if r.verdict != WORSE or r.change_pct is None:
                continue
            if abs(r.change_pct) > fail_on_regression_pct:
                regressions.append(f"{r.shape} {r.metric} {r.change_pct:+.1f}%")
        if eq == "drift":
            regressions.append("outputs drifted (greedy prompts differ)")
        if after.server.error is not None:
            regressions.append(f"the after run could not measure: {after.server.error}")
        for name in missing:
            regressions.append(f"{name}: not measured in the after run")
        if rate_a > rate_b:
            regressions.append(f"more failed requests ({rate_b:.1%} -> {rate_a:.1%})")
    code = ExitCode.FINDINGS if regressions else ExitCode.OK
    return CompareDocument(
        schema_version=COMPARE_SCHEMA_VERSION,
        tool=ToolInfo(name=TOOL_NAME, version=__version__),
        before=before_name,
        after=after_name,
        confidence=confidence,
        per_comparison_confidence=per_row,
        resamples=resamples,
        seed=seed,
        threshold_pct=threshold_pct,
        fail_on_regression_pct=fail_on_regression_pct,
        comparisons=rows,
        equivalence=equivalence,
        errors={"before": errors_b, "after": errors_a},
        scorecard=Scorecard(
            latency=latency,
            throughput=throughput,
            equivalence=eq,
            errors=errors_verdict,
            overall=overall,
        ),
        regressions=regressions,
        exit_code=int(code),
    )
