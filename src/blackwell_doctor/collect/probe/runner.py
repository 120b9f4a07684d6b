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

from blackwell_doctor.collect.childproc import ChildResult, Rearm, run_child
from blackwell_doctor.collect.childproc import can_dlopen as _can_dlopen
from blackwell_doctor.collect.gpu import (
    GpuDocument,
    GpuRun,
    child_failure,
    decode_document,
    skipped_for,
)
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
from blackwell_doctor.facts.document import (
    ClockSample,
    CudaFacts,
    DeviceProbe,
    NvmlFacts,
    ProbeFacts,
    TileProbe,
    Unavailable,
)
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
    # NVML readings under the launches' load (issue 39), by PCI bus id, and why a device
    # could not be read.
    samples: dict[str, list[ClockSample]] = field(default_factory=dict)
    sampling_errors: dict[str, str] = field(default_factory=dict)
    buses: dict[int, str] = field(default_factory=dict)

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
            if line.pci_bus_id is not None:
                self.buses[line.ordinal] = line.pci_bus_id
                self.samples.setdefault(line.pci_bus_id, [])
                if line.sampling_error is not None:
                    self.sampling_errors[line.pci_bus_id] = line.sampling_error
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
            bus = self.buses.get(line.ordinal)
            if bus is not None and line.samples:
                self.samples.setdefault(bus, []).extend(line.samples)
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
    return f"probe-crashed:{result.crash() or 'exited-early'}"


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
    if child_argv is None:
        if not _can_dlopen(CUDA_LIBRARY):
            return Unavailable("libcuda-not-found")
        child_argv = [sys.executable, "-m", CHILD_MODULE]
    probing = _Probing(
        tiles=tiles,
        devices=devices,
        timeout_s=timeout_s,
        timing=timing,
        step_timeout_s=step_timeout_s,
        child_argv=child_argv,
    )
    probing.start()
    job = probing.next_job()
    result = run_child(
        probing.argv(job), timeout_s, on_line=probing.run.feed, idle_timeout_s=probing.step_s
    )
    return probing.to_the_end(result)


def collect_gpu_and_probes(
    *,
    tiles: Sequence[Tile] | None = None,
    gpu_timeout_s: float = 20.0,
    probe_timeout_s: float = 60.0,
    child_argv: Sequence[str] | None = None,
) -> tuple[NvmlFacts | Unavailable, CudaFacts | Unavailable, ProbeFacts | Unavailable]:
    """:func:`~blackwell_doctor.collect.gpu.collect_gpu` and then :func:`run_probes`, in one
    child process and one CUDA initialisation (``check`` with probes).

    The child prints the GPU facts first, within ``gpu_timeout_s`` (else every reason
    ``collect_gpu`` gives: ``gpu-collector-timeout:20s``, ``-crashed:signal-N``, ...); the
    probes then run under their own deadlines (``probe_timeout_s`` overall, a third of it
    per step) from that line on, exactly as :func:`run_probes` runs them, a fresh probe
    child taking over the remaining steps after a hang or a crash. ``wall_s`` counts from
    the facts line. ``tiles``: the catalogue's by default, read only when a child runs.
    ``child_argv`` as in :func:`run_probes`. No fast path without a driver: the caller
    asks :func:`~blackwell_doctor.collect.gpu.drivers_load` first.
    """
    run = collect_gpu_run(
        tiles=tiles,
        gpu_timeout_s=gpu_timeout_s,
        probe_timeout_s=probe_timeout_s,
        child_argv=child_argv,
    )
    return run.nvml, run.cuda, run.probes


def collect_gpu_run(
    *,
    tiles: Sequence[Tile] | None = None,
    gpu_timeout_s: float = 20.0,
    probe_timeout_s: float = 60.0,
    health: bool = False,
    child_argv: Sequence[str] | None = None,
) -> GpuRun:
    """:func:`collect_gpu_and_probes`, and with ``health`` the GPUs' health read with the
    facts and the clock event reasons sampled during the timed launches (issue 39: no load
    and no launch of their own)."""
    if child_argv is None:
        child_argv = [sys.executable, "-m", CHILD_MODULE]
    if tiles is None:
        from blackwell_doctor.ruledata.tiles import load_catalogue

        _, tiles = load_catalogue()
    probing = _Probing(
        tiles=tiles,
        devices=None,
        timeout_s=probe_timeout_s,
        timing=True,
        step_timeout_s=None,
        child_argv=child_argv,
        sample_clocks=health,
    )
    document: GpuDocument | Unavailable | None = None

    def on_line(raw: bytes) -> Rearm | None:
        nonlocal document
        if document is None:  # the facts come first, a line of their own
            document = decode_document(raw)
            if isinstance(document, Unavailable):
                return Rearm(0.0)  # not a GPU child's output: end it now
            if skipped_for(document.cuda) is not None:
                return None  # the child stops there
            probing.start()
            return Rearm(probe_timeout_s, probing.step_s)
        if isinstance(document, GpuDocument):
            probing.run.feed(raw)
        return None

    job = msgspec.structs.replace(probing.next_job(), gpu_facts=True, health=health)
    result = run_child(probing.argv(job), gpu_timeout_s, on_line=on_line)
    if document is None or isinstance(document, Unavailable):
        failure = document or child_failure(result, gpu_timeout_s)
        failure = failure or Unavailable("gpu-collector-bad-output")
        why = _skipped(failure)
        return GpuRun(failure, failure, why, failure if health else None, why)
    skipped = skipped_for(document.cuda)
    if skipped is not None:
        return GpuRun(document.nvml, document.cuda, skipped, document.health, skipped)
    probes = probing.to_the_end(result)
    return GpuRun(
        document.nvml,
        document.cuda,
        probes,
        document.health,
        probing.run.samples if health else {},
        probing.run.sampling_errors,
    )


def _skipped(cuda: CudaFacts | Unavailable) -> Unavailable:
    reason = skipped_for(cuda)
    assert reason is not None
    return reason


class _Probing:
    """One probe run: the steps, their deadlines, and the children run so far."""

    def __init__(
        self,
        *,
        tiles: Sequence[Tile],
        devices: Sequence[int] | None,
        timeout_s: float,
        timing: bool,
        step_timeout_s: float | None,
        child_argv: Sequence[str],
        sample_clocks: bool = False,
    ) -> None:
        self.sample_clocks = sample_clocks
        self.tiles = tiles
        self.devices = list(devices) if devices is not None else None
        self.timeout_s = timeout_s
        self.timing = timing
        self.step_s = step_timeout_s if step_timeout_s is not None else max(1.0, timeout_s / 3)
        self.child_argv = list(child_argv)
        self.specs = [TileSpec(t.m, t.n, t.k, t.epilogue_bytes) for t in tiles]
        self.run = _Run(tile_count=len(self.specs))
        self.started = self.deadline = 0.0

    def start(self) -> None:
        """The overall deadline's clock starts."""
        self.started = time.monotonic()
        self.deadline = self.started + self.timeout_s

    def next_job(self) -> Job:
        """The next child's job: everything for the first, the remaining steps after."""
        run = self.run
        run.child_devices = set()
        run.restart = False
        if run.ordinals is None:  # the first child lists the devices and does everything
            return Job(
                tiles=self.specs,
                devices=self.devices,
                steps=None,
                timing=self.timing,
                sample_clocks=self.sample_clocks,
            )
        return Job(
            tiles=self.specs,
            devices=list(run.ordinals),
            steps=list(run.pending),
            timing=self.timing,
            sample_clocks=self.sample_clocks,
        )

    def argv(self, job: Job) -> list[str]:
        return [*self.child_argv, msgspec.json.encode(job).decode()]

    def to_the_end(self, result: ChildResult) -> ProbeFacts | Unavailable:
        """After the first child's ``result``: fresh children for the steps that remain, then
        the facts (or why there are none)."""
        run = self.run
        while True:
            if run.fatal is not None:
                return Unavailable(run.fatal)
            if run.ordinals is None:  # died before it could even list the devices
                return Unavailable(_failure_reason(result, self.step_s, self.timeout_s))
            if run.pending and not run.restart:
                reason = _failure_reason(result, self.step_s, self.timeout_s)
                ordinal, _index = run.pending[0]
                if ordinal not in run.child_devices:
                    run.fail_device(ordinal, reason)  # it died setting the device up
                else:
                    run.fail(run.pending[0], reason)
            remaining = self.deadline - time.monotonic()
            if not run.pending or remaining <= 0:
                break
            job = self.next_job()
            result = run_child(
                self.argv(job), remaining, on_line=run.feed, idle_timeout_s=self.step_s
            )
        for step in list(run.pending):  # the overall deadline passed
            run.fail(step, f"probe-timeout:{self.timeout_s:g}s")
        return _facts(run, self.tiles, time.monotonic() - self.started)


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


# What the child measured of a tile, under the names the plan's row gives it.
_MEASURED = ("launched", "launch_error", "time_us", "k_iterations", "macs_per_s")


def _tile_probe(plan: TilePlan, measured: TileLine | None) -> TileProbe:
    planned = tile_probe(plan)
    if measured is None:
        return planned
    return msgspec.structs.replace(planned, **{name: getattr(measured, name) for name in _MEASURED})
