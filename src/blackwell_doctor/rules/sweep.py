"""``bench --rate``: where a sweep places its loads, where its knee is, and the run's
``sweep`` section built from the points measured (checks/bench_sweep.toml holds the figures
and why).

How ``--rate sweep`` finds its range, as guidellm's sweep profile does
(src/guidellm/benchmark/profiles/sweep.py: a synchronous benchmark, a throughput one, then
rates interpolated between their request rates) and vLLM's workload explorer
(vllm/benchmarks/sweep/serve_workload.py, vLLM 0.32.0: max_concurrency 1, then the whole
dataset, then ``np.linspace`` between):

1. the *synchronous* point: one request at a time; its achieved rate is what one user gets
   and its median end-to-end latency is the floor;
2. the *throughput* point: every request at once; its achieved rate is the most the server
   serves;
3. ``points`` open-loop rates evenly from the synchronous rate to the throughput rate, the
   last at the throughput rate (guidellm's ``np.linspace(sync, throughput, n)[1:]``),
   measured in ascending order until one is past the knee (and, with SLOs, one's goodput
   share is below the level): rates beyond those only queue;
4. up to ``refine`` more rates, each halving a bracket: first the knee's (the highest rate
   within the rise and the lowest beyond), then the capacity's (the last rate that met the
   level and the first that did not).

The knee: the offered rate at which the E2E p50 crosses ``floor x (1 + rise_pct/100)``,
interpolated linearly between the highest rate measured within and the lowest beyond (the
synchronous point counts as within, at its own achieved rate). Found only by a sweep: rates
given with ``--rate R,R`` have no floor measured.

Nothing here measures or prints.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import msgspec

from blackwell_doctor.report.bench import (
    RATE,
    SYNCHRONOUS,
    THROUGHPUT,
    Knee,
    ShapeResult,
    SweepPoint,
    SweepResult,
)
from blackwell_doctor.report.bench_metrics import stats_ms
from blackwell_doctor.rules import goodput as goodputs

SWEEP = "sweep"
RATES = "rates"
FOUND = "found"
NOT_REACHED = "not reached"
NOT_MEASURED = "not measured"
# Offered rates are kept to this many significant digits (a point's name shows them).
RATE_DIGITS = 3


@dataclass(frozen=True)
class Load:
    """One point of a sweep's plan: a closed loop (synchronous, throughput) or a rate."""

    load: str
    rate: float | None = None

    def name(self, shape: str) -> str:
        """The shape name its requests are kept under: ``SHAPE@sync``, ``SHAPE@max`` or
        ``SHAPE@RATE/s``."""
        if self.load == SYNCHRONOUS:
            return f"{shape}@sync"
        if self.load == THROUGHPUT:
            return f"{shape}@max"
        return f"{shape}@{rate_label(self.rate or 0.0)}/s"


def rate_label(rate: float) -> str:
    return f"{rate:.6g}"


def rounded(rate: float) -> float:
    """``rate`` to RATE_DIGITS significant digits."""
    if rate <= 0 or not math.isfinite(rate):
        return rate
    digits = RATE_DIGITS - 1 - math.floor(math.log10(rate))
    return round(rate, digits)


def grid(sync_rate: float, max_rate: float, count: int) -> list[float]:
    """``count`` rates evenly from ``sync_rate`` (excluded) to ``max_rate`` (included),
    rounded and distinct. A server whose throughput is not above its one-user rate (it
    serves one request at a time) gets the grid up to 1.5 times the one-user rate."""
    top = max_rate if max_rate > sync_rate * 1.01 else sync_rate * 1.5
    rates = [rounded(sync_rate + (top - sync_rate) * (i + 1) / count) for i in range(count)]
    out: list[float] = []
    for r in rates:
        if r > 0 and r not in out:
            out.append(r)
    return out


def e2e_p50(shape: ShapeResult | None) -> float | None:
    return None if shape is None else shape.metrics.e2e_ms.p50


def beyond_floor(value_ms: float | None, floor_ms: float, rise_pct: float) -> bool:
    """Whether a point's E2E p50 left the floor (a point with no successful request did:
    nothing came back in time)."""
    return value_ms is None or value_ms > floor_ms * (1.0 + rise_pct / 100.0)


def knee(
    floor: tuple[float, float] | None,
    measured: Sequence[tuple[float, float | None]],
    *,
    rise_pct: float,
    metric: str = "e2e_ms.p50",
) -> Knee:
    """The knee from ``floor`` ((one-user rate, floor E2E p50 in ms), or None without a
    synchronous point) and the rate points ``measured`` ((offered rate, E2E p50))."""
    if floor is None or floor[1] <= 0:
        return Knee(
            metric=metric,
            rise_pct=rise_pct,
            floor_ms=None if floor is None else floor[1],
            threshold_ms=None,
            rate=None,
            within=None,
            beyond=None,
            verdict=NOT_MEASURED,
            reason=("no one-at-a-time floor was measured (only --rate sweep measures it): no knee"),
        )
    sync_rate, floor_ms = floor
    threshold = floor_ms * (1.0 + rise_pct / 100.0)
    ordered = sorted(measured, key=lambda m: m[0])
    within: tuple[float, float] = (sync_rate, floor_ms)
    for rate, value in ordered:
        if beyond_floor(value, floor_ms, rise_pct):
            r0, v0 = within
            if value is None or value <= v0:
                at = rate
            else:
                at = r0 + (threshold - v0) / (value - v0) * (rate - r0)
            at = min(max(at, r0), rate)
            shown = "no request answered" if value is None else f"{value:.1f} ms"
            return Knee(
                metric=metric,
                rise_pct=rise_pct,
                floor_ms=floor_ms,
                threshold_ms=threshold,
                rate=at,
                within=r0,
                beyond=rate,
                verdict=FOUND,
                reason=(
                    f"E2E p50 left its floor of {floor_ms:.1f} ms (one request at a time) by "
                    f"more than {rise_pct:g}% between {r0:.3g} req/s ({v0:.1f} ms) and "
                    f"{rate:.3g} req/s ({shown}): knee at {at:.3g} req/s"
                ),
            )
        if value is not None and rate > within[0]:
            within = (rate, value)
    top = ordered[-1][0] if ordered else sync_rate
    return Knee(
        metric=metric,
        rise_pct=rise_pct,
        floor_ms=floor_ms,
        threshold_ms=threshold,
        rate=None,
        within=within[0],
        beyond=None,
        verdict=NOT_REACHED,
        reason=(
            f"E2E p50 stayed within {rise_pct:g}% of its floor of {floor_ms:.1f} ms up to "
            f"{top:.3g} req/s, the highest rate measured: the knee is beyond it"
        ),
    )


def refinements(
    measured: Sequence[tuple[float, float | None, float | None]],
    floor: tuple[float, float],
    *,
    rise_pct: float,
    level: float | None,
    count: int,
) -> list[float]:
    """The rates that halve the knee's bracket, then the capacity's, at most ``count``, not
    already measured. ``measured``: (offered rate, E2E p50, goodput share) of each rate."""
    ordered = sorted(measured, key=lambda m: m[0])
    done = {m[0] for m in ordered}
    out: list[float] = []
    found = knee(floor, [(r, v) for r, v, _ in ordered], rise_pct=rise_pct)
    brackets: list[tuple[float, float]] = []
    if found.verdict == FOUND and found.within is not None and found.beyond is not None:
        brackets.append((found.within, found.beyond))
    if level is not None:
        last = None
        for rate, _, share in ordered:
            if share is None:
                continue
            if share < level:
                if last is not None:
                    brackets.append((last, rate))
                break
            last = rate
    for low, high in brackets:
        mid = rounded((low + high) / 2.0)
        if len(out) < count and low < mid < high and mid not in done and mid not in out:
            out.append(mid)
    return out


def stop_ascending(
    floor_ms: float,
    value_ms: float | None,
    share: float | None,
    level: float | None,
    *,
    rise_pct: float,
    missed: bool,
) -> bool:
    """Whether the sweep has gone far enough up: past the knee, and (with SLOs) some rate
    measured so far (``missed``, or this one) had a goodput share below the level."""
    past = beyond_floor(value_ms, floor_ms, rise_pct)
    if level is None:
        return past
    return past and (missed or (share is not None and share < level))


def summarise(
    *,
    shape: str,
    mode: str,
    arrival: str,
    burstiness: float | None,
    slo: Mapping[str, float],
    level: float,
    loads: Sequence[tuple[Load, str]],
    runs: Sequence[Mapping[str, ShapeResult]],
    extras: Mapping[str, tuple[int | None, Sequence[float] | None]],
    rise_pct: float,
    seed: int,
    notes: Sequence[str] = (),
    resamples: int = 2000,
) -> SweepResult:
    """The ``sweep`` section: each load of ``loads`` ((load, shape name), in the order
    measured) whose requests run 1 (``runs[0]``) holds, the knee from run 1, and the
    capacity over every run. ``extras``: per shape name, the peak in flight and each
    request's send lateness in seconds (rate loads; None where not measured)."""
    first = runs[0] if runs else {}
    points: list[SweepPoint] = []
    for load, name in loads:
        result = first.get(name)
        if result is None:
            continue
        good, share = goodputs.goodput(result, slo)
        peak, lateness = extras.get(name, (None, None))
        points.append(
            SweepPoint(
                shape=name,
                load=load.load,
                offered_rate=load.rate,
                achieved_rate=result.metrics.requests_per_s,
                requests=result.requests,
                completed=result.completed,
                errors=dict(result.errors),
                complete=result.complete,
                goodput=good,
                goodput_share=share,
                meets_slo=None if share is None else share >= level,
                peak_in_flight=peak,
                send_lateness_ms=None if lateness is None else stats_ms(lateness),
                metrics=result.metrics,
            )
        )
    sync = next((p for p in points if p.load == SYNCHRONOUS and p.complete), None)
    floor = None
    if sync is not None and sync.achieved_rate and sync.metrics.e2e_ms.p50 is not None:
        floor = (sync.achieved_rate, sync.metrics.e2e_ms.p50)
    rate_points = [p for p in points if p.load == RATE and p.complete and p.offered_rate]
    found = knee(
        floor,
        [(p.offered_rate or 0.0, p.metrics.e2e_ms.p50) for p in rate_points],
        rise_pct=rise_pct,
    )
    cap = None
    if slo:
        cap, _ = goodputs.capacity(points, runs, slo, level, resamples=resamples, seed=seed)
    out_notes = list(notes)
    late_pct = goodputs.load_sweep_rules().sweep.late_pct
    late: list[tuple[float, float, str]] = []  # (p99 over the mean interval, p99 ms, label)
    for p in points:
        late_ms = p.send_lateness_ms
        if p.offered_rate and late_ms is not None and late_ms.p99 is not None:
            interval_ms = 1000.0 / p.offered_rate
            if late_ms.p99 > interval_ms * late_pct / 100.0:
                label = f"{late_ms.p99:.1f} ms at {p.offered_rate:.3g} req/s"
                late.append((late_ms.p99 / interval_ms, late_ms.p99, label))
    if late:
        worst = max(late)
        out_notes.append(
            f"at {len(late)} of {sum(1 for p in points if p.load == RATE)} rates the requests "
            f"left late by more than {late_pct:g}% of the mean interval at p99 (worst "
            f"{worst[2]}, {worst[0]:.0%} of its interval): this client could not keep the "
            "schedule (a CPU-starved host?), so the load offered was not quite the rate asked "
            "for"
        )
    if mode == SWEEP and not any(p.load == THROUGHPUT for p in points):
        out_notes.append("the sweep stopped before its throughput point: no rate was placed")
    return SweepResult(
        shape=shape,
        mode=mode,
        arrival=arrival,
        burstiness=burstiness,
        slo=dict(slo),
        slo_level=level,
        points=points,
        knee=found,
        capacity=cap,
        notes=out_notes,
    )


def loads_of(sweep: SweepResult) -> list[tuple[Load, str]]:
    """A sweep's loads as measured, to measure them again (``--repeat``, the other server
    of ``--compare-urls``, the new container of ``apply --verify``)."""
    return [(Load(p.load, p.offered_rate), p.shape) for p in sweep.points]


def resummarise(
    sweep: SweepResult,
    runs: Sequence[Mapping[str, ShapeResult]],
    *,
    seed: int,
    slo: Mapping[str, float] | None = None,
    level: float | None = None,
    rise_pct: float | None = None,
    resamples: int = 2000,
) -> SweepResult:
    """``sweep`` again over ``runs`` (its document's runs: --repeat's too), optionally
    judged against other SLOs (a compare judges both sides against the before run's). The
    points' send lateness and peak in flight are the ones ``sweep`` recorded."""
    extras: dict[str, tuple[int | None, list[float] | None]] = {
        p.shape: (p.peak_in_flight, None) for p in sweep.points
    }
    lateness = {p.shape: p.send_lateness_ms for p in sweep.points}
    done = summarise(
        shape=sweep.shape,
        mode=sweep.mode,
        arrival=sweep.arrival,
        burstiness=sweep.burstiness,
        slo=sweep.slo if slo is None else slo,
        level=sweep.slo_level if level is None else level,
        loads=loads_of(sweep),
        runs=runs,
        extras=extras,
        rise_pct=sweep.knee.rise_pct if rise_pct is None else rise_pct,
        seed=seed,
        # Kept as recorded: the lateness note (its figures are not redone here).
        notes=[n for n in sweep.notes if not n.startswith("the sweep stopped")],
        resamples=resamples,
    )
    points = [
        msgspec.structs.replace(p, send_lateness_ms=lateness.get(p.shape)) for p in done.points
    ]
    return msgspec.structs.replace(done, points=points)
