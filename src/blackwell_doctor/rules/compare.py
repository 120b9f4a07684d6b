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

The cost is bounded whatever the runs' size. A resample is a draw count per request: each
percentile is read off the statistic's values sorted once, with the requests' counts summed
along them (numpy's linear method on the resampled multiset, exactly, without building or
sorting it). Each run's requests of a shape are resampled from at most
``MAX_BOOTSTRAP_REQUESTS`` of them and its pooled ITL from at most ``MAX_BOOTSTRAP_GAPS``
token gaps: a larger run is subsampled at random, seeded (the same files give the same
answer), and the document says so (``subsamples``). The point values (before, after,
change) always come from every request.
"""

from __future__ import annotations

import math
import operator
import random
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Sequence
from itertools import accumulate, repeat

from blackwell_doctor import TOOL_NAME, __version__
from blackwell_doctor.facts.document import ToolInfo
from blackwell_doctor.report import exitcodes
from blackwell_doctor.report.bench import (
    COMPARE_SCHEMA_VERSION,
    BenchRun,
    CompareDocument,
    Comparison,
    EquivalenceComparison,
    RequestSample,
    Scorecard,
    ShapeMetrics,
    ShapeResult,
    Subsample,
)
from blackwell_doctor.report.bench_metrics import output_tokens_of, tpot_s
from blackwell_doctor.report.sanitize import sanitize_line
from blackwell_doctor.report.stats import percentile

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


# Bounds of the bootstrap's work per run and shape (see the module's docstring): with the
# default 2,000 resamples a compare of any size takes seconds (benchmarks/bench_compare.py).
MAX_BOOTSTRAP_REQUESTS = 2000
MAX_BOOTSTRAP_GAPS = 20_000


class _Sorted:
    """One statistic's values of one run, sorted once, each with the index of the request
    it came from; a resample's percentiles are read from the requests' draw counts."""

    __slots__ = ("owners", "values")

    def __init__(self, pairs: list[tuple[float, int]]) -> None:
        pairs.sort(key=operator.itemgetter(0))
        self.values = [v for v, _ in pairs]
        self.owners = [i for _, i in pairs]

    def percentiles(self, counts: list[int], qs: Sequence[float]) -> list[float | None]:
        """``percentile(sorted(resample), q)`` for each q, where the resample holds each
        value as many times as its request was drawn: the same ranks, the same arithmetic."""
        if not self.values:
            return [None for _ in qs]
        cumulative = list(accumulate(map(counts.__getitem__, self.owners)))
        n = cumulative[-1]
        if n == 0:
            return [None for _ in qs]
        out: list[float | None] = []
        for q in qs:
            rank = (n - 1) * q / 100.0
            low = math.floor(rank)
            high = min(low + 1, n - 1)
            lo_v = self.values[bisect_right(cumulative, low)]
            hi_v = self.values[bisect_right(cumulative, high)]
            out.append(lo_v + (hi_v - lo_v) * (rank - low))
        return out


class _Run:
    """What the bootstrap needs of one run's successful requests of a shape."""

    def __init__(self, samples: Sequence[RequestSample], itl_of: list[int] | None) -> None:
        self.n = len(samples)
        self.ttft = _Sorted(
            [(s.ttft_ms, i) for i, s in enumerate(samples) if s.ttft_ms is not None]
        )
        self.e2e = _Sorted([(s.e2e_ms, i) for i, s in enumerate(samples) if s.e2e_ms is not None])
        tpot = ((tpot_s(s), i) for i, s in enumerate(samples))
        self.tpot = _Sorted([(t * 1000.0, i) for t, i in tpot if t is not None])
        self.seconds = [(s.e2e_ms or 0.0) / 1000.0 for s in samples]
        self.tokens = [output_tokens_of(s) for s in samples]
        # The pooled ITL: of every request, or of the requests ``itl_of`` (indices into
        # ``samples``) when there are too many gaps; its counts are then drawn apart.
        self.itl_n = self.n if itl_of is None else len(itl_of)
        chosen = range(self.n) if itl_of is None else itl_of
        self.itl = _Sorted([(v, j) for j, i in enumerate(chosen) for v in samples[i].itl_ms])

    def draw(self, rng: random.Random) -> tuple[list[int], list[int]]:
        """A resample: how many times each request was drawn (of the requests, and of the
        ITL's requests)."""
        counts = _counts(rng, self.n)
        return counts, counts if self.itl_n == self.n else _counts(rng, self.itl_n)

    def stats(self, counts: list[int], itl_counts: list[int]) -> dict[str, float | None]:
        ttft = self.ttft.percentiles(counts, (50, 99))
        e2e = self.e2e.percentiles(counts, (50, 99))
        itl = self.itl.percentiles(itl_counts, (50, 99))
        seconds = sum(map(operator.mul, counts, self.seconds))
        tokens = sum(map(operator.mul, counts, self.tokens))
        return {
            "ttft_ms.p50": ttft[0],
            "ttft_ms.p99": ttft[1],
            "tpot_ms.p50": self.tpot.percentiles(counts, (50,))[0],
            "itl_ms.p50": itl[0],
            "itl_ms.p99": itl[1],
            "e2e_ms.p50": e2e[0],
            "e2e_ms.p99": e2e[1],
            "output_tokens_per_s": tokens / seconds if seconds > 0 else None,
        }


def _counts(rng: random.Random, n: int) -> list[int]:
    # rng.choices(range(n), k=n) draws what rng.choices(requests, k=n) draws.
    drawn = Counter(rng.choices(range(n), k=n))
    return list(map(drawn.get, range(n), repeat(0)))


def _subsample(
    samples: list[RequestSample], rng: random.Random
) -> tuple[list[RequestSample], list[int] | None]:
    """At most MAX_BOOTSTRAP_REQUESTS of ``samples`` (a seeded random choice, in their
    order), and the indices among those whose ITL gaps (at most MAX_BOOTSTRAP_GAPS, a
    seeded random choice; at least one request) the pooled ITL is resampled from, or None
    when it is all of them."""
    if len(samples) > MAX_BOOTSTRAP_REQUESTS:
        keep = sorted(rng.sample(range(len(samples)), MAX_BOOTSTRAP_REQUESTS))
        samples = [samples[i] for i in keep]
    if sum(len(s.itl_ms) for s in samples) <= MAX_BOOTSTRAP_GAPS:
        return samples, None
    chosen: list[int] = []
    gaps = 0
    for i in rng.sample(range(len(samples)), len(samples)):
        gaps += len(samples[i].itl_ms)
        if gaps > MAX_BOOTSTRAP_GAPS and chosen:
            break
        chosen.append(i)
    return samples, sorted(chosen)


def _compare_shape(
    before: ShapeResult,
    after: ShapeResult,
    *,
    resamples: int,
    seed: int,
    confidence: float,
    threshold: float,
    subsamples: list[Subsample],
) -> list[Comparison]:
    b = [s for s in before.samples if s.ok]
    a = [s for s in after.samples if s.ok]
    rng = random.Random(f"{seed}:{before.name}")  # noqa: S311 (statistics, not secrets)
    boot: dict[str, list[float]] = {m[0]: [] for m in _METRICS}
    points: dict[str, tuple[float | None, float | None]] = {
        m[0]: (m[2](b), m[2](a)) for m in _METRICS
    }
    # The samples each interval is drawn from, per run: requests, and ITL gaps.
    drawn: dict[str, tuple[int, int]] = {}
    if b and a:
        runs = []
        for label, samples in (("before", b), ("after", a)):
            pick = random.Random(f"{seed}:{before.name}:{label}:subsample")  # noqa: S311
            kept, itl_of = _subsample(samples, pick)
            run = _Run(kept, itl_of)
            runs.append(run)
            drawn[label] = (run.n, len(run.itl.values))
            if run.n < len(samples) or itl_of is not None:
                subsamples.append(
                    Subsample(
                        shape=before.name,
                        run=label,
                        requests=run.n,
                        requests_of=len(samples),
                        itl_requests=run.itl_n,
                        itl_gaps=len(run.itl.values),
                        itl_gaps_of=sum(len(s.itl_ms) for s in samples),
                    )
                )
        run_b, run_a = runs
        for _ in range(resamples):
            stats_b = run_b.stats(*run_b.draw(rng))
            stats_a = run_a.stats(*run_a.draw(rng))
            for name, vb in stats_b.items():
                va = stats_a[name]
                if vb and va is not None:
                    boot[name].append((va / vb - 1.0) * 100.0)
    alpha = (1.0 - confidence) / 2.0 * 100.0  # already adjusted by the caller
    rows = []
    for name, lower, _, own, q, count in _METRICS:
        pb, pa = points[name]
        shown_b, shown_a = own(before.metrics), own(after.metrics)
        changes = sorted(boot[name])
        if q is None:
            tail = None
        else:
            # Samples above the percentile in what the interval is drawn from.
            k = 1 if count is _tokens else 0
            n_b, n_a = (drawn[x][k] for x in ("before", "after")) if drawn else (0, 0)
            tail = min(n_b, n_a) * (1.0 - q / 100.0)
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


class NotComparable(Exception):
    """Two runs with nothing to compare (one line, for the CLI)."""


def _names(run: BenchRun) -> str:
    if not run.shapes:
        return "none"
    names = ", ".join(sanitize_line(s.name)[:64] for s in run.shapes[:8])
    return names + (f" and {len(run.shapes) - 8} more" if len(run.shapes) > 8 else "")


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
    lost = bool(before.shapes) and (after.server.error is not None or not after.shapes)
    if not common and not lost:
        # An after run that measured nothing is a regression (below); two runs of different
        # shapes, or a before run that measured nothing, compare nothing.
        raise NotComparable(
            f"{before_name} and {after_name} have no shape in common (before: "
            f"{_names(before)}; after: {_names(after)})"
        )
    per_row = 1.0 - (1.0 - confidence) / max(1, len(common) * len(_METRICS))
    rows: list[Comparison] = []
    equivalence: list[EquivalenceComparison] = []
    subsamples: list[Subsample] = []
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
            subsamples=subsamples,
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
    code = exitcodes.gate(findings=bool(regressions), not_evaluated=False, strict=False)
    return CompareDocument(
        schema_version=COMPARE_SCHEMA_VERSION,
        tool=ToolInfo(name=TOOL_NAME, version=__version__),
        before=before_name,
        after=after_name,
        confidence=confidence,
        per_comparison_confidence=per_row,
        resamples=resamples,
        seed=seed,
        max_bootstrap_requests=MAX_BOOTSTRAP_REQUESTS,
        max_bootstrap_gaps=MAX_BOOTSTRAP_GAPS,
        subsamples=subsamples,
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
