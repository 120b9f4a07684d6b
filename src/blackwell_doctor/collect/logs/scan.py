"""The one entry point for logs: ``check --logs/--container/--journal/--kernel-log`` and
``scan-logs`` both call :func:`collect_logs` (or :func:`scan_sources`, which also returns
the sources that could not be read at all)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, NamedTuple, Required, TypedDict, Unpack, get_args

from blackwell_doctor.collect.logs import sources, walk
from blackwell_doctor.collect.logs.matcher import SourceScanner
from blackwell_doctor.collect.logs.sources import HeadFormat, Opened, Skipped, SourceError
from blackwell_doctor.facts.document import (
    LogFacts,
    LogFinding,
    LogSource,
    LogSourceKind,
    SkipReason,
    Unavailable,
)
from blackwell_doctor.ruledata.logs import Catalogue, load_catalogue

_GLOB_CHARS = frozenset("*?[")

_Input = tuple[str, LogSourceKind, Callable[[], Opened]]


class _Skip(NamedTuple):
    """A directory or file a walk passed over (collect/logs/walk.py), counted."""

    reason: SkipReason


class _Directory(NamedTuple):
    """The start and the end of a directory given: said when nothing in it was read."""

    path: str
    done: bool


_Item = _Input | _Skip | _Directory


class ScanProgress:
    """How far a scan is (``scan-logs`` shows it live on a terminal): sources read, their
    bytes, what was skipped, and the path being read. (A plain class, not a dataclass:
    importing ``dataclasses`` and making one cost ~2 ms of every scan, issue 36.)"""

    __slots__ = ("bytes", "current", "skipped", "sources")

    def __init__(
        self, sources: int = 0, bytes: int = 0, skipped: int = 0, current: str = ""
    ) -> None:
        self.sources = sources
        self.bytes = bytes
        self.skipped = skipped
        self.current = current


Progress = Callable[[ScanProgress], None]


class LogInputs(TypedDict, total=False):
    """The inputs to scan, as :func:`collect_logs` and :func:`scan_sources` take them."""

    paths: Required[Sequence[str]]
    containers: Required[Sequence[str]]
    journal: Required[bool]
    kernel_log: Required[bool]
    host_root: Required[Path]
    docker_host: str | None
    stdin: BinaryIO | None
    progress: Progress | None


def collect_logs(**inputs: Unpack[LogInputs]) -> LogFacts | Unavailable:
    """Scan every input. Unavailable when inputs were named but none could be read (its
    reason is the first source's); otherwise the facts, unreadable sources included with
    their ``error``."""
    facts = scan_sources(**inputs)
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
    progress: Progress | None = None,
) -> LogFacts:
    """Scan every input; ``container_deadline_s``: the whole of one container's log must
    arrive within it (default :data:`sources.DOCKER_DEADLINE_S`; tests give a short one).
    ``progress`` is called with the counts after each source and each thing skipped."""
    catalogue = load_catalogue()
    found: list[LogFinding] = []
    read: list[LogSource] = []
    skipped: dict[SkipReason, int] = {}
    state = ScanProgress()
    read_in_directory = 0  # sources read since the directory being walked began
    for item in _inputs(paths, containers, journal, kernel_log, host_root,
                        docker_host, stdin, container_deadline_s):  # fmt: skip
        if isinstance(item, _Skip):
            skipped[item.reason] = skipped.get(item.reason, 0) + 1
            state.skipped += 1
            if progress is not None:
                progress(state)
            continue
        if isinstance(item, _Directory):
            if item.done and not read_in_directory:
                item_source = LogSource(
                    name=item.path, kind="file", error=f"no-log-file:{item.path}"
                )
                read.append(item_source)
                found.append(input_finding(item_source, catalogue))
            read_in_directory = 0
            continue
        name, kind, opener = item
        state.current = name
        scanner = SourceScanner(catalogue, name, engine=engine)
        error: str | None = None
        try:
            kind, chunks = opener()
            for chunk in chunks:
                scanner.feed(chunk)
        except Skipped as exc:
            skipped[exc.reason] = skipped.get(exc.reason, 0) + 1
            state.skipped += 1
            if progress is not None:
                progress(state)
            continue
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
        read_in_directory += 1
        state.sources += 1
        state.bytes += scanner.size
        if progress is not None:
            progress(state)
        if error is not None:
            found.append(input_finding(source, catalogue))
    found.sort(key=lambda f: (f.signature, f.path, f.line))
    ordered = {r: skipped[r] for r in get_args(SkipReason) if r in skipped}
    return LogFacts(sources=read, findings=found, skipped=ordered)


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
) -> Iterator[_Item]:
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


def _path_inputs(given: str) -> Iterator[_Item]:
    """A file, a directory (its log files, sorted: collect/logs/walk.py) or a glob. What
    cannot be read is an input with its reason, never dropped: an unreadable subdirectory,
    a FIFO, a socket, a device, a dangling symbolic link (open_file refuses the non-regular
    ones); what a directory's walk passes over is counted."""
    if os.path.isdir(given):
        yield _Directory(given, done=False)
        yield from _walk(given)
        yield _Directory(given, done=True)
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


def _own_data() -> frozenset[tuple[int, int]]:
    """The tool's own folders: its package and its shipped data (``checks/`` holds every
    signature's example text, ``examples/`` its example logs)."""
    from blackwell_doctor.ruledata.resources import data_dir

    folders = [str(Path(__file__).resolve().parents[2])]
    for name in ("checks", "examples", "kernels_probe"):
        try:
            folders.append(str(data_dir(name)))
        except FileNotFoundError:
            continue
    return walk.identities(folders)


def _walk(top_dir: str) -> Iterator[_Item]:
    """The log files below ``top_dir`` in sorted order, what is passed over as skips
    (collect/logs/walk.py). Symbolic links to directories are followed once each (a link
    back up is not walked again)."""
    errors: list[OSError] = []
    seen: set[tuple[int, int]] = set()
    own = _own_data()
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
        kept: list[str] = []
        for d in sorted(dirs):
            reason = walk.skipped_directory(os.path.join(top, d), d, own)
            if reason is None:
                kept.append(d)
            else:
                yield _Skip(reason)
        dirs[:] = kept
        for name in sorted(names):
            path = os.path.join(top, name)
            if walk.log_named(name):
                yield path, "file", _opens_walked(path, structured=False)
            elif walk.structured_named(name):
                yield path, "file", _opens_walked(path, structured=True)
            else:
                yield _Skip("not-log-named")
    for exc in errors:  # the top directory itself, or the last subdirectory
        name = str(exc.filename or top_dir)
        yield name, "file", _fails(sources.os_reason(exc, name))


def _opens_walked(name: str, *, structured: bool) -> Callable[[], Opened]:
    """A walked file's opener: binary files, and a ``.json`` that holds no journal or
    Docker records, are passed over (:class:`~blackwell_doctor.collect.logs.sources.Skipped`)."""

    def check(fmt: HeadFormat, head: bytes) -> SkipReason | None:
        if fmt != "text":
            return None
        if structured:
            return "not-log-named"
        return "binary" if walk.binary_head(head) else None

    return lambda: sources.open_file(Path(name), head_check=check)


def _opens(name: str) -> Callable[[], Opened]:
    return lambda: sources.open_file(Path(name))


def _fails(reason: str) -> Callable[[], Opened]:
    def opener() -> Opened:
        raise SourceError(reason)

    return opener
