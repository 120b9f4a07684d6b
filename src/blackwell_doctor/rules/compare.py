"""``bench --compare before.json after.json``: every change with a bootstrap interval and a
verdict, output equivalence, and a scorecard that never calls a trade-off a win.

The interval: both runs' successful requests are resampled with replacement (seeded, so
the same files always give the same answer) and each metric recomputed on the resample;
ITL is pooled over the resampled requests (a cluster bootstrap, since the tokens of one
request are not independent). Throughput's change and interval come from the closed-loop
estimator sum(output tokens) / sum(E2E latency), which is proportional to output tokens/s
at a fixed concurrency (Little's law) and, unlike the run's single tokens/s figure, can be
resampled request by request.

Between runs (issue 21): a run document of ``bench --repeat N`` holds N runs of one
configuration. With several runs a side, each resample first draws that many runs with
replacement, then the requests of each drawn run with replacement (a two-stage bootstrap
for nested data: Davison and Hinkley 1997, as the multi-stage bootstrap of Vanderbilt's
HowToBootstrapCorrelatedData describes it), so the interval holds how much runs of one
configuration differ, not only one run's spread. With one run on a side that variation is
unknown: no change smaller than a noise floor is called better or worse, the floor measured
by ``bench --repeat`` (``calibrate``, stored in the run document) when a side has one, else
the default of ``checks/bench_noise.toml``; the document says which. One run a side draws
exactly what it drew before (no run is drawn), so its intervals are unchanged.

The intervals are simultaneous: with m metrics compared over all shapes, each interval is
taken at confidence 1 - (1 - confidence) / m (Bonferroni), so the chance that the scorecard
calls anything better or worse when nothing changed is at most 1 - confidence overall, not
per row.

A verdict is "better" or "worse" only when the interval excludes zero *and* the change is
at least ``threshold_pct`` *and*, for a latency, at least 0.1 ms: run-to-run noise of a few
percent is real on any server, and a latency of a few microseconds (two SSE events read in
one socket read, as from a server that coalesces its writes) has no meaningful ratio. For
the same reason a latency whose value on either side, or in any one run of either side, is
below 0.1 ms is "not comparable", with no change shown.

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
import statistics
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import Annotated

import msgspec

from blackwell_doctor import TOOL_NAME, __version__
from blackwell_doctor.facts.document import ToolInfo
from blackwell_doctor.report import exitcodes
from blackwell_doctor.report.bench import (
    COMPARE_SCHEMA_VERSION,
    BenchRun,
    Calibration,
    CompareDocument,
    Comparison,
    EquivalenceComparison,
    NoiseFloor,
    RequestSample,
    Scorecard,
    ShapeMetrics,
    ShapeResult,
    Subsample,
    SweepComparison,
    SweepResult,
)
from blackwell_doctor.report.bench_metrics import output_tokens_of, tpot_s
from blackwell_doctor.report.sanitize import sanitize_line
from blackwell_doctor.report.stats import percentile
from blackwell_doctor.ruledata.checkdata import load_shipped
from blackwell_doctor.ruledata.samples import (
    label as quantile_label,
)
from blackwell_doctor.ruledata.samples import (
    load_sample_rules,
    samples_for,
    tail_samples_enough,
)
from blackwell_doctor.rules import drift
from blackwell_doctor.rules import goodput as goodputs
from blackwell_doctor.rules.environment import compare_environments
from blackwell_doctor.rules.resample import draw_counts, nested_counts
from blackwell_doctor.rules.sweep import resummarise

BETTER = "better"
WORSE = "worse"
SAME = "no significant change"
NOT_COMPARABLE = "not comparable"
TOO_FEW = "too few samples"
WITHIN_NOISE = "within the noise floor"

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


# A percentile gets a verdict only when each run has at least checks/bench_samples.toml's
# ``beyond_quantile`` samples above it: a p99 of 48 requests is an interpolation between
# its two largest values, and no bootstrap interval around that means anything (the
# bootstrap is inconsistent for extreme quantiles of small samples). The same rule sets
# a shape's default request count (ruledata/shapes.py), so the two agree.


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
    """What the bootstrap needs of one side's successful requests of a shape: every run's
    (subsampled) requests one after the other, each run a segment."""

    def __init__(self, runs: Sequence[tuple[Sequence[RequestSample], list[int] | None]]) -> None:
        samples = [s for kept, _ in runs for s in kept]
        self.n = len(samples)
        # (offset, size) of each run's requests, and of its ITL requests in the ITL list.
        self.segments: list[tuple[int, int]] = []
        self.itl_segments: list[tuple[int, int]] = []
        itl_requests: list[int] = []
        offset = 0
        for kept, itl_of in runs:
            self.segments.append((offset, len(kept)))
            chosen = range(len(kept)) if itl_of is None else itl_of
            self.itl_segments.append((len(itl_requests), len(chosen)))
            itl_requests += [offset + i for i in chosen]
            offset += len(kept)
        self.ttft = _Sorted(
            [(s.ttft_ms, i) for i, s in enumerate(samples) if s.ttft_ms is not None]
        )
        self.e2e = _Sorted([(s.e2e_ms, i) for i, s in enumerate(samples) if s.e2e_ms is not None])
        tpot = ((tpot_s(s), i) for i, s in enumerate(samples))
        self.tpot = _Sorted([(t * 1000.0, i) for t, i in tpot if t is not None])
        self.seconds = [(s.e2e_ms or 0.0) / 1000.0 for s in samples]
        self.tokens = [output_tokens_of(s) for s in samples]
        # The pooled ITL: of every request, or of the requests chosen in each run when
        # there are too many gaps; its counts are then drawn apart.
        self.itl_all = len(itl_requests) == self.n
        self.itl_n = len(itl_requests)
        self.itl = _Sorted([(v, j) for j, i in enumerate(itl_requests) for v in samples[i].itl_ms])

    def draw(self, rng: random.Random) -> tuple[list[int], list[int]]:
        """A resample: how many times each request was drawn (of the requests, and of the
        ITL's requests). With one run, its requests are drawn with replacement; with
        several, as many runs are drawn with replacement first, then the requests of each
        drawn run (a two-stage bootstrap)."""
        if len(self.segments) == 1:
            counts = draw_counts(rng, self.n)
            return counts, counts if self.itl_all else draw_counts(rng, self.itl_n)
        drawn = rng.choices(range(len(self.segments)), k=len(self.segments))
        counts = nested_counts(rng, self.segments, drawn, self.n)
        if self.itl_all:
            return counts, counts
        return counts, nested_counts(rng, self.itl_segments, drawn, self.itl_n)

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
    before_runs: Sequence[ShapeResult],
    after_runs: Sequence[ShapeResult],
    *,
    resamples: int,
    seed: int,
    confidence: float,
    threshold: float,
    floors: dict[str, float | None],
    subsamples: list[Subsample],
) -> list[Comparison]:
    before = before_runs[0]
    side_runs = {
        "before": [[s for s in r.samples if s.ok] for r in before_runs],
        "after": [[s for s in r.samples if s.ok] for r in after_runs],
    }
    b = [s for run in side_runs["before"] for s in run]
    a = [s for run in side_runs["after"] for s in run]
    rng = random.Random(f"{seed}:{before.name}")  # noqa: S311 (statistics, not secrets)
    boot: dict[str, list[float]] = {m[0]: [] for m in _METRICS}
    # Resamples in which a side's latency fell below the resolution (see below).
    unresolved: Counter[str] = Counter()
    points: dict[str, tuple[float | None, float | None]] = {
        m[0]: (m[2](b), m[2](a)) for m in _METRICS
    }
    # The samples each interval is drawn from, per side (its smallest run): requests, and
    # ITL gaps.
    drawn: dict[str, tuple[int, int]] = {}
    if all(side_runs["before"]) and all(side_runs["after"]):
        sides = []
        for label, runs in side_runs.items():
            parts: list[tuple[Sequence[RequestSample], list[int] | None]] = []
            least = (math.inf, math.inf)
            for k, samples in enumerate(runs):
                # Run 1 keeps the seeds of a one-run compare: the same files, the same answer.
                tag = f"{seed}:{before.name}:{label}:subsample" + (f":{k + 1}" if k else "")
                pick = random.Random(tag)  # noqa: S311
                kept, itl_of = _subsample(samples, pick)
                parts.append((kept, itl_of))
                gaps = sum(len(kept[i].itl_ms) for i in (itl_of or range(len(kept))))
                least = (min(least[0], len(kept)), min(least[1], gaps))
                if len(kept) < len(samples) or itl_of is not None:
                    subsamples.append(
                        Subsample(
                            shape=before.name,
                            run=label if k == 0 else f"{label} run {k + 1}",
                            requests=len(kept),
                            requests_of=len(samples),
                            itl_requests=len(itl_of) if itl_of is not None else len(kept),
                            itl_gaps=gaps,
                            itl_gaps_of=sum(len(s.itl_ms) for s in samples),
                        )
                    )
            sides.append(_Run(parts))
            drawn[label] = (int(least[0]), int(least[1]))
        run_b, run_a = sides
        for _ in range(resamples):
            stats_b = run_b.stats(*run_b.draw(rng))
            stats_a = run_a.stats(*run_a.draw(rng))
            for name, vb in stats_b.items():
                va = stats_a[name]
                if name in LATENCY_METRICS and any(
                    v is not None and v < MIN_LATENCY_CHANGE_MS for v in (vb, va)
                ):
                    unresolved[name] += 1
                if vb and va is not None:
                    boot[name].append((va / vb - 1.0) * 100.0)
    alpha = (1.0 - confidence) / 2.0 * 100.0  # already adjusted by the caller

    rows = []
    for name, lower, _, own, q, count in _METRICS:
        pb, pa = points[name]
        # A latency below the timing's resolution in the pooled figures of a side or in one
        # run's own figure (see the verdict below).
        figures = (own(r.metrics) for r in (*before_runs, *after_runs))
        known = (v for v in (pb, pa, *figures) if v is not None)
        below = lower and min(known, default=math.inf) < MIN_LATENCY_CHANGE_MS
        # One run: its own figures. Several: a percentile of every run's requests together
        # (what the change and its interval are of), and the runs' mean tokens/s.
        if (len(before_runs) == 1 and len(after_runs) == 1) or q is None:
            shown_b = _mean_of([own(r.metrics) for r in before_runs])
            shown_a = _mean_of([own(r.metrics) for r in after_runs])
        else:
            shown_b, shown_a = pb, pa
        changes = sorted(boot[name])
        floor = floors.get(name)
        if q is None:
            tail = None
        else:
            # Samples above the percentile in what the interval is drawn from.
            k = 1 if count is _tokens else 0
            n_b, n_a = (drawn[x][k] for x in ("before", "after")) if drawn else (0, 0)
            tail = min(n_b, n_a) * (1.0 - q / 100.0)
        needed = max(10, resamples // 2)
        reason: str | msgspec.UnsetType = msgspec.UNSET
        if tail is not None and not tail_samples_enough(tail) and pb and pa is not None:
            verdict = TOO_FEW
            assert q is not None
            reason = _too_few_reason(
                q,
                "ITL gaps" if count is _tokens else "requests",
                (n_b, n_a),
                (len(before_runs), len(after_runs)),
            )
        elif not pb or pa is None or len(changes) < needed:
            verdict = NOT_COMPARABLE
            reason = _missing_reason(
                name, (pb, pa), (before_runs, after_runs), len(changes), resamples, needed
            )
        elif below or unresolved[name] > resamples * alpha / 100.0:
            # Below the timing's resolution the ratio means nothing: a TPOT or ITL of 0.00
            # ms is a server that delivered its tokens in bursts (a starved front end seen
            # here: A/A, 0.00 -> 18.24 ms, "+1,033,402%"), not one that generates faster.
            # The same when one run of either side measured below it: runs of one
            # configuration then differ by more than any ratio says (calibrate measures no
            # floor for them), and with no floor the pooled figures of such runs were
            # called "worse" in an A/A (CI on 15c4f13: ITL p99 21 -> 118 ms, interval
            # [+26.8%, +11,076,470%], a resample's p99 falling into the bursts). And when
            # more resamples than one tail of the interval holds fell below it on a side:
            # the interval itself then reaches below the resolution.
            verdict = NOT_COMPARABLE
            reason = _resolution_reason(
                name,
                (pb, pa),
                [[own(r.metrics) for r in runs] for runs in (before_runs, after_runs)],
                unresolved[name],
                resamples,
                resamples * alpha / 100.0,
            )
        else:
            verdict = ""
        change: float | None = None
        low: float | None = None
        high: float | None = None
        if verdict:
            if pb and pa is not None and not below:
                change = (pa / pb - 1.0) * 100.0
        else:
            assert pb
            assert pa is not None
            change = (pa / pb - 1.0) * 100.0
            low, high = percentile(changes, alpha), percentile(changes, 100.0 - alpha)
            fewest = min(len(before_runs), len(after_runs))
            if fewest > 1:
                # Resampling n runs gives their mean a variance of (n-1)/n of the unbiased
                # one (the plug-in variance divides by n): 2/3 with 3 runs. The interval is
                # widened about the change by sqrt(n/(n-1)) to make up for it, on the scale
                # of the ratio's logarithm: a change is a ratio, and widened in percent a
                # change of +4,862% with a lower bound of +100% fell past -100% (issue 21's
                # A/B test).
                low, high = widen_ratio_interval(
                    change, low, high, math.sqrt(fewest / (fewest - 1))
                )
            verdict = _verdict(lower, change, low, high, threshold, abs(pa - pb))
            if verdict in (BETTER, WORSE) and floor is not None and fold_pct(change) < floor:
                verdict = WITHIN_NOISE
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
                verdict=verdict,
                noise_floor_pct=floor,
                reason=reason,
            )
        )
    return rows


_SIDES = ("before", "after")


def _missing_reason(
    name: str,
    points: tuple[float | None, float | None],
    runs: tuple[Sequence[ShapeResult], Sequence[ShapeResult]],
    usable: int,
    resamples: int,
    needed: int,
) -> str:
    """Why a row has no value on a side, or too few usable resamples: what was found."""
    found = []
    figures_only = []
    for side, value, side_runs in zip(_SIDES, points, runs, strict=True):
        if value is not None and (side == "after" or value):
            continue
        requests = sum(r.requests for r in side_runs)
        recorded = sum(len(r.samples) for r in side_runs)
        ok = sum(1 for r in side_runs for s in r.samples if s.ok)
        if value is not None:
            found.append(f"{side}'s {name} is {value:g}: a change from it has no ratio")
        elif not recorded and requests:
            figures_only.append(requests)
            found.append(
                f"{side}'s {requests:,} requests are in its figures only, with no per-request "
                "samples to resample"
            )
        elif not ok:
            found.append(f"none of {side}'s {recorded:,} requests completed")
        else:
            found.append(f"{side}'s {ok:,} completed requests gave no {name}")
    if len(figures_only) == 2:
        return (
            f"neither side has per-request samples to resample: their {figures_only[0]:,} and "
            f"{figures_only[1]:,} requests are in their figures only"
        )
    if found:
        return "; ".join(found)
    empty = [
        f"{side}'s run {k + 1}" if len(side_runs) > 1 else side
        for side, side_runs in zip(_SIDES, runs, strict=True)
        for k, r in enumerate(side_runs)
        if not any(s.ok for s in r.samples)
    ]
    if empty:
        return f"{' and '.join(empty)} completed no request: no resample can be drawn"
    return (
        f"{usable:,} of {resamples:,} resamples usable, {needed:,} needed "
        f"(a resample whose before {name} is 0 or absent has no ratio)"
    )


def _too_few_reason(q: float, unit: str, counts: tuple[int, int], runs: tuple[int, int]) -> str:
    """Why a percentile has too few samples beyond it to be judged: the samples each short
    side's interval is drawn from (its smallest run's, with several runs), and how many the
    percentile needs (checks/bench_samples.toml)."""
    beyond = load_sample_rules().beyond_quantile
    need = samples_for(q)
    short = [
        f"{n:,} on {side}" + (f" (the smallest of {k} runs)" if k > 1 else "")
        for side, n, k in zip(_SIDES, counts, runs, strict=True)
        if not tail_samples_enough(n * (1.0 - q / 100.0))
    ]
    return (
        f"{unit}: {' and '.join(short)}, {need:,} needed for a {quantile_label(q)} "
        f"({beyond} beyond it: checks/bench_samples.toml)"
    )


def _resolution_reason(
    name: str,
    points: tuple[float | None, float | None],
    runs: list[list[float | None]],
    unresolved: int,
    resamples: int,
    tail: float,
) -> str:
    """Why a latency row is below the timing's resolution: the figures that fell below."""
    limit = f"below the timing resolution ({MIN_LATENCY_CHANGE_MS:g} ms)"
    pb, pa = points
    if any(v is not None and v < MIN_LATENCY_CHANGE_MS for v in points):
        return f"{limit}: {_f_ms(pb)} vs {_f_ms(pa)}"
    for side, figures in zip(_SIDES, runs, strict=True):
        for k, v in enumerate(figures):
            if v is not None and v < MIN_LATENCY_CHANGE_MS:
                return (
                    f"{limit} in {side}'s run {k + 1} of {len(figures)}: {_f_ms(v)} "
                    f"(the sides' {name}: {_f_ms(pb)} vs {_f_ms(pa)})"
                )
    return (
        f"{unresolved:,} of {resamples:,} resamples fell {limit} on a side, more than the "
        f"{tail:,.1f} a tail of the interval holds: {_f_ms(pb)} vs {_f_ms(pa)}"
    )


def _f_ms(value: float | None) -> str:
    return "none" if value is None else f"{value:,.2f} ms"


def widen_ratio_interval(
    change_pct: float, low_pct: float, high_pct: float, factor: float
) -> tuple[float, float]:
    """The interval [low, high] of a percent change, widened about the change by ``factor``
    on the log-ratio scale (where a ratio's bootstrap is closer to symmetric): the bounds
    stay above -100% however wide the change. A bound at -100% (a value of 0) stays
    there."""
    centre = math.log1p(change_pct / 100.0) if change_pct > -100.0 else None

    def widen(bound: float) -> float:
        if centre is None or bound <= -100.0:
            return bound
        return math.expm1(centre + (math.log1p(bound / 100.0) - centre) * factor) * 100.0

    return widen(low_pct), widen(high_pct)


def fold_pct(change_pct: float) -> float:
    """A change as the larger over the smaller value, minus one, in percent: the measure
    of a noise floor's spread, the same for a rise and a fall (-50% and +100% are both
    100%)."""
    ratio = 1.0 + change_pct / 100.0
    if ratio <= 0.0:
        return math.inf
    return (max(ratio, 1.0 / ratio) - 1.0) * 100.0


def _mean_of(values: list[float | None]) -> float | None:
    """The value of one run; of several, their mean (None when a run has none)."""
    if len(values) == 1:
        return values[0]
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if len(known) == len(values) else None


def _first_difference(x: str, y: str) -> int:
    for i, (cx, cy) in enumerate(zip(x, y, strict=False)):
        if cx != cy:
            return i
    return min(len(x), len(y))


def _equivalence(before: ShapeResult, after: ShapeResult) -> EquivalenceComparison:
    b = {e.prompt_id: e for e in before.equivalence if e.ok}
    a = {e.prompt_id: e for e in after.equivalence if e.ok}
    common = sorted(set(b) & set(a))
    logprobs, numerics = drift.shape_drift(before, after)
    if not common:
        counts = [
            f"{side} {len(answered)} of {len(shape.equivalence)} answered"
            if shape.equivalence
            else f"{side} has none"
            for side, answered, shape in (("before", b, before), ("after", a, after))
        ]
        return EquivalenceComparison(
            shape=before.name,
            prompts=0,
            exact_match_rate=None,
            first_divergence={},
            verdict=NOT_COMPARABLE,
            reason=f"no greedy prompt answered on both sides ({', '.join(counts)})",
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
        logprobs=logprobs,
        numerics=numerics,
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


def _rollup_reasons(
    rows: Sequence[Comparison],
    equivalence: Sequence[EquivalenceComparison],
    *,
    latency: str,
    throughput: str,
    eq: str,
) -> dict[str, str]:
    """Why each "not comparable" roll-up of the scorecard is: its rows' verdicts counted
    (each row's own reason is on its line), or the equivalences' reasons."""
    out: dict[str, str] = {}
    for key, verdict, latency_rows in (
        ("latency", latency, True),
        ("throughput", throughput, False),
    ):
        if verdict != NOT_COMPARABLE:
            continue
        mine = [r.verdict for r in rows if (r.metric in LATENCY_METRICS) == latency_rows]
        counts = Counter(mine)
        rows_word = "row" if len(mine) == 1 else "rows"
        out[key] = f"none of its {len(mine):,} {rows_word} could be judged: " + ", ".join(
            f"{counts[v]:,} {v}" for v in (TOO_FEW, NOT_COMPARABLE) if counts[v]
        )
    if eq == NOT_COMPARABLE:
        found = [
            f"{e.shape}: {e.reason}"
            for e in equivalence
            if not isinstance(e.reason, msgspec.UnsetType)
        ]
        out["equivalence"] = (
            "; ".join(found) if found else "no shape of both runs has greedy prompts to compare"
        )
    return out


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


def runs_of(run: BenchRun) -> list[dict[str, ShapeResult]]:
    """Every run of a document by shape: its own, then ``bench --repeat``'s others."""
    return [{s.name: s for s in run.shapes}] + [{s.name: s for s in r.shapes} for r in run.repeats]


class NoiseRules(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    default_floor_pct: Annotated[float, msgspec.Meta(ge=0)]
    metric: dict[str, Annotated[float, msgspec.Meta(ge=0)]] = msgspec.field(default_factory=dict)


class NoiseCatalogue(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    floor: NoiseRules


def load_noise_rules() -> NoiseRules:
    """``checks/bench_noise.toml``: the floor assumed when between-run noise is unknown."""
    return load_shipped("bench_noise.toml", NoiseCatalogue).floor


MEASURED = "measured"
DEFAULT = "default"
NONE = "none"


def _floors(
    before: BenchRun, after: BenchRun, n_before: int, n_after: int, *, interleaved: bool
) -> tuple[str, Callable[[str, str], float | None]]:
    """Where the noise floor comes from, and the floor of (shape, metric): the larger of
    the two sides' measured floors; else, with one run on a side, the catalogue's; scaled
    down for means of several runs."""
    measured: dict[tuple[str, str], float] = {}
    for run in (before, after):
        # The floor of the runs the file holds, by this version's rule (a file written by
        # an older one keeps the floor it recorded only when it holds no runs to redo it).
        calibration = calibrate(run) or run.calibration
        if calibration is None:
            continue
        for f in calibration.floors:
            if f.floor_pct is not None:
                key = (f.shape, f.metric)
                measured[key] = max(measured.get(key, 0.0), f.floor_pct)
    # The floor is of one run against one run; a difference of means of n_b and n_a runs
    # varies sqrt(1/n_b + 1/n_a) / sqrt(2) as much (the standard error of a difference of
    # means): 0.58 of it for 3 runs a side. Runs that could not take turns (apply
    # --verify: the baseline, then the new container) keep the whole floor: a drift of the
    # host between the two periods is in neither side's spread.
    scale = math.sqrt((1.0 / n_before + 1.0 / n_after) / 2.0) if interleaved else 1.0
    if measured:

        def of_measured(shape: str, metric: str) -> float | None:
            floor = measured.get((shape, metric))
            return None if floor is None else floor * scale

        return MEASURED, of_measured
    if min(n_before, n_after) == 1:
        rules = load_noise_rules()
        return (
            DEFAULT,
            lambda _shape, metric: rules.metric.get(metric, rules.default_floor_pct) * scale,
        )
    return NONE, lambda _shape, _metric: None


def _noise_sentence(n_before: int, n_after: int, source: str, interleaved: bool) -> str:
    if min(n_before, n_after) > 1:
        text = (
            f"measured: {n_before} runs before, {n_after} after; each interval resamples "
            "runs, then requests within each drawn run (a two-stage bootstrap)"
        )
    else:
        text = (
            f"unknown: {n_before} run(s) before, {n_after} after; the intervals hold the "
            "spread of requests within a run, not how much two runs of one configuration "
            "differ"
        )
    if not interleaved and max(n_before, n_after) > 1:
        text += (
            "; the two sides' runs could not take turns, so each floor is the whole floor "
            "of one run against one (a drift of the host between them is in neither side's "
            "spread)"
        )
    if source == MEASURED:
        return (
            text + "; no change smaller than the noise floor measured by bench --repeat is "
            "called better or worse"
        )
    if source == DEFAULT:
        return (
            text + "; no change smaller than the default noise floor of "
            "checks/bench_noise.toml is called better or worse (bench --repeat N measures it)"
        )
    return text


def calibrate(run: BenchRun, *, interleaved_with: str | None = None) -> Calibration | None:
    """The noise floor of ``run``'s repeats (A/A runs of one configuration): for every
    shape and metric, how much its runs' own figures differ. None with one run."""
    runs = runs_of(run)
    if len(runs) < 2:
        return None
    floors: list[NoiseFloor] = []
    for shape in run.shapes:
        for name, _, _, own, _, _ in _METRICS:
            values = [own(r[shape.name].metrics) if shape.name in r else None for r in runs]
            floors.append(_floor(shape.name, name, values, latency=name in LATENCY_METRICS))
    if not isinstance(run.sweep, msgspec.UnsetType) and run.sweep.slo:
        # A rate run's capacity at SLO, run by run (a crossing in each, else no floor).
        sweep = run.sweep
        cap, _ = goodputs.capacity(sweep.points, runs, sweep.slo, sweep.slo_level, resamples=0)
        floors.append(_floor(sweep.shape, CAPACITY, list(cap.per_run)))
    return Calibration(
        runs=len(runs),
        interleaved_with=interleaved_with,
        method=(
            "floor_pct = max(spread_pct, 2 * sqrt(2) * cv_pct): the largest change seen "
            "between two of the runs, or the change two runs would exceed about 1 time in "
            "20 if their figures were normal with the runs' spread, whichever is larger; "
            f"none for a latency one of whose runs measured below {MIN_LATENCY_CHANGE_MS:g} ms "
            "(below what a compare calls a change, its ratio measures only the resolution)"
        ),
        floors=floors,
    )


def _floor(
    shape: str, metric: str, values: list[float | None], *, latency: bool = False
) -> NoiseFloor:
    known = [v for v in values if v is not None and v > 0]
    if len(known) < 2 or (latency and min(known) < MIN_LATENCY_CHANGE_MS):
        # A latency measured below the resolution on one run (e.g. an ITL p99 of 0.0004 ms
        # where a starved front end delivered an answer in one burst) has no floor: its
        # ratio to the others would be a floor of 100,000s of percent that hides every
        # real change of that row (the compare calls such rows "not comparable" too).
        return NoiseFloor(
            shape=shape, metric=metric, values=values, spread_pct=None, cv_pct=None, floor_pct=None
        )
    spread = (max(known) / min(known) - 1.0) * 100.0
    cv = statistics.stdev(known) / statistics.fmean(known) * 100.0
    return NoiseFloor(
        shape=shape,
        metric=metric,
        values=values,
        spread_pct=spread,
        cv_pct=cv,
        floor_pct=max(spread, 2.0 * math.sqrt(2.0) * cv),
    )


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
    interleaved: bool = True,
    slo: dict[str, float] | None = None,
    slo_level: float | None = None,
) -> CompareDocument:
    """``before`` against ``after``: every metric of every shape in common with its
    interval and verdict, the greedy outputs, the errors, a scorecard. Two rate runs
    (``bench --rate``) also compare their capacity at SLO (a row ``capacity_at_slo``), both
    judged against ``slo`` and ``slo_level`` (default: the before run's)."""
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
    swept = not isinstance(before.sweep, msgspec.UnsetType) and not isinstance(
        after.sweep, msgspec.UnsetType
    )
    judged = swept and bool(slo if slo is not None else before.sweep.slo)  # type: ignore[union-attr]
    per_row = 1.0 - (1.0 - confidence) / max(1, len(common) * len(_METRICS) + int(judged))
    rows: list[Comparison] = []
    equivalence: list[EquivalenceComparison] = []
    subsamples: list[Subsample] = []
    runs_b, runs_a = runs_of(before), runs_of(after)
    source, floor_of = _floors(before, after, len(runs_b), len(runs_a), interleaved=interleaved)
    # A sweep's points other than its first ask no greedy prompts: nothing to compare there.
    silent = {
        p.shape
        for run in (before, after)
        if not isinstance(run.sweep, msgspec.UnsetType)
        for p in run.sweep.points
    }
    for shape in before.shapes:
        other = after_shapes.get(shape.name)
        if other is None:
            continue
        rows += _compare_shape(
            [r[shape.name] for r in runs_b if shape.name in r],
            [r[shape.name] for r in runs_a if shape.name in r],
            resamples=resamples,
            seed=seed,
            confidence=per_row,
            threshold=threshold_pct,
            floors={m[0]: floor_of(shape.name, m[0]) for m in _METRICS},
            subsamples=subsamples,
        )
        if shape.name in silent and not shape.equivalence and not other.equivalence:
            continue
        equivalence.append(_equivalence(shape, other))
    sweep_doc: SweepComparison | msgspec.UnsetType = msgspec.UNSET
    if swept:
        assert not isinstance(before.sweep, msgspec.UnsetType)
        assert not isinstance(after.sweep, msgspec.UnsetType)
        sweep_doc, capacity_row = _compare_sweeps(
            before.sweep,
            after.sweep,
            runs_b,
            runs_a,
            slo=before.sweep.slo if slo is None else slo,
            level=before.sweep.slo_level if slo_level is None else slo_level,
            resamples=resamples,
            seed=seed,
            confidence=per_row,
            threshold=threshold_pct,
            floor=floor_of(before.sweep.shape, CAPACITY),
        )
        if capacity_row is not None:
            rows.append(capacity_row)
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
    numerics = drift.worst([e.numerics for e in equivalence])
    eq_verdicts = [e.verdict for e in equivalence]
    if "drift" in eq_verdicts:
        eq = "drift"
    elif eq_verdicts and all(v == "equivalent" for v in eq_verdicts):
        eq = "equivalent"
    else:
        eq = NOT_COMPARABLE
    reasons = _rollup_reasons(rows, equivalence, latency=latency, throughput=throughput, eq=eq)
    bad = [latency, throughput, errors_verdict]
    broken = WORSE in bad or "mixed" in bad or eq == "drift" or numerics == drift.BEYOND
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
        if numerics == drift.BEYOND:
            regressions.append(
                "greedy log-probabilities drifted beyond tolerance (checks/drift.toml)"
            )
        if after.server.error is not None:
            regressions.append(f"the after run could not measure: {after.server.error}")
        for name in missing:
            regressions.append(f"{name}: not measured in the after run")
        if rate_a > rate_b:
            regressions.append(f"more failed requests ({rate_b:.1%} -> {rate_a:.1%})")
    code = exitcodes.gate(findings=bool(regressions), not_evaluated=False, strict=False)
    pinned = before.environment is not None or after.environment is not None
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
        runs={"before": len(runs_b), "after": len(runs_a)},
        between_run_noise=_noise_sentence(len(runs_b), len(runs_a), source, interleaved),
        noise_floor_source=source,
        comparisons=rows,
        equivalence=equivalence,
        errors={"before": errors_b, "after": errors_a},
        scorecard=Scorecard(
            latency=latency,
            throughput=throughput,
            equivalence=eq,
            errors=errors_verdict,
            overall=overall,
            numerics=numerics,
            reasons=reasons or msgspec.UNSET,
        ),
        regressions=regressions,
        exit_code=int(code),
        environment=(
            compare_environments(before.environment, after.environment) if pinned else msgspec.UNSET
        ),
        sweep=sweep_doc,
    )


# The row of two sweeps' capacity at SLO (rules/goodput.py), higher is better.
CAPACITY = "capacity_at_slo"


def _compare_sweeps(
    before: SweepResult,
    after: SweepResult,
    runs_b: Sequence[dict[str, ShapeResult]],
    runs_a: Sequence[dict[str, ShapeResult]],
    *,
    slo: dict[str, float],
    level: float,
    resamples: int,
    seed: int,
    confidence: float,
    threshold: float,
    floor: float | None,
) -> tuple[SweepComparison, Comparison | None]:
    """Both sweeps judged against ``slo`` at ``level``, and the change of their capacity:
    each side's capacity resampled as goodput.capacity draws it (runs, then requests), the
    change's interval from the pairs of resamples, its verdict as any other row's."""
    notes: list[str] = []
    asked = [(before.slo, before.slo_level), (after.slo, after.slo_level)]
    if any(a != (slo, level) for a in asked):
        notes.append(
            f"both sweeps are judged against the same SLOs ({_slo_words(slo, level)}); the "
            f"runs asked for {_slo_words(*asked[0])} (before) and {_slo_words(*asked[1])} "
            "(after)"
        )
    sides = []
    for sweep, runs, tag in ((before, runs_b, "before"), (after, runs_a, "after")):
        summary = resummarise(sweep, runs, seed=seed, slo=slo, level=level, resamples=resamples)
        draws: list[float] = []
        if slo:
            _, draws = goodputs.capacity(
                summary.points, runs, slo, level, resamples=resamples, seed=f"{seed}:{tag}"
            )
        sides.append((summary, draws))
    (b, draws_b), (a, draws_a) = sides
    names_b = [p.shape for p in b.points]
    names_a = [p.shape for p in a.points]
    matched = [n for n in names_b if n in names_a]
    doc = SweepComparison(
        slo=dict(slo),
        slo_level=level,
        before=b,
        after=a,
        matched=matched,
        only_before=[n for n in names_b if n not in names_a],
        only_after=[n for n in names_a if n not in names_b],
        notes=notes,
    )
    if not slo or b.capacity is None or a.capacity is None:
        return doc, None
    cb, ca = b.capacity, a.capacity
    row = Comparison(
        shape=before.shape,
        metric=CAPACITY,
        better="higher",
        before=cb.rate,
        after=ca.rate,
        change_pct=None,
        ci_low_pct=None,
        ci_high_pct=None,
        verdict=NOT_COMPARABLE,
        noise_floor_pct=floor,
    )
    if cb.bound != goodputs.CROSSING or ca.bound != goodputs.CROSSING:
        found = []
        for c, tag in ((cb, "before"), (ca, "after")):
            if c.bound != goodputs.CROSSING:
                notes.append(f"capacity {tag}: {c.reason}: no change can be put on it")
                found.append(f"{tag}: {c.reason}")
        return doc, msgspec.structs.replace(row, reason="; ".join(found))
    assert cb.rate
    assert ca.rate is not None
    change = (ca.rate / cb.rate - 1.0) * 100.0
    ratios = sorted(
        (va / vb - 1.0) * 100.0 for vb, va in zip(draws_b, draws_a, strict=True) if vb > 0
    )
    needed = max(10, resamples // 2)
    if len(ratios) < needed:
        reason = (
            f"{len(ratios):,} of {resamples:,} resamples usable, {needed:,} needed (a "
            "resample whose before capacity is 0 has no ratio)"
        )
        return doc, msgspec.structs.replace(row, change_pct=change, reason=reason)
    alpha = (1.0 - confidence) / 2.0 * 100.0
    low, high = percentile(ratios, alpha), percentile(ratios, 100.0 - alpha)
    fewest = min(len(runs_b), len(runs_a))
    if fewest > 1:
        low, high = widen_ratio_interval(change, low, high, math.sqrt(fewest / (fewest - 1)))
    verdict = _verdict(False, change, low, high, threshold, abs(ca.rate - cb.rate))
    if verdict in (BETTER, WORSE) and floor is not None and fold_pct(change) < floor:
        verdict = WITHIN_NOISE
    return doc, msgspec.structs.replace(
        row, change_pct=change, ci_low_pct=low, ci_high_pct=high, verdict=verdict
    )


def _slo_words(slo: dict[str, float], level: float) -> str:
    limits = ", ".join(f"{k} <= {v:g}" for k, v in slo.items()) or "none"
    return f"{limits} for {level:.0%} of requests"
