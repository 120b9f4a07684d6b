"""Run the probe kernels in child processes under deadlines: :func:`run_probes`.

The child (:mod:`blackwell_doctor.collect.probe._child`) streams one line per finished step. A step
that hangs (no line for ``step_timeout_s``) or kills its child (a segfault, a sticky CUDA
error) is named in the result (``probe-timeout:10s``, ``probe-crashed:signal-11``), every
finished step is kept, and a fresh child runs the steps that remain. Without libcuda the
answer is immediate and imports no CUDA binding.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec

from blackwell_doctor.collect.childproc import ChildResult, run_child
from blackwell_doctor.collect.childproc import can_dlopen as _can_dlopen
from blackwell_doctor.collect.probe.protocol import (
    LIMIT_STEP,
    DeviceLine,
    DevicesLine,
    FatalLine,
    Job,
    LimitLine,
    RestartLine,
    TileLine,
    TileSpec,
    decode_line,
)
from blackwell_doctor.facts.document import DeviceProbe, ProbeFacts, TileProbe, Unavailable
from blackwell_doctor.ruledata.tileplan import Tile, TilePlan, plan_tile
from blackwell_doctor.ruledata.tiles import tile_probe

CUDA_LIBRARY = "libcuda.so.1"
CHILD_MODULE = "blackwell_doctor.collect.probe._child"

Step = tuple[int, int]  # (ordinal, LIMIT_STEP or tile index)


@dataclass
class _DeviceState:
    line: DeviceLine | None = None
    failure: str | None = None  # setup failed in a child: why
    limit: int | Unavailable | None = None
    tiles: dict[int, TileLine] = field(default_factory=dict)


@dataclass
class _Run:
    """What all children have said so far."""

    ordinals: list[int] | None = None
    fatal: str | None = None
    devices: dict[int, _DeviceState] = field(default_factory=dict)
    pending: list[Step] = field(default_factory=list)
    # Per child: devices set up, and whether it asked for a restart.
    child_devices: set[int] = field(default_factory=set)
    restart: bool = False
    cache_states: list[str] = field(default_factory=list)
    nvrtc_version: str | Unavailable | None = None
    tile_count: int = 0

    def feed(self, raw: bytes) -> None:
        line = decode_line(raw)
        if isinstance(line, DevicesLine):
            if self.ordinals is None:
                self.ordinals = list(line.ordinals)
                self.pending = [
                    (o, s) for o in line.ordinals for s in [LIMIT_STEP, *range(self.tile_count)]
                ]
                for ordinal in line.ordinals:
                    self.devices.setdefault(ordinal, _DeviceState())
        elif isinstance(line, FatalLine):
            self.fatal = line.reason
        elif isinstance(line, RestartLine):
            self.restart = True
        elif isinstance(line, DeviceLine):
            self.child_devices.add(line.ordinal)
            state = self.devices.setdefault(line.ordinal, _DeviceState())
            if state.line is None:
                state.line = line
                if line.cache is not None:
                    self.cache_states.append(line.cache)
                if line.nvrtc_version is not None and self.nvrtc_version is None:
                    self.nvrtc_version = line.nvrtc_version
        elif isinstance(line, LimitLine):
            self.devices.setdefault(line.ordinal, _DeviceState()).limit = line.smem_launch_limit
            self._done((line.ordinal, LIMIT_STEP))
        elif isinstance(line, TileLine):
            self.devices.setdefault(line.ordinal, _DeviceState()).tiles[line.index] = line
            self._done((line.ordinal, line.index))

    def _done(self, step: Step) -> None:
        if step in self.pending:
            self.pending.remove(step)

    def fail(self, step: Step, reason: str) -> None:
        ordinal, index = step
        state = self.devices.setdefault(ordinal, _DeviceState())
        if index == LIMIT_STEP:
            state.limit = Unavailable(reason)
        else:
            state.tiles[index] = TileLine(
                ordinal=ordinal, index=index, launched=False, launch_error=reason
            )
        self._done(step)

    def fail_device(self, ordinal: int, reason: str) -> None:
        self.devices.setdefault(ordinal, _DeviceState()).failure = reason
        for step in [s for s in self.pending if s[0] == ordinal]:
            self.fail(step, reason)


def _failure_reason(result: ChildResult, step_timeout_s: float, timeout_s: float) -> str:
    if result.ending == "start-failed":
        return f"probe-start-failed:{result.start_error}"
    if result.ending == "idle-timeout":
        return f"probe-timeout:{step_timeout_s:g}s"
    if result.ending == "timeout":
        return f"probe-timeout:{timeout_s:g}s"
    code = result.returncode if result.returncode is not None else 0
    if code < 0:
        return f"probe-crashed:signal-{-code}"
    if code > 0:
        return f"probe-crashed:rc={code}"
    return "probe-crashed:exited-early"


def run_probes(
    *,
    tiles: Sequence[Tile],
    devices: Sequence[int] | None = None,
    timeout_s: float = 30.0,
    timing: bool = True,
    step_timeout_s: float | None = None,
    child_argv: Sequence[str] | None = None,
) -> ProbeFacts | Unavailable:
    """Measure the shared-memory limit and launch every tile on each device (default: one
    device per distinct name and compute capability), within ``timeout_s`` overall.

    ``step_timeout_s`` (default: a third of ``timeout_s``) bounds one step: a child that
    prints nothing for that long is killed and the step is named as timed out.
    ``child_argv`` replaces the child's command line, which then gets the job as its last
    argument (tests: children that hang or crash); it also skips the no-driver fast path.
    """
    started = time.monotonic()
    deadline = started + timeout_s
    if child_argv is None:
        if not _can_dlopen(CUDA_LIBRARY):
            return Unavailable("libcuda-not-found")
        child_argv = [sys.executable, "-m", CHILD_MODULE]
    step_s = step_timeout_s if step_timeout_s is not None else max(1.0, timeout_s / 3)
    specs = [TileSpec(t.m, t.n, t.k, t.epilogue_bytes) for t in tiles]
    run = _Run(tile_count=len(specs))
    first = True
    while first or run.pending:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        if run.ordinals is None:  # the first child lists the devices and does everything
            job_devices = list(devices) if devices is not None else None
            steps = None
        else:
            job_devices, steps = list(run.ordinals), list(run.pending)
        job = Job(tiles=specs, devices=job_devices, steps=steps, timing=timing)
        run.child_devices = set()
        run.restart = False
        result = run_child(
            [*child_argv, msgspec.json.encode(job).decode()],
            remaining,
            on_line=run.feed,
            idle_timeout_s=step_s,
        )
        first = False
        if run.fatal is not None:
            return Unavailable(run.fatal)
        if run.ordinals is None:  # died before it could even list the devices
            return Unavailable(_failure_reason(result, step_s, timeout_s))
        if not run.pending or run.restart:
            continue
        reason = _failure_reason(result, step_s, timeout_s)
        ordinal, _index = run.pending[0]
        if ordinal not in run.child_devices:
            run.fail_device(ordinal, reason)  # it died setting the device up
        else:
            run.fail(run.pending[0], reason)
    for step in list(run.pending):  # the overall deadline passed
        run.fail(step, f"probe-timeout:{timeout_s:g}s")
    return _facts(run, tiles, time.monotonic() - started)


def _cache_state(states: list[str]) -> str:
    for state in ("rebuilt", "miss", "hit"):
        if state in states:
            return state
    return "miss"


def _facts(run: _Run, tiles: Sequence[Tile], wall_s: float) -> ProbeFacts:
    devices = []
    for ordinal in run.ordinals or []:
        state = run.devices.get(ordinal, _DeviceState())
        devices.append(_device_probe(ordinal, state, tiles))
    version: str | Unavailable = (
        run.nvrtc_version if run.nvrtc_version is not None else Unavailable("not-reached")
    )
    return ProbeFacts(
        nvrtc_version=version,
        cache=_cache_state(run.cache_states),
        wall_s=round(wall_s, 3),
        devices=devices,
    )


def _device_probe(ordinal: int, state: _DeviceState, tiles: Sequence[Tile]) -> DeviceProbe:
    line = state.line
    missing = Unavailable(state.failure or "not-reached")
    optin = line.smem_optin_attribute if line is not None else missing
    limit = state.limit if state.limit is not None else missing
    tile_probes = []
    if isinstance(optin, int):
        for index, tile in enumerate(tiles):
            tile_probes.append(_tile_probe(plan_tile(tile, optin), state.tiles.get(index)))
    return DeviceProbe(
        ordinal=ordinal,
        name=line.name if line is not None else missing,
        compute_capability=line.compute_capability if line is not None else missing,
        smem_optin_attribute=optin,
        smem_launch_limit=limit,
        compiled_as=line.compiled_as if line is not None else missing,
        tiles=tile_probes,
    )


def _tile_probe(plan: TilePlan, measured: TileLine | None) -> TileProbe:
    planned = tile_probe(plan)
    if measured is None:
        return planned
    return msgspec.structs.replace(
        planned,
        launched=measured.launched,
        launch_error=measured.launch_error,
        time_us=measured.time_us,
        k_iterations=measured.k_iterations,
        macs_per_s=measured.macs_per_s,
    )
