"""The one bounded reader of every file a user names on the command line.

``check/model/recommend --facts``, ``--bench``, ``recommend --catalogue``, ``bench
--compare``, ``bench/apply --shapes`` and each file of ``fleet`` are read here, and nowhere
else. What is accepted: a regular file, or a pipe (``<(collect ...)`` process substitution
names one as ``/dev/fd/N``; a named FIFO), or ``-`` for standard input where the option
takes it. What is refused, before a byte is read: a device (``/dev/zero``, a terminal, a
disk), a socket, a directory. Every input is read up to its kind's cap and no further: a
regular file larger than the cap is refused from its size alone; a pipe or standard input
is refused after ``cap + 1`` bytes, so memory stays bounded whatever the writer sends.
The text must be UTF-8 (checked chunk by chunk as it is read; a BOM is the decoders'
business).

The caps (about 100x the largest real document of each kind, far below what the machine
would notice):

=============  =========  =================================================================
kind           cap        why
=============  =========  =================================================================
facts          64 MiB     an 8-GPU host with every P2P pair is 20 KiB; a long log scan
                          and a bench section stay under 1 MiB
bench run      256 MiB    a run keeps every request's samples (ITL per token): 300,000
                          requests of a soak are tens of MiB
catalogue      1 MiB      the shipped runtimes.toml is 7 KiB (TOML decodes to ~70x
                          its size: tomllib, 200,000 small tables in 3 MB took 223 MB)
shapes         1 MiB      a shapes file is a few tables
trace          4 GiB      read line by line (:func:`iter_input_lines`), never whole:
                          BurstGPT's largest release is 220 MB, Mooncake's 3 MB; a
                          line of at most 1 MiB (a Mooncake line of 10,000,000 tokens
                          has 19,532 hash ids, about 150 KB)
=============  =========  =================================================================

Errors are :class:`InputError`, a :class:`~blackwell_doctor.facts.errors.UserError` (one line,
exit 2); ``fleet`` turns them into a node it could not judge instead.
"""

from __future__ import annotations

import codecs
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import msgspec

from blackwell_doctor.facts.errors import UserError

STDIN = "-"
CHUNK = 1 << 20


class InputKind(msgspec.Struct, frozen=True):
    """What a file is to the user (``facts file``) and the most bytes it may hold."""

    what: str
    limit: int


FACTS = InputKind("facts file", 64 << 20)
BENCH_RUN = InputKind("bench file", 256 << 20)
CATALOGUE = InputKind("catalogue", 1 << 20)
SHAPES = InputKind("shapes file", 1 << 20)
TRACE = InputKind("trace", 4 << 30)
MAX_TRACE_LINE = 1 << 20


class InputError(UserError):
    """A named input that cannot be read; ``reason`` without the file, for callers (fleet)
    that say the file themselves."""

    def __init__(self, kind: InputKind, name: str, reason: str) -> None:
        super().__init__(f"cannot read {kind.what} {name}: {reason}")
        self.reason = reason


def _mib(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


def _file_type(mode: int) -> str | None:
    """Why a file of ``mode`` is refused; None for a regular file or a pipe."""
    if stat.S_ISREG(mode) or stat.S_ISFIFO(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory"
    kind = (
        "a character device"
        if stat.S_ISCHR(mode)
        else "a block device"
        if stat.S_ISBLK(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "not a plain file"
    )
    return f"not a regular file or a pipe ({kind})"


def read_input(path: Path | str, kind: InputKind, *, stdin: BinaryIO | None = None) -> bytes:
    """The bytes of ``path`` (``-``: ``stdin``, when given), at most ``kind.limit`` of them,
    checked to be UTF-8; :class:`InputError` otherwise."""
    name = str(path)
    if name == STDIN and stdin is not None:
        return _bounded(stdin.read, kind, name)
    try:
        # stat before open: opening a device can itself do something (a tape rewinds).
        refused = _file_type(os.stat(name).st_mode)
        if refused is not None:
            raise InputError(kind, name, refused)
        # A FIFO opens blocking, as `cat` does: a named pipe waits for its writer.
        fd = os.open(name, os.O_RDONLY | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(kind, name, exc.strerror or str(exc)) from None
    try:
        st = os.fstat(fd)
        refused = _file_type(st.st_mode)  # swapped between the stat and the open
        if refused is not None:
            raise InputError(kind, name, refused)
        if stat.S_ISREG(st.st_mode) and st.st_size > kind.limit:
            raise InputError(kind, name, f"larger than {_mib(kind.limit)}: not a {kind.what}")
        # A regular file in one read of its size (and one more that finds its end), not in
        # 1 MiB requests: fleet reads thousands of 10-20 KiB files.
        first = st.st_size + 1 if stat.S_ISREG(st.st_mode) else CHUNK
        return _bounded(lambda n: os.read(fd, n), kind, name, first=first)
    except OSError as exc:
        raise InputError(kind, name, exc.strerror or str(exc)) from None
    finally:
        os.close(fd)


def _bounded(
    read: Callable[[int], bytes], kind: InputKind, name: str, *, first: int = CHUNK
) -> bytes:
    """Chunks of ``read(n)`` until the end (the first of at most ``first`` bytes, the others of
    at most CHUNK), refused past ``kind.limit`` bytes or at the first byte that is not UTF-8
    (the decoder's output is dropped chunk by chunk)."""
    chunks: list[bytes] = []
    total = 0
    size = first
    # Made at the first chunk that is not ASCII: until then there is nothing to decode (and
    # nothing pending that a decoder made later would miss).
    decoder: codecs.IncrementalDecoder | None = None
    while True:
        chunk = read(min(size, kind.limit + 1 - total))
        if not chunk:
            break
        size = CHUNK
        total += len(chunk)
        if total > kind.limit:
            raise InputError(kind, name, f"more than {_mib(kind.limit)}: not a {kind.what}")
        chunks.append(chunk)
        if decoder is None:
            if chunk.isascii():
                continue
            decoder = codecs.getincrementaldecoder("utf-8")()
        try:
            decoder.decode(chunk)
        except UnicodeDecodeError as exc:
            offset = total - len(exc.object) + exc.start  # the decoder's pending bytes count
            byte = exc.object[exc.start]
            raise InputError(
                kind, name, f"not UTF-8 text (byte 0x{byte:02x} at offset {offset})"
            ) from None
    if decoder is not None:
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise InputError(kind, name, "not UTF-8 text (it ends inside a character)") from None
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def iter_input_lines(
    path: Path | str, kind: InputKind, *, max_line: int
) -> Iterator[tuple[int, str]]:
    """The lines of ``path`` (numbered from 1, without their line ending), read as they are
    used: memory holds one line, whatever the file's size. Refused as :func:`read_input`
    refuses (a device, a socket, a directory: before a byte is read), and past
    ``kind.limit`` bytes, at a line longer than ``max_line`` bytes or one that is not UTF-8,
    each an :class:`InputError` naming the line."""
    name = str(path)
    try:
        refused = _file_type(os.stat(name).st_mode)
        if refused is not None:
            raise InputError(kind, name, refused)
        handle = open(name, "rb", buffering=CHUNK)  # noqa: SIM115 (closed below)
    except OSError as exc:
        raise InputError(kind, name, exc.strerror or str(exc)) from None
    with handle:
        refused = _file_type(os.fstat(handle.fileno()).st_mode)
        if refused is not None:
            raise InputError(kind, name, refused)
        total = 0
        number = 0
        while True:
            try:
                raw = handle.readline(max_line + 2)  # the line, its "\r\n", one more
            except OSError as exc:
                raise InputError(kind, name, exc.strerror or str(exc)) from None
            if not raw:
                return
            number += 1
            total += len(raw)
            if total > kind.limit:
                raise InputError(kind, name, f"more than {_mib(kind.limit)}: not a {kind.what}")
            line = raw.rstrip(b"\r\n")
            if len(line) > max_line:
                raise InputError(kind, name, f"line {number} is longer than {_mib(max_line)}")
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(
                    kind, name, f"line {number} is not UTF-8 text (byte at column {exc.start + 1})"
                ) from None
            yield number, text
