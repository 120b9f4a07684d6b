"""Goodput under SLOs and the capacity at SLO (``bench --rate ... --slo``).

A request *meets* the SLOs when it succeeded and each metric named is at or below its limit:
TTFT, TPOT and end-to-end latency, per request, as ``vllm bench serve --goodput`` judges
them (``calculate_metrics`` in vllm/benchmarks/serve.py, vLLM 0.32.0: ``ttft``, ``tpot``,
``e2el`` in milliseconds, ``slo >= value``; a request of one output token has a TPOT of 0
there, and here). A failed request meets none, and counts in the share's denominator:
aiperf's ``good_request_fraction`` (good / (valid + errors),
src/aiperf/metrics/types/good_request_fraction_metric.py), so that a server that sheds load
under pressure does not look good by keeping only the survivors fast.

- goodput = requests meeting every SLO / the point's duration (vLLM's ``request_goodput``);
- goodput share = requests meeting every SLO / requests sent;
- capacity at SLO = the highest offered rate whose share stays at or above the level
  (checks/bench_sweep.toml, default 90%): over the rate points in ascending offered rate,
  the first that falls below the level ends it, and the capacity is interpolated linearly
  in the offered rate between the last rate that met the level and that first one.

The capacity's interval is the compare's bootstrap (rules/compare.py): with several runs
(``--repeat N``) each resample draws that many runs with replacement, then each drawn
run's requests at every point with replacement (the two-stage bootstrap for nested data),
and computes the capacity from the resampled shares; with one run, the requests only. The
same draws give ``bench --compare`` its interval on the change of capacity.

Nothing here measures or prints.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Annotated

import msgspec

from blackwell_doctor.report.bench import (
    RATE,
    Capacity,
    RequestSample,
    ShapeResult,
    SweepPoint,
)
from blackwell_doctor.report.bench_metrics import tpot_s
from blackwell_doctor.report.stats import percentile
from blackwell_doctor.ruledata.checkdata import load_shipped
from blackwell_doctor.rules.resample import draw_counts

# The SLO metrics a request is judged on (vLLM's ttft, tpot and e2el, in milliseconds),
# named as this tool's metrics are.
SLO_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms")
# At most this long an SLO (a day): a limit beyond no request deadline means nothing.
MAX_SLO_MS = 86_400_000.0

CROSSING = "crossing"
AT_LEAST = "at least"
BELOW = "below"
NOT_MEASURED = "not measured"


class SloError(Exception):
    """An --slo or --slo-level that cannot be used (one line, for the CLI)."""


class SloRules(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    level_pct: Annotated[float, msgspec.Meta(gt=0, le=100)]


class SweepRules(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    points: Annotated[int, msgspec.Meta(ge=1, le=100)]
    refine: Annotated[int, msgspec.Meta(ge=0, le=10)]
    rise_pct: Annotated[float, msgspec.Meta(gt=0)]
    late_pct: Annotated[float, msgspec.Meta(gt=0)]


class SweepCatalogue(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    sweep: SweepRules
    slo: SloRules


def load_sweep_rules() -> SweepCatalogue:
    """``checks/bench_sweep.toml``: the sweep's grid, its knee and the default SLO level."""
    return load_shipped("bench_sweep.toml", SweepCatalogue)


def parse_slo(text: str) -> dict[str, float]:
    """``ttft_ms:500,tpot_ms:50[,e2e_ms:...]`` as {metric: limit in ms}; SloError for an
    unknown metric, a metric given twice, or a limit that is not a number above 0."""
    slo: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = part.strip().partition(":")
        name = name.strip()
        if not sep or not name:
            raise SloError(
                f"--slo {text!r}: each SLO is METRIC:MILLISECONDS (e.g. ttft_ms:500,tpot_ms:50)"
            )
        if name not in SLO_METRICS:
            raise SloError(
                f"--slo {text!r}: unknown metric {name!r}; known: {', '.join(SLO_METRICS)}"
            )
        if name in slo:
            raise SloError(f"--slo {text!r}: {name} is given twice")
        try:
            limit = float(value)
        except ValueError:
            raise SloError(
                f"--slo {text!r}: {name}'s limit {value.strip()!r} is not a number"
            ) from None
        if not (math.isfinite(limit) and 0 < limit <= MAX_SLO_MS):
            raise SloError(
                f"--slo {text!r}: {name}'s limit must be above 0 and at most "
                f"{MAX_SLO_MS:,.0f} ms, got {value.strip()}"
            )
        slo[name] = limit
    return slo


def parse_level(pct: float) -> float:
    """--slo-level PCT (above 0, at most 100) as a share; SloError otherwise."""
    if not (math.isfinite(pct) and 0 < pct <= 100):
        raise SloError(f"--slo-level must be a percentage above 0 and at most 100, got {pct:g}")
    return pct / 100.0


def meets(sample: RequestSample, slo: Mapping[str, float]) -> bool:
    """Whether ``sample`` succeeded and met every SLO of ``slo`` (vLLM's rule)."""
    if not sample.ok:
        return False
    for name, limit in slo.items():
        if name == "ttft_ms":
            value = sample.ttft_ms
        elif name == "e2e_ms":
            value = sample.e2e_ms
        else:  # tpot_ms: vLLM counts a one-token answer's TPOT as 0 for goodput
            t = tpot_s(sample)
            value = 0.0 if t is None and sample.e2e_ms is not None else t
            value = None if value is None else value * 1000.0
        if value is None or value > limit:
            return False
    return True


def good_count(shape: ShapeResult, slo: Mapping[str, float]) -> int:
    return sum(1 for s in shape.samples if meets(s, slo))


def goodput(shape: ShapeResult, slo: Mapping[str, float]) -> tuple[float | None, float | None]:
    """(goodput in requests/s over the point's duration, share of requests sent); (None,
    None) without SLOs or requests."""
    if not slo or not shape.samples:
        return None, None
    good = good_count(shape, slo)
    rate = good / shape.duration_s if shape.duration_s > 0 else None
    return rate, good / len(shape.samples)


# --------------------------------------------------------------------------- capacity


def crossing(
    rates: Sequence[float], shares: Sequence[float | None], level: float
) -> tuple[str, float | None]:
    """(bound, rate) of the capacity: ``rates`` ascending with their goodput ``shares``
    (None: nothing measured there, skipped)."""
    known = [(r, s) for r, s in zip(rates, shares, strict=True) if s is not None]
    if not known:
        return NOT_MEASURED, None
    last: tuple[float, float] | None = None
    for rate, share in known:
        if share < level:
            if last is None:
                return BELOW, rate
            r0, s0 = last
            # Linear between the last rate that met the level and this one (s0 >= level > share).
            return CROSSING, r0 + (s0 - level) / (s0 - share) * (rate - r0)
        last = (rate, share)
    return AT_LEAST, known[-1][0]


# One rate point's requests in each run: 1 for a request that met the SLOs, 0 for one that
# did not; None for a run that lacks the point.
_Flags = list[list[int] | None]


def _rate_points(
    points: Sequence[SweepPoint],
    runs: Sequence[Mapping[str, ShapeResult]],
    slo: Mapping[str, float],
) -> tuple[list[float], list[_Flags]]:
    """The rate points (ascending offered rate, complete in run 1) and their requests."""
    chosen = sorted(
        (p for p in points if p.load == RATE and p.offered_rate is not None and p.complete),
        key=lambda p: p.offered_rate or 0.0,
    )
    rates = [p.offered_rate or 0.0 for p in chosen]
    out: list[_Flags] = []
    for p in chosen:
        out.append(
            [
                [int(meets(s, slo)) for s in r[p.shape].samples] if p.shape in r else None
                for r in runs
            ]
        )
    return rates, out


def _shares(
    points: Sequence[_Flags], drawn: Sequence[int], rng: random.Random | None
) -> list[float | None]:
    """Each point's share over the runs ``drawn`` (with repeats), each run's requests
    resampled with replacement when ``rng`` is given (else taken as they are)."""
    out: list[float | None] = []
    for point in points:
        good = total = 0
        for r in drawn:
            flags = point[r]
            if not flags:
                continue
            if rng is None:
                good += sum(flags)
            else:
                counts = draw_counts(rng, len(flags))
                good += sum(c for c, f in zip(counts, flags, strict=True) if f)
            total += len(flags)
        out.append(good / total if total else None)
    return out


def capacity(
    points: Sequence[SweepPoint],
    runs: Sequence[Mapping[str, ShapeResult]],
    slo: Mapping[str, float],
    level: float,
    *,
    resamples: int = 2000,
    seed: int | str = 0,
    confidence: float = 0.95,
) -> tuple[Capacity, list[float]]:
    """The capacity at SLO of a sweep's ``points`` over ``runs`` (run 1 first: each maps a
    point's shape name to its requests), with its bootstrap interval; and the resampled
    capacities of the crossing (empty when the capacity is not a crossing), for the
    compare's interval on a change."""
    rates, kept = _rate_points(points, runs, slo)
    everyone = list(range(len(runs)))
    bound, value = crossing(rates, _shares(kept, everyone, None), level)
    per_run = []
    for r in everyone:
        b, v = crossing(rates, _shares(kept, [r], None), level)
        per_run.append(v if b == CROSSING else None)
    draws: list[float] = []
    low = high = None
    if bound == CROSSING and resamples > 0:
        rng = random.Random(f"{seed}:capacity")  # noqa: S311 (statistics, not secrets)
        censored = 0
        for _ in range(resamples):
            drawn = rng.choices(everyone, k=len(everyone)) if len(everyone) > 1 else everyone
            b, v = crossing(rates, _shares(kept, drawn, rng), level)
            if b == CROSSING and v is not None:
                draws.append(v)
            else:  # every rate met (or none did) in this resample: at the grid's end
                censored += 1
                draws.append(rates[-1] if b == AT_LEAST else rates[0])
        ordered = sorted(draws)
        alpha = (1.0 - confidence) / 2.0 * 100.0
        low, high = percentile(ordered, alpha), percentile(ordered, 100.0 - alpha)
    runs_text = f"{len(runs)} runs" if len(runs) > 1 else "1 run"
    pct = f"{level:.0%}"
    if bound == CROSSING:
        reason = (
            f"the goodput share fell below {pct} between {_below_rate(rates, kept, level)}: "
            f"capacity {value:.3g} req/s"
        )
        if low is not None and high is not None:
            reason += (
                f" ({confidence:.0%} interval {low:.3g} to {high:.3g}, {resamples} resamples "
                f"of {runs_text})"
            )
    elif bound == AT_LEAST:
        reason = (
            f"every rate measured met {pct} of requests within the SLOs: capacity is at least "
            f"{value:.3g} req/s, the highest rate measured"
        )
    elif bound == BELOW:
        reason = (
            f"the lowest rate measured, {value:.3g} req/s, already had fewer than {pct} of "
            "requests within the SLOs: capacity is below it"
        )
    else:
        reason = "no rate point measured to the end: no capacity"
    return (
        Capacity(
            level=level,
            bound=bound,
            rate=value,
            ci_low=low,
            ci_high=high,
            confidence=confidence,
            resamples=resamples if low is not None else 0,
            runs=len(runs),
            per_run=per_run,
            reason=reason,
        ),
        draws if bound == CROSSING else [],
    )


def _below_rate(rates: Sequence[float], kept: Sequence[_Flags], level: float) -> str:
    shares = _shares(kept, list(range(len(kept[0]))) if kept else [], None)
    last = None
    for rate, share in zip(rates, shares, strict=True):
        if share is None:
            continue
        if share < level:
            return f"{last:.3g} and {rate:.3g} req/s" if last is not None else f"{rate:.3g} req/s"
        last = rate
    return "the rates measured"
