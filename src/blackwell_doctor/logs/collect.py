"""The one entry point for logs: ``check --logs/--container/--journal/--kernel-log`` and
``scan-logs`` both call :func:`collect_logs` (or :func:`scan_sources`, which also returns
the sources that could not be read at all)."""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from blackwell_doctor.facts import LogFacts, LogFinding, LogSource, LogSourceKind, Unavailable
from blackwell_doctor.logs import sources
from blackwell_doctor.logs.catalogue import SEVERITY_RANK, load_catalogue
from blackwell_doctor.logs.matcher import SourceScanner
from blackwell_doctor.logs.sources import Opened, SourceError

_GLOB_CHARS = frozenset("*?[")

_Input = tuple[str, LogSourceKind, Callable[[], Opened]]


def collect_logs(
    *,
    paths: Sequence[str],
    containers: Sequence[str],
    journal: bool,
    kernel_log: bool,
    host_root: Path,
    docker_host: str | None = None,
    stdin: BinaryIO | None = None,
) -> LogFacts | Unavailable:
    """Scan every input. Unavailable when inputs were named but none could be read (its
    reason is the first source's); otherwise the facts, unreadable sources included with
    their ``error``."""
    facts = scan_sources(
        paths=paths,
        containers=containers,
        journal=journal,
        kernel_log=kernel_log,
        host_root=host_root,
        docker_host=docker_host,
        stdin=stdin,
    )
    if facts.sources and not any(readable(s) for s in facts.sources):
        first = facts.sources[0].error or "unreadable"
        return Unavailable(f"no-log-readable:{first}")
    return facts


def readable(source: LogSource) -> bool:
    """Read at least in part (an error after some bytes still counts as read)."""
    return source.error is None or source.bytes > 0


def scan_sources(
    *,
    paths: Sequence[str],
    containers: Sequence[str],
    journal: bool,
    kernel_log: bool,
    host_root: Path,
    docker_host: str | None = None,
    stdin: BinaryIO | None = None,
    engine: str = "auto",
) -> LogFacts:
    catalogue = load_catalogue()
    found: list[LogFinding] = []
    read: list[LogSource] = []
    for name, kind, opener in _inputs(paths, containers, journal, kernel_log, host_root,
                                      docker_host, stdin):  # fmt: skip
        scanner = SourceScanner(catalogue, name, engine=engine)
        error: str | None = None
        try:
            kind, chunks = opener()
            for chunk in chunks:
                scanner.feed(chunk)
        except SourceError as exc:
            error = exc.reason
        except OSError as exc:
            error = sources.os_reason(exc, name)
        found.extend(scanner.finish())
        read.append(
            LogSource(name=name, kind=kind, lines=scanner.lines, bytes=scanner.size, error=error)
        )
    found.sort(key=lambda f: (-SEVERITY_RANK[f.severity], f.signature, f.path, f.line))
    return LogFacts(sources=read, findings=found)


def _inputs(
    paths: Sequence[str],
    containers: Sequence[str],
    journal: bool,
    kernel_log: bool,
    host_root: Path,
    docker_host: str | None,
    stdin: BinaryIO | None,
) -> Iterator[_Input]:
    for given in paths:
        if given == "-":
            stream = stdin

            def open_stdin(stream: BinaryIO | None = stream) -> Opened:
                if stream is None:
                    raise SourceError("no-stdin")
                return sources.stdin_chunks(stream)

            yield "-", "stdin", open_stdin
            continue
        yield from _path_inputs(given)
    for name in containers:
        yield (
            f"container:{name}",
            "container",
            lambda name=name: sources.container_chunks(name, docker_host),  # type: ignore[misc]
        )
    if journal:
        yield "journal", "journal", sources.journal_chunks
    if kernel_log:
        yield "kernel", "kernel", lambda: sources.kernel_chunks(host_root)


def _path_inputs(given: str) -> Iterator[_Input]:
    """A file, a directory (every regular file below it, sorted) or a glob."""
    if os.path.isdir(given):
        files: list[str] = []
        for top, dirs, names in os.walk(given, onerror=None):
            dirs.sort()
            files.extend(os.path.join(top, name) for name in sorted(names))
        if not files:
            yield given, "file", _fails(f"empty-directory:{given}")
        for name in files:
            if os.path.isfile(name):
                yield name, "file", _opens(name)
        return
    if not os.path.lexists(given) and _GLOB_CHARS & set(given):
        matches = sorted(m for m in glob.glob(given, recursive=True) if os.path.isfile(m))
        if not matches:
            yield given, "file", _fails(f"not-found:{given}")
        for name in matches:
            yield name, "file", _opens(name)
        return
    yield given, "file", _opens(given)


def _opens(name: str) -> Callable[[], Opened]:
    return lambda: sources.open_file(Path(name))


def _fails(reason: str) -> Callable[[], Opened]:
    def opener() -> Opened:
        raise SourceError(reason)

    return opener
