"""The live progress shown on standard error while a command runs: ``bench``'s (a shape's
requests, a soak's intervals), ``scan-logs``'s (files read and skipped) and ``apply``'s
image pull. Only drawing: what is shown comes from the app's state and events."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.live import Live as RichLive

    from blackwell_doctor.app.bench import Live
    from blackwell_doctor.apply.docker import PullEvent
    from blackwell_doctor.collect.logs.scan import ScanProgress


class BenchDisplay:
    """Progress on standard error: a rich live line on a terminal (redrawn 4 times a
    second from the run's state, so the run itself pays nothing per request), plain lines
    when piped (one per phase and per tenth of a shape)."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty() and os.environ.get("TERM") != "dumb"
        self._state: Live | None = None
        self._last: tuple[str, str] = ("", "")
        self._step = -1
        self._live: RichLive | None = None
        self.status: Callable[[], str] | None = None  # the live line when no shape runs

    def line(self) -> str:
        from blackwell_doctor.report.stats import percentile

        live = self._state
        if live is None:
            return self.status() if self.status else "asking the server what it serves..."

        def p50(values: list[float]) -> str:
            return "-" if not values else f"{percentile(sorted(values), 50) * 1000:.1f}"

        return (
            f"{live.shape}: {live.phase} {live.done}/{live.total} requests"
            + (f", {live.errors} failed" if live.errors else "")
            + f", running p50 TTFT {p50(list(live.ttft_s))} ms, "
            f"E2E {p50(list(live.e2e_s))} ms"
        )

    def __rich__(self) -> str:
        return self.line()

    def __enter__(self) -> BenchDisplay:
        if self.tty:
            from rich.console import Console
            from rich.live import Live as RichLive

            self._live = RichLive(
                self, console=Console(stderr=True), refresh_per_second=4, transient=True
            )
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()

    def message(self, line: str) -> None:
        """A progress line of its own (the soak's, one per interval)."""
        if self._live is not None:
            self._live.console.print(line, markup=False, highlight=False)
        else:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    def __call__(self, live: Live) -> None:
        self._state = live
        if self._live is not None:
            if live.phase == "done":
                self._live.console.print(self.line(), markup=False, highlight=False)
            return
        step = live.done * 10 // max(1, live.total)
        if (live.shape, live.phase) != self._last or step != self._step:
            self._last, self._step = (live.shape, live.phase), step
            sys.stderr.write(self.line() + "\n")
            sys.stderr.flush()


@contextmanager
def pull_bar() -> Iterator[PullEvent]:
    """docker pull progress as a rich bar on standard error (a terminal)."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    tasks: dict[str, Any] = {}

    def on_event(event: dict[str, Any]) -> None:
        layer = event.get("id")
        detail = event.get("progressDetail") or {}
        if not layer or "total" not in detail:
            return
        if layer not in tasks:
            tasks[layer] = progress.add_task(str(layer), total=detail["total"])
        progress.update(
            tasks[layer],
            completed=detail.get("current", 0),
            description=f"{layer} {event.get('status', '')}",
        )

    with progress:
        yield on_event


class ScanDisplay:
    """``scan-logs``'s live count on standard error, on a terminal only (a pipe or a file
    gets nothing: the report is what is read there): sources read, bytes, what was
    skipped, the file being read; redrawn 4 times a second from the scan's state, so the
    scan pays one assignment per file. Gone when the scan ends (transient)."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty() and os.environ.get("TERM") != "dumb"
        self._state: ScanProgress | None = None
        self._live: RichLive | None = None

    def __call__(self, state: ScanProgress) -> None:
        first = self._state is None
        self._state = state
        if first and self._live is not None:
            self._live.refresh()  # drawn at the first file, not only at the next tick

    def line(self) -> str:
        s = self._state
        if s is None:
            return "scanning..."
        return (
            f"scanning: {s.sources:,} log(s) read ({s.bytes / 1e6:,.1f} MB), "
            f"{s.skipped:,} skipped; {s.current}"
        )

    def __enter__(self) -> ScanDisplay:
        if self.tty:
            from rich.console import Console
            from rich.live import Live as RichLive
            from rich.text import Text

            self._live = RichLive(
                console=Console(stderr=True),
                refresh_per_second=4,
                transient=True,
                get_renderable=lambda: Text(self.line(), no_wrap=True, overflow="ellipsis"),
            )
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()
