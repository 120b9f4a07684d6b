"""The one entry point for logs: ``check --logs/--container/--journal/--kernel-log`` and
``scan-logs`` both call :func:`collect_logs` (or :func:`scan_sources`, which also returns
the sources that could not be read at all)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from blackwell_doctor.collect.logs import sources
from blackwell_doctor.collect.logs.matcher import SourceScanner
from blackwell_doctor.collect.logs.sources import Opened, SourceError
from blackwell_doctor.facts.document import (
    LogFacts,
    LogFinding,
    LogSource,
    LogSourceKind,
    Unavailable,
)
from blackwell_doctor.ruledata.logs import Catalogue, load_catalogue

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
    container_deadline_s: float | None = None,
) -> LogFacts:
    """Scan every input; ``container_deadline_s``: the whole of one container's log must
    arrive within it (default :data:`sources.DOCKER_DEADLINE_S`; tests give a short one)."""
    catalogue = load_catalogue()
    found: list[LogFinding] = []
    read: list[LogSource] = []
    for name, kind, opener in _inputs(paths, containers, journal, kernel_log, host_root,
                                      docker_host, stdin, container_deadline_s):  # fmt: skip
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
        source = LogSource(
            name=name,
            kind=kind,
            lines=scanner.lines,
            bytes=scanner.size,
            error=error,
            markers=sorted(scanner.markers),
        )
        read.append(source)
        if error is not None:
            found.append(input_finding(source, catalogue))
    found.sort(key=lambda f: (f.signature, f.path, f.line))
    return LogFacts(sources=read, findings=found)


def input_finding(source: LogSource, catalogue: Catalogue) -> LogFinding:
    """The finding for a source that could not be read (``input.unreadable``: line 0, nothing
    was read) or broke off (``input.partially_read``: line = the last line read). The
    excerpt is the reason token."""
    assert source.error is not None
    partial = readable(source)
    problem = catalogue.inputs["input.partially_read" if partial else "input.unreadable"]
    line = source.lines if partial else 0
    return LogFinding(
        signature=problem.id,
        path=source.name,
        line=line,
        last_line=line,
        count=1,
        excerpt=source.error,
    )


def _inputs(
    paths: Sequence[str],
    containers: Sequence[str],
    journal: bool,
    kernel_log: bool,
    host_root: Path,
    docker_host: str | None,
    stdin: BinaryIO | None,
    container_deadline_s: float | None = None,
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

        def open_container(name: str = name) -> Opened:
            return sources.container_chunks(name, docker_host, deadline_s=container_deadline_s)

        yield f"container:{name}", "container", open_container
    if journal:
        yield "journal", "journal", sources.journal_chunks
    if kernel_log:
        yield "kernel", "kernel", lambda: sources.kernel_chunks(host_root)


def _path_inputs(given: str) -> Iterator[_Input]:
    """A file, a directory (everything below it, sorted) or a glob. What cannot be read is
    an input with its reason, never dropped: an unreadable subdirectory, a FIFO, a socket,
    a device, a dangling symbolic link (open_file refuses the non-regular ones)."""
    if os.path.isdir(given):
        found = list(_walk(given))
        if not found:
            yield given, "file", _fails(f"empty-directory:{given}")
        yield from found
        return
    if not os.path.lexists(given) and _GLOB_CHARS & set(given):
        import glob  # only for a pattern (~1 ms of start-up with fnmatch)

        # Directories a glob matches are not descended into (``**`` lists their files).
        matches = sorted(m for m in glob.glob(given, recursive=True) if not os.path.isdir(m))
        if not matches:
            yield given, "file", _fails(f"not-found:{given}")
        for name in matches:
            yield name, "file", _opens(name)
        return
    yield given, "file", _opens(given)


def _walk(top_dir: str) -> Iterator[_Input]:
    """Every entry below ``top_dir`` that is not a directory, in sorted order. Symbolic links
    to directories are followed once each (a link back up is not walked again)."""
    errors: list[OSError] = []
    seen: set[tuple[int, int]] = set()
    for top, dirs, names in os.walk(top_dir, onerror=errors.append, followlinks=True):
        while errors:
            exc = errors.pop(0)
            name = str(exc.filename or top)
            yield name, "file", _fails(sources.os_reason(exc, name))
        try:
            st = os.stat(top)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in seen:
            dirs.clear()
            continue
        seen.add((st.st_dev, st.st_ino))
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(top, name)
            yield path, "file", _opens(path)
    for exc in errors:  # the top directory itself, or the last subdirectory
        name = str(exc.filename or top_dir)
        yield name, "file", _fails(sources.os_reason(exc, name))


def _opens(name: str) -> Callable[[], Opened]:
    return lambda: sources.open_file(Path(name))


def _fails(reason: str) -> Callable[[], Opened]:
    def opener() -> Opened:
        raise SourceError(reason)

    return opener
