"""``bench --rate``: one shape measured at several loads.

``--rate R,R,...`` sends the shape's requests at each rate in turn, each request at its
offset of the arrival process (collect/bench/schedule.py); ``--rate sweep`` finds its own
rates: one request at a time, every request at once, then rates between, up to the knee
(rules/sweep.py says how, checks/bench_sweep.toml with which figures). A plan (the loads a
first run measured) is measured as it is: the runs after the first of ``--repeat``, the
other server of ``--compare-urls`` and the new container of ``apply --verify`` meet the
same loads, so their points compare one to one.

Each point is a shape of the run document (``SHAPE@sync``, ``SHAPE@max``, ``SHAPE@2.5/s``)
with every request's sample; the warm-up, the prompt size and the greedy prompts happen
once, at the first point. Whatever stops the sweep (its end, Ctrl-C, an unreachable server),
``state`` holds each point measured and the one in progress, and the document is built from
it (app/bench.py: build_document).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable
from typing import Protocol

import msgspec

from blackwell_doctor.app import bench as runner
from blackwell_doctor.collect.bench import schedule
from blackwell_doctor.report.bench import RATE, SYNCHRONOUS, THROUGHPUT, ShapeResult
from blackwell_doctor.rules import goodput as goodputs
from blackwell_doctor.rules import sweep as sweeps


async def run(
    config: runner.BenchConfig, state: runner.RunState, progress: runner.Progress
) -> None:
    """Measure ``config`` into ``state``: its loads (``bench --rate``), else its shapes."""
    if config.load is None:
        await runner.run_bench(config, state, progress)
    else:
        await run_sweep(config, state, progress)


async def run_sweep(
    config: runner.BenchConfig, state: runner.RunState, progress: runner.Progress
) -> None:
    """Measure ``config.load``'s loads of ``config``'s one shape into ``state``."""
    load = config.load
    assert load is not None
    (shape,) = config.shapes
    total = config.requests or shape.planned_requests()
    sweep = runner.SweepState(load=load, shape=shape.name)
    state.sweep = sweep
    # Every request of a rate or throughput point may be in flight at once.
    async with runner.connect(config, state, width=total + 4) as srv:
        if srv is None:
            return
        server = state.server
        assert server is not None
        size = await runner.prompt_size(srv, config, server, shape)
        live = runner.Live()
        first = True

        async def measure(point: sweeps.Load, name: str | None = None) -> ShapeResult | None:
            nonlocal first
            name = name or point.name(shape.name)
            sweep.loads.append((point, name))
            sent = schedule.Sent()
            offsets = None
            if point.load == SYNCHRONOUS:
                users = 1
            elif point.load == THROUGHPUT:
                users = total
            else:
                assert point.rate is not None
                users = total
                # One seed, one pattern: every rate's schedule is the same draw, scaled.
                offsets = schedule.arrivals(
                    load.arrival,
                    point.rate,
                    total,
                    burstiness=load.burstiness or 1.0,
                    seed=config.seed,
                )
                sweep.extras[name] = (None, sent.lateness_s)
            one = msgspec.structs.replace(shape, name=name, concurrency=users, requests=total)
            try:
                await runner.measure_shape(
                    srv,
                    config,
                    state,
                    one,
                    live,
                    progress,
                    offsets=offsets,
                    size=size,
                    warmup=first,
                    equivalence=first,
                    sent=sent,
                )
            finally:
                first = False
                peak = sent.peak_in_flight if offsets is not None else users
                sweep.extras[name] = (peak, sent.lateness_s if offsets is not None else None)
            done = state.shapes[-1] if state.shapes else None
            if done is None or done.name != name:
                return None
            if offsets is not None:
                # An open loop has no users: its concurrency is the most requests in flight.
                done = msgspec.structs.replace(done, concurrency=sent.peak_in_flight)
                state.shapes[-1] = done
            return done

        try:
            await _loads(load, measure, sweep)
        except MemoryError:
            state.findings.append(
                f"{shape.name}: this machine ran out of memory building or sending its "
                f"requests ({total} x ~{shape.input_tokens} tokens in flight): measuring "
                "stopped"
            )
            state.stopped = True


async def _loads(load: runner.RateLoad, measure: _Measure, sweep: runner.SweepState) -> None:
    """Measure the plan, the rates given, or a sweep (rules/sweep.py)."""
    if load.plan is not None:
        for point, name in load.plan:
            await measure(point, name)
        return
    if load.rates is not None:
        for rate in load.rates:
            await measure(sweeps.Load(RATE, rate))
        return
    sync = await measure(sweeps.Load(SYNCHRONOUS))
    if sync is None:
        return
    sync_rate, floor = sync.metrics.requests_per_s, sync.metrics.e2e_ms.p50
    if not sync_rate or floor is None or not sync.complete:
        sweep.notes.append(
            "no request answered one at a time: no floor, so no rate was placed"
            if sync.complete
            else "the one-at-a-time point did not finish: no rate was placed"
        )
        return
    most = await measure(sweeps.Load(THROUGHPUT))
    if most is None:
        return
    max_rate = most.metrics.requests_per_s
    if not max_rate or not most.complete:
        sweep.notes.append("no request answered with every request at once: no rate was placed")
        return
    if max_rate <= sync_rate * 1.01:
        sweep.notes.append(
            f"the server served {max_rate:.3g} req/s with every request at once, no more than "
            f"{sync_rate:.3g} req/s one at a time: it does not batch, so the rates reach "
            "1.5 times the one-user rate"
        )
    level = load.level if load.slo else None
    measured: list[tuple[float, float | None, float | None]] = []
    missed = False
    for rate in sweeps.grid(sync_rate, max_rate, load.points):
        done = await measure(sweeps.Load(RATE, rate))
        if done is None or not done.complete:
            return
        _, share = goodputs.goodput(done, load.slo)
        value = done.metrics.e2e_ms.p50
        measured.append((rate, value, share))
        if sweeps.stop_ascending(floor, value, share, level, rise_pct=load.rise_pct, missed=missed):
            break
        missed = missed or (level is not None and share is not None and share < level)
    for rate in sweeps.refinements(
        measured, (sync_rate, floor), rise_pct=load.rise_pct, level=level, count=load.refine
    ):
        done = await measure(sweeps.Load(RATE, rate))
        if done is None or not done.complete:
            return


class _Measure(Protocol):
    """run_sweep's measure(): one load measured, its shape result (None: none was kept)."""

    def __call__(
        self, point: sweeps.Load, name: str | None = None
    ) -> Awaitable[ShapeResult | None]: ...


# The loads a run measured, in order, with the shape name of each: what the runs after it
# measure as they are.
Plan = tuple[tuple[sweeps.Load, str], ...]


def plan_of(state: runner.RunState) -> Plan | None:
    """The loads ``state``'s run measured (every one it started), or None for a run at
    fixed shapes or one that measured none."""
    if state.sweep is None or not state.sweep.loads:
        return None
    return tuple(state.sweep.loads)


def with_plan(config: runner.BenchConfig, plan: Plan) -> runner.BenchConfig:
    """``config`` measuring ``plan`` as it is (no sweep of its own)."""
    assert config.load is not None
    return dataclasses.replace(config, load=dataclasses.replace(config.load, plan=plan))
