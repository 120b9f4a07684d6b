"""The bootstrap's draws, shared by ``bench --compare`` (rules/compare.py) and the capacity
at SLO (rules/goodput.py): a resample is a draw count per item, so a statistic is computed on
the original values weighted by their counts, never on a copied multiset.

With several runs of one configuration (``bench --repeat N``) a resample draws the runs
first, with replacement, then the items of each drawn run (the two-stage bootstrap for
nested data: Davison and Hinkley, *Bootstrap Methods and Their Application*, 1997)."""

from __future__ import annotations

import random
from collections import Counter
from itertools import repeat


def nested_counts(
    rng: random.Random, segments: list[tuple[int, int]], drawn: list[int], n: int
) -> list[int]:
    """Draw counts over ``n`` items: for each drawn run, its segment's items drawn with
    replacement, as many as it holds (a run drawn twice contributes two draws)."""
    counts = [0] * n
    for r in drawn:
        offset, size = segments[r]
        if size:
            for i in rng.choices(range(offset, offset + size), k=size):
                counts[i] += 1
    return counts


def draw_counts(rng: random.Random, n: int) -> list[int]:
    # rng.choices(range(n), k=n) draws what rng.choices(requests, k=n) draws.
    drawn = Counter(rng.choices(range(n), k=n))
    return list(map(drawn.get, range(n), repeat(0)))
