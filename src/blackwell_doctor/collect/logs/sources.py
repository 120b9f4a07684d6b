"""Where log bytes come from: files (plain, gzip, docker json-file, journald json/export),
stdin, containers, the systemd journal and the kernel log. Each opener returns the source's
kind and an iterator of byte chunks; a problem is a :class:`SourceError` with a reason
token, never a crash.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import subprocess
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Literal

import msgspec

from blackwell_doctor.collect.logs.matcher import CHUNK_BYTES
from blackwell_doctor.facts.document import LogSourceKind, SkipReason

# socket (Docker), tempfile (commands) and queue (gzip) are imported where a source of that
# kind is read: a plain file's scan does not need them (start-up: docs/performance.md).
if TYPE_CHECKING:
    import socket

JOURNAL_TIMEOUT_S = 120.0
DMESG_TIMEOUT_S = 20.0
DOCKER_TIMEOUT_S = 30.0

_GZIP_MAGIC = b"\x1f\x8b"
_GZIP_STEP = 1 << 16
_DOCKER_JSON_HEAD = b'{"log":'
# Docker's json-file driver writes one object per line; a "log" value may be a partial line
# (split at 16 KiB, no trailing newline), so values are concatenated as they are.
_DOCKER_BATCH = 1 << 20
_DOCKER_MAX_RECORD = 1 << 20


class SourceError(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Skipped(Exception):
    """A file a directory walk passed over once its first bytes were seen (binary, or a
    ``.json`` that holds no log records): counted, not a source (collect/logs/walk.py)."""

    def __init__(self, reason: SkipReason) -> None:
        super().__init__(reason)
        self.reason: SkipReason = reason


# What the first bytes of a file say it holds (after gunzip): its format's name and the
# bytes. A HeadCheck returns why the file is not read, or None to read it.
HeadFormat = Literal["text", "docker-json", "journal-json", "journal-export"]
HeadCheck = Callable[[HeadFormat, bytes], "SkipReason | None"]


def os_reason(exc: OSError, name: str) -> str:
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return f"not-found:{name}"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"permission-denied:{name}"
    return f"os-error-{errno.errorcode.get(exc.errno or 0, 'EIO').lower()}:{name}"


Opened = tuple[LogSourceKind, Iterator[bytes]]


# --------------------------------------------------------------------------- files and stdin


# Docker's json-file logs are read as files; facts.LogSourceKind has no value of its own
# for them yet (asked of the lead: "docker-json"). Until then they are reported as "file".
DOCKER_JSON_KIND: LogSourceKind = "docker-json"


def open_file(path: Path, head_check: HeadCheck | None = None) -> Opened:
    """A regular file; gzip by its magic bytes (rotated ``.gz`` or not), docker json-file
    by its first bytes. FIFOs, sockets and devices are refused (a scan must not block); a
    dangling symbolic link says so. ``head_check`` (a directory walk's): :class:`Skipped`
    when it refuses what the first bytes hold."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise SourceError(f"not-a-regular-file:{path}")
        fh = open(path, "rb")  # noqa: SIM115 - closed by the generator
    except OSError as exc:
        if exc.errno == errno.ENOENT and os.path.islink(path):
            raise SourceError(f"broken-symlink:{path}") from None
        raise SourceError(os_reason(exc, str(path))) from None
    return _sniff(_file_chunks(fh, str(path)), str(path), plain="file", head_check=head_check)


def _sniff(
    raw: Iterator[bytes], name: str, *, plain: LogSourceKind, head_check: HeadCheck | None = None
) -> Opened:
    """Read the first chunk now and tell the format by it: gzip (its magic bytes, then the
    same test on what it holds), docker json-file, or plain text of kind ``plain``.
    ``head_check`` sees the format and the first bytes (decompressed) first."""
    kind = plain
    first = next(raw, b"")
    if first[:2] == _GZIP_MAGIC:
        raw = _ahead(_gunzip(_again(first, raw), name))
        first = next(raw, b"")
        kind = "gzip" if plain == "file" else plain
    head = first.lstrip()
    fmt: HeadFormat = "text"
    if head[: len(_DOCKER_JSON_HEAD)] == _DOCKER_JSON_HEAD:
        fmt = "docker-json"
    elif _is_journal_json(head):
        fmt = "journal-json"
    elif head[: len(_JOURNAL_EXPORT_HEAD)] == _JOURNAL_EXPORT_HEAD:
        fmt = "journal-export"
    if head_check is not None:
        refused = head_check(fmt, first)
        if refused is not None:
            close = getattr(raw, "close", None)
            if close is not None:
                close()  # the file, and a decompression thread
            raise Skipped(refused)
    if fmt == "docker-json":
        if kind == "file":
            kind = DOCKER_JSON_KIND
        return kind, _json_lines(_again(first, raw), _docker_value)
    if fmt == "journal-json":
        return kind, _json_lines(_again(first, raw), _journal_value)
    if fmt == "journal-export":
        return kind, _journal_export(_again(first, raw))
    return kind, _again(first, raw)


def _again(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    # Closed before it reached ``rest`` (a consumer that stopped after the first chunk),
    # it closes ``rest`` itself: the decompression thread and the file must not wait for
    # the garbage collector (on Python 3.12 on a 32-core host they outlived close()).
    try:
        if first:
            yield first
        yield from rest
    finally:
        close = getattr(rest, "close", None)
        if close is not None:
            close()


def _file_chunks(fh: BinaryIO, name: str) -> Iterator[bytes]:
    with fh:
        while True:
            try:
                chunk = fh.read(CHUNK_BYTES)
            except OSError as exc:
                raise SourceError(os_reason(exc, name)) from None
            if not chunk:
                return
            yield chunk


def _gunzip(raw: Iterator[bytes], name: str) -> Iterator[bytes]:
    """Decompress a gzip stream in pieces of at most CHUNK_BYTES (constant memory, also for
    a bomb). Members may follow one another (``cat a.gz b.gz``), zero padding after a
    member is skipped, as gzip(1) does. A damaged stream is ``corrupt-gzip``, one that ends
    early (a rotation caught mid-write) ``truncated-gzip``: both after everything before
    the damage has been yielded."""
    unzip = zlib.decompressobj(wbits=31)
    fed = False  # the current member has had input
    for data in _slices(raw):
        while data:
            if unzip.eof:
                data = data.lstrip(b"\x00")
                if not data:
                    break
                unzip, fed = zlib.decompressobj(wbits=31), False
            try:
                out = unzip.decompress(data, CHUNK_BYTES)
                fed = True
                while True:
                    if out:
                        yield out
                    if unzip.eof or len(out) < CHUNK_BYTES or unzip.unconsumed_tail:
                        break
                    out = unzip.decompress(b"", CHUNK_BYTES)  # output still pending
            except zlib.error:
                raise SourceError(f"corrupt-gzip:{name}") from None
            data = unzip.unused_data if unzip.eof else unzip.unconsumed_tail
    if fed and not unzip.eof:
        raise SourceError(f"truncated-gzip:{name}")


# Chunks decompressed ahead of the scan: 16 x CHUNK_BYTES (16 MiB, what 2 chunks of 8 MiB
# were) of memory at most; with 2 of 1 MiB the scan waited on the thread more often.
_AHEAD = 16


def _ahead(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """Run ``chunks`` (the gzip decompression) in a thread, at most :data:`_AHEAD` chunks
    ahead of the consumer: zlib inflates without the GIL, so decompression and the scan use
    both cores (benchmarks/scan_logs.py). Its SourceError (or any error) is raised here, in
    order, after the chunks before it; a consumer that stops early stops the thread."""
    from queue import Full, Queue

    queue: Queue[tuple[bytes | None, BaseException | None]] = Queue(maxsize=_AHEAD)
    stop = threading.Event()

    def put(item: tuple[bytes | None, BaseException | None]) -> bool:
        while not stop.is_set():
            try:
                queue.put(item, timeout=0.1)
            except Full:
                continue
            return True
        return False

    def produce() -> None:
        try:
            for chunk in chunks:
                if not put((chunk, None)):
                    return
            put((None, None))
        except BaseException as exc:  # handed to the consumer, raised there
            put((None, exc))

    worker = threading.Thread(target=produce, name="scan-logs-gunzip", daemon=True)
    worker.start()
    try:
        while True:
            chunk, error = queue.get()
            if error is not None:
                raise error
            if chunk is None:
                return
            yield chunk
    finally:
        stop.set()
        worker.join()


def _slices(raw: Iterator[bytes]) -> Iterator[bytes]:
    # Compressed input in small steps: a damaged stream loses only the output of one step.
    for data in raw:
        for at in range(0, len(data), _GZIP_STEP):
            yield data[at : at + _GZIP_STEP]


def stdin_chunks(stream: BinaryIO) -> Opened:
    """Standard input: plain, docker json-file or gzip (``cat x.log.gz | scan-logs -``), by
    its first bytes as for files; its kind stays ``stdin``."""

    def chunks() -> Iterator[bytes]:
        while True:
            try:
                chunk = stream.read(CHUNK_BYTES)
            except OSError as exc:
                raise SourceError(os_reason(exc, "-")) from None
            if not chunk:
                return
            yield chunk

    return _sniff(chunks(), "-", plain="stdin")


class _DockerLine(msgspec.Struct):
    log: str = ""


_docker_decoder = msgspec.json.Decoder(_DockerLine)


def _json_lines(chunks: Iterator[bytes], value: Callable[[bytes], bytes]) -> Iterator[bytes]:
    """The messages of one-JSON-object-per-line records (``value`` takes one record's
    bytes to its text), in batches. A record longer than
    _DOCKER_MAX_RECORD (the driver splits messages at 16 KiB, so only a damaged or hostile
    file has one) is not decoded: its bytes pass through as text up to its end, so that
    memory stays bounded as for a plain file's long line, and records after it are decoded
    again."""
    carry = b""
    out: list[bytes] = []
    size = 0
    runaway = False  # inside a record too long to decode, passing it through
    for chunk in chunks:
        start = 0
        if runaway:
            nl = chunk.find(b"\n")
            if nl == -1:
                yield chunk
                continue
            yield chunk[: nl + 1]
            runaway, start = False, nl + 1
        last_nl = chunk.rfind(b"\n", start)
        if last_nl == -1:
            carry += chunk[start:] if start else chunk
        else:
            if carry:
                first_nl = chunk.find(b"\n", start)
                piece = value(carry + chunk[start:first_nl])
                out.append(piece)
                size += len(piece)
                start, carry = first_nl + 1, b""
            for raw in chunk[start:last_nl].split(b"\n") if start <= last_nl else ():
                piece = value(raw)
                out.append(piece)
                size += len(piece)
            carry = chunk[last_nl + 1 :]
        if len(carry) > _DOCKER_MAX_RECORD:
            out.append(carry)
            size += len(carry)
            carry, runaway = b"", True
        if size >= _DOCKER_BATCH or runaway:
            yield b"".join(out)
            out, size = [], 0
    if carry:
        out.append(value(carry))
    if out:
        yield b"".join(out)


def _docker_value(raw: bytes) -> bytes:
    if not raw.strip():
        return b""
    try:
        return _docker_decoder.decode(raw).log.encode("utf-8", errors="surrogateescape")
    except (msgspec.DecodeError, UnicodeEncodeError):
        return raw + b"\n"  # not json after all: keep the line as it is


# systemd's journal exported to a file or a pipe (journalctl(1), systemd.journal-fields(7),
# https://systemd.io/JOURNAL_EXPORT_FORMATS/): ``-o json`` writes one object per entry and
# line, MESSAGE a string or, when it is not valid UTF-8, an array of byte values (null when
# too large); ``-o export`` writes KEY=VALUE lines, an entry ending at an empty line, and a
# binary field as its name, a newline, a 64-bit little-endian length, the bytes and a
# newline. Only MESSAGE is kept, one line per entry (a multi-line message keeps its lines),
# led by "<N>" where the entry's PRIORITY is err or worse (issue 33: the level the journal
# keeps apart; in export, a PRIORITY written after the MESSAGE is not seen).
_JOURNAL_EXPORT_HEAD = b"__CURSOR="
_JOURNAL_JSON_KEYS = (b'"__CURSOR"', b'"__REALTIME_TIMESTAMP"', b'"_BOOT_ID"')


def _is_journal_json(head: bytes) -> bool:
    first_line = head[: head.find(b"\n")] if b"\n" in head else head
    return (
        head[:1] == b"{"
        and b'"MESSAGE"' in first_line
        and any(k in first_line for k in _JOURNAL_JSON_KEYS)
    )


class _JournalEntry(msgspec.Struct):
    MESSAGE: str | list[int] | None = None
    PRIORITY: str | int | None = None


def _priority_prefix(priority: str | int | bytes | None) -> bytes:
    """``<N>`` before a MESSAGE whose entry's PRIORITY is err or worse (0-3), the syslog
    PRI form the grammar table reads (ruledata/records.py, syslog-pri): the journal keeps
    a record's level apart from its text (systemd.journal-fields(7) PRIORITY=)."""
    if isinstance(priority, bytes):
        priority = priority.decode("ascii", "replace")
    text = str(priority).strip() if priority is not None else ""
    return f"<{text}>".encode() if text in ("0", "1", "2", "3") else b""


_journal_decoder = msgspec.json.Decoder(_JournalEntry)


def _journal_value(raw: bytes) -> bytes:
    if not raw.strip():
        return b""
    try:
        entry = _journal_decoder.decode(raw)
        message = entry.MESSAGE
    except msgspec.DecodeError:
        return raw + b"\n"  # not a journal record after all: keep the line as it is
    if message is None:
        return b""
    if isinstance(message, list):
        data = bytes(b & 0xFF for b in message)
    else:
        data = message.encode("utf-8", errors="surrogateescape")
    data = _priority_prefix(entry.PRIORITY) + data
    return data if data.endswith(b"\n") else data + b"\n"


def _journal_export(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """The MESSAGE fields of a journal export stream, in batches, in constant memory: a
    text line longer than _DOCKER_MAX_RECORD is dropped up to its end (no field of the
    format is that long but a damaged one), a binary MESSAGE is passed on as it arrives
    whatever its length, other binary fields are skipped as they arrive."""
    buf = b""
    out: list[bytes] = []
    size = 0
    binary_left = 0  # bytes of a binary field still to come (its data, then b"\n")
    binary_keep = False
    skip_line = False  # inside an over-long text line
    # The entry's PRIORITY where it came before its MESSAGE (journald writes it first).
    priority: bytes | None = None
    for chunk in chunks:
        buf += chunk
        pos = 0
        while pos < len(buf):
            if binary_left:
                take = min(binary_left, len(buf) - pos)
                if binary_keep:  # its bytes and, at the end, the field's newline
                    out.append(buf[pos : pos + take])
                    size += take
                binary_left -= take
                pos += take
                continue
            nl = buf.find(b"\n", pos)
            if nl == -1:
                if len(buf) - pos > _DOCKER_MAX_RECORD:
                    skip_line, pos = True, len(buf)
                break
            line = buf[pos:nl]
            if skip_line:
                skip_line, pos = False, nl + 1
                continue
            eq = line.find(b"=")
            if eq != -1:
                if line[:eq] == b"MESSAGE":
                    out.append(_priority_prefix(priority) + line[eq + 1 :] + b"\n")
                    size += len(line) - eq
                elif line[:eq] == b"PRIORITY":
                    priority = line[eq + 1 :]
                pos = nl + 1
            elif line:  # a binary field: name, newline, u64 little-endian length
                if len(buf) - (nl + 1) < 8:
                    break  # its length is in the next chunk
                length = int.from_bytes(buf[nl + 1 : nl + 9], "little")
                binary_left, binary_keep = length + 1, line == b"MESSAGE"
                pos = nl + 9
            else:
                pos = nl + 1  # the empty line between entries
                priority = None
        buf = buf[pos:]
        if size >= _DOCKER_BATCH:
            yield b"".join(out)
            out, size = [], 0
    if buf and not binary_left and not skip_line:
        line = buf.rstrip(b"\n")
        if line.startswith(b"MESSAGE="):
            out.append(line[len(b"MESSAGE=") :] + b"\n")
    if out:
        yield b"".join(out)


# --------------------------------------------------------------------------- commands


def command_chunks(args: list[str], *, timeout_s: float, name: str) -> Iterator[bytes]:
    """Stream a command's standard output; a missing command, a failure or a hang becomes
    a SourceError (after what it printed has been yielded)."""
    import tempfile

    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err
            )
        except FileNotFoundError:
            raise SourceError(f"not-found:{args[0]}") from None
        except PermissionError:
            raise SourceError(f"permission-denied:{args[0]}") from None
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            with contextlib.suppress(OSError):
                proc.kill()

        timer = threading.Timer(timeout_s, kill)
        timer.daemon = True
        timer.start()
        try:
            assert proc.stdout is not None
            while chunk := proc.stdout.read(CHUNK_BYTES):
                yield chunk
            code = proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                with contextlib.suppress(OSError):
                    proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        if timed_out.is_set():
            raise SourceError(f"timeout-{timeout_s:g}s:{name}")
        if code != 0:
            err.seek(0)
            message = err.read(4096).decode("utf-8", errors="replace").lower()
            if "permission" in message or "not permitted" in message:
                raise SourceError(f"permission-denied:{name}")
            raise SourceError(f"exit-{code}:{name}")


def journal_chunks() -> Opened:
    # -b: this boot; short-iso: sortable timestamps; --no-pager: never wait on a terminal.
    args = ["journalctl", "-b", "-o", "short-iso", "--no-pager"]
    return "journal", command_chunks(args, timeout_s=JOURNAL_TIMEOUT_S, name="journal")


# --------------------------------------------------------------------------- kernel log


def kernel_chunks(host_root: Path) -> Opened:
    """/dev/kmsg under the host root, read without blocking until EAGAIN; where it cannot be
    opened on this host (root ``/``), ``dmesg``. (HostFS refuses non-regular files on
    purpose; /dev/kmsg is a character device, so it is opened here.)"""
    try:
        return "kernel", _kmsg(host_root)
    except SourceError as first:
        if host_root != Path("/"):
            raise
        try:
            return "kernel", _prefetch(
                command_chunks(["dmesg"], timeout_s=DMESG_TIMEOUT_S, name="dmesg")
            )
        except SourceError:
            raise first from None


def _prefetch(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """Start the command now, so that a missing ``dmesg`` is known before scanning."""
    first = next(chunks, b"")

    def rest() -> Iterator[bytes]:
        if first:
            yield first
        yield from chunks

    return rest()


def _kmsg(host_root: Path) -> Iterator[bytes]:
    path = host_root / "dev" / "kmsg"
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    if host_root != Path("/"):
        flags |= os.O_NOFOLLOW
    try:
        mode = os.stat(path).st_mode
        if not (stat.S_ISCHR(mode) or stat.S_ISREG(mode)):
            raise SourceError("not-a-log-device:/dev/kmsg")
        fd = os.open(path, flags)
    except OSError as exc:
        raise SourceError(os_reason(exc, "/dev/kmsg")) from None
    return _kmsg_records(fd)


def _kmsg_records(fd: int) -> Iterator[bytes]:
    """/dev/kmsg records: ``prio,seq,usec,flags[,...];message`` then continuation lines that
    start with a space (key=value), written out as dmesg does: ``[seconds] message``."""
    carry = b""
    try:
        while True:
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                break  # EAGAIN: no more records now
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue  # records overwritten while reading: go on with the next
                if exc.errno == errno.EINVAL and not carry:
                    continue
                raise SourceError(os_reason(exc, "/dev/kmsg")) from None
            if not data:
                break
            lines = (carry + data).split(b"\n")
            carry = lines.pop()
            out = [_kmsg_line(line) for line in lines]
            yield b"".join(out)
        if carry:
            yield _kmsg_line(carry)
    finally:
        os.close(fd)


def _kmsg_line(line: bytes) -> bytes:
    if not line or line.startswith(b" "):
        return b""
    head, sep, message = line.partition(b";")
    if not sep:
        return line + b"\n"
    fields = head.split(b",")
    try:
        seconds = int(fields[2]) / 1e6
    except (IndexError, ValueError):
        return message + b"\n"
    return b"[%12.6f] " % seconds + message + b"\n"


# --------------------------------------------------------------------------- containers


def container_chunks(
    name: str, docker_host: str | None, *, deadline_s: float | None = None
) -> Opened:
    """A container's stdout and stderr through the Docker API (the docker SDK, imported only
    here). Engine down, unknown container, no permission: a SourceError.

    The log stream is read here rather than through the SDK's ``logs(stream=True)``: the
    SDK turns the socket's timeout off for streams and reads each frame whole at the size
    its header announces, so an engine that stalls after one frame hangs the scan forever
    and one that announces a 4 GB frame makes it allocate that much. Here every read has
    the API timeout, the whole stream has ``deadline_s`` (checked between reads and
    enforced by shutting the socket down, so a peer that trickles a byte at a time cannot
    outlast it), frame headers are checked, and a frame's payload is passed on in pieces
    of at most DOCKER_READ_BYTES whatever size it announces."""
    label = f"container:{name}"
    deadline = DOCKER_DEADLINE_S if deadline_s is None else deadline_s
    read_timeout = min(DOCKER_TIMEOUT_S, deadline)
    try:
        import docker
        import docker.errors
        import requests
    except ImportError:
        raise SourceError("docker-sdk-not-installed") from None
    watchdog = _Watchdog(deadline, label)
    try:
        if docker_host:
            client = docker.DockerClient(base_url=docker_host, timeout=read_timeout)
        else:
            client = docker.from_env(timeout=read_timeout)
        container = client.containers.get(name)
        tty = bool(container.attrs.get("Config", {}).get("Tty"))
        api = client.api
        response = api.get(
            api._url("/containers/{0}/logs", container.id),
            params={"stdout": 1, "stderr": 1, "follow": 0, "timestamps": 0, "tail": "all"},
            stream=True,
            timeout=(read_timeout, read_timeout),
        )
        api._raise_for_status(response)
        watchdog.arm(response)
    except docker.errors.NotFound:
        watchdog.cancel()
        raise SourceError(f"container-not-found:{name}") from None
    except (docker.errors.DockerException, requests.RequestException, OSError) as exc:
        watchdog.cancel()
        raise SourceError(_docker_reason(exc, label, watchdog, read_timeout)) from None

    def chunks() -> Iterator[bytes]:
        try:
            raw = response.raw
            yield from (_raw_stream(raw, watchdog) if tty else _frames(raw, watchdog))
            if watchdog.fired:
                raise SourceError(watchdog.reason)
        except (docker.errors.DockerException, requests.RequestException, OSError) as exc:
            raise SourceError(_docker_reason(exc, label, watchdog, read_timeout)) from None
        except Exception as exc:  # urllib3/http.client errors of a socket shut mid-read
            if watchdog.fired:
                raise SourceError(watchdog.reason) from None
            if isinstance(exc, SourceError):
                raise
            raise SourceError(f"docker-stream-error:{label}") from None
        finally:
            watchdog.cancel()
            with contextlib.suppress(Exception):
                response.close()
            with contextlib.suppress(Exception):
                client.close()

    return "container", chunks()


# The whole of one container's log must arrive within this (the API timeout above bounds
# each read); a peer that sends a byte now and then cannot keep a scan going.
DOCKER_DEADLINE_S = 120.0
DOCKER_READ_BYTES = 1 << 20
# A multiplexed stream's frame header (Docker Engine API, "Attach to a container"): stream
# type (0 stdin, 1 stdout, 2 stderr), three zero bytes, the payload size big-endian (read
# with int.from_bytes: ``struct`` is ~1 ms of a scan's start-up).
_FRAME_HEADER_BYTES = 8


class _Watchdog:
    """Ends a stream at a deadline: shuts its socket down, which wakes a blocked read."""

    def __init__(self, deadline_s: float, label: str) -> None:
        self.seconds = deadline_s
        self.deadline = time.monotonic() + deadline_s
        self.reason = f"timeout-{deadline_s:g}s:{label}"
        self.label = label
        self.fired = False
        self._timer: threading.Timer | None = None

    def arm(self, response: object) -> None:
        import socket

        def fire() -> None:
            self.fired = True
            for sock in _sockets(response):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

        self._timer = threading.Timer(max(0.0, self.deadline - time.monotonic()), fire)
        self._timer.daemon = True
        self._timer.start()

    def expired(self) -> bool:
        return self.fired or time.monotonic() >= self.deadline

    def cut(self, reason: str) -> SourceError:
        """The error for a stream that broke off: the deadline's when it has passed (the
        shut socket is what broke it), else ``reason``."""
        return SourceError(self.reason if self.expired() else f"{reason}:{self.label}")

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def _sockets(response: object) -> list[socket.socket]:
    """The socket under a requests response (unix socket or TCP), found by walking the
    wrappers urllib3 and http.client put around it."""
    import socket

    found: list[socket.socket] = []
    node: object = getattr(response, "raw", None)
    for attr in ("_fp", "fp", "raw", "_sock"):
        if node is None:
            break
        if isinstance(node, socket.socket):
            break
        node = getattr(node, attr, None)
    if isinstance(node, socket.socket):
        found.append(node)
    return found


def _read(raw: BinaryIO, size: int, watchdog: _Watchdog) -> bytes:
    """Up to ``size`` bytes; b"" only at the end of the stream. Past the deadline, or when
    the deadline's shutdown is what ended the read, the timeout (a SourceError): the clock
    can pass the deadline before the timer's thread has run, and a stream cut there is not
    a stream read to its end."""
    if watchdog.expired():
        raise SourceError(watchdog.reason)
    data = raw.read(size)
    if not data and watchdog.fired:
        raise SourceError(watchdog.reason)
    return data


def _raw_stream(raw: BinaryIO, watchdog: _Watchdog) -> Iterator[bytes]:
    # A container with a TTY has one stream and no frames.
    while data := _read(raw, DOCKER_READ_BYTES, watchdog):
        yield data


def _frames(raw: BinaryIO, watchdog: _Watchdog) -> Iterator[bytes]:
    """The payloads of a multiplexed stream. It may end only between frames: a header or a
    payload cut short (a frame announced at 4 GB, closed after 13 bytes) is
    ``docker-truncated-frame``, never the end of the log."""
    while True:
        header = _read(raw, _FRAME_HEADER_BYTES, watchdog)
        if not header:
            return
        if len(header) < _FRAME_HEADER_BYTES:
            raise watchdog.cut("docker-truncated-frame")
        if header[:1] not in (b"\0", b"\1", b"\2") or header[1:4] != b"\0\0\0":
            raise watchdog.cut("docker-bad-frame")
        left = int.from_bytes(header[4:8], "big")
        while left:
            data = _read(raw, min(left, DOCKER_READ_BYTES), watchdog)
            if not data:
                raise watchdog.cut("docker-truncated-frame")
            left -= len(data)
            yield data


def _docker_reason(exc: BaseException, label: str, watchdog: _Watchdog, timeout_s: float) -> str:
    """One reason token for a Docker API failure: a timeout says so (a requests timeout is
    an OSError without errno, which read as ``os-error-eio``), then permissions, an
    unreachable engine, the API's status code."""
    import requests

    if watchdog.fired:
        return f"timeout-{watchdog.seconds:g}s:{label}"
    text = str(exc).lower()
    if isinstance(exc, (requests.Timeout, TimeoutError)) or "timed out" in text:
        return f"timeout-{timeout_s:g}s:{label}"
    if "permission denied" in text:
        return f"permission-denied:{label}"
    if "connection" in text or "no such file" in text or "not found" in text:
        return f"docker-engine-unreachable:{label}"
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return f"docker-error-{status}:{label}"
    if isinstance(exc, OSError) and exc.errno is not None:
        return os_reason(exc, label)
    return f"docker-error:{label}"
