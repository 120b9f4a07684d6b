"""Arithmetic for ``bench``: percentiles as ``vllm bench serve`` computes them.

``vllm bench serve`` (vllm/benchmarks/serve.py, ``calculate_metrics``, vLLM 0.32.0) reports
``np.mean(x)`` and ``np.percentile(x, p)`` with numpy's default ``linear`` method (Hyndman
and Fan's type 7). :func:`percentile` is that method, so this tool's p50/p90/p95/p99 equal
vLLM's on the same samples without depending on numpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import IO

from blackwell_doctor.report.indexed import Indexed

PERCENTILES = (50, 90, 95, 99)


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """numpy.percentile(values, p) (method="linear") of already sorted ``sorted_values``."""
    n = len(sorted_values)
    if n == 0:
        raise ValueError("percentile of no samples")
    rank = (n - 1) * p / 100.0
    low = math.floor(rank)
    high = min(low + 1, n - 1)
    frac = rank - low
    lo_v = sorted_values[low]
    return lo_v + (sorted_values[high] - lo_v) * frac


def mean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("mean of no samples")
    return math.fsum(values) / len(values)


# Values sorted a chunk at a time: a chunk's sort holds its values as Python floats (32 bytes
# each) at most this many at once, the rest stays 8 bytes each in an array.
_CHUNK = 1 << 16


def _key(value: float) -> int:
    """An integer in the order of the floats (IEEE 754 bits, negatives flipped)."""
    import struct

    bits: int = struct.unpack("<q", struct.pack("<d", value))[0]
    return bits if bits >= 0 else -(bits & 0x7FFF_FFFF_FFFF_FFFF) - 1


def _value(key: int) -> float:
    import struct

    bits = key if key >= 0 else -(key + 1) | -0x8000_0000_0000_0000
    value: float = struct.unpack("<d", struct.pack("<q", bits))[0]
    return value


# Where Ascending writes a long series' sorted chunks: a factory of an empty binary file
# opened for reading and writing, given by the layer that may touch the disk
# (app/bench.py's spill_sorted); None (the default, and a pure caller's): kept in memory.
_spill: Callable[[], IO[bytes]] | None = None


@contextmanager
def spilling(factory: Callable[[], IO[bytes]]) -> Iterator[None]:
    """While in this block, Ascending writes its sorted chunks to a file of ``factory``."""
    global _spill
    before, _spill = _spill, factory
    try:
        yield
    finally:
        _spill = before


class _Stored(Indexed[float]):
    """``n`` floats of ``file`` from byte ``at``, each read when asked for: a binary search
    reads the few it compares, and nothing of the file is mapped into the process (a mapped
    page it touched would count in its memory)."""

    out_of_range = "stored value out of range"

    def __init__(self, file: IO[bytes], at: int, n: int) -> None:
        self._file, self._start, self._n = file, at, n

    def __len__(self) -> int:
        return self._n

    def _at(self, index: int) -> float:
        import struct

        self._file.seek(self._start + 8 * index)
        value: float = struct.unpack("d", self._file.read(8))[0]
        return value


class Ascending(Indexed[float]):
    """``values`` (floats, no NaN) in ascending order, for :func:`percentile`: sorted a
    chunk at a time, each order statistic found by a binary search over the floats' bit
    patterns, counting through every sorted chunk (bisect). It reads the same values
    ``sorted(values)`` would.

    Inside :func:`spilling` the sorted chunks are written to the file it gives and their
    values read back as a search compares them: the process holds one chunk's sort at a
    time, not a second copy of the series (the largest, a run's pooled token gaps, is 8
    bytes a token). Otherwise, or where the file cannot be written, they are kept in
    memory, 8 bytes a value."""

    out_of_range = "order statistic out of range"

    def __init__(self, values: Sequence[float]) -> None:
        from array import array  # (Ascending is a bench run's; check's imports stay few)

        self._file: IO[bytes] | None = None
        self._chunks: list[Sequence[float]] = []
        self._n = len(values)
        if _spill is not None:
            try:
                self._store(values, _spill)
                return
            except OSError:  # no temporary directory, or no room in it
                if self._file is not None:
                    self._file.close()
                    self._file = None
                self._chunks = []
        data = array("d", values)
        for start in range(0, len(data), _CHUNK):
            data[start : start + _CHUNK] = array("d", sorted(data[start : start + _CHUNK]))
        view = memoryview(data)
        self._chunks = [view[start : start + _CHUNK] for start in range(0, len(data), _CHUNK)]

    def _store(self, values: Sequence[float], factory: Callable[[], IO[bytes]]) -> None:
        from array import array
        from itertools import islice

        self._file = factory()
        left = iter(values)
        at = 0
        while chunk := sorted(islice(left, _CHUNK)):
            self._file.write(array("d", chunk).tobytes())
            self._chunks.append(_Stored(self._file, at, len(chunk)))
            at += 8 * len(chunk)
        self._file.flush()

    def __len__(self) -> int:
        return self._n

    def _at(self, index: int) -> float:
        if len(self._chunks) == 1:
            return self._chunks[0][index]
        # The smallest float x with more than ``index`` values <= x is the value at index.
        low = _key(min(c[0] for c in self._chunks))
        high = _key(max(c[-1] for c in self._chunks))
        from bisect import bisect_right

        while low < high:
            mid = (low + high) // 2
            x = _value(mid)
            if sum(bisect_right(c, x) for c in self._chunks) > index:
                high = mid
            else:
                low = mid + 1
        return _value(low)


def ascending(values: Sequence[float]) -> Sequence[float]:
    """``values`` in ascending order: ``sorted`` for a few, :class:`Ascending` (8 bytes a
    value) for many."""
    return sorted(values) if len(values) <= _CHUNK else Ascending(values)


def rank_points(values: Sequence[float], points: int) -> list[float]:
    """``values``' order statistics at ``points`` evenly spaced ranks (all of them when there
    are fewer), lowest first: a bounded CDF."""
    n = len(values)
    if n == 0:
        return []
    ordered = ascending(values)
    if n <= points:
        return [ordered[k] for k in range(n)]
    return [ordered[round(j * (n - 1) / (points - 1))] for j in range(points)]
