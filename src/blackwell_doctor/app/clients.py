"""Client processes: the requests of a load shared among processes, each with its own event
loop and connection pool, so that no one loop's parsing holds the load back.

One event loop reads every answer of its requests: at ~5 us of CPU per output token
(collect/bench/client.py, benchmarks/bench_client.py) one loop keeps up with ~150,000
tokens/s on an idle core, and a loop that reads answers is late to send the next request
of an open-loop schedule. ``bench --trace`` (app/replay.py), the shapes' fixed concurrency
and ``bench --rate`` (app/bench.py's measure_shape) therefore send from client processes
when the load is large and the machine has cores for them: each process gets a *share*
(every n-th request) and a *sender* (a module-level coroutine function that sends a share
from a common start), and reports each request as it ends. This process keeps the server's
/metrics, the warm-up, the greedy prompts and the document.

Processes are spawned (a fresh interpreter: no inherited threads, sockets or loop), each
reports that it has started (its imports done), then all get one start time. Results come
back in batches (at most _BATCH, at least every _FLUSH_S) over a pipe, read here by a thread
per process and handed to this loop. Cancelling (Ctrl-C) tells them to stop and keeps what
they had measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any, Generic, TypeVar

import aiohttp
import msgspec

from blackwell_doctor.collect.bench import client
from blackwell_doctor.report.bench import RequestSample

# At most this many client processes; one per CPU but one (this process keeps its own work).
MAX_PROCESSES = 16
# Auto: one client process per this many requests in an open loop's busiest second, and per
# this many users of a closed loop. One loop holds ~150,000 output tokens/s on an idle core
# (above); 200 requests/s leave its sends on time (1,000/s from 6 processes: p99 0.48 ms late,
# benchmarks/evidence/2026-11-28/bench-lateness-h200), 256 users of answers of 128 tokens are
# ~32,000 tokens in flight.
REQUESTS_PER_PROCESS = 200
USERS_PER_PROCESS = 256
# Connections one process may hold (as a shape's concurrency: more wait for one, and that
# wait counts in their TTFT, as in vllm bench serve).
MAX_IN_FLIGHT = 10_000
# How long one may take to start, to stop; results sent back in batches of at most _BATCH,
# at least every _FLUSH_S.
_START_S = 60.0
_STOP_S = 5.0
_BATCH = 256
_FLUSH_S = 0.05
# Before the first due time: room for the processes to get the start and settle.
LEAD_S = 0.05

# One measured request: (its index in the load, its send lateness in seconds (0 in a closed
# loop), its sample, its client-side reasoning token estimate, the server's
# system_fingerprint, the times it was written again on a new connection, and its reasoning
# text when the server counted none: this process may count it with the server's /tokenize).
Result = tuple[int, float, RequestSample, int | None, str | None, int, str | None]
Report = Callable[[Result], None]

S = TypeVar("S")
# A sender: sends ``share`` from ``t0`` (time.perf_counter, the same clock in every process
# of the machine) through ``session``, ``report`` for each request as it ends, ``sent()`` as
# each one leaves; returns the most of its requests in flight at once.
Sender = Callable[[S, float, aiohttp.ClientSession, Report, Callable[[], None]], Awaitable[int]]


def result(index: int, lateness_s: float, outcome: client.Outcome, sample: RequestSample) -> Result:
    """The Result of ``outcome`` (request ``index``), measured into ``sample``."""
    reasoning = outcome.reasoning_text if outcome.reasoning_tokens is None else ""
    return (
        index,
        lateness_s,
        sample,
        outcome.reasoning_chunks if reasoning else None,
        outcome.system_fingerprint,
        outcome.resent,
        reasoning or None,
    )


def for_rate(offsets_s: Sequence[float], time_scale: float = 1.0) -> int:
    """Client processes (auto) for an open loop at these send offsets (ascending): one per
    REQUESTS_PER_PROCESS requests in its busiest second."""
    busiest, low = 0, 0
    for high in range(len(offsets_s)):
        while (offsets_s[high] - offsets_s[low]) * time_scale >= 1.0:
            low += 1
        busiest = max(busiest, high - low + 1)
    return _capped(math.ceil(busiest / REQUESTS_PER_PROCESS))


def for_users(users: int) -> int:
    """Client processes (auto) for a closed loop of ``users``."""
    return _capped(math.ceil(users / USERS_PER_PROCESS))


def _capped(wanted: int) -> int:
    cpus = max(1, (os.cpu_count() or 1) - 1)
    return max(1, min(cpus, MAX_PROCESSES, wanted))


def session(limit: int = MAX_IN_FLIGHT) -> aiohttp.ClientSession:
    """A session as every sender uses: bench's keep-alive pool (client.Pool) of ``limit``
    connections, no overall timeout (each request has its deadline), 1 MiB reads."""
    return aiohttp.ClientSession(
        connector=client.Pool(limit),
        timeout=aiohttp.ClientTimeout(total=None),
        read_bufsize=1 << 20,
    )


class Run(Generic[S]):
    """Shares sent by client processes: :meth:`send` starts them and waits for them; ``t0``
    is their common start (time.perf_counter), ``peak_in_flight`` the sum of their peaks."""

    def __init__(self, shares: Sequence[S], sender: Sender[S]) -> None:
        self.shares = list(shares)
        self.sender = sender
        self.t0 = 0.0
        self.peak_in_flight = 0

    async def send(self, report: Report, sent: Callable[[int], None]) -> None:
        """Start every share's process, give them one start, and return when all are done;
        ``report`` gets each result, ``sent(n)`` each batch of n requests that left, both in
        this loop."""
        import multiprocessing

        loop = asyncio.get_running_loop()
        context = multiprocessing.get_context("spawn")
        workers = []
        for share in self.shares:
            here, there = context.Pipe()
            process = context.Process(
                target=worker_main,
                args=(there, share, self.sender),
                name="blackwell-doctor-client",
                daemon=True,
            )
            process.start()
            there.close()
            workers.append((process, here))
        self.shares = []  # each process has its own copy now: none is kept here
        ended: list[asyncio.Future[int]] = [loop.create_future() for _ in workers]

        def read(k: int) -> None:
            conn = workers[k][1]
            peak = 0
            try:
                while True:
                    kind, payload = _decode_message(conn.recv_bytes())
                    if kind == _RESULTS:
                        loop.call_soon_threadsafe(_each, payload, report)
                    elif kind == _SENT:
                        loop.call_soon_threadsafe(sent, payload)
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
            self.t0 = time.perf_counter() + LEAD_S
            for _, conn in workers:
                conn.send_bytes(msgspec.msgpack.encode(self.t0))
            readers = [
                threading.Thread(
                    target=read, args=(k,), name="blackwell-doctor-results", daemon=True
                )
                for k in range(len(workers))
            ]
            for thread in readers:
                thread.start()
            self.peak_in_flight = sum(await asyncio.gather(*ended))
        finally:
            for _, conn in workers:
                with contextlib.suppress(OSError):
                    conn.send_bytes(_STOP)
            if not all(f.done() for f in ended):  # stopped early: what they measured comes
                with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.gather(*ended), _STOP_S)
            for process, conn in workers:
                process.join(timeout=_STOP_S)
                if process.is_alive():
                    process.terminate()
                conn.close()


def _each(results: list[Result], report: Report) -> None:
    for one in results:
        report(one)


def _settle(future: asyncio.Future[int], peak: int) -> None:
    if not future.done():
        future.set_result(peak)


# Between this process and a client process: one tag byte, then msgpack.
_READY, _SENT, _RESULTS, _DONE = b"Y", b"S", b"R", b"D"
_STOP = b"stop"
_results = msgspec.msgpack.Decoder(
    list[tuple[int, float, RequestSample, int | None, str | None, int, str | None]]
)
_int = msgspec.msgpack.Decoder(int)


def _decode_message(data: bytes) -> tuple[bytes, Any]:
    tag, body = data[:1], data[1:]
    if tag == _RESULTS:
        return tag, _results.decode(body)
    if tag in (_SENT, _DONE):
        return tag, _int.decode(body)
    return tag, None


def worker_main(conn: Connection, share: S, sender: Sender[S]) -> None:
    """A client process: send ``share`` with ``sender`` from the start the parent gives,
    results back in batches as they end (from a thread: a full pipe never holds up the
    loop), until done or told to stop. Ctrl-C is the parent's to handle: ignored here."""
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

        def report(one: Result) -> None:
            batch.append(one)
            if len(batch) >= _BATCH:
                flush()

        def sent() -> None:
            nonlocal sent_count
            sent_count += 1

        async def tick() -> None:
            while True:
                await asyncio.sleep(_FLUSH_S)
                flush()

        ticker = asyncio.create_task(tick())
        peak = 0
        try:
            async with session() as http:
                peak = await sender(share, t0, http, report, sent)
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
