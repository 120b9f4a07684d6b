"""The P2P child: ``python -m blackwell_doctor.collect.probe._p2p_child JOB_JSON``.

Tests one GPU pair (A, B) of a :class:`~blackwell_doctor.collect.probe.p2p_protocol.P2PJob` by
moving data, and prints one :mod:`~blackwell_doctor.collect.probe.p2p_protocol` line per stage and
measurement, flushed at once. It may hang or die in the driver; the parent
(:mod:`blackwell_doctor.collect.probe.p2p`) copes with that. It calls the driver through
:mod:`blackwell_doctor.collect.cuda_driver`, the one CUDA adapter.

What it does, after ``cuDeviceCanAccessPeer`` allows both directions:

1. enables peer access both ways in the two primary contexts;
2. fills a source buffer on each GPU with a hashed pattern (kernel, spot-checked on the
   host), ``cuMemcpyPeer`` A->B and B->A, then counts the destination words that differ
   (a kernel on the owning GPU) and spot-checks windows on the host;
3. runs ``p2p_fill`` on A writing B's memory through the peer mapping (and B->A), verified
   the same way;
4. times ``cuMemcpyPeerAsync`` with CUDA events (copies issued back to back, so the host's
   launch latency is not counted): each direction alone, on a stream of the source GPU,
   then both at once on two streams; the destinations are verified again;
5. times the control: device -> pinned host -> other device in 8 MiB chunks on two streams
   (pipelined, as NCCL's host path would be), each direction, verified.

Errors on the peer path (after peer access is enabled) are faults: the pair is broken.
Errors that say the test itself could not go on (out of memory, no NVRTC) are errors.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import statistics
import struct
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from blackwell_doctor.collect.cuda_driver import CudaFailure, Driver, StickyFailure, reason_token
from blackwell_doctor.collect.probe.nvrtc import compile_probes
from blackwell_doctor.collect.probe.p2p_protocol import (
    TEST_HANG_ENV,
    AccessLine,
    BandwidthLine,
    DevicesLine,
    Direction,
    DoneLine,
    ErrorLine,
    FatalLine,
    FaultLine,
    Line,
    P2PJob,
    Stage,
    StageLine,
    VerifyCheck,
    VerifyLine,
    encode_line,
)
from blackwell_doctor.facts.document import Unavailable
from blackwell_doctor.ruledata.resources import data_dir

SOURCE = "p2p_probe.cu"
THREADS = 256
BLOCKS_PER_SM = 4
CHUNK_BYTES = 8 << 20  # host-staged control: the pipeline's chunk
MIN_FALLBACK_BYTES = 16 << 20  # out of memory: halve the buffers down to this
SPOT_WORDS = 4096  # words per host spot-check window
SPIN_MAX_NS = 120 * 10**9  # the test seam's spinning kernel gives up after this
SEEDS = {"copy-a": 0x1111, "copy-b": 0x2222, "write-a": 0x3333, "write-b": 0x4444}

_MASK = 0xFFFFFFFF
_INFRA_ERRORS = frozenset({"CUDA_ERROR_OUT_OF_MEMORY", "LIBCUDA_NOT_FOUND"})
_PEER_STAGES: frozenset[Stage] = frozenset(
    {"enable", "copy", "peer-write", "bandwidth", "after-load"}
)


def pattern_word(index: int, seed: int) -> int:
    """The 32-bit word at ``index`` of a buffer filled with ``seed`` (p2p_probe.cu)."""
    x = ((index & _MASK) * 0x9E3779B1 + seed) & _MASK
    x ^= ((index >> 32) * 0x85EBCA77) & _MASK
    x ^= x >> 15
    x = (x * 0x2C1B3C6D) & _MASK
    x ^= x >> 12
    x = (x * 0x297A2D39) & _MASK
    x ^= x >> 15
    return x


def pattern_bytes(start_word: int, count: int, seed: int) -> bytes:
    return struct.pack(f"<{count}I", *(pattern_word(start_word + i, seed) for i in range(count)))


def spot_windows(words: int) -> list[tuple[int, int]]:
    """(first word, count) of the start, the middle and the end of a buffer."""
    count = min(SPOT_WORDS, words)
    starts = sorted({0, max(0, words // 2 - count // 2), words - count})
    return [(start, count) for start in starts]


def buffer_size(requested: int) -> int:
    """Whole 4 KiB pages, at least one."""
    return max(4096, requested - requested % 4096)


class StageFault(Exception):
    """Report ``reason`` for the current stage and stop: a fault or an error by stage."""

    def __init__(self, reason: str, *, fault: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fault = fault


class StopTest(Exception):
    """Stop here: what went wrong has been reported already (a mismatch)."""


@dataclass(frozen=True)
class HangSeam:
    """The test seam (``TEST_HANG_ENV``): ``ACTION:STAGE[@A-B]``."""

    action: str
    stage: str
    pair: tuple[int, int] | None

    @classmethod
    def parse(cls, value: str | None) -> HangSeam | None:
        if not value:
            return None
        spec, _, pair_text = value.partition("@")
        action, _, stage = spec.partition(":")
        pair: tuple[int, int] | None = None
        if pair_text:
            a, _, b = pair_text.partition("-")
            with contextlib.suppress(ValueError):
                pair = (int(a), int(b))
        return cls(action=action, stage=stage, pair=pair)

    def applies(self, stage: Stage, pair: tuple[int, int]) -> bool:
        return self.stage == stage and (self.pair is None or self.pair == pair)


@dataclass
class Side:
    """One GPU of the pair: its context, stream, events, module and buffers."""

    ordinal: int
    device: Any
    context: Any
    sm_count: int
    stream: Any = None
    start: Any = None
    end: Any = None
    signal: Any = None  # no timing: another stream waits on it
    chunks: list[Any] = field(default_factory=list)
    fill: Any = None
    check: Any = None
    spin: Any = None
    src: int = 0
    dst: int = 0
    result: int = 0  # 2 x u64 for p2p_check

    @property
    def grid(self) -> int:
        return max(1, self.sm_count * BLOCKS_PER_SM)


class PairTest:
    """The stages of one pair's test, in order; each emits what it measured."""

    def __init__(
        self,
        driver: Driver,
        job: P2PJob,
        emit: Callable[[Line], None],
        seam: HangSeam | None = None,
    ) -> None:
        self.driver = driver
        self.d: Any = driver.d
        self.job = job
        self.emit = emit
        self.seam = seam
        self.size = buffer_size(job.size_bytes)
        self.a: Side | None = None
        self.b: Side | None = None
        self.host = 0  # pinned host buffer
        self.stage: Stage = "init"

    # -- plumbing

    def enter(self, stage: Stage) -> None:
        self.stage = stage
        self.emit(StageLine(stage=stage))
        seam = self.seam
        if seam is not None and seam.applies(stage, (self.job.gpu_a, self.job.gpu_b)):
            self._misbehave(seam)

    def _misbehave(self, seam: HangSeam) -> None:
        if seam.action == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        if (
            seam.action == "gpu"
            and self.a is not None
            and self.b is not None
            and self.a.spin is not None
        ):
            # Spin on A, polling a flag in B's memory through the peer mapping, then wait:
            # the child blocks inside the driver, as it would on a wedged peer transfer.
            a, b = self.a, self.b
            self.ctx(b)
            self.driver.call("cuMemsetD32", self.d.CUdeviceptr(b.result), 0, 1)
            self.driver.call("cuCtxSynchronize")
            self.ctx(a)
            params = [ctypes.c_uint64(b.result), ctypes.c_uint64(SPIN_MAX_NS)]
            self.driver.launch(a.spin, 1, 1, 0, params)
            self.driver.call("cuCtxSynchronize")
        time.sleep(3600)

    def ctx(self, side: Side) -> None:
        self.driver.call("cuCtxSetCurrent", side.context)

    def sides(self) -> tuple[Side, Side]:
        assert self.a is not None
        assert self.b is not None
        return self.a, self.b

    def ptr(self, address: int) -> Any:
        return self.d.CUdeviceptr(address)

    # -- the test

    def run(self) -> None:
        """Every stage in order; a fault or an error ends the test (the child exits)."""
        try:
            if not self._access():
                return
            steps: list[tuple[Stage, Callable[[], None]]] = [
                ("enable", self._enable),
                ("setup", self._setup),
                ("copy", self._copy),
                ("peer-write", self._peer_write),
                ("bandwidth", self._bandwidth),
                ("after-load", self._after_load),
                ("host-staged", self._host_staged),
            ]
            for stage, step in steps:
                self.enter(stage)
                step()
        except StopTest:
            return
        except StageFault as exc:
            line_type = FaultLine if exc.fault else ErrorLine
            self.emit(line_type(stage=self.stage, reason=exc.reason))
            return
        except (CudaFailure, StickyFailure) as exc:
            fault = self.stage in _PEER_STAGES and exc.name not in _INFRA_ERRORS
            line_type = FaultLine if fault else ErrorLine
            self.emit(line_type(stage=self.stage, reason=reason_token(exc.name)))
            return
        self.emit(DoneLine(size_bytes=self.size))

    def _access(self) -> bool:
        driver, job = self.driver, self.job
        self.enter("init")
        try:
            self.a = self._side(job.gpu_a)
            self.b = self._side(job.gpu_b)
        except CudaFailure as exc:
            self.emit(ErrorLine(stage="init", reason=reason_token(exc.name)))
            return False
        a, b = self.sides()
        self.enter("access")
        answers: list[bool | None] = []
        reason: str | None = None
        for first, second in ((a, b), (b, a)):
            try:
                answers.append(
                    bool(driver.call("cuDeviceCanAccessPeer", first.device, second.device))
                )
            except CudaFailure as exc:
                answers.append(None)
                reason = reason_token(exc.name)
        self.emit(AccessLine(a_to_b=answers[0], b_to_a=answers[1], reason=reason))
        if answers == [True, True]:
            return True
        self.emit(DoneLine(size_bytes=self.size))
        return False

    def _side(self, ordinal: int) -> Side:
        driver = self.driver
        device = driver.call("cuDeviceGet", ordinal)
        context = driver.call("cuDevicePrimaryCtxRetain", device)
        sm_count = driver.attribute(device, "MULTIPROCESSOR_COUNT")
        return Side(ordinal=ordinal, device=device, context=context, sm_count=sm_count)

    def _enable(self) -> None:
        a, b = self.sides()
        for here, peer in ((a, b), (b, a)):
            self.ctx(here)
            try:
                self.driver.call("cuCtxEnablePeerAccess", peer.context, 0)
            except CudaFailure as exc:
                if exc.name != "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED":
                    raise StageFault(
                        f"enable-peer-access:{reason_token(exc.name)}", fault=True
                    ) from None

    def _setup(self) -> None:
        a, b = self.sides()
        driver, d = self.driver, self.d
        non_blocking = int(d.CUstream_flags.CU_STREAM_NON_BLOCKING)
        no_timing = int(d.CUevent_flags.CU_EVENT_DISABLE_TIMING)
        chunk_count = -(-self.size // CHUNK_BYTES)
        for side in (a, b):
            self.ctx(side)
            side.stream = driver.call("cuStreamCreate", non_blocking)
            side.start = driver.call("cuEventCreate", 0)
            side.end = driver.call("cuEventCreate", 0)
            side.signal = driver.call("cuEventCreate", no_timing)
            side.chunks = [driver.call("cuEventCreate", no_timing) for _ in range(chunk_count)]
            side.result = driver.alloc(16)
        self._allocate()
        self._load_module()
        for side, seed in ((a, SEEDS["copy-a"]), (b, SEEDS["copy-b"])):
            self.fill(side, side.src, seed)
            problem = self.spot_check(side, side.src, seed)
            if problem is not None:  # the pattern kernel or the host hash is wrong
                raise StageFault(f"pattern-self-test-failed:gpu{side.ordinal}", fault=False)

    def _allocate(self) -> None:
        a, b = self.sides()
        floor = min(self.size, MIN_FALLBACK_BYTES)
        while True:
            allocated: list[tuple[Side, int]] = []
            try:
                for side in (a, b):
                    self.ctx(side)
                    side.src = self.driver.alloc(self.size)
                    allocated.append((side, side.src))
                    side.dst = self.driver.alloc(self.size)
                    allocated.append((side, side.dst))
                return
            except CudaFailure as exc:
                for side, pointer in allocated:
                    self.ctx(side)
                    self.driver.free(pointer)
                if exc.name != "CUDA_ERROR_OUT_OF_MEMORY" or self.size // 2 < floor:
                    raise
                self.size = buffer_size(self.size // 2)

    def _load_module(self) -> None:
        a, b = self.sides()
        source = (
            b'#line 1 "'
            + SOURCE.encode()
            + b'"\n'
            + (data_dir("kernels_probe") / SOURCE).read_bytes()
        )
        modules: dict[int, Any] = {}
        for side in (a, b):
            major = self.driver.attribute(side.device, "COMPUTE_CAPABILITY_MAJOR")
            minor = self.driver.attribute(side.device, "COMPUTE_CAPABILITY_MINOR")
            arch = major * 10 + minor
            compiled = compile_probes(arch, [], source=source)
            if isinstance(compiled, Unavailable):
                raise StageFault(compiled.reason, fault=False)
            self.ctx(side)
            try:
                module = self.driver.call("cuModuleLoadData", compiled.image)
            except CudaFailure as exc:
                raise StageFault(
                    "module-load-failed:" + reason_token(exc.name), fault=False
                ) from None
            modules[side.ordinal] = module
            side.fill = self.driver.call("cuModuleGetFunction", module, b"p2p_fill")
            side.check = self.driver.call("cuModuleGetFunction", module, b"p2p_check")
            side.spin = self.driver.call("cuModuleGetFunction", module, b"p2p_spin")

    # -- kernels and checks

    def fill(self, runner: Side, address: int, seed: int) -> None:
        """``p2p_fill`` on ``runner`` into ``address`` (local, or a peer's through UVA)."""
        self.ctx(runner)
        params = [ctypes.c_uint64(address), ctypes.c_uint64(self.size // 16), ctypes.c_uint32(seed)]
        self.driver.launch(runner.fill, runner.grid, THREADS, 0, params)
        self.driver.synchronize()

    def count_mismatches(self, owner: Side, address: int, seed: int) -> tuple[int, int]:
        """(mismatching words, index of the first) counted by ``p2p_check`` on ``owner``."""
        driver = self.driver
        self.ctx(owner)
        driver.upload(owner.result, struct.pack("<QQ", 0, 2**64 - 1))
        params = [
            ctypes.c_uint64(address),
            ctypes.c_uint64(self.size // 16),
            ctypes.c_uint32(seed),
            ctypes.c_uint64(owner.result),
        ]
        driver.launch(owner.check, owner.grid, THREADS, 0, params)
        driver.synchronize()
        bad, first = struct.unpack("<QQ", driver.download(owner.result, 16))
        return int(bad), int(first)

    def spot_check(self, owner: Side, address: int, seed: int) -> str | None:
        """Windows of the buffer read back to the host and compared with the host's hash."""
        self.ctx(owner)
        for start, count in spot_windows(self.size // 4):
            got = self.driver.download(address + start * 4, count * 4)
            if got != pattern_bytes(start, count, seed):
                words = struct.unpack(f"<{count}I", got)
                first = next(
                    start + i for i, w in enumerate(words) if w != pattern_word(start + i, seed)
                )
                return f"host spot check: word {first} differs"
        return None

    def verify(self, owner: Side, address: int, seed: int, label: str) -> str | None:
        """None when the buffer holds the pattern, else what is wrong."""
        words = self.size // 4
        bad, first = self.count_mismatches(owner, address, seed)
        if bad:
            return f"mismatch:{label}:{bad}/{words} words, first at word {first}"
        problem = self.spot_check(owner, address, seed)
        if problem is not None:
            return f"mismatch:{label}:{problem}"
        return None

    def clear(self, side: Side, address: int) -> None:
        self.ctx(side)
        self.driver.call("cuMemsetD8", self.ptr(address), 0, self.size)
        self.driver.synchronize()

    def _verify_pair(self, check: VerifyCheck, a_seed: int, b_seed: int) -> None:
        """B's destination holds A's pattern (``a_seed``) and A's holds B's: one line."""
        a, b = self.sides()
        problems = [
            p
            for p in (
                self.verify(b, b.dst, a_seed, "a-to-b"),
                self.verify(a, a.dst, b_seed, "b-to-a"),
            )
            if p is not None
        ]
        self.emit(
            VerifyLine(
                check=check,
                verified=not problems,
                detail="; ".join(problems) if problems else None,
            )
        )
        if problems:
            raise StopTest

    def _checker_self_test(self, owner: Side, address: int, seed: int) -> None:
        """A zeroed buffer must count as (nearly) all wrong, or the checker proves nothing."""
        bad, _first = self.count_mismatches(owner, address, seed)
        if bad < (self.size // 4) // 2:
            raise StageFault(f"checker-self-test-failed:gpu{owner.ordinal}", fault=False)

    # -- the stages

    def _copy(self) -> None:
        a, b = self.sides()
        driver = self.driver
        self.clear(a, a.dst)
        self.clear(b, b.dst)
        self._checker_self_test(b, b.dst, SEEDS["copy-a"])
        self.ctx(a)
        driver.call(
            "cuMemcpyPeer", self.ptr(b.dst), b.context, self.ptr(a.src), a.context, self.size
        )
        self.ctx(b)
        driver.call(
            "cuMemcpyPeer", self.ptr(a.dst), a.context, self.ptr(b.src), b.context, self.size
        )
        self._verify_pair("copy", SEEDS["copy-a"], SEEDS["copy-b"])

    def _peer_write(self) -> None:
        a, b = self.sides()
        self.clear(a, a.dst)
        self.clear(b, b.dst)
        self.fill(a, b.dst, SEEDS["write-a"])  # a kernel on A storing into B's memory
        self.fill(b, a.dst, SEEDS["write-b"])
        self._verify_pair("peer-write", SEEDS["write-a"], SEEDS["write-b"])

    def _bandwidth(self) -> None:
        a, b = self.sides()
        size = self.size
        for direction, src, dst in self.directions():
            ms = self.timed(src, functools.partial(self.peer_copy, src, dst))
            self.emit(BandwidthLine(kind="uni", direction=direction, gbps=_gbps(size, ms)))

        def both() -> None:
            self.ctx(b)
            self.wait(b, a.start)
            self.peer_copy(a, b)
            self.peer_copy(b, a)
            self.join(b, a)

        ms = self.timed(a, both)
        self.emit(BandwidthLine(kind="bidi", direction="both", gbps=_gbps(2 * size, ms)))

    def _after_load(self) -> None:
        self._verify_pair("after-load", SEEDS["copy-a"], SEEDS["copy-b"])

    def _host_staged(self) -> None:
        a, _b = self.sides()
        driver = self.driver
        self.ctx(a)
        try:
            portable = int(self.d.CU_MEMHOSTALLOC_PORTABLE)
            self.host = int(driver.call("cuMemHostAlloc", self.size, portable))
        except CudaFailure as exc:
            raise StageFault("pinned-host-alloc:" + reason_token(exc.name), fault=False) from None
        for direction, src, dst in self.directions():
            self.clear(dst, dst.dst)
            ms = self.timed(src, functools.partial(self.staged_copy, src, dst))
            seed = SEEDS["copy-a"] if src is a else SEEDS["copy-b"]
            problem = self.verify(dst, dst.dst, seed, direction)
            if problem is not None:
                raise StageFault(f"host-staged control wrong: {problem}", fault=False)
            self.emit(BandwidthLine(kind="host", direction=direction, gbps=_gbps(self.size, ms)))

    # -- copies and timing

    def directions(self) -> list[tuple[Direction, Side, Side]]:
        a, b = self.sides()
        return [("a-to-b", a, b), ("b-to-a", b, a)]

    def peer_copy(self, src: Side, dst: Side) -> None:
        """src.src -> dst.dst on the source GPU's stream (as PyTorch issues it)."""
        self.ctx(src)
        self.driver.call(
            "cuMemcpyPeerAsync",
            self.ptr(dst.dst),
            dst.context,
            self.ptr(src.src),
            src.context,
            self.size,
            src.stream,
        )

    def wait(self, side: Side, event: Any) -> None:
        self.driver.call("cuStreamWaitEvent", side.stream, event, 0)

    def join(self, done: Side, into: Side) -> None:
        """``into``'s stream waits for everything issued so far on ``done``'s."""
        self.ctx(done)
        self.driver.call("cuEventRecord", done.signal, done.stream)
        self.ctx(into)
        self.wait(into, done.signal)

    def staged_copy(self, src: Side, dst: Side) -> None:
        """src.src -> pinned host -> dst.dst, chunk by chunk: the download of chunk k+1
        overlaps the upload of chunk k."""
        driver = self.driver
        for k, offset in enumerate(range(0, self.size, CHUNK_BYTES)):
            length = min(CHUNK_BYTES, self.size - offset)
            self.ctx(src)
            driver.call(
                "cuMemcpyDtoHAsync",
                self.host + offset,
                self.ptr(src.src + offset),
                length,
                src.stream,
            )
            driver.call("cuEventRecord", src.chunks[k], src.stream)
            self.ctx(dst)
            self.wait(dst, src.chunks[k])
            driver.call(
                "cuMemcpyHtoDAsync",
                self.ptr(dst.dst + offset),
                self.host + offset,
                length,
                dst.stream,
            )
        self.join(dst, src)

    def timed(self, side: Side, issue: Callable[[], None]) -> float:
        """Milliseconds per ``issue``: the median of ``trials`` trials (after a warm-up one),
        each ``iterations`` issues back to back between two events on ``side``'s stream, so
        the host's launch latency is not counted. ``issue`` leaves that stream waiting for
        all it did."""
        driver, job = self.driver, self.job
        samples = []
        for trial in range(job.trials + 1):
            self.ctx(side)
            driver.call("cuEventRecord", side.start, side.stream)
            for _ in range(job.iterations):
                issue()
            self.ctx(side)
            driver.call("cuEventRecord", side.end, side.stream)
            try:
                driver.call("cuEventSynchronize", side.end)
            except CudaFailure as exc:
                raise StickyFailure(exc.name) from None
            if trial:
                samples.append(driver.elapsed_ms(side.start, side.end) / job.iterations)
        return float(statistics.median(samples))


def _gbps(size: int, ms: float) -> float:
    return round(size / (ms * 1e-3) / 1e9, 3) if ms > 0 else 0.0


def run_job(job: P2PJob, emit: Callable[[Line], None], driver: Driver | None = None) -> int:
    seam = HangSeam.parse(os.environ.get(TEST_HANG_ENV))
    try:
        driver = driver or Driver()
        driver.call("cuInit", 0)
        count = int(driver.call("cuDeviceGetCount"))
    except CudaFailure as exc:
        emit(FatalLine(reason=reason_token(exc.name)))
        return 0
    emit(DevicesLine(count=count))
    if not (0 <= job.gpu_a < count and 0 <= job.gpu_b < count) or job.gpu_a == job.gpu_b:
        return 0  # the parent asked for the count (a host with fewer GPUs than the pair)
    test = PairTest(driver, job, emit, seam)
    try:
        test.run()
    except Exception as exc:  # a bug here: the test could not run, the pair is not to blame
        traceback.print_exc()  # to stderr, which the parent keeps a tail of
        emit(ErrorLine(stage=test.stage, reason=f"p2p-child-error:{type(exc).__name__}"))
    return 0


def _emit(line: Line) -> None:
    sys.stdout.buffer.write(encode_line(line))
    sys.stdout.flush()


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print(
            "usage: python -m blackwell_doctor.collect.probe._p2p_child JOB_JSON", file=sys.stderr
        )
        return 2
    job = msgspec.json.decode(argv[0], type=P2PJob)
    return run_job(job, _emit)


if __name__ == "__main__":
    from blackwell_doctor.collect.childexit import leave

    # Its answer written, it ends at once: no CUDA/NVML/NCCL teardown (childexit).
    leave(main(sys.argv[1:]))
