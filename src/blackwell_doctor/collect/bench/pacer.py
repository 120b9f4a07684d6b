"""Send each request at its time: an open-loop schedule (a trace's timestamps, an arrival
process), kept to well under a millisecond.

The event loop cannot keep such times itself: it waits in ``epoll_wait``, whose timeout is
whole milliseconds, rounded up (CPython's ``selectors.EpollSelector.select``: ``math.ceil(
timeout * 1e3) * 1e-3``), so a request due at t leaves at up to t + 1 ms even on an idle
loop. Here a thread sleeps until each due time (``time.sleep``: ``clock_nanosleep``, tens
of microseconds late) and hands the request to the loop with
``loop.call_soon_threadsafe``, which wakes a waiting loop at once through its self-pipe.
A request is then late by the thread's wake-up plus what the loop was doing when it
arrived; the caller measures that, from the due time to the moment the request is sent.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

# Sleep in steps of at most this, so that a stopped schedule ends its thread promptly.
_STEP_S = 0.05
# The last stretch before a due time is slept with time.sleep (clock_nanosleep), not on the
# stop event (a lock's timed wait, coarser).
_FINE_S = 0.02


async def pace(count: int, due: Callable[[int], float], fire: Callable[[int, float], None]) -> None:
    """Call ``fire(i, due(i))`` in the running loop once ``time.perf_counter()`` reaches
    ``due(i)``, for i from 0 to ``count - 1`` in order (due times in order); return when
    the last has been handed over. Cancelling stops the schedule: no later call is made."""
    loop = asyncio.get_running_loop()
    finished: asyncio.Future[None] = loop.create_future()
    stop = threading.Event()

    def hand(index: int, when: float) -> None:
        if not stop.is_set():
            fire(index, when)

    def end() -> None:
        if not finished.done():
            finished.set_result(None)

    def schedule() -> None:
        try:
            for index in range(count):
                when = due(index)
                while not stop.is_set():
                    left = when - time.perf_counter()
                    if left <= 0:
                        break
                    if left > _FINE_S:
                        stop.wait(min(_STEP_S, left - _FINE_S / 2))
                    else:
                        time.sleep(left)
                if stop.is_set():
                    return
                loop.call_soon_threadsafe(hand, index, when)
            loop.call_soon_threadsafe(end)
        except RuntimeError:  # the loop closed under us (the run ended)
            return

    thread = threading.Thread(target=schedule, name="blackwell-doctor-pacer", daemon=True)
    thread.start()
    try:
        await finished
    finally:
        stop.set()
