"""The server's own counters from its Prometheus ``/metrics`` text, parsed with
``prometheus_client.parser`` (the reference implementation of the text format), never by
hand. Names are vLLM's (``vllm:*``, v0.8+ V1 engine) with SGLang's (``sglang:*``) as the
alternative; a series a server does not export stays null."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec
from prometheus_client.parser import text_string_to_metric_families

from blackwell_doctor.report.bench import Histogram, ServerSide

# family name (as prometheus_client reports it: counters without "_total") by quantity.
_COUNTERS = {
    "generation_tokens": ("vllm:generation_tokens", "sglang:generation_tokens"),
    "prompt_tokens": ("vllm:prompt_tokens", "sglang:prompt_tokens"),
    "preemptions": ("vllm:num_preemptions",),
    # Prompt tokens looked up in the prefix cache, and found there (vLLM V1's scheduler
    # stats: vllm/v1/metrics/loggers.py, 0.32.0, counters vllm:prefix_cache_queries and
    # vllm:prefix_cache_hits, "in terms of number of queried / cached tokens").
    "prefix_cache_queries": ("vllm:prefix_cache_queries",),
    "prefix_cache_hits": ("vllm:prefix_cache_hits",),
}
_HISTOGRAMS = {
    "ttft": ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    # vLLM renamed time_per_output_token_seconds to inter_token_latency_seconds (v0.11).
    "itl": (
        "vllm:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds",
        "sglang:inter_token_latency_seconds",
    ),
    "e2e": ("vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds"),
}
_GAUGES = {
    # 0..1 in vLLM (gpu_cache_usage_perc before v0.10).
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs"),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
}


class Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    """Sums over the series of one model (every engine) at one instant."""

    counters: dict[str, float]
    histograms: dict[str, tuple[float, float]]  # quantity -> (sum, count)
    gauges: dict[str, float]


class MetricsParseError(Exception):
    pass


# The families read, and the suffixes of their samples' names (prometheus_client's text
# format: a counter's _total and _created, a histogram's _sum, _count, _bucket, _created).
_FAMILIES = frozenset(
    n for table in (_COUNTERS, _HISTOGRAMS, _GAUGES) for v in table.values() for n in v
)
_SUFFIXES = ("_total", "_sum", "_count")
_UNREAD = ("_bucket", "_created")


def _read_here(name: str) -> bool:
    """Whether a sample or metadata line of metric ``name`` is one :func:`parse` reads."""
    if name.endswith(_UNREAD):
        return False
    if name in _FAMILIES:
        return True
    return any(name.endswith(x) and name[: -len(x)] in _FAMILIES for x in _SUFFIXES)


def only_read_lines(text: str) -> str:
    """The lines of ``text`` that :func:`parse` reads (those of the quantities above, less
    histogram buckets): vLLM's /metrics is ~55 kB and prometheus_client parses it in 40 ms
    on a busy 2-core machine, time a paced sender's event loop cannot give while requests
    are due (bench --trace polls it every second); its ~40 lines of interest parse in
    well under a millisecond."""
    kept = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE") and _read_here(parts[2]):
                kept.append(line)
        elif _read_here(line.split("{", 1)[0].split(" ", 1)[0]):
            kept.append(line)
    return "\n".join(kept) + "\n"


def parse(text: str, *, model: str | None, quick: bool = False) -> Snapshot:
    """Sum the samples of the quantities above, keeping only ``model``'s series when the
    samples carry a model_name label. Raises MetricsParseError on text that is not the
    Prometheus exposition format. ``quick``: only the lines read are parsed
    (:func:`only_read_lines`), for a poll of a server already known to answer Prometheus
    text: the same snapshot, without the check of the rest of the text."""
    if quick:
        text = only_read_lines(text)
    counters: dict[str, float] = {}
    hist: dict[str, list[float]] = {}
    gauges: dict[str, float] = {}
    wanted = {name: q for q, names in _COUNTERS.items() for name in names}
    wanted_h = {name: q for q, names in _HISTOGRAMS.items() for name in names}
    wanted_g = {name: q for q, names in _GAUGES.items() for name in names}
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError) as exc:
        raise MetricsParseError(f"not Prometheus text: {exc}") from None

    def mine(labels: dict[str, str]) -> bool:
        name = labels.get("model_name")
        return model is None or name is None or name == model

    for family in families:
        if family.name in wanted:
            q = wanted[family.name]
            if q in counters:
                continue  # the first name listed wins
            values = [
                s.value
                for s in family.samples
                if s.name.endswith("_total") or s.name == family.name
                if mine(s.labels)
            ]
            counters[q] = sum(values)
        elif family.name in wanted_h:
            q = wanted_h[family.name]
            if q in hist:
                continue
            total = [0.0, 0.0]
            for s in family.samples:
                if not mine(s.labels):
                    continue
                if s.name.endswith("_sum"):
                    total[0] += s.value
                elif s.name.endswith("_count"):
                    total[1] += s.value
            hist[q] = total
        elif family.name in wanted_g:
            q = wanted_g[family.name]
            if q in gauges:
                continue
            gauges[q] = sum(s.value for s in family.samples if mine(s.labels))
    return Snapshot(
        counters=counters,
        histograms={q: (v[0], v[1]) for q, v in hist.items()},
        gauges=gauges,
    )


def delta(before: Snapshot, after: Snapshot, peaks: Iterable[Snapshot]) -> ServerSide:
    """What the server counted between ``before`` and ``after``; gauge peaks over ``peaks``."""

    def counter(q: str) -> float | None:
        if q not in before.counters or q not in after.counters:
            return None
        return after.counters[q] - before.counters[q]

    def histogram(q: str) -> Histogram | None:
        if q not in before.histograms or q not in after.histograms:
            return None
        s = after.histograms[q][0] - before.histograms[q][0]
        n = after.histograms[q][1] - before.histograms[q][1]
        return Histogram(count=n, mean_ms=s / n * 1000.0 if n > 0 else None)

    seen = [before, after, *peaks]

    def peak(q: str, scale: float = 1.0) -> float | None:
        values = [s.gauges[q] for s in seen if q in s.gauges]
        return max(values) * scale if values else None

    queries, hits = counter("prefix_cache_queries"), counter("prefix_cache_hits")
    return ServerSide(
        prefix_cache_queries=queries,
        prefix_cache_hits=hits,
        prefix_cache_hit_rate=hits / queries if queries and hits is not None else None,
        generation_tokens=counter("generation_tokens"),
        prompt_tokens=counter("prompt_tokens"),
        preemptions=counter("preemptions"),
        ttft=histogram("ttft"),
        itl=histogram("itl"),
        e2e=histogram("e2e"),
        kv_cache_usage_peak_pct=peak("kv_cache_usage", 100.0),
        running_peak=peak("running"),
        waiting_peak=peak("waiting"),
    )
