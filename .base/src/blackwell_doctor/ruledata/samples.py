"""How many samples a percentile needs: ``checks/bench_samples.toml``.

One rule for both ends: a shape without ``requests`` measures enough for its quantiles
(ruledata/shapes.py), and ``bench --compare`` judges a percentile only with that many
samples beyond it (rules/compare.py).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Annotated

import msgspec

from blackwell_doctor.ruledata.checkdata import load_shipped

Percentile = Annotated[float, msgspec.Meta(gt=0, lt=100)]


class SampleRules(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    beyond_quantile: Annotated[int, msgspec.Meta(ge=1, le=10_000)]
    quantiles: Annotated[list[Percentile], msgspec.Meta(min_length=1)]


class SampleCatalogue(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    samples: SampleRules


@functools.cache
def load_sample_rules() -> SampleRules:
    """``checks/bench_samples.toml``."""
    return load_shipped("bench_samples.toml", SampleCatalogue).samples


def samples_for(quantile: float, beyond: int | None = None) -> int:
    """The fewest samples with ``beyond`` (the catalogue's when None) beyond ``quantile``
    (a percentile, 0 < q < 100): ceil(beyond * 100 / (100 - q))."""
    k = load_sample_rules().beyond_quantile if beyond is None else beyond
    # In exact decimals: in floats 100 - 99.9 is 0.0999999999999943, and 10,001 samples.
    q = Fraction(repr(float(quantile)))
    return max(1, math.ceil(k * 100 / (100 - q)))


def needed(quantiles: Sequence[float]) -> tuple[float, int]:
    """The highest of ``quantiles`` and the samples it needs."""
    top = max(quantiles)
    return top, samples_for(top)


def tail_samples_enough(samples: float) -> bool:
    """Whether ``samples`` beyond a percentile (n * (1 - q/100), a float) are enough to
    judge it; rounded first: 100 * (1 - 0.9) is 9.999999999999998, not 10."""
    return round(samples, 9) >= load_sample_rules().beyond_quantile


def label(quantile: float) -> str:
    """``p99``, ``p99.9``."""
    return f"p{quantile:g}"
