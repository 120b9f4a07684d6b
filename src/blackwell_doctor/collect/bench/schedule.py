"""Open-loop load: when each request is sent, and the sender that keeps to it.

A *schedule* is a list of send offsets in seconds from the load's start, ascending: request
``i`` leaves at ``start + offsets[i]`` whatever the requests before it are doing (an open
loop, as ``vllm bench serve --request-rate`` sends without ``--max-concurrency``). Anything
that can say when its requests go (a rate here, a replayed trace elsewhere) makes a list of
offsets and hands it to :func:`send_on_schedule`, the one sender (``bench --rate`` through
app/bench.py's measure_shape, ``bench --trace`` through app/replay.py's send_share, in this
process or in each client process), whose times the pacer keeps (collect/bench/pacer.py).

Arrival processes, as vLLM 0.32.0 defines them (``get_request`` in
vllm/benchmarks/serve.py):

- ``poisson``: intervals exponential with mean 1/rate (a gamma of shape 1);
- ``gamma``: intervals Gamma(shape = burstiness, scale = 1 / (rate x burstiness)), mean
  1/rate, coefficient of variation 1/sqrt(burstiness): below 1 burstier than Poisson,
  above 1 more even;
- ``constant``: every interval 1/rate (vLLM's burstiness = inf).

As in vLLM, the first request leaves one interval after the start, and the cumulative
offsets of a random process are rescaled so that the last one is exactly count/rate: the
offered rate is the rate asked for, whatever the seed. Intervals are drawn from Python's
``random.Random`` seeded with ``--seed`` (the same distribution as vLLM's numpy draws, not
the same numbers), so one seed gives one schedule on every machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from array import array
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from blackwell_doctor.collect.bench import pacer

CONSTANT = "constant"
POISSON = "poisson"
GAMMA = "gamma"
ARRIVALS = (CONSTANT, POISSON, GAMMA)


def arrivals(
    kind: str, rate: float, count: int, *, burstiness: float = 1.0, seed: int = 0
) -> list[float]:
    """``count`` send offsets (seconds, ascending) of ``kind`` arrivals at ``rate``
    requests per second; ValueError for an unknown kind or a rate or burstiness that is not
    a positive finite number."""
    if kind not in ARRIVALS:
        raise ValueError(f"unknown arrival process {kind!r}: one of {', '.join(ARRIVALS)}")
    for name, value in (("rate", rate), ("burstiness", burstiness)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"the {name} must be a positive finite number, got {value}")
    if count <= 0:
        return []
    if kind == CONSTANT:
        return [(i + 1) / rate for i in range(count)]
    shape = 1.0 if kind == POISSON else burstiness
    rng = random.Random(f"{seed}:arrivals:{kind}:{shape!r}")  # noqa: S311 (a load, not a secret)
    scale = 1.0 / (rate * shape)
    offsets: list[float] = []
    total = 0.0
    for _ in range(count):
        total += rng.gammavariate(shape, scale)
        offsets.append(total)
    # vLLM's normalize_factor: the last request at count/rate exactly.
    factor = (count / rate) / offsets[-1] if offsets[-1] > 0 else 1.0
    return [t * factor for t in offsets]


@dataclass
class Sent:
    """What :func:`send_on_schedule` did: each started request's lateness (seconds after
    its scheduled time that it was sent; entry ``i`` is request ``i``'s, as they start in
    order), the most requests in flight at once, and whether ``stop`` cut the schedule
    short."""

    lateness_s: array[float] = field(default_factory=lambda: array("d"))
    peak_in_flight: int = 0
    stopped: bool = False


async def send_on_schedule(
    offsets: Sequence[float],
    send: Callable[[int], Awaitable[object]],
    *,
    start: float | None = None,
    stop: Callable[[], bool] | None = None,
    sent: Sent | None = None,
) -> Sent:
    """Start ``send(i)`` at ``start + offsets[i]`` (``time.perf_counter``; default now), each
    in its own task, never waiting for an earlier one to finish; return once every started
    request has finished. ``stop()`` is asked before each start: True ends the schedule
    there (the requests in flight still finish). ``sent`` (filled as it goes, so a caller
    interrupted mid-way keeps what was measured) is returned.

    The times are kept by the pacer (collect/bench/pacer.py: a thread beside the loop's own
    timer, well under a millisecond where the loop alone is up to one late). A request's
    lateness runs from its due time to the moment ``send(i)`` is called, in its own task:
    the pacer's wake-up and whatever the loop was doing before it got there; a request's
    POST (where its TTFT starts) begins in that same step.

    A request that raises (a bug, not a failed request: those are outcomes) ends the load
    at once, as the closed loop's does, and its exception is raised here. Whatever ends it
    (that, a cancellation), every task is cancelled and awaited here, so none is left
    running or dies with an exception nobody reads."""
    out = sent if sent is not None else Sent()
    origin = time.perf_counter() if start is None else start
    loop = asyncio.get_running_loop()
    running: set[asyncio.Task[object]] = set()
    failed: list[BaseException] = []
    # Set once the load is over: a request raised, or the pacer ended (its last request
    # handed over, stopped, or its own error) and no request is left in flight. Each task's
    # end checks it in O(1): no wait over every task in flight per request.
    over: asyncio.Future[None] = loop.create_future()
    in_flight = 0

    async def one(index: int, due: float) -> object:
        nonlocal in_flight
        out.lateness_s.append(max(0.0, time.perf_counter() - due))
        in_flight += 1
        out.peak_in_flight = max(out.peak_in_flight, in_flight)
        try:
            return await send(index)
        finally:
            in_flight -= 1

    def settle() -> None:
        if over.done():
            return
        ended = pacing.done() and (
            not running or pacing.cancelled() or pacing.exception() is not None
        )
        if failed or ended:
            over.set_result(None)

    def finished(task: asyncio.Task[object]) -> None:
        running.discard(task)
        if not task.cancelled() and task.exception() is not None and not failed:
            failed.append(task.exception())  # type: ignore[arg-type]
        settle()

    def fire(index: int, due: float) -> bool:
        if failed:
            return False
        if stop is not None and stop():
            out.stopped = True
            return False
        task = asyncio.create_task(one(index, due))
        running.add(task)
        task.add_done_callback(finished)
        return True

    pacing = asyncio.create_task(pacer.pace(len(offsets), lambda i: origin + offsets[i], fire))
    pacing.add_done_callback(lambda _: settle())
    try:
        await over
        if failed:
            raise failed[0]
        pacing.result()  # the pacer's own error, if it had one
    finally:
        pacing.cancel()
        for task in list(running):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await pacing
        for task in list(running):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    return out
