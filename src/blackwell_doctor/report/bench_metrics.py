"""Per-shape metrics with ``vllm bench serve``'s definitions (vllm/benchmarks/serve.py,
``calculate_metrics``, vLLM 0.32.0):

- over *successful* requests only: TTFT and E2E per request; ITL pooled over every token
  chunk of every request; TPOT = (latency - TTFT) / (output_tokens - 1), only for requests
  with more than one output token;
- output tokens/s = sum of output tokens / the shape's wall-clock duration (first request
  sent to last one finished); requests/s = successful requests / that duration;
- mean and p50/p90/p95/p99 as numpy's mean and ``percentile`` (linear), in milliseconds.

Output tokens are the server's ``usage.completion_tokens``. When a request carries none,
vLLM falls back to re-tokenizing the text; this tool counts its token chunks instead and
labels the shape's count ``estimated`` (the server sending no usage is a finding).

Added here, not in vLLM: reasoning tokens apart from answer tokens, answer tokens/s, and
per-user output tokens/s (each request's output tokens / its E2E latency).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterator, Sequence
from itertools import repeat

from blackwell_doctor.report.bench import ESTIMATED, USAGE, RequestSample, ShapeMetrics, Stats
from blackwell_doctor.report.indexed import Indexed
from blackwell_doctor.report.sample_table import SampleTable
from blackwell_doctor.report.stats import PERCENTILES, ascending, mean, percentile


def stats_ms(values_s: Sequence[float]) -> Stats:
    """Seconds in, milliseconds out; all null for no samples."""
    if not values_s:
        return Stats()
    ordered = ascending(values_s)
    p = {q: percentile(ordered, q) * 1000.0 for q in PERCENTILES}
    return Stats(mean=mean(values_s) * 1000.0, p50=p[50], p90=p[90], p95=p[95], p99=p[99])


def _plain_stats(values: Sequence[float]) -> Stats:
    if not values:
        return Stats()
    ordered = ascending(values)
    p = {q: percentile(ordered, q) for q in PERCENTILES}
    return Stats(mean=mean(values), p50=p[50], p90=p[90], p95=p[95], p99=p[99])


def output_tokens_of(sample: RequestSample) -> int:
    """usage.completion_tokens, else the number of token chunks (1 + ITL intervals)."""
    if sample.output_tokens is not None:
        return sample.output_tokens
    return len(sample.itl_ms) + 1


def tpot_s(sample: RequestSample) -> float | None:
    """vLLM's TPOT of one request in seconds; None when it has at most one token."""
    if not sample.ok or sample.e2e_ms is None or sample.ttft_ms is None:
        return None
    n = output_tokens_of(sample)
    if n <= 1:
        return None
    return (sample.e2e_ms - sample.ttft_ms) / 1000.0 / (n - 1)


def shape_metrics(
    samples: Sequence[RequestSample],
    *,
    duration_s: float,
    reasoning_estimates: Sequence[int | None],
    server_generation_tokens: float | None,
) -> ShapeMetrics:
    """The metrics of one shape's measured requests.

    ``reasoning_estimates`` (one per sample) are client-side reasoning token counts used
    when the server reports none (None: no reasoning text). A :class:`SampleTable` is read
    from its columns (:func:`_table_metrics`): the same figures, without an object per
    request or per token gap.
    """
    if isinstance(samples, SampleTable):
        return _table_metrics(
            samples,
            duration_s=duration_s,
            reasoning_estimates=reasoning_estimates,
            server_generation_tokens=server_generation_tokens,
        )
    ok = [s for s in samples if s.ok]
    ttfts = [s.ttft_ms / 1000.0 for s in ok if s.ttft_ms is not None]
    e2es = [s.e2e_ms / 1000.0 for s in ok if s.e2e_ms is not None]
    itls = [v / 1000.0 for s in ok for v in s.itl_ms]
    tpots = [t for t in (tpot_s(s) for s in ok) if t is not None]
    output = sum(output_tokens_of(s) for s in ok)
    usage_everywhere = all(s.output_tokens is not None for s in ok)
    reasoning = 0
    sources: set[str] = set()
    for sample, estimate in zip(samples, reasoning_estimates, strict=True):
        if not sample.ok:
            continue
        if sample.reasoning_tokens is not None:
            reasoning += sample.reasoning_tokens
            sources.add(USAGE)
        elif estimate:
            reasoning += estimate
            sources.add(ESTIMATED)
    reasoning_source = ESTIMATED if ESTIMATED in sources else (USAGE if sources else "none")
    per_user = [output_tokens_of(s) / (s.e2e_ms / 1000.0) for s in ok if s.e2e_ms and s.e2e_ms > 0]
    prompts = [s.prompt_tokens for s in ok if s.prompt_tokens is not None]

    def rate(n: int) -> float | None:
        return n / duration_s if duration_s > 0 and ok else None

    return ShapeMetrics(
        ttft_ms=stats_ms(ttfts),
        tpot_ms=stats_ms(tpots),
        itl_ms=stats_ms(itls),
        e2e_ms=stats_ms(e2es),
        output_tokens=output,
        reasoning_tokens=reasoning,
        answer_tokens=output - reasoning,
        output_tokens_per_s=rate(output),
        answer_tokens_per_s=rate(output - reasoning),
        output_tokens_per_s_per_user=_plain_stats(per_user),
        requests_per_s=rate(len(ok)),
        token_source=USAGE if usage_everywhere else ESTIMATED,
        reasoning_source=reasoning_source,
        prompt_tokens_mean=mean([float(p) for p in prompts]) if prompts else None,
        server_generation_tokens=server_generation_tokens,
    )


def _table_metrics(
    table: SampleTable,
    *,
    duration_s: float,
    reasoning_estimates: Sequence[int | None],
    server_generation_tokens: float | None,
) -> ShapeMetrics:
    """:func:`shape_metrics` of a SampleTable, value for value: the same samples through the
    same arithmetic (tests/test_bench_memory.py checks it to the bit). One series at a time,
    8 bytes a value: the pooled token gaps are sorted from a copy of the table's own (in
    milliseconds; dividing by 1000 keeps their order, so each order statistic is divided
    after), the others from a column made and dropped in turn (in the table's file, past its
    first values: :meth:`SampleTable.floats`)."""
    if len(reasoning_estimates) != len(table):
        raise ValueError("one reasoning estimate per sample")
    ok = table.ints(row for row in table.rows() if table.ok[row])

    def tokens(row: int) -> int:
        counted = table.output_tokens[row]
        return counted if counted >= 0 else len(table.gaps_ms(row)) + 1

    def seconds(column: Sequence[float]) -> Sequence[float]:
        return table.floats(v / 1000.0 for row in ok if not math.isnan(v := column[row]))

    def tpots() -> Iterator[float]:
        for row in ok:
            ttft, e2e, n = table.ttft_ms[row], table.e2e_ms[row], tokens(row)
            if not (math.isnan(ttft) or math.isnan(e2e)) and n > 1:
                yield (e2e - ttft) / 1000.0 / (n - 1)

    def per_user() -> Iterator[float]:
        for row in ok:
            e2e = table.e2e_ms[row]
            if not math.isnan(e2e) and e2e > 0:
                yield tokens(row) / (e2e / 1000.0)

    output = sum(tokens(row) for row in ok)
    reasoning = 0
    sources: set[str] = set()
    for k, row in enumerate(table.rows()):
        if not table.ok[row]:
            continue
        if table.reasoning_tokens[row] >= 0:
            reasoning += table.reasoning_tokens[row]
            sources.add(USAGE)
        elif estimate := reasoning_estimates[k]:
            reasoning += estimate
            sources.add(ESTIMATED)
    reasoning_source = ESTIMATED if ESTIMATED in sources else (USAGE if sources else "none")
    prompts = table.floats(float(p) for row in ok if (p := table.prompt_tokens[row]) >= 0)

    def rate(n: int) -> float | None:
        return n / duration_s if duration_s > 0 and ok else None

    return ShapeMetrics(
        ttft_ms=stats_ms(seconds(table.ttft_ms)),
        tpot_ms=stats_ms(table.floats(tpots())),
        itl_ms=_gap_stats(table, ok),
        e2e_ms=stats_ms(seconds(table.e2e_ms)),
        output_tokens=output,
        reasoning_tokens=reasoning,
        answer_tokens=output - reasoning,
        output_tokens_per_s=rate(output),
        answer_tokens_per_s=rate(output - reasoning),
        output_tokens_per_s_per_user=_plain_stats(table.floats(per_user())),
        requests_per_s=rate(len(ok)),
        token_source=USAGE if all(table.output_tokens[row] >= 0 for row in ok) else ESTIMATED,
        reasoning_source=reasoning_source,
        prompt_tokens_mean=mean(prompts) if prompts else None,
        server_generation_tokens=server_generation_tokens,
    )


class _Thousandths(Indexed[float]):
    """``ordered`` (milliseconds) read in seconds, value by value."""

    def __init__(self, ordered: Sequence[float]) -> None:
        self.ordered = ordered

    def __len__(self) -> int:
        return len(self.ordered)

    def _at(self, index: int) -> float:
        return self.ordered[index] / 1000.0


def _gap_stats(table: SampleTable, ok: Sequence[int]) -> Stats:
    """stats_ms of the successful requests' token gaps pooled (each v / 1000.0 s), from the
    table's own gaps: all of them when no failed request has any (a failed request keeps
    none), else those of ``ok``."""
    failed_gaps = any(
        not table.ok[row] and table.gaps_end[row] > (table.gaps_end[row - 1] if row else 0)
        for row in range(len(table.ok))
    )
    gaps: Sequence[float]
    if failed_gaps:
        pooled = table.floats()
        for row in ok:
            pooled.extend(table.gaps_ms(row))
        gaps = pooled
    else:
        gaps = table.gaps
    if not gaps:
        return Stats()
    ordered = _Thousandths(ascending(gaps))
    p = {q: percentile(ordered, q) * 1000.0 for q in PERCENTILES}
    seconds = math.fsum(map(operator.truediv, gaps, repeat(1000.0))) / len(gaps)
    return Stats(mean=seconds * 1000.0, p50=p[50], p90=p[90], p95=p[95], p99=p[99])
