"""Opening a file that untrusted input names (a model's shard, a file a package's RECORD
lists) for reading, when it is a regular file and only then.

A FIFO planted under a file's name would block ``open()`` for a writer forever, and opening
a device can do something by itself (a tape rewinds, a modem hangs up): the path is looked
at before it is opened (``stat``), opened without blocking (``O_NONBLOCK``; ``O_NOCTTY``: a
terminal never becomes ours), and what was opened is looked at again (``fstat``: the path
may have been replaced in between). Anything but a regular file is a
:class:`NotRegularFile`, an ``OSError`` whose ``strerror`` says so, so that callers that
turn an ``OSError`` into a reason need nothing more.
"""

from __future__ import annotations

import errno
import os
import stat

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)


class NotRegularFile(OSError):
    """The path names a FIFO, a socket, a device or a directory."""

    def __init__(self, path: str) -> None:
        super().__init__(errno.EINVAL, "not a regular file", path)


def open_regular(path: str | os.PathLike[str]) -> tuple[int, os.stat_result]:
    """A descriptor of ``path`` (links followed) and its ``fstat``, if it is a regular file;
    :class:`NotRegularFile` if it is something else, ``OSError`` if it cannot be opened.
    The caller closes the descriptor."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise NotRegularFile(os.fspath(path))
    fd = os.open(path, _FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(os.fspath(path))
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_regular(path: str | os.PathLike[str], limit: int) -> tuple[bytes, int]:
    """At most ``limit`` bytes of the regular file ``path`` (:func:`open_regular`), and the
    file's size, which tells a caller whether there was more."""
    fd, st = open_regular(path)
    try:
        return read_upto(fd, min(limit, st.st_size)), st.st_size
    finally:
        os.close(fd)


def read_upto(fd: int, n: int) -> bytes:
    """At most ``n`` bytes of ``fd``, fewer only at its end. One read first: a regular file
    gives all n bytes at once (below the kernel's 2 GiB a read), with no copy of them
    (joining chunks held a 100 MB model header twice: 200 MB at its cap)."""
    first = os.read(fd, n) if n > 0 else b""
    if len(first) == n or not first:
        return first
    chunks = [first]
    left = n - len(first)
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 24))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
