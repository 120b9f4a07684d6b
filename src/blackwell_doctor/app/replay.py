"""``bench --trace FILE``: replay a request trace, each request sent at its timestamp.

The trace (collect/bench/trace.py) gives each request's due time, lengths and prompt blocks.
Prompts are sized in the server's own tokens: words that its ``/tokenize`` counts as one
token each (collect/bench/blocks.py), checked on a whole block, less the chat template's
own tokens (the difference between the server's chat and plain counts of one text), so a
request asks the server for the trace's input length; ``ignore_eos`` with ``max_tokens`` =
the trace's output length asks it for the trace's answer length. Requests go out open-loop
(none waits for another, as the traced service's users did not) through the pacer
(collect/bench/pacer.py), and each one's send lateness (sent minus due) is kept.

The requests are measured as a shape's are (the run's shape ``trace``: TTFT, TPOT, ITL,
E2E, output tokens from usage, the server's /metrics beside them, prefix-cache hits
included), and the document's ``trace`` says what was replayed and how late.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from blackwell_doctor.app import bench as runner
from blackwell_doctor.collect.bench import blocks, client, pacer, prompts
from blackwell_doctor.collect.bench.server_metrics import Snapshot, delta
from blackwell_doctor.collect.bench.trace import BURSTGPT, Trace
from blackwell_doctor.report.bench import (
    ESTIMATED,
    USAGE,
    BenchRun,
    RequestSample,
    ShapeResult,
    TraceResult,
)
from blackwell_doctor.report.bench_metrics import shape_metrics, stats_ms

SHAPE = "trace"
# Requests in flight at once, at most (as a shape's concurrency): more wait for a
# connection, and that wait counts in their TTFT, as in vllm bench serve.
MAX_IN_FLIGHT = 10_000
# Request bodies built ahead of the schedule (so that none is built at its due time).
_AHEAD = 64
# Before the first due time: room for the pacer's thread to start and the loop to settle.
_LEAD_S = 0.05
# A request later than this is counted apart (the bar the client is held to).
LATE_MS = 1.0
# How many words a block check builds: one of Mooncake's blocks.
_CHECK_WORDS = 512


@dataclass(frozen=True)
class Sizing:
    """How prompts are sized: words (one token each when ``source`` is "tokenize"), words
    per token, and the chat template's own tokens."""

    words: list[str]
    words_per_token: float
    template_tokens: int
    source: str  # "tokenize" or "estimated"
    notes: list[str]


@dataclass
class ReplayState:
    """A replay as it goes (whatever stops it, the document is built from this)."""

    trace: Trace
    time_scale: float
    sizing: Sizing | None = None
    t0: float = 0.0
    end: float = 0.0
    samples: list[RequestSample | None] = field(default_factory=list)
    lateness_s: array[float] = field(default_factory=lambda: array("d"))
    reasoning_estimates: list[int | None] = field(default_factory=list)
    fired: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    prompt_tokens: int = 0
    reusable_prompt_tokens: int = 0
    capped: int = 0
    short: int = 0
    before: Snapshot | None = None
    after: Snapshot | None = None
    peaks: list[Snapshot] = field(default_factory=list)
    done: bool = False


async def _sizing(srv: runner._Server, model: str, block_tokens: int | None) -> Sizing:
    """Words and the template's tokens, from the server's /tokenize where it counts."""
    server = srv

    async def plain(text: str) -> int | None:
        return await server.count_tokens(model, text, chat=False)

    words = await blocks.single_token_words(plain)
    if words is not None and len(words) >= 2:
        check = blocks.BlockPrompts(words, seed=0, words_per_block=_CHECK_WORDS)
        text = check.text([0], _CHECK_WORDS, request=0)
        counted = await plain(text)
        chat = await server.count_tokens(model, text, chat=True)
        if counted == _CHECK_WORDS and chat is not None and chat >= counted:
            return Sizing(words, 1.0, chat - counted, "tokenize", [])
        why = (
            f"the server's /tokenize counted {counted} tokens for {_CHECK_WORDS} words of one "
            "token each (its tokenizer merges across spaces)"
        )
    elif words is None:
        why = "the server has no usable /tokenize"
    else:
        why = (
            f"the server's tokenizer has {len(words)} of {len(blocks.CANDIDATES)} words as "
            "one token"
        )
    ratio = 1.0 / prompts.TOKENS_PER_WORD_ESTIMATE
    return Sizing(
        list(blocks.CANDIDATES),
        ratio,
        0,
        ESTIMATED,
        [
            f"{why}: prompt sizes are estimated (~{prompts.TOKENS_PER_WORD_ESTIMATE} tokens "
            "per word), and a block's tokens are not the trace's"
        ],
    )


def _room(max_model_len: int | None, output: int, sizing: Sizing) -> int | None:
    """The most prompt tokens a request of ``output`` answer tokens may have."""
    if max_model_len is None:
        return None
    room = max_model_len - output
    if sizing.source != "tokenize":  # estimated sizes: keep the shapes' margin
        room = int(room * 0.9)
    return max(1, room)


async def run_replay(
    config: runner.BenchConfig,
    replay: ReplayState,
    state: runner.RunState,
    progress: runner.Progress,
) -> None:
    """Replay ``replay.trace`` against ``config``'s server into ``replay`` and ``state``."""
    trace = replay.trace
    count = len(trace)
    async with runner.connect(config, state, width=min(MAX_IN_FLIGHT, count) + 4) as srv:
        if srv is None:
            return
        server = state.server
        assert server is not None
        assert server.model is not None
        model = server.model
        sizing = await _sizing(srv, model, trace.block_tokens)
        replay.sizing = sizing
        words_per_block = (
            None
            if trace.block_tokens is None
            else max(1, round(trace.block_tokens * sizing.words_per_token))
        )
        builder = blocks.BlockPrompts(
            sizing.words, seed=config.seed, words_per_block=words_per_block
        )
        chat_url = srv.endpoint.url("/v1/chat/completions")
        seen: dict[int, int] = {}

        def body(index: int) -> bytes:
            output = trace.output_tokens[index]
            asked = trace.input_tokens[index]
            room = _room(server.max_model_len, output, sizing)
            if room is not None and asked > room:
                asked = room
                replay.capped += 1
            content = asked - sizing.template_tokens
            if content < 1:
                replay.short += 1
                content = 1
            hashes = trace.hashes(index)
            replay.prompt_tokens += content + sizing.template_tokens
            replay.reusable_prompt_tokens += _reusable(
                hashes, content, trace.block_tokens, seen, sizing.template_tokens
            )
            n_words = max(1, round(content * sizing.words_per_token))
            return client.request_body(
                model=model,
                prompt=builder.text(hashes, n_words, request=index),
                max_tokens=output,
                ignore_eos=True,
            )

        bodies: dict[int, bytes] = {}
        built = 0
        wake = asyncio.Event()

        async def prepare() -> None:
            nonlocal built
            while built < count:
                if built - replay.fired >= _AHEAD:
                    wake.clear()
                    await wake.wait()
                    continue
                bodies[built] = body(built)
                built += 1
                await asyncio.sleep(0)

        live = runner.Live(shape=SHAPE, phase="replaying", total=count)
        replay.samples = [None] * count
        replay.reasoning_estimates = [None] * count
        replay.lateness_s = array("d", bytes(8 * count))
        tasks: set[asyncio.Task[None]] = set()

        async def one(index: int, due: float, data: bytes) -> None:
            replay.in_flight += 1
            replay.peak_in_flight = max(replay.peak_in_flight, replay.in_flight)
            try:
                o = await client.stream_chat(
                    srv.session,
                    chat_url,
                    data,
                    srv.headers,
                    deadline_s=config.deadline_s,
                    max_tokens=trace.output_tokens[index],
                )
            finally:
                replay.in_flight -= 1
            replay.lateness_s[index] = o.start_s - due
            runner.note_fingerprint(state, o)
            replay.samples[index] = runner._sample(o, replay.t0, trace.output_tokens[index])
            replay.reasoning_estimates[index] = (
                o.reasoning_chunks if o.reasoning_text and o.reasoning_tokens is None else None
            )
            replay.end = time.perf_counter()
            live.done += 1
            if o.ok:
                assert o.ttft_s is not None
                assert o.latency_s is not None
                live.ttft_s.append(o.ttft_s)
                live.e2e_s.append(o.latency_s)
            else:
                live.errors += 1
            progress(live)

        def fire(index: int, due: float) -> None:
            data = bodies.pop(index, None)
            if data is None:  # the builder fell behind: build it now (its time counts)
                nonlocal built
                while built <= index:
                    bodies[built] = body(built)
                    built += 1
                data = bodies.pop(index)
            replay.fired = index + 1
            wake.set()
            task = asyncio.create_task(one(index, due, data))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        if server.metrics_endpoint:
            replay.before = await runner._settled_metrics(srv, model)
        builder_task = asyncio.create_task(prepare())
        while built < min(count, _AHEAD):  # the first bodies ready before the clock starts
            await asyncio.sleep(0)
        progress(live)

        async def poll() -> None:
            while True:
                await asyncio.sleep(runner._POLL_INTERVAL_S)
                snap = await srv.metrics(model, quick=True)  # 40 ms of parsing otherwise
                if snap is not None:
                    replay.peaks.append(snap)

        poller = asyncio.create_task(poll()) if server.metrics_endpoint else None
        scale = replay.time_scale
        offsets = trace.offsets_s
        replay.t0 = time.perf_counter() + _LEAD_S
        t0 = replay.t0
        try:
            await pacer.pace(count, lambda i: t0 + offsets[i] * scale, fire)
            while tasks:  # a request's own failure is its outcome; anything else a bug
                await asyncio.gather(*list(tasks))
        finally:
            for task in (builder_task, poller, *tasks):
                if task is not None:
                    task.cancel()
            for task in (builder_task, poller):
                if task is not None:
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
        replay.done = True
        if server.metrics_endpoint:
            replay.after = await runner._settled_metrics(srv, model)
        live.phase = "done"
        progress(live)


def _reusable(
    hashes: array[int], content: int, block_tokens: int | None, seen: dict[int, int], template: int
) -> int:
    """Prompt tokens of this request that an earlier request carried, block by block from
    the prompt's start (the template's own tokens before them count with the first): a
    block as far as an earlier request had it (``seen``: the most tokens of each block
    sent so far, updated with this request's)."""
    if not block_tokens:
        return 0
    reusable = 0
    left = content
    prefix = True
    for hash_id in hashes:
        if left <= 0:
            break
        size = min(block_tokens, left)
        had = seen.get(hash_id, 0)
        if prefix and had:
            reusable += min(size, had) + (template if reusable == 0 else 0)
        prefix = prefix and had >= size
        seen[hash_id] = max(had, size)
        left -= size
    return reusable


def build_document(state: runner.RunState, replay: ReplayState, *, interrupted: bool) -> BenchRun:
    """The run document of a replay: the shape ``trace`` with its requests, and ``trace``."""
    samples = [s for s in replay.samples if s is not None]
    estimates = [e for s, e in zip(replay.samples, replay.reasoning_estimates, strict=True) if s]
    if samples or replay.done:
        state.shapes.append(_shape_result(replay, samples, estimates))
    if not replay.done and not interrupted and state.server and state.server.error is None:
        state.stopped = True
    doc = runner.build_document(state, interrupted=interrupted)
    trace = replay.trace
    due = [replay.lateness_s[i] for i, s in enumerate(replay.samples) if s is not None]
    result = TraceResult(
        file=trace.path,
        format=trace.format,
        block_tokens=trace.block_tokens,
        time_scale=replay.time_scale,
        rows=trace.rows,
        skipped=trace.skipped,
        not_replayed=trace.cut,
        requests=len(trace),
        sent=replay.fired,
        span_s=(trace.offsets_s[-1] * replay.time_scale) if len(trace) else 0.0,
        lateness_ms=stats_ms(due),
        lateness_max_ms=max(due) * 1000.0 if due else None,
        late_over_1ms=sum(1 for v in due if v * 1000.0 > LATE_MS),
        peak_in_flight=replay.peak_in_flight,
        prompt_tokens=replay.prompt_tokens,
        reusable_prompt_tokens=replay.reusable_prompt_tokens,
        capped=replay.capped,
        size_source=replay.sizing.source if replay.sizing else ESTIMATED,
    )
    return msgspec.structs.replace(doc, trace=result)


def _shape_result(
    replay: ReplayState, samples: list[RequestSample], estimates: list[int | None]
) -> ShapeResult:
    trace = replay.trace
    server = None
    if replay.before is not None and replay.after is not None:
        server = delta(replay.before, replay.after, replay.peaks)
    duration = max(0.0, replay.end - replay.t0) if replay.end else 0.0
    metrics = shape_metrics(
        samples,
        duration_s=duration,
        reasoning_estimates=estimates,
        server_generation_tokens=None if server is None else server.generation_tokens,
    )
    notes = list(replay.sizing.notes) if replay.sizing else []
    if replay.capped:
        notes.append(
            f"{replay.capped} prompts were cut to fit the server's max_model_len with their "
            "answer (their last blocks dropped)"
        )
    if replay.short:
        notes.append(
            f"{replay.short} requests asked fewer tokens than the chat template's own "
            f"{replay.sizing.template_tokens if replay.sizing else 0}: sent with one word"
        )
    if trace.skipped:
        notes.append(
            f"{trace.skipped} rows of the trace ask for no answer (BurstGPT: a failed request, "
            "Response tokens 0) and were not replayed"
            if trace.format == BURSTGPT
            else f"{trace.skipped} rows of the trace ask for no answer and were not replayed"
        )
    if metrics.token_source != USAGE:
        notes.append(
            "the server sent no usage for some requests: their output tokens are counted "
            "from token chunks (estimated)"
        )
    if (
        server is not None
        and server.generation_tokens is not None
        and replay.done
        and server.generation_tokens != metrics.output_tokens
    ):
        notes.append(
            f"the server counted {server.generation_tokens:g} generated tokens, the client "
            f"{metrics.output_tokens} (other traffic on the server, or failed requests?)"
        )
    inputs = trace.input_tokens
    mean_in = round(sum(inputs) / len(inputs)) if len(inputs) else 0
    name = Path(trace.path).name
    return ShapeResult(
        name=SHAPE,
        description=f"{trace.format} trace {name}, {len(trace)} requests at their timestamps "
        f"x {replay.time_scale:g}",
        concurrency=replay.peak_in_flight,
        input_tokens=mean_in,
        input_tokens_requested=mean_in,
        input_size_source=replay.sizing.source if replay.sizing else ESTIMATED,
        output_tokens_max=max(trace.output_tokens) if len(trace) else 0,
        requests=len(samples),
        completed=sum(1 for s in samples if s.ok),
        errors=_errors(samples),
        duration_s=duration,
        complete=replay.done and len(samples) == len(trace),
        metrics=metrics,
        server=server,
        equivalence=[],
        samples=samples,
        notes=notes,
        requests_planned=len(trace),
    )


def _errors(samples: list[RequestSample]) -> dict[str, int]:
    errors: dict[str, int] = {}
    for s in samples:
        if s.error:
            errors[s.error] = errors.get(s.error, 0) + 1
    return errors
