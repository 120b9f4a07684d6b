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
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from typing import overload

import aiohttp
import msgspec

from blackwell_doctor.app import bench as runner
from blackwell_doctor.app import clients
from blackwell_doctor.collect.bench import blocks, client, prompts, schedule
from blackwell_doctor.collect.bench.server_metrics import Snapshot, delta
from blackwell_doctor.collect.bench.trace import BURSTGPT, Trace
from blackwell_doctor.report.bench import (
    ESTIMATED,
    LATENESS_POINTS,
    USAGE,
    BenchRun,
    ShapeResult,
    TraceResult,
)
from blackwell_doctor.report.bench_metrics import shape_metrics, stats_ms
from blackwell_doctor.report.column import Column
from blackwell_doctor.report.sample_table import SampleTable
from blackwell_doctor.report.stats import rank_points

SHAPE = "trace"
# Request bodies built ahead of the schedule (so that none is built at its due time).
_AHEAD = 64
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
    # The requests measured, as they ended (columns: report/sample_table.py, past their
    # first values in an unnamed temporary file), each row's index in the trace, its send
    # lateness and its client-side reasoning estimate (-1: none), columns of the same file.
    samples: SampleTable = field(default_factory=lambda: SampleTable(tempfile.TemporaryFile))
    indices: Column[int] = field(init=False)
    lateness_s: Column[float] = field(init=False)
    reasoning_estimates: Column[int] = field(init=False)
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

    def __post_init__(self) -> None:
        self.indices = self.samples.ints()
        self.lateness_s = self.samples.floats()
        self.reasoning_estimates = self.samples.ints()


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

    target: runner.ChatTarget
    seed: int
    words: list[str]
    words_per_block: int | None
    indices: Sequence[int]
    due_s: Sequence[float]
    n_words: Sequence[int]
    outputs: Sequence[int]
    hash_starts: Sequence[int]
    hash_ids: Sequence[int]


async def send_share(
    share: Share,
    t0: float,
    session: aiohttp.ClientSession,
    report: clients.Report,
    sent: Callable[[], None],
) -> int:
    """Send ``share``'s requests at t0 + their due times (collect/bench/schedule.py's
    send_on_schedule, the one open-loop sender), each measured into ``report`` as it ends
    with its send lateness; ``sent()`` as each leaves. Returns the most requests in flight
    at once (a clients.Sender)."""
    count = len(share.indices)
    builder = blocks.BlockPrompts(
        share.words, seed=share.seed, words_per_block=share.words_per_block
    )

    def body(k: int) -> bytes:
        index = share.indices[k]
        hashes = share.hash_ids[share.hash_starts[k] : share.hash_starts[k + 1]]
        return client.request_body(
            model=share.target.model,
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
        sent()
        late = done.lateness_s[k]  # send_on_schedule's, taken as this task began
        o = await share.target.stream(session, data, share.outputs[k])
        report(clients.result(share.indices[k], late, o, runner._sample(o, t0, share.outputs[k])))

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
    clients.REQUESTS_PER_PROCESS requests in the schedule's busiest second, at most one per
    CPU but one, at least one."""
    if asked is not None:
        return asked
    return clients.for_rate(trace.offsets_s, time_scale)


async def run_replay(
    config: runner.BenchConfig,
    replay: ReplayState,
    state: runner.RunState,
    progress: runner.Progress,
) -> None:
    """Replay ``replay.trace`` against ``config``'s server into ``replay`` and ``state``."""
    trace = replay.trace
    count = len(trace)
    async with runner.connect(config, state, width=min(clients.MAX_IN_FLIGHT, count) + 4) as srv:
        if srv is None:
            return
        server, model = runner.served(state)
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
                target=runner.chat_target(srv, model, config),
                seed=config.seed,
                words=sizing.words,
                words_per_block=words_per_block,
            )
            for part in range(processes)
        ]
        del n_words  # in the shares now
        live = runner.Live(shape=SHAPE, phase="replaying", total=count)

        def report(result: clients.Result) -> None:
            index, late, sample, estimate, fingerprint, resent, _ = result
            replay.resent += resent
            replay.lateness_s.append(late)
            replay.samples.append(sample)
            replay.indices.append(index)
            replay.reasoning_estimates.append(-1 if estimate is None else estimate)
            if fingerprint:
                runner.note_fingerprint(state, fingerprint)
            replay.end = time.perf_counter()
            live.count(sample)
            progress(live)

        def sent() -> None:
            replay.fired += 1

        def sent_batch(count: int) -> None:
            replay.fired += count

        if server.metrics_endpoint:
            replay.before = await runner._settled_metrics(srv, model)
        progress(live)

        async with runner.polled_metrics(srv, model, replay.peaks, poll=server.metrics_endpoint):
            if processes == 1:
                replay.t0 = time.perf_counter() + clients.LEAD_S
                replay.peak_in_flight = await send_share(
                    shares[0], replay.t0, srv.session, report, sent
                )
            else:
                run = clients.Run(shares, send_share)
                shares.clear()  # the processes' own copies are what they send
                try:
                    await run.send(report, sent_batch)
                finally:
                    replay.t0, replay.peak_in_flight = run.t0, run.peak_in_flight
        replay.done = True
        if server.metrics_endpoint:
            replay.after = await runner._settled_metrics(srv, model)
        live.phase = "done"
        progress(live)


def _plan_sizes(replay: ReplayState, max_model_len: int | None, sizing: Sizing) -> Column[int]:
    """Each request's prompt words (capped to fit the server's context with its answer),
    counting the capped and the too short, the prompt tokens and those an earlier request
    carried (the trace's own reuse)."""
    trace = replay.trace
    n_words = replay.samples.ints()
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
        n_words.append(max(1, round(content * sizing.words_per_token)))
    return n_words


def _share(
    replay: ReplayState,
    part: int,
    parts: int,
    n_words: Sequence[int],
    *,
    target: runner.ChatTarget,
    seed: int,
    words: list[str],
    words_per_block: int | None,
) -> Share:
    """Requests ``part``, ``part + parts``, ... of the trace: every sender gets its turn in
    each burst, so a burst's requests leave side by side."""
    trace = replay.trace
    table = replay.samples  # its file holds the columns (a client process gets them whole)
    indices = table.ints(range(part, len(trace), parts))
    starts = table.ints([0])
    ids = table.ints()
    for index in indices:
        ids.extend(trace.hashes(index))
        starts.append(len(ids))
    return Share(
        target=target,
        seed=seed,
        words=words,
        words_per_block=words_per_block,
        indices=indices,
        due_s=table.floats(trace.offsets_s[i] * replay.time_scale for i in indices),
        n_words=table.ints(n_words[i] for i in indices),
        outputs=table.ints(trace.output_tokens[i] for i in indices),
        hash_starts=starts,
        hash_ids=ids,
    )


def _reusable(
    hashes: Sequence[int],
    content: int,
    block_tokens: int | None,
    seen: dict[int, int],
    template: int,
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
    # The rows in trace order (each trace index is measured at most once).
    table = replay.samples
    row_of = table.ints(repeat(-1, len(replay.trace)))
    for row, index in enumerate(replay.indices):
        row_of[index] = row
    order = table.ints(row for row in row_of if row >= 0)
    del row_of
    samples = replay.samples.ordered(order)
    estimates = _Estimates(replay.reasoning_estimates, order)
    if len(samples) or replay.done:
        state.shapes.append(_shape_result(replay, samples, estimates))
    if not replay.done and not interrupted and state.server and state.server.error is None:
        state.stopped = True
    doc = runner.build_document(state, interrupted=interrupted)
    trace = replay.trace
    due = table.floats(replay.lateness_s[row] for row in order)
    with runner.spill_sorted():
        lateness_ms = stats_ms(due)
        lateness_cdf_ms = [v * 1000.0 for v in rank_points(due, LATENESS_POINTS)]
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
        lateness_ms=lateness_ms,
        lateness_cdf_ms=lateness_cdf_ms,
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


class _Estimates(Sequence[int | None]):
    """Each row's reasoning estimate (-1: none) read in ``order``, without a list of them."""

    def __init__(self, estimates: Sequence[int], order: Sequence[int]) -> None:
        self.estimates, self.order = estimates, order

    def __len__(self) -> int:
        return len(self.order)

    @overload
    def __getitem__(self, index: int) -> int | None: ...

    @overload
    def __getitem__(self, index: slice) -> list[int | None]: ...

    def __getitem__(self, index: int | slice) -> int | list[int | None] | None:
        if isinstance(index, slice):
            return [self[k] for k in range(*index.indices(len(self)))]
        value = self.estimates[self.order[index]]
        return None if value < 0 else value


def _shape_result(
    replay: ReplayState, samples: SampleTable, estimates: Sequence[int | None]
) -> ShapeResult:
    trace = replay.trace
    server = None
    if replay.before is not None and replay.after is not None:
        server = delta(replay.before, replay.after, replay.peaks)
    duration = max(0.0, replay.end - replay.t0) if replay.end else 0.0
    with runner.spill_sorted():
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
        completed=samples.completed(),
        errors=samples.error_counts(),
        duration_s=duration,
        complete=replay.done and len(samples) == len(trace),
        metrics=metrics,
        server=server,
        equivalence=[],
        samples=samples,
        notes=notes,
        requests_planned=len(trace),
    )
