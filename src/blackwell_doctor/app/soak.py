"""``bench --soak DURATION``: one shape's load held steady for a long run, measured per
interval, with the server's KV-cache use and each GPU's used memory sampled beside it, and
a verdict on whether anything grows (:mod:`blackwell_doctor.rules.soak_trend`).

The load is closed-loop, as ``bench``'s shapes are: the shape's ``concurrency`` users each
send their next request as soon as the previous one finished, until the soak's end; then
no new request is sent and those in flight finish (the *drain*: counted in the totals, in
no interval, so that the last interval is not one of a thinning load). A request counts in
the interval in which it finished. Each interval keeps its figures only (percentiles,
counts, means), never its requests: an 8-hour soak holds a few hundred small records.

Samples: the server's ``/metrics`` about once a second (``vllm:kv_cache_usage_perc``,
parsed by :mod:`blackwell_doctor.collect.bench.server_metrics`; the interval keeps the mean and the
peak, and the preemption counter's rise); each GPU's used memory once per interval, at its
end (:mod:`blackwell_doctor.collect.bench.soak_gpu`). Nothing needs a GPU here: without NVML or
``/metrics`` the series is ``unavailable`` with the reason, and the rest is measured.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import msgspec

from blackwell_doctor.app import bench as runner
from blackwell_doctor.collect.bench import client, prompts, soak_gpu
from blackwell_doctor.collect.bench.server_metrics import Snapshot
from blackwell_doctor.report.bench import BenchRun, SoakInterval, SoakResult, Trend
from blackwell_doctor.report.bench_metrics import stats_ms
from blackwell_doctor.ruledata.shapes import Shape
from blackwell_doctor.rules import soak_trend as verdicts
from blackwell_doctor.rules.compare import MIN_LATENCY_CHANGE_MS
from blackwell_doctor.rules.soak_trend import Series, SoakRules

# /metrics is read about this often (the interval is split into equal steps near it).
POLL_S = 1.0
MIN_INTERVAL_S = 1.0
MAX_DURATION_S = 7 * 86400.0
# The GPU memory reader's deadline (a child process: interpreter start, nvmlInit, reads).
GPU_SAMPLE_TIMEOUT_S = 10.0
SAMPLED = "sampled"

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"(?:\s*\d+(?:\.\d+)?\s*[smhd])+\s*")
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")


class SoakError(Exception):
    """Unusable soak options (one line, for the CLI)."""


def parse_duration(text: str, *, option: str) -> float:
    """Seconds in a human duration: ``90`` (seconds), ``60s``, ``30m``, ``8h``, ``1h30m``,
    ``1.5d``."""
    s = text.strip().lower()
    if re.fullmatch(r"\d+(?:\.\d+)?", s):
        seconds = float(s)
    elif _DURATION.fullmatch(s):
        seconds = sum(float(n) * _UNITS[u] for n, u in _PART.findall(s))
    else:
        raise SoakError(f"{option} takes a duration like 60s, 30m, 8h or 1h30m, got {text!r}")
    if not math.isfinite(seconds) or seconds < MIN_INTERVAL_S:
        raise SoakError(f"{option} must be at least {MIN_INTERVAL_S:g} s, got {text!r}")
    if seconds > MAX_DURATION_S:
        raise SoakError(f"{option} must be at most {MAX_DURATION_S / 86400:g} days, got {text!r}")
    return seconds


def default_interval(duration_s: float) -> float:
    """About 30 intervals, each between 5 s and 60 s (never longer than the soak)."""
    return min(duration_s, min(60.0, max(5.0, duration_s / 30.0)))


def check_interval(duration_s: float, interval_s: float) -> None:
    if interval_s > duration_s:
        raise SoakError(
            f"--soak-interval ({interval_s:g} s) is longer than the soak ({duration_s:g} s)"
        )


@dataclass
class _Bucket:
    """An interval still open: raw figures, dropped when it closes."""

    index: int
    requests: int = 0
    completed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    output_tokens: int = 0
    ttft_s: list[float] = field(default_factory=list)
    itl_s: list[float] = field(default_factory=list)
    kv: list[float] = field(default_factory=list)


# What an interval's record counts as its bucket counted it, by the same name.
_COUNTED = ("requests", "completed", "errors", "output_tokens")


@dataclass
class SoakState:
    """What a soak has gathered so far: read to build the document whatever stops it."""

    shape: Shape
    duration_s: float
    interval_s: float
    size: runner.PromptSize | None = None
    t0: float = 0.0  # perf_counter of the first measured request; 0 before
    end: float = 0.0
    stopped: float = 0.0  # perf_counter at which the sampling ended (the end or Ctrl-C)
    intervals: list[SoakInterval] = field(default_factory=list)
    open: dict[int, _Bucket] = field(default_factory=dict)
    requests: int = 0
    completed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    output_tokens: int = 0  # completed within the soak (the drain excluded)
    drain_requests: int = 0
    kv_cache: str = "unavailable: not sampled"
    gpu_memory: str = "unavailable: not sampled"
    gpu_total_mib: list[float | None] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def record(self, outcome: client.Outcome, now: float) -> None:
        """A finished request: in the totals, and in its interval unless it is the drain."""
        tokens = 0
        self.requests += 1
        if outcome.ok:
            self.completed += 1
            tokens = (
                outcome.completion_tokens
                if outcome.completion_tokens is not None
                else len(outcome.itl_s) + 1
            )
        elif outcome.error:
            self.errors[outcome.error] = self.errors.get(outcome.error, 0) + 1
        if now >= self.end:
            self.drain_requests += 1
            return
        self.output_tokens += tokens
        bucket = self._bucket(now)
        bucket.requests += 1
        if outcome.ok:
            bucket.completed += 1
            bucket.output_tokens += tokens
            if outcome.ttft_s is not None:
                bucket.ttft_s.append(outcome.ttft_s)
            bucket.itl_s.extend(outcome.itl_s)
        elif outcome.error:
            bucket.errors[outcome.error] = bucket.errors.get(outcome.error, 0) + 1

    def _bucket(self, now: float) -> _Bucket:
        index = max(0, int((now - self.t0) // self.interval_s))
        if index not in self.open:
            self.open[index] = _Bucket(index=index)
        return self.open[index]

    def close(
        self,
        index: int,
        *,
        end: float,
        partial: bool,
        preemptions: float | None = None,
        gpu_used_mib: list[float | None] | None = None,
    ) -> SoakInterval:
        """Turn interval ``index`` (ending at perf_counter ``end``) into its record."""
        bucket = self.open.pop(index, None) or _Bucket(index=index)
        start_s = index * self.interval_s
        end_s = max(start_s, end - self.t0)
        seconds = end_s - start_s
        interval = SoakInterval(
            index=index,
            start_s=start_s,
            end_s=end_s,
            partial=partial,
            **{name: getattr(bucket, name) for name in _COUNTED},
            output_tokens_per_s=bucket.output_tokens / seconds if seconds > 0 else None,
            ttft_ms=stats_ms(bucket.ttft_s),
            itl_ms=stats_ms(bucket.itl_s),
            kv_cache_usage_pct=sum(bucket.kv) / len(bucket.kv) * 100.0 if bucket.kv else None,
            kv_cache_usage_peak_pct=max(bucket.kv) * 100.0 if bucket.kv else None,
            kv_samples=len(bucket.kv),
            preemptions=preemptions,
            gpu_memory_used_mib=gpu_used_mib,
        )
        self.intervals.append(interval)
        return interval


Message = Callable[[str], None]


def live_line(soak: SoakState) -> str:
    """The terminal's live line while a soak runs (redrawn a few times a second)."""
    if not soak.t0:
        return f"soak {soak.shape.name}: asking the server, warming up..."
    elapsed = min(time.perf_counter() - soak.t0, soak.duration_s)
    failed = sum(soak.errors.values())
    return (
        f"soak {soak.shape.name}: {elapsed:,.0f}/{soak.duration_s:,.0f} s, "
        f"{soak.requests} requests finished" + (f", {failed} failed" if failed else "")
    )


def interval_line(soak: SoakState, iv: SoakInterval) -> str:
    """One progress line per closed interval."""
    planned = math.ceil(soak.duration_s / soak.interval_s - 1e-9)

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    parts = [
        f"soak {soak.shape.name}: interval {iv.index + 1}/{planned} "
        f"({iv.start_s:.0f}-{iv.end_s:.0f} s): {iv.requests} requests",
    ]
    if iv.errors:
        parts.append(f"{sum(iv.errors.values())} failed")
    tps = "-" if iv.output_tokens_per_s is None else f"{iv.output_tokens_per_s:,.1f}"
    parts.append(f"{tps} tok/s")
    parts.append(f"ITL p50 {ms(iv.itl_ms.p50)} ms")
    if iv.kv_cache_usage_pct is not None:
        parts.append(f"KV {iv.kv_cache_usage_pct:.2f}%")
    if iv.gpu_memory_used_mib:
        used = ", ".join("-" if v is None else f"{v:,.0f}" for v in iv.gpu_memory_used_mib)
        parts.append(f"GPU MiB {used}")
    return ", ".join(parts)


async def run_soak(
    config: runner.BenchConfig,
    state: runner.RunState,
    soak: SoakState,
    message: Message,
    *,
    gpu_sampler: Callable[[], soak_gpu.Sample | str] | None = None,
) -> None:
    """Hold ``soak.shape``'s load for ``soak.duration_s`` seconds, filling ``soak``.

    ``gpu_sampler`` replaces the NVML reader (tests); by default each GPU's memory is read
    by :func:`blackwell_doctor.collect.bench.soak_gpu.sample_gpu_memory`.
    """
    shape = soak.shape
    sample_gpu = gpu_sampler or (lambda: soak_gpu.sample_gpu_memory(timeout_s=GPU_SAMPLE_TIMEOUT_S))
    async with runner.connect(config, state, width=shape.concurrency + 4) as srv:
        if srv is None:
            return
        server, model = runner.served(state)
        size = await runner.prompt_size(srv, config, server, shape)
        soak.size = size
        soak.notes.extend(size.notes)
        target = runner.chat_target(srv, model, config)

        def body(index: int, salt: str = "") -> bytes:
            return client.request_body(
                model=model,
                prompt=prompts.words(config.seed, shape.name + salt, index, size.n_words),
                max_tokens=shape.output_tokens,
                ignore_eos=shape.ignore_eos,
                extra=shape.extra_body,
            )

        async def send(data: bytes) -> client.Outcome:
            most = runner.usage_limit(shape.output_tokens, shape.extra_body)
            return await target.stream(srv.session, data, most)

        if shape.warmup:
            message(f"soak {shape.name}: warm-up ({shape.warmup} requests)")
            warm_width = min(shape.warmup, shape.concurrency)
            await runner.send_each(shape.warmup, warm_width, _warm(send, body))
        metrics = server.metrics_endpoint
        first = await srv.metrics(model) if metrics else None
        if first is None:
            soak.kv_cache = "unavailable: " + (
                "the server has no Prometheus /metrics" if not metrics else "/metrics failed"
            )
        elif "kv_cache_usage" not in first.gauges:
            soak.kv_cache = "unavailable: /metrics has no vllm:kv_cache_usage_perc"
        else:
            soak.kv_cache = SAMPLED
        planned = math.ceil(soak.duration_s / soak.interval_s - 1e-9)
        message(
            f"soak {shape.name}: {shape.concurrency} users for {soak.duration_s:g} s, "
            f"{planned} intervals of {soak.interval_s:g} s"
        )
        soak.t0 = time.perf_counter()
        soak.end = soak.t0 + soak.duration_s
        numbers = itertools.count()

        async def user() -> None:
            while time.perf_counter() < soak.end:
                outcome = await send(body(next(numbers)))
                soak.record(outcome, time.perf_counter())
                if outcome.error == client.UNREACHABLE:
                    await asyncio.sleep(1.0)  # a server that is gone is not hammered

        users = [asyncio.create_task(user()) for _ in range(shape.concurrency)]
        try:
            await _sample(srv, model, soak, first, sample_gpu, message)
            await asyncio.gather(*users)  # the drain: requests in flight at the end
        finally:
            for task in users:
                task.cancel()
            # Every user's end read here, a failure included (none dies unread).
            await asyncio.gather(*users, return_exceptions=True)


def _warm(
    send: Callable[[bytes], Awaitable[client.Outcome]], body: Callable[[int, str], bytes]
) -> Callable[[int], Awaitable[bool]]:
    async def one(index: int) -> bool:
        await send(body(index, "/warmup"))  # the body built as it is sent
        return True

    return one


async def _sample(
    srv: runner._Server,
    model: str,
    soak: SoakState,
    first: Snapshot | None,
    sample_gpu: Callable[[], soak_gpu.Sample | str],
    message: Message,
) -> None:
    """Poll /metrics about once a second and NVML at each interval's end, closing each
    interval there, until the soak's end."""
    steps = max(1, round(soak.interval_s / POLL_S))
    step_s = soak.interval_s / steps
    total_polls = math.ceil(soak.duration_s / step_s - 1e-9)
    last_counters = first
    gpu_on = True
    for poll in range(1, total_polls + 1):
        at_end = poll == total_polls
        when = soak.end if at_end else soak.t0 + poll * step_s
        await asyncio.sleep(max(0.0, when - time.perf_counter()))
        index = (poll - 1) // steps
        boundary = poll % steps == 0 or at_end
        snap = await srv.metrics(model) if soak.kv_cache == SAMPLED else None
        if snap is not None and "kv_cache_usage" in snap.gauges:
            bucket = soak.open.setdefault(index, _Bucket(index=index))
            bucket.kv.append(snap.gauges["kv_cache_usage"])
        if not boundary:
            continue
        preemptions = None
        if snap is not None and last_counters is not None:
            after = snap.counters.get("preemptions")
            before = last_counters.counters.get("preemptions")
            if after is not None and before is not None:
                preemptions = after - before
        last_counters = snap
        used: list[float | None] | None = None
        if gpu_on:
            reading = await asyncio.to_thread(sample_gpu)
            if isinstance(reading, soak_gpu.Sample):
                used = reading.used_mib
                soak.gpu_memory = SAMPLED
                soak.gpu_total_mib = reading.total_mib
            elif soak.gpu_memory != SAMPLED:
                soak.gpu_memory = f"unavailable: {reading}"
                gpu_on = False  # no NVML here: do not ask again every interval
            else:
                soak.notes.append(f"interval {index + 1}: GPU memory not read ({reading})")
                if "timeout" in reading:
                    # A wedged driver: readers left stuck in it would pile up.
                    soak.notes.append("GPU memory sampling stopped after a reader timed out")
                    gpu_on = False
        interval = soak.close(
            index,
            end=min(soak.t0 + (index + 1) * soak.interval_s, soak.end),
            partial=at_end and poll % steps != 0,
            preemptions=preemptions,
            gpu_used_mib=used,
        )
        soak.stopped = min(time.perf_counter(), soak.end)
        message(interval_line(soak, interval))


# --------------------------------------------------------------------------- the document


def _series(soak: SoakState, rules: SoakRules) -> list[tuple[Series, dict[str, float]]]:
    fitted = [
        iv for iv in soak.intervals if not iv.partial and iv.index >= rules.fit.warmup_intervals
    ]

    def hours(iv: SoakInterval) -> float:
        return (iv.start_s + iv.end_s) / 2.0 / 3600.0

    def pick(values: list[tuple[SoakInterval, float | None]]) -> tuple[list[float], list[float]]:
        kept = [(hours(iv), v) for iv, v in values if v is not None]
        return [h for h, _ in kept], [v for _, v in kept]

    out: list[tuple[Series, dict[str, float]]] = []
    kv_h, kv_v = pick([(iv, iv.kv_cache_usage_pct) for iv in fitted])
    out.append(
        (
            Series(
                quantity="kv_cache_usage_pct",
                label="KV cache use",
                unit="pp",
                hours=kv_h,
                values=kv_v,
                unavailable=None if soak.kv_cache == SAMPLED else soak.kv_cache,
                ceiling=100.0,
            ),
            {
                "min_rate_per_hour": rules.kv_cache.min_rate_pp_per_hour,
                "min_growth": rules.kv_cache.min_growth_pp,
            },
        )
    )
    gpu_rules = {
        "min_rate_per_hour": rules.gpu_memory.min_rate_mib_per_hour,
        "min_growth": rules.gpu_memory.min_growth_mib,
    }
    if soak.gpu_memory != SAMPLED:
        out.append(
            (
                Series(
                    quantity="gpu_memory_used_mib",
                    label="GPU used memory",
                    unit="MiB",
                    hours=[],
                    values=[],
                    unavailable=soak.gpu_memory,
                ),
                gpu_rules,
            )
        )
    else:
        for gpu, total in enumerate(soak.gpu_total_mib):
            g_h, g_v = pick(
                [
                    (
                        iv,
                        iv.gpu_memory_used_mib[gpu]
                        if iv.gpu_memory_used_mib and gpu < len(iv.gpu_memory_used_mib)
                        else None,
                    )
                    for iv in fitted
                ]
            )
            out.append(
                (
                    Series(
                        quantity=f"gpu{gpu}_memory_used_mib",
                        label=f"GPU {gpu} used memory",
                        unit="MiB",
                        hours=g_h,
                        values=g_v,
                        ceiling=total,
                    ),
                    gpu_rules,
                )
            )
    itl_h, itl_v = pick([(iv, iv.itl_ms.p50) for iv in fitted])
    out.append(
        (
            Series(quantity="itl_p50_ms", label="ITL p50", unit="ms", hours=itl_h, values=itl_v),
            # A rise below bench --compare's latency resolution is no change, whatever its
            # share of a start near 0 (a server streaming in bursts has ITL p50s of ~0 ms).
            {"min_growth_pct": rules.itl.min_growth_pct, "min_growth": MIN_LATENCY_CHANGE_MS},
        )
    )
    return out


def per_trend_confidence(soak: SoakState, rules: SoakRules) -> float:
    """Each fitted series' confidence (the Bonferroni rule of rules.soak_trend)."""
    return verdicts.per_trend_confidence(_series(soak, rules), rules.fit)


def trends(soak: SoakState, rules: SoakRules) -> list[Trend]:
    return verdicts.trends(_series(soak, rules), rules.fit)


def soak_result(soak: SoakState, rules: SoakRules, *, interrupted: bool) -> SoakResult:
    """The soak's section of the run document; open intervals (Ctrl-C) close as partial."""
    if soak.t0:
        now = min(time.perf_counter(), soak.end) if interrupted else soak.end
        for index in sorted(soak.open):
            if index * soak.interval_s < now - soak.t0:
                soak.close(index, end=now, partial=True)
        soak.open.clear()
        soak.stopped = max(soak.stopped, now)
    soak.intervals.sort(key=lambda iv: iv.index)
    duration = max(0.0, soak.stopped - soak.t0) if soak.t0 else 0.0
    found = trends(soak, rules)
    size = soak.size
    shape = soak.shape
    return SoakResult(
        shape=shape.name,
        description=shape.description,
        concurrency=shape.concurrency,
        input_tokens=size.target if size else shape.input_tokens,
        input_size_source=size.source if size else "estimated",
        output_tokens_max=shape.output_tokens,
        duration_s_requested=soak.duration_s,
        duration_s=duration,
        interval_s=soak.interval_s,
        complete=bool(soak.t0) and not interrupted,
        requests=soak.requests,
        completed=soak.completed,
        errors=dict(soak.errors),
        output_tokens=soak.output_tokens,
        output_tokens_per_s=soak.output_tokens / duration if duration > 0 else None,
        drain_requests=soak.drain_requests,
        kv_cache=soak.kv_cache,
        gpu_memory=soak.gpu_memory,
        gpu_total_mib=list(soak.gpu_total_mib),
        confidence=rules.fit.confidence,
        per_trend_confidence=per_trend_confidence(soak, rules),
        intervals=list(soak.intervals),
        trends=found,
        findings=verdicts.findings(found),
        notes=list(soak.notes),
    )


def build_document(
    state: runner.RunState, soak: SoakState, rules: SoakRules, *, interrupted: bool
) -> BenchRun:
    """The run document of a soak: ``bench``'s, with the ``soak`` section and its verdict."""
    doc = runner.build_document(state, interrupted=interrupted)
    result = soak_result(soak, rules, interrupted=interrupted)
    code = verdicts.exit_code(result, server_error=doc.server.error, interrupted=interrupted)
    return msgspec.structs.replace(
        doc,
        complete=doc.complete and result.complete,
        soak=result,
        exit_code=int(code),
    )
