"""``bench --trace FILE``: replay a request trace, each request sent at its timestamp.

The trace (collect/bench/trace.py) gives each request's due time, lengths and prompt blocks.
Prompts are sized in the server's own tokens: words that its ``/tokenize`` counts as one
token each (collect/bench/blocks.py), checked on a whole block, less the chat template's
own tokens (the difference between the server's chat and plain counts of one text), so a
request asks the server for the trace's input length; ``ignore_eos`` with ``max_tokens`` =
the trace's output length asks it for the trace's answer length. Requests go out open-loop
(none waits for another, as the traced service's users did not) through the one open-loop
sender (collect/bench/schedule.py's send_on_schedule, timed by collect/bench/pacer.py), and
each one's send lateness (sent minus due) is kept.

The requests are measured as a shape's are (the run's shape ``trace``: TTFT, TPOT, ITL,
E2E, output tokens from usage, the server's /metrics beside them, prefix-cache hits
included), and the document's ``trace`` says what was replayed and how late.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import threading
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

from blackwell_doctor.app import bench as runner
from blackwell_doctor.collect.bench import blocks, client, prompts, schedule
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
# Before the first due time: room for the pacer's thread (and the client processes) to
# start and the loop to settle.
_LEAD_S = 0.05
# Client processes: one per this many requests in the schedule's busiest second (auto), at
# most MAX_PROCESSES; how long one may take to start, to stop; results sent back in batches
# of at most _BATCH, at least every _FLUSH_S.
REQUESTS_PER_PROCESS = 200
MAX_PROCESSES = 16
_START_S = 60.0
_STOP_S = 5.0
_BATCH = 256
_FLUSH_S = 0.05
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
    processes: int = 1  # client processes sending (--client-processes)
    sizing: Sizing | None = None
    t0: float = 0.0
    end: float = 0.0
    samples: list[RequestSample | None] = field(default_factory=list)
    lateness_s: array[float] = field(default_factory=lambda: array("d"))
    reasoning_estimates: list[int | None] = field(default_factory=list)
    fired: int = 0
    peak_in_flight: int = 0
    resent: int = 0  # requests written again on a new connection (client.stream_chat)
    prompt_tokens: int = 0
    reusable_prompt_tokens: int = 0
    capped: int = 0
    short: int = 0
    before: Snapshot | None = None
    after: Snapshot | None = None
    peaks: list[Snapshot] = field(default_factory=list)
    done: bool = False


async def _sizing(server: runner._Server, model: str) -> Sizing:
    """Words and the template's tokens, from the server's /tokenize where it counts."""

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


@dataclass(frozen=True)
class Share:
    """The requests one sender (this process, or one of the client processes) replays, in
    due order: their indices in the trace, due times after the start (seconds, scaled),
    prompt words, answer tokens and prompt blocks (``hash_ids[hash_starts[k] :
    hash_starts[k + 1]]``), and what it needs to build and send them."""

    chat_url: str
    headers: dict[str, str]
    model: str
    deadline_s: float
    seed: int
    words: list[str]
    words_per_block: int | None
    indices: array[int]
    due_s: array[float]
    n_words: array[int]
    outputs: array[int]
    hash_starts: array[int]
    hash_ids: array[int]


# One measured request: (its index in the trace, its send lateness in seconds, its sample,
# its client-side reasoning token estimate, the server's system_fingerprint, the times it
# was written again on a new connection).
Result = tuple[int, float, RequestSample, int | None, str | None, int]


async def send_share(
    share: Share,
    t0: float,
    session: aiohttp.ClientSession,
    report: Callable[[Result], None],
    sent: Callable[[int], None],
) -> int:
    """Send ``share``'s requests at t0 + their due times (collect/bench/schedule.py's
    send_on_schedule, the one open-loop sender), each measured into ``report`` as it ends
    with its send lateness; ``sent(k)`` as request k of the share leaves. Returns the most
    requests in flight at once."""
    count = len(share.indices)
    builder = blocks.BlockPrompts(
        share.words, seed=share.seed, words_per_block=share.words_per_block
    )

    def body(k: int) -> bytes:
        index = share.indices[k]
        hashes = share.hash_ids[share.hash_starts[k] : share.hash_starts[k + 1]]
        return client.request_body(
            model=share.model,
            prompt=builder.text(hashes, share.n_words[k], request=index),
            max_tokens=share.outputs[k],
            ignore_eos=True,
        )

    bodies: dict[int, bytes] = {}
    built = 0
    started = 0
    wake = asyncio.Event()

    async def prepare() -> None:
        nonlocal built
        while built < count:
            if built - started >= _AHEAD:
                wake.clear()
                await wake.wait()
                continue
            bodies[built] = body(built)
            built += 1
            await asyncio.sleep(0)

    done = schedule.Sent()

    async def one(k: int) -> None:
        nonlocal built, started
        data = bodies.pop(k, None)
        if data is None:  # the builder fell behind: build it now (its time counts)
            while built <= k:
                bodies[built] = body(built)
                built += 1
            data = bodies.pop(k)
        started = k + 1
        wake.set()
        sent(k)
        late = done.lateness_s[k]  # send_on_schedule's, taken as this task began
        o = await client.stream_chat(
            session,
            share.chat_url,
            data,
            share.headers,
            deadline_s=share.deadline_s,
            max_tokens=share.outputs[k],
        )
        estimate = o.reasoning_chunks if o.reasoning_text and o.reasoning_tokens is None else None
        sample = runner._sample(o, t0, share.outputs[k])
        report((share.indices[k], late, sample, estimate, o.system_fingerprint, o.resent))

    builder_task = asyncio.create_task(prepare())
    while built < min(count, _AHEAD):  # the first bodies ready before the clock starts
        await asyncio.sleep(0)
    try:
        # A request's own failure is its outcome; one that raises is a bug and ends the run.
        await schedule.send_on_schedule(share.due_s, one, start=t0, sent=done)
    finally:
        builder_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await builder_task
    return done.peak_in_flight


def client_processes(trace: Trace, time_scale: float, asked: int | None) -> int:
    """How many client processes send the replay: ``asked``, else (auto) one per
    REQUESTS_PER_PROCESS requests in the schedule's busiest second, at most one per CPU but
    one, at least one."""
    if asked is not None:
        return asked
    offsets, busiest, low = trace.offsets_s, 0, 0
    for high in range(len(offsets)):
        while (offsets[high] - offsets[low]) * time_scale >= 1.0:
            low += 1
        busiest = max(busiest, high - low + 1)
    cpus = max(1, (os.cpu_count() or 1) - 1)
    return max(1, min(cpus, MAX_PROCESSES, math.ceil(busiest / REQUESTS_PER_PROCESS)))


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
        sizing = await _sizing(srv, model)
        replay.sizing = sizing
        n_words = _plan_sizes(replay, server.max_model_len, sizing)
        words_per_block = (
            None
            if trace.block_tokens is None
            else max(1, round(trace.block_tokens * sizing.words_per_token))
        )
        processes = max(1, min(replay.processes, count))
        replay.processes = processes
        shares = [
            _share(
                replay,
                part,
                processes,
                n_words,
                chat_url=srv.endpoint.url("/v1/chat/completions"),
                headers=dict(srv.headers),
                model=model,
                deadline_s=config.deadline_s,
                seed=config.seed,
                words=sizing.words,
                words_per_block=words_per_block,
            )
            for part in range(processes)
        ]
        live = runner.Live(shape=SHAPE, phase="replaying", total=count)
        replay.samples = [None] * count
        replay.reasoning_estimates = [None] * count
        replay.lateness_s = array("d", bytes(8 * count))

        def report(result: Result) -> None:
            index, late, sample, estimate, fingerprint, resent = result
            replay.resent += resent
            replay.lateness_s[index] = late
            replay.samples[index] = sample
            replay.reasoning_estimates[index] = estimate
            if fingerprint:
                runner.note_fingerprint(state, client.Outcome(system_fingerprint=fingerprint))
            replay.end = time.perf_counter()
            live.done += 1
            if sample.ok:
                assert sample.ttft_ms is not None
                assert sample.e2e_ms is not None
                live.ttft_s.append(sample.ttft_ms / 1000.0)
                live.e2e_s.append(sample.e2e_ms / 1000.0)
            else:
                live.errors += 1
            progress(live)

        def sent(_: int) -> None:
            replay.fired += 1

        if server.metrics_endpoint:
            replay.before = await runner._settled_metrics(srv, model)
        progress(live)

        async with runner.polled_metrics(srv, model, replay.peaks, poll=server.metrics_endpoint):
            if processes == 1:
                replay.t0 = time.perf_counter() + _LEAD_S
                replay.peak_in_flight = await send_share(
                    shares[0], replay.t0, srv.session, report, sent
                )
            else:
                await _send_in_processes(replay, shares, report, sent)
        replay.done = True
        if server.metrics_endpoint:
            replay.after = await runner._settled_metrics(srv, model)
        live.phase = "done"
        progress(live)


def _plan_sizes(replay: ReplayState, max_model_len: int | None, sizing: Sizing) -> array[int]:
    """Each request's prompt words (capped to fit the server's context with its answer),
    counting the capped and the too short, the prompt tokens and those an earlier request
    carried (the trace's own reuse)."""
    trace = replay.trace
    n_words = array("q", bytes(8 * len(trace)))
    seen: dict[int, int] = {}
    for index in range(len(trace)):
        output = trace.output_tokens[index]
        asked = trace.input_tokens[index]
        room = _room(max_model_len, output, sizing)
        if room is not None and asked > room:
            asked = room
            replay.capped += 1
        content = asked - sizing.template_tokens
        if content < 1:
            replay.short += 1
            content = 1
        replay.prompt_tokens += content + sizing.template_tokens
        replay.reusable_prompt_tokens += _reusable(
            trace.hashes(index), content, trace.block_tokens, seen, sizing.template_tokens
        )
        n_words[index] = max(1, round(content * sizing.words_per_token))
    return n_words


def _share(
    replay: ReplayState,
    part: int,
    parts: int,
    n_words: array[int],
    *,
    chat_url: str,
    headers: dict[str, str],
    model: str,
    deadline_s: float,
    seed: int,
    words: list[str],
    words_per_block: int | None,
) -> Share:
    """Requests ``part``, ``part + parts``, ... of the trace: every sender gets its turn in
    each burst, so a burst's requests leave side by side."""
    trace = replay.trace
    indices = array("q", range(part, len(trace), parts))
    starts = array("q", [0])
    ids: array[int] = array("q")
    for index in indices:
        ids.extend(trace.hashes(index))
        starts.append(len(ids))
    return Share(
        chat_url=chat_url,
        headers=headers,
        model=model,
        deadline_s=deadline_s,
        seed=seed,
        words=words,
        words_per_block=words_per_block,
        indices=indices,
        due_s=array("d", (trace.offsets_s[i] * replay.time_scale for i in indices)),
        n_words=array("q", (n_words[i] for i in indices)),
        outputs=array("q", (trace.output_tokens[i] for i in indices)),
        hash_starts=starts,
        hash_ids=ids,
    )


async def _send_in_processes(
    replay: ReplayState,
    shares: list[Share],
    report: Callable[[Result], None],
    sent: Callable[[int], None],
) -> None:
    """Each share sent by a client process of its own (spawned: a fresh interpreter, no
    inherited threads or sockets), all from one start; their results read by a thread per
    process and handed to this loop. Cancelling tells them to stop and keeps what they had
    measured."""
    import multiprocessing

    loop = asyncio.get_running_loop()
    context = multiprocessing.get_context("spawn")
    workers = []
    for share in shares:
        here, there = context.Pipe()
        process = context.Process(
            target=worker_main, args=(there, share), name="blackwell-doctor-client", daemon=True
        )
        process.start()
        there.close()
        workers.append((process, here))
    ended: list[asyncio.Future[int]] = [loop.create_future() for _ in workers]

    def read(k: int) -> None:
        conn = workers[k][1]
        peak = 0
        try:
            while True:
                message = conn.recv_bytes()
                kind, payload = _decode_message(message)
                if kind == _RESULTS:
                    loop.call_soon_threadsafe(_each, payload, report)
                elif kind == _SENT:
                    loop.call_soon_threadsafe(_times, payload, sent)
                elif kind == _DONE:
                    peak = payload
                    break
        except (EOFError, OSError):
            pass
        except RuntimeError:  # the loop closed: the run was abandoned
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, ended[k], peak)

    try:
        for _, conn in workers:  # each one started, its imports done
            ready = await asyncio.wait_for(asyncio.to_thread(conn.recv_bytes), _START_S)
            if _decode_message(ready)[0] != _READY:
                raise RuntimeError("a client process did not start")
        replay.t0 = time.perf_counter() + _LEAD_S
        for _, conn in workers:
            conn.send_bytes(msgspec.msgpack.encode(replay.t0))
        readers = [
            threading.Thread(target=read, args=(k,), name="blackwell-doctor-results", daemon=True)
            for k in range(len(workers))
        ]
        for thread in readers:
            thread.start()
        peaks = await asyncio.gather(*ended)
        replay.peak_in_flight = sum(peaks)
    finally:
        for _, conn in workers:
            with contextlib.suppress(OSError):
                conn.send_bytes(_STOP)
        if not all(f.done() for f in ended):  # stopped early: what they measured comes back
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.gather(*ended), _STOP_S)
        for process, conn in workers:
            process.join(timeout=_STOP_S)
            if process.is_alive():
                process.terminate()
            conn.close()


def _each(results: list[Result], report: Callable[[Result], None]) -> None:
    for result in results:
        report(result)


def _times(count: int, sent: Callable[[int], None]) -> None:
    for _ in range(count):
        sent(0)


def _settle(future: asyncio.Future[int], peak: int) -> None:
    if not future.done():
        future.set_result(peak)


# Between this process and a client process: one tag byte, then msgpack.
_READY, _SENT, _RESULTS, _DONE = b"Y", b"S", b"R", b"D"
_STOP = b"stop"
_results = msgspec.msgpack.Decoder(
    list[tuple[int, float, RequestSample, int | None, str | None, int]]
)
_int = msgspec.msgpack.Decoder(int)


def _decode_message(data: bytes) -> tuple[bytes, Any]:
    tag, body = data[:1], data[1:]
    if tag == _RESULTS:
        return tag, _results.decode(body)
    if tag in (_SENT, _DONE):
        return tag, _int.decode(body)
    return tag, None


def worker_main(conn: Connection, share: Share) -> None:
    """A client process: send ``share`` from the start the parent gives, results back in
    batches as they end (from a thread: a full pipe never holds up the loop), until done or
    told to stop. Ctrl-C is the parent's to handle: ignored here."""
    import queue

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn.send_bytes(_READY)
    try:
        t0 = msgspec.msgpack.decode(conn.recv_bytes(), type=float)
    except (EOFError, OSError, msgspec.DecodeError):
        return
    outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()

    def post() -> None:
        while (data := outbox.get()) is not None:
            with contextlib.suppress(OSError):
                conn.send_bytes(data)

    poster = threading.Thread(target=post, name="blackwell-doctor-post", daemon=True)
    poster.start()

    async def main() -> int:
        loop = asyncio.get_running_loop()
        me = asyncio.current_task()
        assert me is not None

        def listen() -> None:  # the parent's stop (or its end) cancels the sending
            with contextlib.suppress(EOFError, OSError):
                conn.recv_bytes()
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(me.cancel)

        threading.Thread(target=listen, name="blackwell-doctor-stop", daemon=True).start()
        batch: list[Result] = []
        sent_count = 0

        def flush() -> None:
            nonlocal sent_count
            if sent_count:
                outbox.put(_SENT + msgspec.msgpack.encode(sent_count))
                sent_count = 0
            if batch:
                outbox.put(_RESULTS + msgspec.msgpack.encode(batch))
                batch.clear()

        def report(result: Result) -> None:
            batch.append(result)
            if len(batch) >= _BATCH:
                flush()

        def sent(_: int) -> None:
            nonlocal sent_count
            sent_count += 1

        async def tick() -> None:
            while True:
                await asyncio.sleep(_FLUSH_S)
                flush()

        ticker = asyncio.create_task(tick())
        connector = client.Pool(MAX_IN_FLIGHT)
        peak = 0
        try:
            async with aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=None),
                read_bufsize=1 << 20,
            ) as session:
                peak = await send_share(share, t0, session, report, sent)
        except asyncio.CancelledError:
            pass
        finally:
            ticker.cancel()
            flush()
        return peak

    peak = asyncio.run(main())
    outbox.put(_DONE + msgspec.msgpack.encode(peak))
    outbox.put(None)
    poster.join(timeout=_STOP_S)


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
        client_processes=replay.processes,
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
    if replay.resent:
        notes.append(runner.resent_note(replay.resent))
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
