"""Send each request at its time: an open-loop schedule (a trace's timestamps, an arrival
process), kept to well under a millisecond.

The event loop alone cannot keep such times: it waits in ``epoll_wait``, whose timeout is
whole milliseconds, rounded up (CPython's ``selectors.EpollSelector.select``: ``math.ceil(
timeout * 1e3) * 1e-3``), so a request due at t leaves at up to t + 1 ms even on an idle
loop. Here a thread sleeps until each due time (``time.sleep``: ``clock_nanosleep``, tens
of microseconds late) and hands the request to the loop with
``loop.call_soon_threadsafe``, which wakes a waiting loop at once through its self-pipe.
The loop's own timer is armed for the same time too, and whichever comes first sends: on a
machine with cores to spare the thread is the earlier, on one whose cores are all busy the
thread's wake-up can wait its turn behind other processes, and one wake-up (the loop's)
then beats two (the thread's, then the loop's). A request is then late by that wake-up plus
what the loop was doing when it came; the caller measures it, from the due time to the
moment the request is sent.
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


async def pace(count: int, due: Callable[[int], float], fire: Callable[[int, float], bool]) -> None:
    """Call ``fire(i, due(i))`` in the running loop once ``time.perf_counter()`` reaches
    ``due(i)``, for i from 0 to ``count - 1`` in order (due times in order); return when
    the last has been handed over, or as soon as ``fire`` returns False (the schedule ends
    there). Cancelling stops the schedule too: no later call is made. The one sender that
    uses it is collect/bench/schedule.py's send_on_schedule."""
    loop = asyncio.get_running_loop()
    finished: asyncio.Future[None] = loop.create_future()
    stop = threading.Event()
    # The loop's clock (time.monotonic) against perf_counter's: on Linux both read
    # CLOCK_MONOTONIC, but the offset is measured rather than assumed, perf_counter first,
    # so that it errs late: the loop's timer never fires before a due time.
    before = time.perf_counter()
    skew = loop.time() - before
    sent = 0  # requests handed over (only the loop's thread writes it)
    timer: asyncio.TimerHandle | None = None

    def upto(index: int) -> None:
        """Hand over every request up to ``index`` not handed over yet, then arm the loop's
        timer for the next one."""
        nonlocal sent, timer
        if stop.is_set():
            return
        while sent <= index and sent < count:
            if not fire(sent, due(sent)):
                stop.set()
                if not finished.done():
                    finished.set_result(None)
                return
            sent += 1
        if timer is not None:
            timer.cancel()
            timer = None
        if sent >= count:
            if not finished.done():
                finished.set_result(None)
            return
        timer = loop.call_at(due(sent) + skew, upto, sent)

    def schedule() -> None:
        try:
            for index in range(count):
                when = due(index)
                while not stop.is_set() and sent <= index:
                    left = when - time.perf_counter()
                    if left <= 0:
                        break
                    if left > _FINE_S:
                        stop.wait(min(_STEP_S, left - _FINE_S / 2))
                    else:
                        time.sleep(left)
                if stop.is_set():
                    return
                if sent <= index:
                    loop.call_soon_threadsafe(upto, index)
        except RuntimeError:  # the loop closed under us (the run ended)
            return

    thread = threading.Thread(target=schedule, name="blackwell-doctor-pacer", daemon=True)
    if count <= 0:
        return
    timer = loop.call_at(due(0) + skew, upto, 0)
    thread.start()
    try:
        await finished
    finally:
        stop.set()
        if timer is not None:
            timer.cancel()
