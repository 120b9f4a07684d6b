"""Arithmetic for ``bench``: percentiles as ``vllm bench serve`` computes them.

``vllm bench serve`` (vllm/benchmarks/serve.py, ``calculate_metrics``, vLLM 0.32.0) reports
``np.mean(x)`` and ``np.percentile(x, p)`` with numpy's default ``linear`` method (Hyndman
and Fan's type 7). :func:`percentile` is that method, so this tool's p50/p90/p95/p99 equal
vLLM's on the same samples without depending on numpy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import overload

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


class Ascending(Sequence[float]):
    """``values`` (floats, no NaN) in ascending order, for :func:`percentile`, in 8 bytes a
    value: a copy sorted a chunk at a time, each order statistic found by a binary search
    over the floats' bit patterns, counting through every sorted chunk (bisect). It reads
    the same values ``sorted(values)`` would."""

    def __init__(self, values: Sequence[float]) -> None:
        from array import array  # (Ascending is a bench run's; check's imports stay few)

        data = array("d", values)
        self._chunks = []
        for start in range(0, len(data), _CHUNK):
            data[start : start + _CHUNK] = array("d", sorted(data[start : start + _CHUNK]))
            self._chunks.append(memoryview(data)[start : start + _CHUNK])
        self._data = data

    def __len__(self) -> int:
        return len(self._data)

    @overload
    def __getitem__(self, index: int) -> float: ...

    @overload
    def __getitem__(self, index: slice) -> list[float]: ...

    def __getitem__(self, index: int | slice) -> float | list[float]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self._data)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("order statistic out of range")
        if len(self._chunks) == 1:
            return self._data[index]
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
