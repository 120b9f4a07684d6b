"""``bench --repeat N`` and ``bench --compare-urls A B --repeat N`` (issue 21).

Each configuration is run N times with the same shapes and seed; with two servers their
runs take turns (A B A B ...), so a drift of the host over the minutes of the measurement
falls on both alike. The runs of one server become one run document: run 1's shapes, runs
2..N as ``repeats``, and the noise floor of their spread as ``calibration``
(blackwell_doctor.rules.compare.calibrate): ``--repeat N`` on one URL is the A/A
calibration of that server and host.

Nothing here prints: progress goes to the caller's ``Progress`` and ``say``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import msgspec

from blackwell_doctor.app import bench as runner
from blackwell_doctor.report.bench import BENCH_SCHEMA_VERSION, BenchRun, RepeatRun
from blackwell_doctor.report.exitcodes import ExitCode
from blackwell_doctor.rules.compare import calibrate, runs_of
from blackwell_doctor.rules.sweep import resummarise

MAX_REPEAT = 100


def combine(runs: Sequence[BenchRun], *, interleaved_with: str | None = None) -> BenchRun:
    """One document of ``runs`` of one configuration: the first run's shapes, the others
    as repeats, their calibration, findings labelled by run, the worst exit code."""
    first = runs[0]
    if len(runs) == 1:
        return first
    findings = [f"run {i + 1}: {f}" for i, r in enumerate(runs) for f in r.findings]
    codes = [r.exit_code for r in runs]
    code = int(ExitCode.INTERRUPTED) if int(ExitCode.INTERRUPTED) in codes else max(codes)
    doc = msgspec.structs.replace(
        first,
        schema_version=BENCH_SCHEMA_VERSION,
        complete=all(r.complete for r in runs),
        interrupted=any(r.interrupted for r in runs),
        findings=findings,
        exit_code=code,
        repeats=[
            RepeatRun(index=i + 2, started_at=r.started_at, complete=r.complete, shapes=r.shapes)
            for i, r in enumerate(runs[1:])
        ],
    )
    extra: dict[str, object] = {}
    if not isinstance(first.sweep, msgspec.UnsetType):
        # The capacity at SLO of every run's points together, with its interval across runs.
        extra["sweep"] = resummarise(first.sweep, runs_of(doc), seed=doc.seed)
    return msgspec.structs.replace(
        doc, calibration=calibrate(doc, interleaved_with=interleaved_with), **extra
    )


def run_repeated(
    configs: Sequence[runner.BenchConfig],
    repeat: int,
    progress: runner.Progress,
    *,
    say: Callable[[str], None],
    run: Callable[[runner.BenchConfig, runner.RunState, runner.Progress], None],
) -> list[list[BenchRun]]:
    """``repeat`` runs of each config, taking turns (config 1, 2, ..., 1, 2, ...). ``run``
    measures one (the event loop's ``loop.run(run_bench(...))``). A Ctrl-C is re-raised
    with the runs measured so far (the one in progress included, partial) as its
    ``partial``: one list per config."""
    done: list[list[BenchRun]] = [[] for _ in configs]
    for i in range(repeat):
        for k, config in enumerate(configs):
            state = runner.RunState()
            label = f"run {i + 1}/{repeat}" + (f" of {config.url}" if len(configs) > 1 else "")
            say(f"bench {label}")
            try:
                run(config, state, progress)
            except KeyboardInterrupt as exc:
                done[k].append(runner.build_document(state, interrupted=True))
                exc.partial = done  # type: ignore[attr-defined]
                raise
            done[k].append(runner.build_document(state, interrupted=False))
            if done[k][-1].server.error is not None:
                # An unreachable server stays so: the runs left would say the same.
                return done
    return done


def same_seed(config: runner.BenchConfig, seed: int) -> runner.BenchConfig:
    """``config`` with ``seed`` (both servers of --compare-urls send the same prompts)."""
    return replace(config, seed=seed)
