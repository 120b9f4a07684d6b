"""The probe child: ``python -m blackwell_doctor.collect.probe._child JOB_JSON``.

With ``gpu_facts`` in the job it first reads and prints the GPU facts as
:mod:`blackwell_doctor.collect._gpu_child` does, in this same process and CUDA
initialisation.

Runs the steps of a :class:`~blackwell_doctor.collect.probe.protocol.Job` on the GPU and prints one
:mod:`~blackwell_doctor.collect.probe.protocol` line per finished step, flushed at once. It may hang
or die in the driver; the parent (:mod:`blackwell_doctor.collect.probe.runner`) copes with that.
It calls the driver through :mod:`blackwell_doctor.collect.cuda_driver`, the one CUDA adapter.
"""

from __future__ import annotations

import ctypes
import functools
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from blackwell_doctor.collect.cuda_driver import (
    CudaFailure,
    Driver,
    StickyFailure,
    c_string,
    reason_token,
)
from blackwell_doctor.collect.probe.nvrtc import CompiledProbes, compile_probes
from blackwell_doctor.collect.probe.protocol import (
    LIMIT_STEP,
    THREADS_PER_BLOCK,
    TIMED_LAUNCHES,
    DeviceLine,
    DevicesLine,
    FatalLine,
    Job,
    LimitLine,
    Line,
    RestartLine,
    TileLine,
    TileSpec,
    encode_line,
)
from blackwell_doctor.facts.document import ClockSample, Unavailable
from blackwell_doctor.ruledata.tileplan import Tile, TilePlan, plan_tile, stage_buffers

if TYPE_CHECKING:
    from blackwell_doctor.collect.nvml import ClockSampler

# Launch results that say "this configuration is refused", leaving the context usable.
_REJECTIONS = frozenset(
    {
        "CUDA_ERROR_INVALID_VALUE",
        "CUDA_ERROR_OUT_OF_RESOURCES",
        "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
        "CUDA_ERROR_NOT_SUPPORTED",
    }
)


# --------------------------------------------------------------------------- test data


def _scale_table() -> bytes:
    # Positive E4M3 scales between 2^-2 and 2^2 (exponent fields 5..9), any mantissa.
    return bytes(((5 + (b % 5)) << 3) | ((b >> 3) & 7) for b in range(256))


_SCALES = _scale_table()


@dataclass(frozen=True)
class MainloopData:
    """The probe's operands, tile-major as the kernel reads them (see the .cu header)."""

    a: bytes
    b: bytes
    sfa: bytes
    sfb: bytes


# The operands must be varied, not random: a block of random bytes of a prime length (no
# tile row, k slice or stage of any tile lines up with it), repeated, costs one short draw
# and copies. Drawing every buffer (random.randbytes, ~9 MB for the catalogue's tiles) was
# 31 ms of a probe child on an H200 (issue 36).
_POOL_BYTES = 65521  # the largest prime below 2**16
_PART_SHIFT = 16381  # a prime: where each operand starts in the pool


@functools.cache
def _pool(seed: int) -> bytes:
    return random.Random(seed).randbytes(_POOL_BYTES)  # noqa: S311 -- test data, not secrets


def _varied(seed: int, part: int, size: int) -> bytes:
    """``size`` bytes of ``seed``'s pool, repeated from operand ``part``'s own start."""
    pool = _pool(seed)
    start = part * _PART_SHIFT % _POOL_BYTES
    turned = pool[start:] + pool[:start]
    return (turned * (size // _POOL_BYTES + 1))[:size]


def make_data(tile: Tile, k_iterations: int, seed: int) -> MainloopData:
    buffers = stage_buffers(tile)
    return MainloopData(
        a=_varied(seed, 0, buffers.a * k_iterations),
        b=_varied(seed, 1, buffers.b * k_iterations),
        sfa=_varied(seed, 2, buffers.sfa * k_iterations).translate(_SCALES),
        sfb=_varied(seed, 3, buffers.sfb * k_iterations).translate(_SCALES),
    )


def name_expression(tile: Tile, stages: int) -> str:
    return f"blockscaled_mainloop<{tile.m}, {tile.n}, {tile.k}, {stages}>"


# --------------------------------------------------------------------------- the probes


@dataclass(frozen=True)
class MainloopRun:
    launched: bool
    launch_error: str | None = None
    time_us: float | None = None
    out_block0: bytes | None = None  # M x N float32 of block 0 (for a reference check)


class DeviceSession:
    """One device's primary context and probe module."""

    def __init__(self, driver: Driver, ordinal: int) -> None:
        self.driver = driver
        self.ordinal = ordinal
        self.device = driver.call("cuDeviceGet", ordinal)
        self.context = driver.call("cuDevicePrimaryCtxRetain", self.device)
        driver.call("cuCtxSetCurrent", self.context)
        self.module: Any = None
        self.compiled: CompiledProbes | None = None

    def load(self, compiled: CompiledProbes) -> None:
        self.module = self.driver.call("cuModuleLoadData", compiled.image)
        self.compiled = compiled

    def function(self, name: str) -> Any:
        return self.driver.call("cuModuleGetFunction", self.module, name.encode())

    # -- the shared-memory limit, bisected with real launches

    def smem_accepts(self, function: Any, flag: int, size: int) -> bool:
        driver = self.driver
        try:
            driver.set_max_dynamic_smem(function, size)
        except CudaFailure:
            return False  # the attribute itself refused the size
        driver.call("cuMemsetD32", driver.d.CUdeviceptr(flag), 0, 1)
        params = [ctypes.c_uint64(flag), ctypes.c_uint32(size)]
        try:
            driver.launch(function, 1, 32, size, params)
        except CudaFailure as exc:
            if exc.name in _REJECTIONS:
                return False
            raise StickyFailure(exc.name) from None
        driver.synchronize()
        return int.from_bytes(driver.download(flag, 4), "little") == 1

    def bisect_smem_limit(self, upper: int) -> int | Unavailable:
        """The largest size in [0, upper) a launch accepts (``upper`` is assumed refused)."""
        function = self.function("smem_probe")
        flag = self.driver.alloc(4)
        try:
            if not self.smem_accepts(function, flag, 0):
                return Unavailable("smem-probe-failed-at-0")
            low, high = 0, upper
            while high - low > 1:
                middle = (low + high) // 2
                if self.smem_accepts(function, flag, middle):
                    low = middle
                else:
                    high = middle
            return low
        finally:
            self.driver.free(flag)

    # -- the block-scaled mainloop

    def run_mainloop(
        self,
        plan: TilePlan,
        *,
        grid: int,
        k_iterations: int,
        timed_launches: int,
        seed: int = 1,
        keep_output: bool = False,
        during: Callable[[], None] | None = None,
    ) -> MainloopRun:
        assert plan.layout is not None
        assert self.compiled is not None
        tile, layout, driver = plan.tile, plan.layout, self.driver
        expression = name_expression(tile, plan.stages)
        function = self.function(self.compiled.lowered_names[expression])
        try:
            driver.set_max_dynamic_smem(function, layout.total_bytes)
        except CudaFailure as exc:
            return MainloopRun(launched=False, launch_error=exc.name)
        data = make_data(tile, k_iterations, seed)
        out_bytes = grid * tile.m * tile.n * 4
        sizes = [len(data.a), len(data.b), len(data.sfa), len(data.sfb), out_bytes, grid * 4]
        pointers: list[int] = []
        try:
            for size in sizes:
                pointers.append(driver.alloc(size))
            for pointer, blob in zip(pointers, (data.a, data.b, data.sfa, data.sfb), strict=False):
                driver.upload(pointer, blob)
            driver.call("cuMemsetD32", driver.d.CUdeviceptr(pointers[5]), 0, grid)
            params: list[Any] = [ctypes.c_uint64(p) for p in pointers]
            params.append(ctypes.c_int32(k_iterations))
            params += [
                ctypes.c_uint32(value)
                for value in (
                    layout.a_offset,
                    layout.b_offset,
                    layout.sfa_offset,
                    layout.sfb_offset,
                    layout.tensormap_offset,
                    layout.barrier_offset,
                    layout.epilogue_offset,
                    layout.epilogue_bytes,
                    layout.total_bytes,
                )
            ]

            def launch() -> None:
                driver.launch(function, grid, THREADS_PER_BLOCK, layout.total_bytes, params)

            try:
                launch()  # the warm-up, and the driver's answer
            except CudaFailure as exc:
                if exc.name in _REJECTIONS:
                    return MainloopRun(launched=False, launch_error=exc.name)
                raise StickyFailure(exc.name) from None
            driver.synchronize()
            status = driver.download(pointers[5], grid * 4)
            if any(status[i] != 1 for i in range(0, len(status), 4)):
                return MainloopRun(launched=False, launch_error="probe-guard-bytes-mismatch")
            output = driver.download(pointers[4], tile.m * tile.n * 4) if keep_output else None
            time_us = self._time(launch, timed_launches, during) if timed_launches > 0 else None
            return MainloopRun(launched=True, time_us=time_us, out_block0=output)
        finally:
            for pointer in pointers:
                driver.free(pointer)

    def _time(
        self, launch: Callable[[], None], count: int, during: Callable[[], None] | None = None
    ) -> float:
        """The median of ``count`` launches; ``during`` is called after each launch, while
        the kernel runs (NVML's readings under load, issue 39: no launch of its own)."""
        driver = self.driver
        start = driver.call("cuEventCreate", 0)
        end = driver.call("cuEventCreate", 0)
        try:
            samples = []
            for _ in range(count):
                driver.call("cuEventRecord", start, driver.d.CUstream(0))
                launch()
                driver.call("cuEventRecord", end, driver.d.CUstream(0))
                if during is not None:
                    during()
                try:
                    driver.call("cuEventSynchronize", end)
                except CudaFailure as exc:
                    raise StickyFailure(exc.name) from None
                samples.append(driver.elapsed_ms(start, end) * 1000.0)
            return float(statistics.median(samples))
        finally:
            driver.call("cuEventDestroy", start)
            driver.call("cuEventDestroy", end)


# --------------------------------------------------------------------------- the job


def _tiles(job: Job) -> list[Tile]:
    return [Tile(m=t.m, n=t.n, k=t.k, epilogue_bytes=t.epilogue_bytes) for t in job.tiles]


def _cc(driver: Driver, device: Any) -> tuple[int, int]:
    return (
        driver.attribute(device, "COMPUTE_CAPABILITY_MAJOR"),
        driver.attribute(device, "COMPUTE_CAPABILITY_MINOR"),
    )


def _name(driver: Driver, device: Any) -> str:
    raw = driver.call("cuDeviceGetName", 256, device)
    data = raw if isinstance(raw, bytes) else str(raw).encode()
    return data.split(b"\0", 1)[0].decode("utf-8", "replace").strip()


def select_devices(driver: Driver) -> list[int]:
    """One ordinal per distinct (name, compute capability): the first of each."""
    seen: set[tuple[str, tuple[int, int]]] = set()
    chosen = []
    for ordinal in range(int(driver.call("cuDeviceGetCount"))):
        device = driver.call("cuDeviceGet", ordinal)
        key = (_name(driver, device), _cc(driver, device))
        if key not in seen:
            seen.add(key)
            chosen.append(ordinal)
    return chosen


def run_job(
    job: Job,
    emit: Callable[[Line], None],
    driver: Driver | None = None,
    sampler: ClockSampler | None = None,
) -> int:
    try:
        driver = driver or Driver()
        driver.call("cuInit", 0)
        ordinals = job.devices if job.devices is not None else select_devices(driver)
    except CudaFailure as exc:
        emit(FatalLine(reason=exc.reason))
        return 0
    emit(DevicesLine(ordinals=ordinals))
    tiles = _tiles(job)
    steps = job.steps
    if steps is None:
        steps = [(o, s) for o in ordinals for s in [LIMIT_STEP, *range(len(tiles))]]
    by_device: dict[int, list[int]] = {}
    for ordinal, step in steps:
        by_device.setdefault(ordinal, []).append(step)
    if sampler is None and job.sample_clocks:
        sampler = _sampler()
    try:
        for ordinal, device_steps in by_device.items():
            try:
                _run_device(driver, job, tiles, ordinal, device_steps, emit, sampler)
            except StickyFailure as exc:
                emit(RestartLine(reason=exc.name))
                return 0
    finally:
        if sampler is not None:
            sampler.close()
    return 0


def _sampler() -> ClockSampler:
    """NVML, opened for the readings under load (issue 39)."""
    from blackwell_doctor.collect.nvml import ClockSampler, RealNvml

    sampler = ClockSampler(RealNvml())
    sampler.start()
    return sampler


def _run_device(
    driver: Driver,
    job: Job,
    tiles: list[Tile],
    ordinal: int,
    steps: list[int],
    emit: Callable[[Line], None],
    sampler: ClockSampler | None = None,
) -> None:
    def fail_all(reason: str) -> None:
        for step in steps:
            if step == LIMIT_STEP:
                emit(LimitLine(ordinal=ordinal, smem_launch_limit=Unavailable(reason)))
            else:
                emit(TileLine(ordinal=ordinal, index=step, launch_error=reason))

    try:
        session = DeviceSession(driver, ordinal)
        name = _name(driver, session.device)
        cc = _cc(driver, session.device)
        optin = driver.attribute(session.device, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")
        per_sm = driver.attribute(session.device, "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR")
        sm_count = driver.attribute(session.device, "MULTIPROCESSOR_COUNT")
        bus = c_string(driver.call("cuDeviceGetPCIBusId", 32, session.device)).strip()
    except CudaFailure as exc:
        reason = reason_token(exc.name)
        emit(
            DeviceLine(
                ordinal=ordinal,
                name=Unavailable(reason),
                compute_capability=Unavailable(reason),
                smem_optin_attribute=Unavailable(reason),
                sm_count=Unavailable(reason),
                compiled_as=Unavailable(reason),
            )
        )
        fail_all(reason)
        return
    plans = {i: plan_tile(tile, optin) for i, tile in enumerate(tiles)}
    expressions = sorted(
        {name_expression(p.tile, p.stages) for p in plans.values() if p.layout is not None}
    )
    compiled = compile_probes(cc[0] * 10 + cc[1], expressions)
    compiled_as: str | Unavailable
    if isinstance(compiled, Unavailable):
        compiled_as = compiled
    else:
        try:
            session.load(compiled)
            compiled_as = compiled.compiled_as
        except CudaFailure as exc:
            compiled_as = Unavailable("module-load-failed:" + reason_token(exc.name))
    nvml_index: int | None = None
    sampling_error: str | None = None
    if sampler is not None:
        nvml_index = sampler.index(bus) if sampler.error is None else None
        if nvml_index is None:
            sampling_error = sampler.error or f"nvml-no-device-at:{bus}"
    emit(
        DeviceLine(
            ordinal=ordinal,
            name=name,
            compute_capability=cc,
            smem_optin_attribute=optin,
            sm_count=sm_count,
            compiled_as=compiled_as,
            cache=None if isinstance(compiled, Unavailable) else compiled.cache,
            nvrtc_version=(
                compiled.nvrtc_version if not isinstance(compiled, Unavailable) else None
            ),
            pci_bus_id=bus if sampler is not None else None,
            sampling_error=sampling_error,
        )
    )
    if isinstance(compiled_as, Unavailable):
        fail_all(compiled_as.reason)
        return
    k_iterations = {i: max(1, job.k_total // t.k) for i, t in enumerate(tiles)}
    for step in steps:
        if step == LIMIT_STEP:
            try:
                limit = session.bisect_smem_limit(per_sm + 1)
            except CudaFailure as exc:
                limit = Unavailable(reason_token(exc.name))
            except StickyFailure as exc:
                emit(LimitLine(ordinal=ordinal, smem_launch_limit=Unavailable(exc.name)))
                raise
            emit(LimitLine(ordinal=ordinal, smem_launch_limit=limit))
            continue
        plan = plans[step]
        if plan.layout is None:  # not even one stage fits: nothing to launch
            emit(TileLine(ordinal=ordinal, index=step))
            continue
        samples: list[ClockSample] = []
        during: Callable[[], None] | None = None
        if sampler is not None and nvml_index is not None:
            during = functools.partial(_sample_into, samples, sampler, nvml_index)
        try:
            run = session.run_mainloop(
                plan,
                grid=sm_count,
                k_iterations=k_iterations[step],
                timed_launches=TIMED_LAUNCHES if job.timing else 0,
                during=during,
            )
        except CudaFailure as exc:
            run = MainloopRun(launched=False, launch_error=exc.name)
        except StickyFailure as exc:
            emit(TileLine(ordinal=ordinal, index=step, launched=False, launch_error=exc.name))
            raise
        macs: float | None = None
        if run.time_us:
            work = sm_count * plan.tile.m * plan.tile.n * plan.tile.k * k_iterations[step]
            macs = work / (run.time_us * 1e-6)
        emit(
            TileLine(
                ordinal=ordinal,
                index=step,
                launched=run.launched,
                launch_error=run.launch_error,
                time_us=run.time_us,
                k_iterations=k_iterations[step] if run.launched else None,
                macs_per_s=macs,
                samples=samples,
            )
        )


def _sample_into(samples: list[ClockSample], sampler: ClockSampler, index: int) -> None:
    samples.append(sampler.sample(index))


def _emit(line: Line) -> None:
    sys.stdout.buffer.write(encode_line(line))
    sys.stdout.flush()


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m blackwell_doctor.collect.probe._child JOB_JSON", file=sys.stderr)
        return 2
    job = msgspec.json.decode(argv[0], type=Job)
    if not job.gpu_facts:
        return run_job(job, _emit, sampler=_sampler() if job.sample_clocks else None)
    from blackwell_doctor.collect._gpu_child import gpu_document, write_document
    from blackwell_doctor.collect.gpu import skipped_for

    # NVML is reference counted: opened first for the readings under load, it stays loaded
    # through the GPU facts' own session (one nvmlInit's cost, not two), on the thread that
    # reads NVML while this one initialises CUDA.
    opened: list[ClockSampler] = []
    document = gpu_document(
        health=job.health,
        first_on_nvml=(lambda: opened.append(_sampler())) if job.sample_clocks else None,
    )
    sampler = opened[0] if opened else None
    write_document(document)
    if skipped_for(document.cuda) is not None:
        if sampler is not None:
            sampler.close()
        return 0
    return run_job(job, _emit, sampler=sampler)


__all__ = ["DeviceSession", "Driver", "MainloopData", "TileSpec", "make_data", "run_job"]

if __name__ == "__main__":
    from blackwell_doctor.collect.childexit import leave

    # Its answer written, it ends at once: no CUDA/NVML/NCCL teardown (childexit).
    leave(main(sys.argv[1:]))
