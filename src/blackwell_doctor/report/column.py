"""A column of numbers (one ``array`` type code) whose memory stays flat, whatever its length.

A bench run keeps a few numbers for every request it sends and measures: the trace's times
and lengths, each request's lateness, its measured times and token gaps. As ``array``\\ s
they cost 8 bytes a number, so a replay of a million requests of 16 tokens holds ~200 MB.
A :class:`Column` holds its first :data:`KEPT` values in memory; past them, given a
:class:`Spill` (one unnamed temporary file, shared by every column of a run), it writes the
rest to the file :data:`BLOCK` values at a time and reads them back by seek: a value by
itself, a run of them (a request's token gaps) across blocks, or every value in order (a
sequential pass reads each block once). The last two blocks read are kept, so a pass in
(almost) the order the values were appended, or two positions walking it a little apart (a
sliding window), reads each block about once; a value written to a block already in the
file is written through to it.

Columns of one file may be read from another thread (the pacer's, collect/bench/pacer.py,
reads the schedule's due times while the loop's thread appends measured requests): each
seek with its read or write, and each block fetched into a column's cache, happens under
the file's lock, so no thread moves the file between another's seek and its write.

The file comes from the layer that may touch the disk (app/: ``tempfile.TemporaryFile``);
where it cannot be written (no temporary directory, no room) the values stay in memory, as
they would without a file. Values read back are the values appended, bit for bit (the
file holds their machine bytes).
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import IO, Any, Generic, TypeVar, overload

T = TypeVar("T", int, float)

# Values of a column held in memory before any is written to the file (128 KiB of floats).
KEPT = 1 << 14
# Values written to, and read back from, the file at a time (32 KiB of floats).
BLOCK = 1 << 12


class Spill:
    """One file (``factory()``, opened on the first write) that columns append blocks to
    and read them back from by their offset."""

    def __init__(self, factory: Callable[[], IO[bytes]]) -> None:
        self._factory = factory
        self._file: IO[bytes] | None = None
        self._end = 0
        self.lock = threading.RLock()  # a seek and its read or write, from any thread

    def write(self, data: bytes) -> int:
        """Append ``data``; its offset in the file. OSError where it cannot be written."""
        with self.lock:
            if self._file is None:
                self._file = self._factory()
            at = self._end
            self._file.seek(at)
            self._file.write(data)
            self._end += len(data)
            return at

    def rewrite(self, at: int, data: bytes) -> None:
        """Write ``data`` over the file's bytes from ``at`` (written before)."""
        with self.lock:
            assert self._file is not None
            self._file.seek(at)
            self._file.write(data)

    def read(self, at: int, size: int) -> bytes:
        with self.lock:
            assert self._file is not None
            self._file.seek(at)
            data = self._file.read(size)
        if len(data) != size:
            raise OSError(f"a spilled block read back {len(data)} of its {size} bytes")
        return data


class Column(Sequence[T], Generic[T]):
    """Values of type code ``typecode`` appended in order and read back by position: the
    first ``KEPT`` in memory, then (with a ``spill``) blocks in its file, then the values
    appended since the last block was written."""

    def __init__(self, typecode: str, spill: Spill | None = None, values: Iterable[T] = ()) -> None:
        self.typecode = typecode
        self._head: array[T] = array(typecode)
        self._blocks = array("q")  # each written block's offset in the spill file
        self._tail: array[T] = array(typecode)
        self._spill = spill
        self._writing = spill is not None  # blocks go to the file (until it cannot be written)
        self._full = False  # the head holds KEPT values: the next go to the tail
        self._cache: dict[int, array[T]] = {}  # the blocks read last (two), by number
        self._n = 0
        self.extend(values)

    def append(self, value: T) -> None:
        if not self._full:
            self._head.append(value)
            self._full = self._spill is not None and len(self._head) >= KEPT
        else:
            self._tail.append(value)
            if self._writing and len(self._tail) >= BLOCK:
                self._write_block()
        self._n += 1

    def extend(self, values: Iterable[T]) -> None:
        if not isinstance(values, (array, list)):
            for value in values:
                self.append(value)
            return
        # A list or an array (a request's token gaps): the head's share, then the tail's.
        if not self._full:
            if self._spill is None:
                self._head.extend(values)
                self._n += len(values)
                return
            room = max(1, KEPT - len(self._head))  # (the first value goes to the head)
            first = values[:room]
            self._head.extend(first)
            self._n += len(first)
            self._full = len(self._head) >= KEPT
            values = values[room:]
            if not values:
                return
        self._tail.extend(values)
        self._n += len(values)
        while self._writing and len(self._tail) >= BLOCK:
            self._write_block()

    def _write_block(self) -> None:
        assert self._spill is not None
        try:
            at = self._spill.write(self._tail[:BLOCK].tobytes())
        except OSError:  # no temporary directory, or no room in it: kept in memory
            self._writing = False
            return
        self._blocks.append(at)
        del self._tail[:BLOCK]

    def _block(self, b: int) -> array[T]:
        block = self._cache.get(b)  # (one dict read: no lock needed for a hit)
        if block is not None:
            return block
        spill = self._spill
        assert spill is not None
        with spill.lock:
            block = self._cache.get(b)
            if block is None:
                size = BLOCK * self._head.itemsize
                block = array(self.typecode, spill.read(self._blocks[b], size))
                if len(self._cache) >= 2:
                    del self._cache[next(iter(self._cache))]
                self._cache[b] = block
            return block

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> array[T]: ...

    def __getitem__(self, index: int | slice) -> T | array[T]:
        if type(index) is int and 0 <= index < len(self._head):  # the common case, first
            return self._head[index]
        if isinstance(index, slice):
            start, stop, step = index.indices(self._n)
            if step == 1:
                return self.read(start, stop)
            return array(self.typecode, (self[i] for i in range(start, stop, step)))
        if index < 0:
            index += self._n
        if not 0 <= index < self._n:
            raise IndexError("column index out of range")
        head = len(self._head)
        if index < head:
            return self._head[index]
        b, k = divmod(index - head, BLOCK)
        if b < len(self._blocks):
            return self._block(b)[k]
        return self._tail[index - head - BLOCK * len(self._blocks)]

    def __setitem__(self, index: int, value: T) -> None:
        """Write the value at ``index`` (appended before): in memory, or through to its block."""
        if not 0 <= index < self._n:
            raise IndexError("column index out of range")
        head = len(self._head)
        if index < head:
            self._head[index] = value
            return
        b, k = divmod(index - head, BLOCK)
        if b >= len(self._blocks):
            self._tail[index - head - BLOCK * len(self._blocks)] = value
            return
        block = self._block(b)
        block[k] = value
        assert self._spill is not None
        self._spill.rewrite(self._blocks[b] + k * block.itemsize, block[k : k + 1].tobytes())

    def read(self, start: int, stop: int) -> array[T]:
        """Values ``start`` to ``stop`` (a copy)."""
        out: array[T] = array(self.typecode)
        head = len(self._head)
        if start < head:
            out.extend(self._head[start : min(stop, head)])
            start = head
        while start < stop:
            b, k = divmod(start - head, BLOCK)
            if b < len(self._blocks):
                take = min(stop - start, BLOCK - k)
                out.extend(self._block(b)[k : k + take])
            else:
                at = start - head - BLOCK * len(self._blocks)
                take = stop - start
                out.extend(self._tail[at : at + take])
            start += take
        return out

    def __iter__(self) -> Iterator[T]:
        yield from self._head
        for b in range(len(self._blocks)):
            yield from self._block(b)
        yield from self._tail

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (to a client process) as its values in memory: no file goes with it."""
        return (Column, (self.typecode, None, array(self.typecode, self)))


def floats(spill: Spill | None = None, values: Iterable[float] = ()) -> Column[float]:
    """A column of 8-byte floats."""
    return Column("d", spill, values)


def ints(spill: Spill | None = None, values: Iterable[int] = ()) -> Column[int]:
    """A column of 8-byte signed integers."""
    return Column("q", spill, values)


def flags(spill: Spill | None = None, values: Iterable[int] = ()) -> Column[int]:
    """A column of bytes (0 or 1)."""
    return Column("B", spill, values)
