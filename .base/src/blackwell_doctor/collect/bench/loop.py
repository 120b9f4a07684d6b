"""``asyncio.run`` with a bounded Ctrl-C, for ``bench``, ``bench --soak`` and ``apply --verify``.

``asyncio.run`` answers the first SIGINT by cancelling the main task, and then waits without
limit: for every task to finish cancelling, and for every thread of the default executor
(``loop.shutdown_default_executor()``, then again at interpreter exit, which joins
ThreadPoolExecutor workers). A DNS lookup (aiohttp's threaded resolver calls
``getaddrinfo`` in that executor) or a GPU memory reader (the soak's, in a thread) that hangs
therefore holds the command long after Ctrl-C, up to the resolver's or the reader's own
timeout, or forever.

:func:`run` keeps ``asyncio.run``'s contract (the first Ctrl-C cancels the main task, which
unwinds and keeps what it gathered; KeyboardInterrupt is raised after it; a second Ctrl-C
raises at once) and bounds the wait: what has not finished ``grace_s`` seconds after the
first Ctrl-C is abandoned. Executor work runs in daemon threads, so an abandoned call does
not hold the exit either.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import signal
import threading
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")

# After the first Ctrl-C, how long the cancelled run may take to unwind (close its
# connections, cancel its requests) before it is abandoned.
INTERRUPT_GRACE_S = 5.0


class _DaemonThreads(concurrent.futures.ThreadPoolExecutor):
    """The loop's default executor: each call in a daemon thread of its own, never joined
    (the pool's own workers are joined at interpreter exit, a hung call with them). A
    ThreadPoolExecutor only because the loop accepts no other kind; it starts no worker."""

    def submit(
        self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def work() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:  # handed to the awaiting task, as the pool does
                future.set_exception(exc)
            else:
                future.set_result(result)

        threading.Thread(target=work, name="blackwell-doctor-io", daemon=True).start()
        return future


def run(main: Coroutine[Any, Any, T], *, grace_s: float = INTERRUPT_GRACE_S) -> T:
    """Run ``main`` to its end in a new event loop; Ctrl-C raises KeyboardInterrupt within
    about ``grace_s`` seconds whatever the run is waiting for."""
    loop = asyncio.new_event_loop()
    loop.set_default_executor(_DaemonThreads())
    task = loop.create_task(main)
    interrupted = False
    grace: asyncio.TimerHandle | None = None

    def start_grace() -> None:
        nonlocal grace
        grace = loop.call_later(grace_s, loop.stop)

    def on_sigint() -> None:
        nonlocal interrupted
        if interrupted:
            raise KeyboardInterrupt  # a second Ctrl-C: now (it leaves run_until_complete)
        interrupted = True
        task.cancel()
        start_grace()

    # As asyncio.run: only where Ctrl-C would raise KeyboardInterrupt (a process started
    # with SIGINT ignored keeps ignoring it). Through the loop's own signal handling, not
    # signal.signal as asyncio.run does: that also sets the wakeup fd, so the loop wakes at
    # once wherever the signal lands; a signal caught by another thread (the DNS lookup's,
    # say) otherwise waits for the loop's next timer, 15 s away in a probe.
    installed = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )
    if installed:
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    asyncio.set_event_loop(loop)
    try:
        try:
            result = loop.run_until_complete(task)
        except asyncio.CancelledError:
            if interrupted:
                raise KeyboardInterrupt from None
            raise
        except RuntimeError:
            # loop.stop at the end of the grace: "Event loop stopped before Future completed."
            if interrupted and not task.done():
                raise KeyboardInterrupt from None
            raise
        if interrupted:  # the run swallowed the cancellation; Ctrl-C still ends it
            raise KeyboardInterrupt
        return result
    finally:
        if grace is not None:
            grace.cancel()
        if installed:
            loop.remove_signal_handler(signal.SIGINT)  # back to default_int_handler
        try:
            _close(loop, grace_s)
        finally:
            asyncio.set_event_loop(None)


def _close(loop: asyncio.AbstractEventLoop, grace_s: float) -> None:
    """Cancel what is left and give it ``grace_s`` to go; then close the loop without
    waiting for executor threads (daemon threads: they do not hold the exit)."""
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for t in pending:
        t.cancel()
    if pending:
        loop.run_until_complete(asyncio.wait(pending, timeout=grace_s))
    still = [t for t in pending if not t.done()]
    if not still:
        with contextlib.suppress(TimeoutError):
            loop.run_until_complete(asyncio.wait_for(loop.shutdown_asyncgens(), grace_s))
    else:
        # Abandoned on purpose: no "Task was destroyed but it is pending" at exit.
        loop.set_exception_handler(lambda _loop, _context: None)
    loop.close()
