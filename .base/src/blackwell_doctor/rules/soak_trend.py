"""Trend arithmetic of ``bench --soak``: is a per-interval series (KV-cache use, a GPU's used
memory, ITL p50) growing, by how much per hour, and how sure can one be?

The slope is Theil–Sen's (the median of the slopes of every pair of points): one spike, a
stuck sample or a burst of preemptions moves it little, where least squares would follow
them. Its interval is Sen's (1968, eq. 2.6): the ranks of the pairwise slopes between which
the true slope lies with the given confidence, from the null variance of Kendall's S with
the ties correction (GPU memory moves in 2 MiB steps, so ties are the rule). This is
``scipy.stats.theilslopes`` exactly (same ranks, same banker's rounding; the tests use scipy
as the oracle): scipy and numpy would cost the CLI about 60 MB of wheels and their import
time for forty lines of arithmetic, and the rest of ``bench`` already computes without
numpy (:mod:`blackwell_doctor.report.stats`).

Sen's interval assumes independent residuals. Per-interval means of a soak are somewhat
autocorrelated (a slow oscillation of the load makes the interval too narrow), which is why
a finding also needs a growth rate and an observed growth above the thresholds of
``checks/soak.toml``: statistically "not flat" is not yet operationally "growing".
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

import msgspec

from blackwell_doctor.report import exitcodes
from blackwell_doctor.report.bench import SoakResult, Trend
from blackwell_doctor.report.exitcodes import ExitCode
from blackwell_doctor.ruledata.checkdata import load_shipped


@dataclass(frozen=True)
class TheilSen:
    """slope (y units per x unit) and its interval; the interval is None when Sen's variance
    is negative (scipy then gives NaN). A flat series has variance 0 and the interval [0, 0]."""

    slope: float
    intercept: float
    low: float | None
    high: float | None
    n: int


def theil_sen(x: Sequence[float], y: Sequence[float], *, confidence: float = 0.95) -> TheilSen:
    """Theil–Sen slope of ``y`` against ``x`` with Sen's interval (scipy's ``theilslopes``,
    ``method="separate"``). Needs at least two points with distinct x."""
    n = len(y)
    if len(x) != n:
        raise ValueError("x and y differ in length")
    slopes = sorted(
        (y[j] - y[i]) / (x[j] - x[i])
        for i in range(n)
        for j in range(n)
        if x[j] - x[i] > 0  # scipy's deltax > 0: every unordered pair once
    )
    if not slopes:
        raise ValueError("Theil-Sen needs two points with distinct x")
    slope = statistics.median(slopes)
    intercept = statistics.median(y) - slope * statistics.median(x)
    alpha = 1.0 - confidence if confidence > 0.5 else confidence
    z = statistics.NormalDist().inv_cdf(alpha / 2.0)  # negative

    def ties(values: Sequence[float]) -> float:
        return sum(k * (k - 1) * (2 * k + 5) for k in Counter(values).values() if k > 1)

    sigsq = (n * (n - 1) * (2 * n + 5) - ties(x) - ties(y)) / 18.0
    if sigsq < 0:
        return TheilSen(slope=slope, intercept=intercept, low=None, high=None, n=n)
    sigma = math.sqrt(sigsq)
    nt = len(slopes)
    upper = min(round((nt - z * sigma) / 2.0), nt - 1)
    lower = max(round((nt + z * sigma) / 2.0) - 1, 0)
    return TheilSen(slope=slope, intercept=intercept, low=slopes[lower], high=slopes[upper], n=n)


# --------------------------------------------------------------------------- thresholds


class FitRules(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    confidence: Annotated[float, msgspec.Meta(gt=0.5, lt=1.0)]
    warmup_intervals: Annotated[int, msgspec.Meta(ge=0)]
    min_intervals: Annotated[int, msgspec.Meta(ge=3)]


class KvRules(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    min_rate_pp_per_hour: Annotated[float, msgspec.Meta(gt=0)]
    min_growth_pp: Annotated[float, msgspec.Meta(ge=0)]


class GpuRules(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    min_rate_mib_per_hour: Annotated[float, msgspec.Meta(gt=0)]
    min_growth_mib: Annotated[float, msgspec.Meta(ge=0)]


class ItlRules(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    min_growth_pct: Annotated[float, msgspec.Meta(gt=0)]


class SoakRules(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    fit: FitRules
    kv_cache: KvRules
    gpu_memory: GpuRules
    itl: ItlRules


def load_rules() -> SoakRules:
    """``checks/soak.toml``."""
    return load_shipped("soak.toml", SoakRules)


# --------------------------------------------------------------------------- verdicts

GROWING = "growing"
NO_TREND = "no trend"
TOO_FEW = "too few intervals"
UNAVAILABLE = "unavailable"


@dataclass(frozen=True)
class Series:
    """One quantity's per-interval values, ready to be judged."""

    quantity: str  # the JSON name
    label: str  # how sentences name it
    unit: str  # "pp", "MiB", "ms"
    hours: list[float]  # the middle of each fitted interval, hours since the soak began
    values: list[float]
    unavailable: str | None = None  # why there is no series at all
    ceiling: float | None = None  # the value at which it is exhausted (100 pp, total MiB)


def _num(value: float, unit: str) -> str:
    digits = 0 if unit == "MiB" else 2
    return f"{value:+,.{digits}f} {unit}"


# Theil-Sen takes every pair: 500 points are 125k slopes (tens of milliseconds). A week in
# 60 s intervals is 10,080, fitted as 500 bins of consecutive intervals (their means).
MAX_FIT_POINTS = 500


def _binned(x: list[float], y: list[float], limit: int) -> tuple[list[float], list[float]]:
    n = len(y)
    if n <= limit:
        return x, y
    edges = [round(i * n / limit) for i in range(limit + 1)]
    bx = [sum(x[a:b]) / (b - a) for a, b in itertools.pairwise(edges)]
    by = [sum(y[a:b]) / (b - a) for a, b in itertools.pairwise(edges)]
    return bx, by


def _span(hours: float) -> str:
    if hours >= 1.0:
        return f"{hours:,.1f} h"
    if hours * 60.0 >= 1.0:
        return f"{hours * 60.0:.1f} min"
    return f"{hours * 3600.0:.0f} s"


def _bare(series: Series, verdict: str, reason: str) -> Trend:
    return Trend(
        quantity=series.quantity,
        unit=series.unit,
        intervals=len(series.values),
        first=series.values[0] if series.values else None,
        last=series.values[-1] if series.values else None,
        slope_per_hour=None,
        ci_low_per_hour=None,
        ci_high_per_hour=None,
        growth=None,
        growth_low=None,
        growth_high=None,
        growth_pct=None,
        verdict=verdict,
        reason=reason,
    )


def judge(
    series: Series,
    rules: FitRules,
    *,
    min_rate_per_hour: float | None = None,
    min_growth: float | None = None,
    min_growth_pct: float | None = None,
) -> Trend:
    """The trend of ``series`` and its verdict under ``checks/soak.toml``'s conditions."""
    unit = series.unit
    if series.unavailable is not None:
        return _bare(series, UNAVAILABLE, f"{series.label}: {series.unavailable}")
    if len(series.values) < rules.min_intervals or len(set(series.hours)) < 2:
        return _bare(
            series,
            TOO_FEW,
            f"{series.label}: {len(series.values)} intervals fitted, a trend needs "
            f"{rules.min_intervals} (after {rules.warmup_intervals} warm-up)",
        )
    fit_x, fit_y = _binned(series.hours, series.values, MAX_FIT_POINTS)
    fit = theil_sen(fit_x, fit_y, confidence=rules.confidence)
    span = series.hours[-1] - series.hours[0]
    start = fit.intercept + fit.slope * series.hours[0]
    growth = fit.slope * span
    growth_pct = growth / start * 100.0 if start > 0 else None
    interval = (
        "no interval"
        if fit.low is None or fit.high is None
        else f"{rules.confidence:.2%} interval {_num(fit.low, unit)} to "
        f"{_num(fit.high, unit)} per hour"
    )
    level = "%" if unit == "pp" else unit  # a level in %, its changes in percentage points
    digits = 0 if unit == "MiB" else 2
    head = (
        f"{series.label} {_num(fit.slope, unit)} per hour ({interval}) over "
        f"{_span(span)} of {len(series.values)} intervals, "
        f"{series.values[0]:,.{digits}f} -> {series.values[-1]:,.{digits}f} {level}"
    )
    why: list[str] = []
    if fit.low is None or fit.low <= 0:
        why.append("the interval includes 0" if fit.low is not None else "no interval")
    if min_rate_per_hour is not None and fit.slope < min_rate_per_hour:
        why.append(f"below {min_rate_per_hour:g} {unit} per hour")
    if min_growth is not None and growth < min_growth:
        why.append(f"a fitted rise of {_num(growth, unit)}, below {min_growth:g} {unit}")
    if min_growth_pct is not None and growth_pct is None:
        why.append(f"no relative rise from a fitted start of {start:.2f} {unit}")
    elif min_growth_pct is not None and growth_pct is not None and growth_pct < min_growth_pct:
        why.append(f"a fitted rise of {growth_pct:+.1f}%, below {min_growth_pct:g}%")
    if why:
        verdict, reason = NO_TREND, f"no trend: {head}; " + ", ".join(why)
    else:
        verdict, reason = GROWING, f"growing: {head}"
        assert fit.low is not None
        assert fit.high is not None
        low, high = fit.low * span, fit.high * span
        reason += f"; fitted rise {_num(growth, unit)} ({_num(low, unit)} to {_num(high, unit)})"
        if growth_pct is not None and min_growth_pct is not None:
            reason += (
                f", {growth_pct:+.1f}% ({low / start * 100.0:+.1f}% to "
                f"{high / start * 100.0:+.1f}%) of the start"
            )
        if series.ceiling is not None and fit.slope > 0:
            left = (series.ceiling - series.values[-1]) / fit.slope
            reason += f"; at this rate exhausted in ~{max(0.0, left):,.0f} h"
    return Trend(
        quantity=series.quantity,
        unit=unit,
        intervals=len(series.values),
        first=series.values[0],
        last=series.values[-1],
        slope_per_hour=fit.slope,
        ci_low_per_hour=fit.low,
        ci_high_per_hour=fit.high,
        growth=growth,
        growth_low=None if fit.low is None else fit.low * span,
        growth_high=None if fit.high is None else fit.high * span,
        growth_pct=growth_pct,
        verdict=verdict,
        reason=reason,
    )


# --------------------------------------------------------------------------- the soak's verdict

# A series to judge and its thresholds (keyword arguments of :func:`judge`).
Limits = dict[str, float]


def per_trend_confidence(series: Sequence[tuple[Series, Limits]], rules: FitRules) -> float:
    """Each fitted series' interval is taken at 1 - (1 - confidence) / m (Bonferroni, m the
    series with enough intervals), so that the chance of calling any of them growing when
    none is stays within 1 - confidence for the whole soak, not per series."""
    fitted = [
        s for s, _ in series if s.unavailable is None and len(s.values) >= rules.min_intervals
    ]
    return 1.0 - (1.0 - rules.confidence) / max(1, len(fitted))


def trends(series: Sequence[tuple[Series, Limits]], rules: FitRules) -> list[Trend]:
    """Every series judged, each at the soak's per-trend confidence."""
    fit = msgspec.structs.replace(rules, confidence=per_trend_confidence(series, rules))
    return [judge(s, fit, **limits) for s, limits in series]


def findings(judged: Sequence[Trend]) -> list[str]:
    """The soak's findings: every trend judged growing, in its own words."""
    return [t.reason for t in judged if t.verdict == GROWING]


def exit_code(result: SoakResult, *, server_error: str | None, interrupted: bool) -> ExitCode:
    """The soak run's exit code: 130 when interrupted; 1 when the server failed, a request
    failed, a trend grows or the soak did not run its course; else 0."""
    return exitcodes.run(
        interrupted=interrupted,
        findings=bool(
            server_error is not None or result.errors or result.findings or not result.complete
        ),
    )
