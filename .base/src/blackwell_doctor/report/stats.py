"""Arithmetic for ``bench``: percentiles as ``vllm bench serve`` computes them.

``vllm bench serve`` (vllm/benchmarks/serve.py, ``calculate_metrics``, vLLM 0.32.0) reports
``np.mean(x)`` and ``np.percentile(x, p)`` with numpy's default ``linear`` method (Hyndman
and Fan's type 7). :func:`percentile` is that method, so this tool's p50/p90/p95/p99 equal
vLLM's on the same samples without depending on numpy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

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
