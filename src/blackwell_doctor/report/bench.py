"""The ``bench`` and ``bench --compare`` documents (JSON schemas shipped in ``schemas/``)."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from blackwell_doctor.facts.document import ToolInfo
from blackwell_doctor.report.bench_env import Environment, EnvironmentComparison

# 2: the optional ``soak`` section (``bench --soak``). 3: ``repeats`` (the other runs of
# ``bench --repeat N``) and ``calibration`` (their noise floor). Versions 1 and 2 are still
# read (one run, no floor). 4: ``environment`` (what the run pinned of the server and its
# host); older documents read with none. 5: ``sweep`` (``bench --rate``: each load's point,
# the knee, the capacity at SLO); absent from a run at fixed shapes. 6: ``trace`` (bench
# --trace: the replayed trace and each request's send lateness), each shape's ``turns``
# (bench --multi-turn) and each request's ``turn``, and the server's prefix-cache counters
# in ``server``.
BENCH_SCHEMA_VERSION = 6
READABLE_BENCH_SCHEMA_VERSIONS = (1, 2, 3, 4, 5, 6)
# Where a token count comes from: the server's usage, or this client's estimate.
USAGE = "usage"
ESTIMATED = "estimated"
# 2: ``runs``, ``between_run_noise``, ``noise_floor_source``, each row's ``noise_floor_pct``
# and the verdict "within the noise floor". Since, without a new version (each absent where
# it does not apply, so a compare of runs without them is byte for byte what it was):
# ``environment``, and ``sweep`` (two rate runs' curves; their capacity at SLO is a row of
# ``comparisons``), a "not comparable" or "too few samples" row's or equivalence's
# ``reason`` and the scorecard's ``reasons`` (issue 40).
COMPARE_SCHEMA_VERSION = 2


class Stats(msgspec.Struct, frozen=True, kw_only=True):
    """mean and percentiles in milliseconds, as ``vllm bench serve`` computes them; all null
    when there is no sample (e.g. TPOT of one-token answers)."""

    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None


class ShapeMetrics(msgspec.Struct, frozen=True, kw_only=True):
    ttft_ms: Stats
    tpot_ms: Stats
    itl_ms: Stats
    e2e_ms: Stats
    # usage.completion_tokens summed over successful requests: answer + reasoning.
    output_tokens: int
    # Of those, tokens the server put in reasoning deltas (its own count when it gives
    # completion_tokens_details.reasoning_tokens, else estimated: see reasoning_source).
    reasoning_tokens: int
    answer_tokens: int
    output_tokens_per_s: float | None
    answer_tokens_per_s: float | None
    output_tokens_per_s_per_user: Stats
    requests_per_s: float | None
    # "usage": the server's usage.completion_tokens; "estimated": the server sent no usage
    # and the count is the number of token chunks (a finding).
    token_source: str
    # "usage", "estimated" (server /tokenize of the reasoning text, or chunks), or "none".
    reasoning_source: str
    prompt_tokens_mean: float | None
    server_generation_tokens: float | None


class Histogram(msgspec.Struct, frozen=True, kw_only=True):
    count: float
    mean_ms: float | None


class ServerSide(msgspec.Struct, frozen=True, kw_only=True):
    """The server's own /metrics over the measured requests (deltas; peaks while running)."""

    generation_tokens: float | None = None
    prompt_tokens: float | None = None
    preemptions: float | None = None
    ttft: Histogram | None = None
    itl: Histogram | None = None
    e2e: Histogram | None = None
    kv_cache_usage_peak_pct: float | None = None
    running_peak: float | None = None
    waiting_peak: float | None = None
    # The prefix cache over the requests, in prompt tokens: looked up (queries) and found
    # cached (hits), vLLM's vllm:prefix_cache_queries and vllm:prefix_cache_hits counters
    # (vllm/v1/metrics/loggers.py, 0.32.0), and hits / queries. Null where the server
    # exports no such counter, or (the rate) queried no token. Since schema_version 6.
    prefix_cache_queries: float | None = None
    prefix_cache_hits: float | None = None
    prefix_cache_hit_rate: float | None = None


class RequestSample(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One measured request: what --compare resamples. Times in milliseconds."""

    ok: bool
    error: str | None = None
    detail: str | None = None
    start_ms: float = 0.0  # since the shape's first measured request
    ttft_ms: float | None = None
    e2e_ms: float | None = None
    itl_ms: list[float] = msgspec.field(default_factory=list)
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    # Why the answer is degenerate (empty, or one unit repeated: rules/degenerate.py);
    # absent when it is not. Written since schema_version 3; older runs were not judged.
    degenerate: str | None = None
    # bench --multi-turn: the request's turn in its conversation (1, 2, ...); absent
    # otherwise. Since schema_version 6.
    turn: int | None = None


class EquivalenceOutput(msgspec.Struct, frozen=True, kw_only=True):
    """A greedy prompt's answer, kept so two runs can be compared for drift."""

    prompt_id: str
    ok: bool
    text: str = ""
    reasoning: str = ""
    output_tokens: int | None = None
    finish_reason: str | None = None
    error: str | None = None
    degenerate: str | None = None  # as RequestSample's
    # The log-probabilities of each answer token and of the top-k alternatives at its step
    # (OpenAI's logprobs / top_logprobs), in order, reasoning tokens included; null when the
    # server gave none (not asked, or not supported). Written since schema_version 3.
    logprobs: list[TokenLogprob] | None = None


class TopLogprob(msgspec.Struct, frozen=True, kw_only=True):
    token: str
    logprob: float


class TokenLogprob(msgspec.Struct, frozen=True, kw_only=True):
    """One generated token: its text, its log-probability (null when the server did not
    give it) and the top-k candidates of its step."""

    token: str
    logprob: float | None = None
    top: list[TopLogprob] = msgspec.field(default_factory=list)


class ShapeResult(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    description: str
    concurrency: int
    input_tokens: int  # the size asked for, after the server's cap
    input_tokens_requested: int
    input_size_source: str  # "tokenize" (the server's /tokenize) or "estimated"
    output_tokens_max: int
    requests: int  # measured requests sent (finished or failed)
    completed: int
    errors: dict[str, int]
    duration_s: float
    complete: bool  # false when interrupted or stopped by --duration before all requests
    metrics: ShapeMetrics
    server: ServerSide | None
    equivalence: list[EquivalenceOutput]
    # Read from a run file: a list. Measured in this process: a report.sample_table
    # SampleTable (the same samples, held as columns), written a batch at a time.
    samples: Sequence[RequestSample]
    notes: list[str]
    # Enough samples by design (checks/bench_samples.toml): the requests this shape was to
    # send (its own count, --requests, or what its quantiles need), the percentiles it is
    # measured for, and the requests the highest of them needs. Null in runs before them.
    requests_planned: int | None = None
    quantiles: list[float] | None = None
    requests_needed: int | None = None
    # bench --multi-turn N: each user holds conversations of N turns, each turn's prompt
    # carrying the earlier turns and the server's answers to them; null otherwise.
    turns: int | None = None


class ServerInfo(msgspec.Struct, frozen=True, kw_only=True):
    url: str  # without credentials
    model: str | None
    models: list[str]  # ids /v1/models listed
    max_model_len: int | None
    metrics_endpoint: bool
    tokenize_endpoint: bool
    error: str | None = None  # why the server could not be asked (e.g. unreachable)


class SoakInterval(msgspec.Struct, frozen=True, kw_only=True):
    """One interval of a soak. Requests count in the interval in which they finished."""

    index: int
    start_s: float  # since the soak's first request
    end_s: float
    partial: bool  # cut short (the soak's end or Ctrl-C): shown, never fitted
    requests: int  # finished in the interval, ok or failed
    completed: int
    errors: dict[str, int]
    output_tokens: int
    output_tokens_per_s: float | None
    ttft_ms: Stats
    itl_ms: Stats
    # The server's vllm:kv_cache_usage_perc x 100, mean and peak of the samples taken in
    # the interval; null without /metrics or without that gauge.
    kv_cache_usage_pct: float | None
    kv_cache_usage_peak_pct: float | None
    kv_samples: int
    preemptions: float | None  # the server's counter over the interval
    # NVML used memory of each GPU (by NVML index) at the interval's end; null when the
    # sample failed or NVML is unavailable.
    gpu_memory_used_mib: list[float | None] | None


class Trend(msgspec.Struct, frozen=True, kw_only=True):
    """A per-interval series fitted against time (Theil-Sen, Sen's interval)."""

    quantity: str  # "kv_cache_usage_pct", "gpu<N>_memory_used_mib", "itl_p50_ms"
    unit: str  # "pp" (percentage points), "MiB", "ms"
    intervals: int  # fitted (full intervals after the warm-up ones)
    first: float | None  # observed, first fitted interval
    last: float | None  # observed, last fitted interval
    slope_per_hour: float | None
    ci_low_per_hour: float | None
    ci_high_per_hour: float | None
    growth: float | None  # the fitted line's rise over the fitted span, in unit
    growth_low: float | None  # the rise at the slope interval's ends: first interval to
    growth_high: float | None  # last, with its interval estimate
    growth_pct: float | None  # the rise against the line's start (ITL)
    # "growing" (a finding), "no trend", "too few intervals", "unavailable"
    verdict: str
    reason: str  # one sentence with the numbers and the thresholds


class SoakResult(msgspec.Struct, frozen=True, kw_only=True):
    shape: str
    description: str
    concurrency: int
    input_tokens: int
    input_size_source: str
    output_tokens_max: int
    duration_s_requested: float
    duration_s: float  # first request to the soak's end (or Ctrl-C); the drain excluded
    interval_s: float
    complete: bool
    requests: int  # every finished request, the drain's included
    completed: int
    errors: dict[str, int]
    output_tokens: int
    output_tokens_per_s: float | None  # completed output tokens / duration_s (drain excluded)
    drain_requests: int  # in flight at the end, finished after it: totals only
    kv_cache: str  # "sampled" or "unavailable: <reason>"
    gpu_memory: str  # "sampled" or "unavailable: <reason>"
    gpu_total_mib: list[float | None]
    confidence: float  # of all the trend intervals together (family-wise)
    per_trend_confidence: float  # of each (Bonferroni)
    intervals: list[SoakInterval]
    trends: list[Trend]
    findings: list[str]
    notes: list[str]


# A sweep point's load (SweepPoint.load).
SYNCHRONOUS = "synchronous"  # one request at a time (closed loop): the latency floor
THROUGHPUT = "throughput"  # every request at once (closed loop): the most the server serves
RATE = "rate"  # open loop: requests sent at offered_rate by the arrival process


class SweepPoint(msgspec.Struct, frozen=True, kw_only=True):
    """One load of ``bench --rate``: its requests are the run's shape named ``shape`` (with
    their samples); here, what the load asked for and what the server made of it."""

    shape: str  # the ShapeResult of this point, e.g. "short@2.5/s"
    load: str  # "synchronous", "throughput" or "rate"
    # Requests per second the schedule sent at (rate loads); null for the closed loops.
    offered_rate: float | None
    # Successful requests per second over the point's duration, first request sent to the
    # last one finished: vLLM's request_throughput (its metrics' requests_per_s).
    achieved_rate: float | None
    requests: int  # sent (finished or failed)
    completed: int
    errors: dict[str, int]
    complete: bool  # false when interrupted or stopped by --duration
    # Requests per second that met every SLO (over the same duration): vLLM's
    # request_goodput. Null without --slo.
    goodput: float | None
    # Of the requests sent, the share that met every SLO (a failed one meets none): aiperf's
    # good_request_fraction. Null without --slo.
    goodput_share: float | None
    # goodput_share at or above the sweep's slo_level; null without --slo.
    meets_slo: bool | None
    peak_in_flight: int | None  # the most requests of this point in flight at once
    # Rate loads: how late each request left against its schedule (this client's own lag).
    send_lateness_ms: Stats | None
    metrics: ShapeMetrics


class Knee(msgspec.Struct, frozen=True, kw_only=True):
    """Where latency leaves its floor (checks/bench_sweep.toml says why these figures)."""

    metric: str  # "e2e_ms.p50"
    rise_pct: float  # left the floor: above floor_ms x (1 + rise_pct / 100)
    floor_ms: float | None  # the synchronous point's figure (one request at a time)
    threshold_ms: float | None
    # The offered rate at which the metric crosses the threshold, interpolated linearly
    # between ``within`` and ``beyond``; null when not found.
    rate: float | None
    within: float | None  # the highest rate measured within the rise (or the one-user rate)
    beyond: float | None  # the lowest rate measured beyond it
    verdict: str  # "found", "not reached" (every rate within), "not measured" (no floor)
    reason: str


class Capacity(msgspec.Struct, frozen=True, kw_only=True):
    """The highest offered rate whose goodput share stays at or above ``level``."""

    level: float  # the share required, 0..1
    # "crossing": interpolated between the last rate that met the level and the first that
    # did not; "at least": every rate measured met it (the highest is a lower bound);
    # "below": the lowest rate measured already missed it; "not measured": no rate point.
    bound: str
    rate: float | None  # crossing: the interpolated rate; at least: the highest rate measured
    ci_low: float | None  # the bootstrap interval of a crossing (runs, then requests)
    ci_high: float | None
    confidence: float
    resamples: int
    runs: int  # the runs (bench --repeat) the interval resamples
    per_run: list[float | None]  # each run's own capacity (a crossing), in run order
    reason: str


class SweepResult(msgspec.Struct, frozen=True, kw_only=True):
    """``bench --rate``: one shape measured at several loads (the run's ``shapes`` hold each
    point's requests), the knee and the capacity at SLO."""

    shape: str  # the shape the loads were made of
    mode: str  # "sweep" (--rate sweep: found its own rates) or "rates" (--rate R,R,...)
    arrival: str  # "constant", "poisson" or "gamma"
    burstiness: float | None  # gamma's shape (vLLM's --burstiness); null otherwise
    # The SLOs every request is judged against, milliseconds by metric ("ttft_ms",
    # "tpot_ms", "e2e_ms"); empty without --slo.
    slo: dict[str, float]
    slo_level: float  # the goodput share capacity needs, 0..1
    points: list[SweepPoint]  # in the order measured
    knee: Knee
    capacity: Capacity | None  # null without --slo
    notes: list[str]


class RepeatRun(msgspec.Struct, frozen=True, kw_only=True):
    """Another run of the same configuration (``bench --repeat N``): run 1 is the
    document's own ``shapes``, runs 2..N are these."""

    index: int  # 2..N
    started_at: str
    complete: bool
    shapes: list[ShapeResult]


class NoiseFloor(msgspec.Struct, frozen=True, kw_only=True):
    """How much one statistic of one shape differed between runs of one configuration."""

    shape: str
    metric: str
    values: list[float | None]  # the statistic of each run, in run order
    spread_pct: float | None  # the largest change between two of the runs, in percent
    cv_pct: float | None  # the runs' standard deviation over their mean, in percent
    # max(spread_pct, 2 * sqrt(2) * cv_pct): a change between two runs of one configuration
    # smaller than this is not told apart from the host's own variation.
    floor_pct: float | None


class Calibration(msgspec.Struct, frozen=True, kw_only=True):
    """The noise floor of this server and host, from ``bench --repeat N`` (A/A runs)."""

    runs: int
    interleaved_with: str | None  # the other server's URL when A and B took turns
    method: str  # one sentence: how floor_pct is computed
    floors: list[NoiseFloor]


# How many order statistics of the send lateness a replay keeps (TraceResult.lateness_cdf_ms).
LATENESS_POINTS = 201


class TraceResult(msgspec.Struct, frozen=True, kw_only=True):
    """A replayed request trace: what was read of it, and how closely each request left at
    its time. The requests' own measurements are the run's shape ``trace``."""

    file: str  # the trace file, as given
    format: str  # "mooncake" (JSON Lines) or "burstgpt" (CSV)
    # Tokens each Mooncake hash id stands for (512 in Mooncake's releases); null: BurstGPT,
    # whose requests share no blocks.
    block_tokens: int | None
    # Each request is sent at its timestamp (since the first request) x time_scale.
    time_scale: float
    rows: int  # requests in the file
    skipped: int  # rows asking no answer (BurstGPT: Response tokens 0, a failed request)
    not_replayed: int  # rows after --requests N or past --duration S
    requests: int  # requests to replay (the file's, less skipped and not_replayed)
    sent: int  # of those, sent (fewer when interrupted); measured ones are the shape's
    span_s: float  # the schedule's length: the last request's due time after the first
    # Send lateness: the moment a request was sent (its POST, where its TTFT starts) minus
    # its due time, in milliseconds.
    lateness_ms: Stats
    lateness_max_ms: float | None
    late_over_1ms: int  # requests sent more than 1 ms after their due time
    # The most requests awaiting their answer at once (with several client processes, the
    # sum of each one's most).
    peak_in_flight: int
    # Prompt tokens asked of the server (after capping), and of them those in blocks an
    # earlier request already carried from the prompt's start on: what a prefix cache that
    # kept every block could serve (the trace's own reuse; the server's measured hit rate
    # is the shape's server.prefix_cache_hit_rate).
    prompt_tokens: int
    reusable_prompt_tokens: int
    # Requests whose prompt was cut to fit the server's max_model_len with their answer.
    capped: int
    # "tokenize": prompts sized in the server's tokens (one token per word, checked on a
    # whole block); "estimated": the server has no usable /tokenize.
    size_source: str
    # Processes that sent the requests (each its share, round robin, its own event loop).
    client_processes: int = 1
    # The lateness distribution (ms) at evenly spaced ranks, lowest to highest (at most
    # LATENESS_POINTS order statistics of every sent request's lateness: the first is the
    # least late, the last the latest): the HTML report's send-lateness CDF. Empty in
    # documents written before it (schema_version 6 all the same: it only adds a figure).
    lateness_cdf_ms: list[float] = msgspec.field(default_factory=list)


class BenchRun(msgspec.Struct, frozen=True, kw_only=True):
    schema_version: int
    tool: ToolInfo
    started_at: str
    seed: int
    server: ServerInfo
    complete: bool
    interrupted: bool
    findings: list[str]
    shapes: list[ShapeResult]
    exit_code: int
    soak: SoakResult | None = None  # schema_version 2
    repeats: list[RepeatRun] = msgspec.field(default_factory=list)  # schema_version 3
    calibration: Calibration | None = None  # schema_version 3
    environment: Environment | None = None  # schema_version 4
    # bench --rate (schema_version 5); absent from a run at fixed shapes.
    sweep: SweepResult | msgspec.UnsetType = msgspec.UNSET
    # bench --trace (schema_version 6); absent from a run that replays no trace.
    trace: TraceResult | msgspec.UnsetType = msgspec.UNSET


class Comparison(msgspec.Struct, frozen=True, kw_only=True):
    shape: str
    metric: str  # e.g. "ttft_ms.p50", "output_tokens_per_s"
    better: str  # "lower" or "higher"
    before: float | None
    after: float | None
    change_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    # "better", "worse", "no significant change", "within the noise floor" (significant but
    # smaller than noise_floor_pct), "too few samples", "not comparable"
    verdict: str
    # Below this change no verdict is "better" or "worse": the floor measured by
    # ``bench --repeat`` (the larger of the two sides'), or, with one run on a side and no
    # measurement, the default of checks/bench_noise.toml. None: no floor applies.
    noise_floor_pct: float | None = None
    # Why the verdict is "not comparable" or "too few samples", with the figures found
    # (e.g. "none of after's 60 requests completed", "100 requests on before, 1,000 needed
    # for a p99 (10 beyond it, ...)"); absent from every other row (issue 40), so a compare
    # without such a row is byte for byte what it was.
    reason: str | msgspec.UnsetType = msgspec.UNSET


def group_reasons(rows: Sequence[Comparison]) -> dict[tuple[str, str, str], list[str]]:
    """(shape, verdict, reason) -> the metrics of the rows with that reason, in order: one
    line for the eight rows of a shape whose runs hold no per-request samples."""
    out: dict[tuple[str, str, str], list[str]] = {}
    for r in rows:
        if not isinstance(r.reason, msgspec.UnsetType):
            out.setdefault((r.shape, r.verdict, r.reason), []).append(r.metric)
    return out


class EquivalenceComparison(msgspec.Struct, frozen=True, kw_only=True):
    shape: str
    prompts: int
    exact_match_rate: float | None
    # prompt id -> first differing character position (answer, then reasoning text).
    first_divergence: dict[str, int]
    verdict: str  # "equivalent", "drift", "not comparable"
    # The greedy prompts' log-probabilities compared (rules/drift.py), where both runs have
    # them; and their verdict: "identical", "within tolerance", "beyond tolerance", or
    # "not measured" (checks/drift.toml).
    logprobs: list[LogprobDrift] = msgspec.field(default_factory=list)
    numerics: str = "not measured"
    # Why the verdict is "not comparable" (e.g. "no greedy prompt answered on both sides:
    # before 0 of 4, after 4 of 4"); absent otherwise (issue 40).
    reason: str | msgspec.UnsetType = msgspec.UNSET


class LogprobDrift(msgspec.Struct, frozen=True, kw_only=True):
    """The numerical drift of one greedy prompt's answer between two runs."""

    prompt_id: str
    tokens: int  # positions compared: the shorter answer's tokens
    # The first position whose token differs (0-based), null when none does; the shared
    # prefix is the tokens before it, where both runs said the same.
    first_divergent_token: int | None
    token_before: str | None  # the tokens at that position
    token_after: str | None
    # |logprob before - logprob after| of the chosen token over the shared prefix.
    mean_abs_logprob_diff: float | None
    max_abs_logprob_diff: float | None
    # KL(before || after) estimated on the top-k of each step whose context is the same
    # (the shared prefix and the divergent step), in nats (rules/drift.py says how).
    topk_kl_mean: float | None
    topk_kl_max: float | None
    verdict: str  # "identical", "within tolerance", "beyond tolerance"
    why: str


class Scorecard(msgspec.Struct, frozen=True, kw_only=True):
    latency: str
    throughput: str
    equivalence: str
    errors: str
    overall: str
    # The greedy prompts' log-probabilities: the worst shape's EquivalenceComparison.numerics.
    numerics: str = "not measured"
    # Why a roll-up is "not comparable" ("latency" -> "none of its 7 rows could be judged:
    # 2 too few samples, 5 not comparable"), by the field's name; absent when none is
    # (issue 40), so a compare without one is byte for byte what it was.
    reasons: dict[str, str] | msgspec.UnsetType = msgspec.UNSET


class Subsample(msgspec.Struct, frozen=True, kw_only=True):
    """A run whose intervals were drawn from a seeded random subsample of its successful
    requests of a shape (the bootstrap's cost bound; the point values use them all)."""

    shape: str
    run: str  # "before" or "after"
    requests: int  # resampled for TTFT, TPOT, E2E and throughput
    requests_of: int
    itl_requests: int  # whose ITL gaps are pooled and resampled
    itl_gaps: int
    itl_gaps_of: int


class CompareDocument(msgspec.Struct, frozen=True, kw_only=True):
    schema_version: int
    tool: ToolInfo
    before: str
    after: str
    confidence: float  # of all the intervals together (family-wise)
    per_comparison_confidence: float  # of each interval (Bonferroni)
    resamples: int
    seed: int
    # The bootstrap's bound per run and shape, and the runs it subsampled (seeded by seed).
    max_bootstrap_requests: int = 0
    max_bootstrap_gaps: int = 0
    subsamples: list[Subsample] = msgspec.field(default_factory=list)
    threshold_pct: float
    fail_on_regression_pct: float | None
    # Runs of each side ("before"/"after" -> count): more than one, and the intervals
    # resample runs, then requests within each (a hierarchical bootstrap).
    runs: dict[str, int] = msgspec.field(default_factory=dict)
    # One sentence: whether the intervals hold the variation between runs.
    between_run_noise: str = ""
    # "measured" (a side's calibration), "default" (checks/bench_noise.toml), or "none".
    noise_floor_source: str = "none"
    comparisons: list[Comparison]
    equivalence: list[EquivalenceComparison]
    errors: dict[str, dict[str, int]]  # "before"/"after" -> error kind -> count
    scorecard: Scorecard
    regressions: list[str]
    exit_code: int
    # What differs between the two runs' pinned environments (issue 21): absent from the
    # document when neither run pinned one (runs before bench schema 4), so a compare of
    # such runs is byte for byte what it was.
    environment: EnvironmentComparison | msgspec.UnsetType = msgspec.UNSET
    # Two rate runs (bench --rate): each side's curve, judged against the before run's SLOs;
    # absent unless both runs have a sweep.
    sweep: SweepComparison | msgspec.UnsetType = msgspec.UNSET


class SweepComparison(msgspec.Struct, frozen=True, kw_only=True):
    """Two sweeps side by side: each run's points (their metric rows, with intervals, are
    in ``comparisons`` under the point's shape name) and capacity, both judged against the
    same SLOs; the capacity's change is the row ``capacity_at_slo`` of ``comparisons``."""

    slo: dict[str, float]
    slo_level: float
    before: SweepResult
    after: SweepResult
    matched: list[str]  # points measured at the same load on both sides, by shape name
    only_before: list[str]
    only_after: list[str]
    notes: list[str]


class RunFileError(Exception):
    """A run file --compare cannot read (one line)."""


def decode_run(data: bytes, *, source: str) -> BenchRun:
    try:
        head = msgspec.json.decode(data, type=dict[str, object])
    except msgspec.DecodeError as exc:
        raise RunFileError(f"{source} is not JSON: {exc}") from None
    except RecursionError:  # msgspec: "maximum recursion depth exceeded while deserializing"
        raise RunFileError(f"{source}: arrays or objects nested too deeply") from None
    version = head.get("schema_version")
    if version not in READABLE_BENCH_SCHEMA_VERSIONS or isinstance(version, bool):
        readable = " or ".join(str(v) for v in READABLE_BENCH_SCHEMA_VERSIONS)
        raise RunFileError(
            f"{source}: not a bench run of schema_version {readable} (schema_version: {version!r})"
        )
    try:
        return msgspec.json.decode(data, type=BenchRun)
    except msgspec.ValidationError as exc:
        raise RunFileError(f"{source}: not a valid bench run: {exc}") from None
    except RecursionError:
        raise RunFileError(f"{source}: arrays or objects nested too deeply") from None
