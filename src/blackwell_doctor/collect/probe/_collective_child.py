"""The collective child: ``python -m blackwell_doctor.collect.probe._collective_child JOB``.

:class:`AllReduceJob`: loads libnccl.so.2 (:mod:`blackwell_doctor.collect.nccl`), fills a
float32 send buffer per rank with ``rank + 1`` in each GPU's primary context (the one the
CUDA runtime inside NCCL uses too), runs one grouped ``ncclAllReduce`` (sum) over all the
job's GPUs with ``ncclCommInitAll``, reads every rank's result back and compares it with
``n(n+1)/2``, then times ``iterations`` more and compares again. A hang stays a hang: the
parent kills this child at its deadline (the stage it last printed says where).

:class:`LinkLoadJob`: per GPU, pinned host-to-device copies for a moment, and NVML's
current link generation and width read while they run (a GPU lowers its link when idle).

:class:`PairJob` (owner and writer): one pair's peer-write tests in two
processes started together: one writes the other's buffer through a CUDA IPC mapping
(vLLM's custom all-reduce), and through a CUDA VMM allocation shared by file descriptor, as
PyTorch's CUDA symmetric memory shares its buffers (vLLM's symmetric-memory all-reduce):
``cuMemCreate`` with a POSIX fd handle, ``cuMemExportToShareableHandle``, the fd passed
with the IPC handle over the parent's socket pair (SCM_RIGHTS),
``cuMemImportFromShareableHandle``, ``cuMemAddressReserve``, ``cuMemMap``,
``cuMemSetAccess`` for the writer's own GPU, a write, then system-scope atomic adds on a
counter through that mapping (a PTX kernel the driver compiles); the owner checks every
word and the count. No multicast object is ever created: the multicast attribute is only
read.

Devices are numbered as NVML numbers them: the parent sets CUDA_DEVICE_ORDER=PCI_BUS_ID.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import statistics
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from blackwell_doctor.collect.cuda_driver import CudaFailure, Driver, c_string, reason_token
from blackwell_doctor.collect.nccl import Nccl, NcclFailure
from blackwell_doctor.collect.probe.collective_protocol import (
    ATOMIC_BLOCKS,
    ATOMIC_THREADS,
    IPC_PATTERN,
    SYMM_PATTERN,
    TEST_FAULT_ENV,
    AllReduceJob,
    DoneLine,
    ErrorLine,
    FatalLine,
    HandleLine,
    Job,
    Line,
    LinkLine,
    LinkLoadJob,
    PairCheck,
    PairJob,
    ResultLine,
    Stage,
    StageLine,
    VersionLine,
    encode_line,
)

Emit = Callable[[Line], None]
_CHUNK = 1 << 20


def _emit(line: Line) -> None:
    sys.stdout.buffer.write(encode_line(line))
    sys.stdout.buffer.flush()


def _float_bits(value: float) -> int:
    bits: int = struct.unpack("<I", struct.pack("<f", value))[0]
    return bits


def _first_difference(data: bytes | bytearray, expected: bytes) -> int:
    """Index (in floats) of the first float that differs; the data are known to differ."""
    for start in range(0, len(data), _CHUNK):
        if data[start : start + _CHUNK] != expected[start : start + _CHUNK]:
            for i in range(start, min(start + _CHUNK, len(data)), 4):
                if data[i : i + 4] != expected[i : i + 4]:
                    return i // 4
    return len(data) // 4


class _Ranks:
    """One context, stream and pair of buffers per GPU of the job."""

    def __init__(self, driver: Driver, gpus: Sequence[int], size: int) -> None:
        self.driver = driver
        self.contexts: list[Any] = []
        self.streams: list[Any] = []
        self.sends: list[int] = []
        self.recvs: list[int] = []
        for ordinal in gpus:
            device = driver.call("cuDeviceGet", ordinal)
            context = driver.call("cuDevicePrimaryCtxRetain", device)
            driver.call("cuCtxSetCurrent", context)
            self.contexts.append(context)
            self.streams.append(driver.call("cuStreamCreate", 0))
            self.sends.append(driver.alloc(size))
            self.recvs.append(driver.alloc(size))

    def use(self, rank: int) -> None:
        self.driver.call("cuCtxSetCurrent", self.contexts[rank])

    def fill(self, rank: int, value: float, count: int) -> None:
        self.use(rank)
        d = self.driver.d
        self.driver.call("cuMemsetD32", d.CUdeviceptr(self.sends[rank]), _float_bits(value), count)
        self.driver.call("cuMemsetD32", d.CUdeviceptr(self.recvs[rank]), 0, count)
        self.driver.call("cuCtxSynchronize")

    def wait(self) -> None:
        for rank, stream in enumerate(self.streams):
            self.use(rank)
            self.driver.call("cuStreamSynchronize", stream)

    def handles(self) -> list[int]:
        return [int(s) for s in self.streams]


def run_allreduce(
    job: AllReduceJob, emit: Emit, driver: Driver | None = None, nccl: Nccl | None = None
) -> int:
    stage: Stage = "init"
    emit(StageLine(stage=stage))
    fault = os.environ.get(TEST_FAULT_ENV, "") if os.environ.get("NCCL_P2P_DISABLE") != "1" else ""
    try:
        nccl = nccl or Nccl(job.library)
        emit(VersionLine(nccl=nccl.version(), library=job.library))
        driver = driver or Driver()
        driver.call("cuInit", 0)
        count_devices = int(driver.call("cuDeviceGetCount"))
    except NcclFailure as exc:
        emit(FatalLine(reason=exc.reason))
        return 0
    except CudaFailure as exc:
        emit(FatalLine(reason=reason_token(exc.name)))
        return 0
    except ImportError:
        emit(FatalLine(reason="cuda-bindings-not-installed"))
        return 0
    if any(g >= count_devices for g in job.gpus):
        emit(FatalLine(reason=f"gpu-not-found:{max(job.gpus)} of {count_devices}"))
        return 0
    n = len(job.gpus)
    count = job.size_bytes // 4
    expected = struct.pack("<f", n * (n + 1) / 2) * count
    try:
        stage = "buffers"
        emit(StageLine(stage=stage))
        ranks = _Ranks(driver, job.gpus, count * 4)
        for rank in range(n):
            # The seam's wrong sum: the last rank sends other data than the sum expects.
            value = rank + 1 + (1 if fault == "wrong-sum" and rank == n - 1 else 0)
            ranks.fill(rank, float(value), count)
        stage = "comm"
        emit(StageLine(stage=stage))
        comms = nccl.comm_init_all(list(job.gpus))
        stage = "allreduce"
        emit(StageLine(stage=stage))
        # The seam's hang: the last rank is left out, so the others wait for it for ever.
        take = n - 1 if fault == "hang" else n
        nccl.all_reduce_sum(
            comms[:take], ranks.sends[:take], ranks.recvs[:take], count, ranks.handles()[:take]
        )
        ranks.wait()
        stage = "verify"
        emit(StageLine(stage=stage))
        landed = bytearray(len(expected))  # every rank's result read into it, in turn
        detail = _compare(ranks, expected, landed)
        if detail is not None:
            emit(ResultLine(correct=False, detail=detail))
            return 0
        stage = "timing"
        emit(StageLine(stage=stage))
        times: list[float] = []
        for _ in range(job.iterations):
            started = time.perf_counter()
            nccl.all_reduce_sum(comms, ranks.sends, ranks.recvs, count, ranks.handles())
            ranks.wait()
            times.append(time.perf_counter() - started)
        stage = "verify-after"
        emit(StageLine(stage=stage))
        detail = _compare(ranks, expected, landed)
        emit(
            ResultLine(
                correct=detail is None,
                detail=detail,
                iterations=job.iterations,
                time_s=round(statistics.median(times), 7) if times else None,
            )
        )
        # No ncclCommDestroy (121 ms on an H200 pair): the process ends next, without exit
        # handlers (collect/childexit.py), and the communicators go with it.
    except NcclFailure as exc:
        emit(ErrorLine(stage=stage, reason=exc.reason))
        return 0
    except CudaFailure as exc:
        emit(ErrorLine(stage=stage, reason=reason_token(exc.name)))
        return 0
    emit(DoneLine())
    return 0


def _compare(ranks: _Ranks, expected: bytes, landed: bytearray) -> str | None:
    """Every rank's result, read into ``landed`` (one buffer for all: a fresh one per read
    cost its pages' first touch, ~30 ms per 64 MB), against ``expected``, whole: a
    bytearray compares as memcmp does."""
    for rank in range(len(ranks.recvs)):
        ranks.use(rank)
        ranks.driver.download_into(ranks.recvs[rank], landed)
        if landed != expected:
            first = _first_difference(landed, expected)
            return f"rank{rank}: differs from the sum, first at float {first}"
    return None


def run_link_load(job: LinkLoadJob, emit: Emit, driver: Driver | None = None) -> int:
    from blackwell_doctor.collect.nvml import NvmlCallError, RealNvml
    from blackwell_doctor.facts.pciaddr import normalize_pci_bus_id

    emit(StageLine(stage="init"))
    nvml = RealNvml()
    try:
        driver = driver or Driver()
        driver.call("cuInit", 0)
        nvml.init()
        by_bus = {
            normalize_pci_bus_id(nvml.device_pci_bus_id(i)): i for i in range(nvml.device_count())
        }
    except CudaFailure as exc:
        emit(FatalLine(reason=reason_token(exc.name)))
        return 0
    except NvmlCallError as exc:
        emit(FatalLine(reason=exc.reason))
        return 0
    except ImportError:
        emit(FatalLine(reason="cuda-bindings-not-installed"))
        return 0
    emit(StageLine(stage="load"))
    for ordinal in job.gpus:
        try:
            emit(_load_one(driver, nvml, by_bus, ordinal, job))
        except CudaFailure as exc:
            emit(LinkLine(gpu=ordinal, error=reason_token(exc.name)))
        except NvmlCallError as exc:
            emit(LinkLine(gpu=ordinal, error=exc.reason))
    nvml.shutdown()
    emit(DoneLine())
    return 0


def _load_one(
    driver: Driver, nvml: Any, by_bus: dict[str, int], ordinal: int, job: LinkLoadJob
) -> LinkLine:
    from blackwell_doctor.facts.pciaddr import normalize_pci_bus_id

    device = driver.call("cuDeviceGet", ordinal)
    bus = normalize_pci_bus_id(c_string(driver.call("cuDeviceGetPCIBusId", 32, device)).strip())
    index = by_bus.get(bus)
    if index is None:
        return LinkLine(gpu=ordinal, error=f"nvml-no-device-at:{bus}")
    context = driver.call("cuDevicePrimaryCtxRetain", device)
    driver.call("cuCtxSetCurrent", context)
    stream = driver.call("cuStreamCreate", 0)
    host = int(driver.call("cuMemHostAlloc", job.size_bytes, 0))
    target = driver.alloc(job.size_bytes)
    d = driver.d
    copies = 0
    started = time.perf_counter()
    reading: dict[str, int | None] = {}
    try:
        while True:
            for _ in range(4):
                driver.call(
                    "cuMemcpyHtoDAsync", d.CUdeviceptr(target), host, job.size_bytes, stream
                )
                copies += 1
            if time.perf_counter() - started >= job.seconds and not reading:
                # Read while the last copies are still in flight: the link is busy now.
                for name in ("current_gen", "current_width", "max_gen", "max_width"):
                    reading[name] = nvml.device_pcie(index, name)
            driver.call("cuStreamSynchronize", stream)
            if reading:
                break
        elapsed = time.perf_counter() - started
    finally:
        driver.call("cuMemFreeHost", host)
        driver.free(target)
    return LinkLine(
        gpu=index,
        current_gen=reading.get("current_gen"),
        current_width=reading.get("current_width"),
        max_gen=reading.get("max_gen"),
        max_width=reading.get("max_width"),
        h2d_gbps=round(copies * job.size_bytes / elapsed / 1e9, 2) if elapsed > 0 else None,
    )


def _start(driver: Driver | None, ordinal: int, emit: Emit) -> Driver | None:
    """The driver, initialised, with ``ordinal``'s primary context current; None after a
    fatal line."""
    try:
        driver = driver or Driver()
        driver.call("cuInit", 0)
        device = driver.call("cuDeviceGet", ordinal)
        driver.call("cuCtxSetCurrent", driver.call("cuDevicePrimaryCtxRetain", device))
    except CudaFailure as exc:
        emit(FatalLine(reason=reason_token(exc.name)))
        return None
    except ImportError:
        emit(FatalLine(reason="cuda-bindings-not-installed"))
        return None
    return driver


# CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS (cuda.h), as a plain int: the binding's enum type
# differs between cuda-bindings releases, the parameter is an unsigned int in all of them.
_LAZY_ENABLE_PEER_ACCESS = 1


_IPC_HANDLE_BYTES = 64  # sizeof(CUipcMemHandle): char reserved[64] (cuda.h)


def _handle_bytes(handle: Any) -> bytes:
    """The 64 bytes of a CUipcMemHandle. cuda-bindings 13 exposes no ``reserved`` field,
    only the struct's address (``getPtr``), so the bytes are read from there."""
    return ctypes.string_at(int(handle.getPtr()), _IPC_HANDLE_BYTES)


def _handle_from(driver: Driver, raw: bytes) -> Any:
    if len(raw) != _IPC_HANDLE_BYTES:
        raise CudaFailure("CUDA_ERROR_INVALID_VALUE", reason="ipc-handle-malformed")
    handle = driver.d.CUipcMemHandle()
    ctypes.memmove(int(handle.getPtr()), raw, _IPC_HANDLE_BYTES)
    return handle


# ------------------------------------------------------------------ symmetric memory (VMM)
# What PyTorch's CUDASymmetricMemoryAllocator::alloc, make_peer_alloc_info and map_block do
# (torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemory.cu, CUDASymmetricMemoryUtils.cpp)
# on a host without fabric handles, less the multicast part (cuMulticastCreate is never
# called here: it can take shared GPUs out of service).


def _posix_fd(d: Any) -> Any:
    return d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR


def _device_location(d: Any, target: Any, ordinal: int) -> None:
    target.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    target.location.id = ordinal


def _map(driver: Driver, handle: Any, size: int, ordinal: int) -> int:
    """map_block: reserve a range, map the allocation there, allow ``ordinal`` to read and
    write it. Returns the address."""
    d = driver.d
    pointer = int(driver.call("cuMemAddressReserve", size, 0, 0, 0))
    driver.call("cuMemMap", d.CUdeviceptr(pointer), size, 0, handle, 0)
    desc = d.CUmemAccessDesc()
    _device_location(d, desc, ordinal)
    desc.flags = d.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    driver.call("cuMemSetAccess", d.CUdeviceptr(pointer), size, [desc], 1)
    return pointer


def _unmap(driver: Driver, pointer: int, size: int, handle: Any) -> None:
    """Best effort: the process ends next, which frees all of it anyway."""
    d = driver.d
    for function, args in (
        ("cuMemUnmap", (d.CUdeviceptr(pointer), size)),
        ("cuMemAddressFree", (d.CUdeviceptr(pointer), size)),
        ("cuMemRelease", (handle,)),
    ):
        with contextlib.suppress(CudaFailure):
            driver.call(function, *args)


def _vmm_check(driver: Driver, device: Any) -> None:
    for name, reason in (
        ("VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED", "symm-vmm-not-supported"),
        ("HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED", "symm-posix-fd-not-supported"),
    ):
        if not driver.attribute(device, name):
            raise CudaFailure("CUDA_ERROR_NOT_SUPPORTED", reason=reason)


def _multicast(driver: Driver, ordinals: Sequence[int]) -> bool | None:
    """Whether every GPU reports CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED; None when the
    attribute cannot be read. An attribute read only."""
    try:
        return all(
            driver.attribute(driver.call("cuDeviceGet", o), "MULTICAST_SUPPORTED") for o in ordinals
        )
    except CudaFailure:
        return None


# ------------------------------------------------------------------ one pair, two processes
# The owner exports both buffers and sends the writer, over the socket pair the parent made
# (SOCK_SEQPACKET: one message each), the symmetric allocation's size (0: none) and the IPC
# handle's bytes (none when IPC is not tested), with the allocation's fd (SCM_RIGHTS). The
# writer reports each write back ("cuda-ipc:written", "symm-mem:failed", ...) once its
# copy finished; the owner checks what landed when told, or when its wait ran out.
_HEADER = struct.Struct("<Q")
_REPORT_BYTES = 64

# The writer's atomics, in PTX the driver compiles itself (no NVRTC needed): one
# system-scope fetch-and-add of 1 per thread on the counter's address, the kind of atomic
# PyTorch's symmetric memory signals peers with.
_ATOMIC_PTX = b"""\
.version 6.0
.target sm_60
.address_size 64

.visible .entry bd_peer_add(.param .u64 counter)
{
    .reg .b64 %rd<3>;
    .reg .b32 %r<2>;
    ld.param.u64 %rd1, [counter];
    cvta.to.global.u64 %rd2, %rd1;
    atom.global.sys.add.u32 %r1, [%rd2], 1;
    ret;
}
\x00"""

_LABELS: dict[PairCheck, str] = {"cuda-ipc": "ipc", "symm-mem": "symm", "symm-atomic": "atomic"}
_WAITS: dict[PairCheck, Stage] = {
    "cuda-ipc": "ipc-wait",
    "symm-mem": "symm-wait",
    "symm-atomic": "symm-wait",
}


def _words(value: int, count: int) -> bytes:
    return struct.pack("<I", value) * count


def _errno(exc: OSError) -> str:
    import errno

    return errno.errorcode.get(exc.errno or 0, type(exc).__name__)


def _ipc_export(driver: Driver, size: int) -> tuple[int, bytes]:
    """A zeroed buffer and its cuIpcGetMemHandle's bytes."""
    d = driver.d
    pointer = driver.alloc(size)
    driver.call("cuMemsetD32", d.CUdeviceptr(pointer), 0, size // 4)
    driver.call("cuCtxSynchronize")
    return pointer, _handle_bytes(driver.call("cuIpcGetMemHandle", d.CUdeviceptr(pointer)))


def _symm_export(driver: Driver, job: PairJob) -> tuple[Any, int, int, int]:
    """CUDASymmetricMemoryAllocator::alloc without multicast: a cuMemCreate allocation with a
    POSIX fd handle (room for the pattern and the atomics' counter, rounded up to the
    granularity), mapped here, zeroed, exported. Returns (handle, address, size, fd)."""
    d = driver.d
    _vmm_check(driver, driver.call("cuDeviceGet", job.gpu))
    prop = d.CUmemAllocationProp()
    prop.type = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    _device_location(d, prop, job.gpu)
    prop.requestedHandleTypes = _posix_fd(d)
    granularity = int(
        driver.call(
            "cuMemGetAllocationGranularity",
            prop,
            d.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
        )
    )
    size = -(-(job.size_bytes + 4) // granularity) * granularity
    handle = driver.call("cuMemCreate", size, prop, 0)
    pointer = _map(driver, handle, size, job.gpu)
    driver.call("cuMemsetD32", d.CUdeviceptr(pointer), 0, job.size_bytes // 4 + 1)
    driver.call("cuCtxSynchronize")
    fd = int(driver.call("cuMemExportToShareableHandle", handle, _posix_fd(d), 0))
    return handle, pointer, size, fd


# Each side's first stage, with and without the IPC test.
_FIRST: dict[tuple[str, bool], Stage] = {
    ("owner", True): "ipc-export",
    ("owner", False): "symm-export",
    ("writer", True): "ipc-open",
    ("writer", False): "symm-import",
}


def _wait_at(gate: int | None) -> None:
    """Read the gate (PairJob.gate) to its end: the parent's go."""
    if gate is None:
        return
    with contextlib.suppress(OSError):
        while os.read(gate, 64):
            pass
        os.close(gate)


def run_pair(job: PairJob, emit: Emit, driver: Driver | None = None) -> int:
    """Either side of a pair's peer-write tests: the channel taken over, the driver
    started, then the side's own part (past the job's gate); its done line only when that
    part got through."""
    first = _FIRST[job.role, job.ipc]
    emit(StageLine(stage=first))
    with socket.socket(fileno=job.channel) as conn:
        started = _start(driver, job.gpu, emit)
        if started is None:
            return 0
        side = _pair_owner if job.role == "owner" else _pair_writer
        if side(job, started, conn, first, emit):
            emit(DoneLine())
    return 0


def _pair_owner(
    job: PairJob, driver: Driver, conn: socket.socket, first: Stage, emit: Emit
) -> bool:
    checks: dict[PairCheck, tuple[int, bytes]] = {}
    handle = b""
    if job.ipc:
        try:
            pointer, handle = _ipc_export(driver, job.size_bytes)
            checks["cuda-ipc"] = (pointer, _words(IPC_PATTERN, job.size_bytes // 4))
        except CudaFailure as exc:
            emit(ErrorLine(stage="ipc-export", reason=exc.reason))
    fd: int | None = None
    size = 0
    multicast: bool | None = None
    symm: tuple[Any, int, int] | None = None
    if job.symm:
        if job.ipc:
            emit(StageLine(stage="symm-export"))
        multicast = _multicast(driver, (job.gpu, job.peer))
        try:
            allocation, pointer, size, fd = _symm_export(driver, job)
            symm = (allocation, pointer, size)
            checks["symm-mem"] = (pointer, _words(SYMM_PATTERN, job.size_bytes // 4))
            atomics = ATOMIC_BLOCKS * ATOMIC_THREADS
            checks["symm-atomic"] = (pointer + job.size_bytes, _words(atomics, 1))
        except CudaFailure as exc:
            emit(ErrorLine(stage="symm-export", reason=exc.reason))
    landed = bytearray(job.size_bytes)  # what the writer wrote is read into it, in turn
    _wait_at(job.gate)
    try:
        socket.send_fds(conn, [_HEADER.pack(size) + handle], [] if fd is None else [fd])
    except OSError as exc:
        emit(ErrorLine(stage=first, reason=f"pair-channel:{_errno(exc)}"))
        return False
    finally:
        if fd is not None:
            os.close(fd)  # the writer's copy (and the allocation) stay
    emit(HandleLine(multicast=multicast))
    _judge(driver, conn, checks, job.wait_s, emit, landed)
    if symm is not None:
        _unmap(driver, symm[1], symm[2], symm[0])
    return True


def _judge(
    driver: Driver,
    conn: socket.socket,
    checks: dict[PairCheck, tuple[int, bytes]],
    wait_s: float,
    emit: Emit,
    landed: bytearray,
) -> None:
    """The owner's side: wait (within ``wait_s`` in all) for the writer's report of each
    check, compare what landed once it says its write finished; a write it never reported
    is compared at the end (not seen, or the first word that differs); a write it reported
    failed is left to its own error line, and so are atomics it never reported. A buffer's
    words are read into ``landed``."""
    pending = dict(checks)
    if pending:
        emit(StageLine(stage=_WAITS[next(iter(pending))]))
    deadline = time.monotonic() + wait_s
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        conn.settimeout(left)
        try:
            message = conn.recv(_REPORT_BYTES)
        except OSError:  # timed out, or the channel broke
            break
        if not message:
            break  # the writer is gone
        name, _, verdict = message.decode("ascii", "replace").partition(":")
        found = next((check for check in pending if check == name), None)
        if found is None:
            continue
        pointer, expected = pending.pop(found)
        if verdict == "written":
            _compare_written(driver, found, pointer, expected, wait_s, emit, landed)
        if found == "cuda-ipc" and "symm-mem" in pending:
            emit(StageLine(stage="symm-wait"))
    for name, (pointer, expected) in pending.items():
        if name != "symm-atomic":
            _compare_written(driver, name, pointer, expected, wait_s, emit, landed)


def _compare_written(
    driver: Driver,
    check: PairCheck,
    pointer: int,
    expected: bytes,
    wait_s: float,
    emit: Emit,
    landed: bytearray,
) -> None:
    """Every word of one check: correct, not seen, or the first word that differs (for
    the atomics' counter, how many adds landed). A buffer the size of ``landed`` is read
    into it (and compared as memcmp compares), the counter on its own."""
    label = _LABELS[check]
    data: bytes | bytearray
    if len(expected) == len(landed):
        driver.download_into(pointer, landed)
        data = landed
    else:
        data = driver.download(pointer, len(expected))
    if data == expected:
        emit(ResultLine(correct=True, check=check))
    elif check == "symm-atomic":
        (got,), (want,) = struct.unpack("<I", data), struct.unpack("<I", expected)
        detail = f"{label}: {got} of {want} adds landed"
        emit(ResultLine(correct=False, check=check, detail=detail))
    elif data[:4] != expected[:4] and data[-4:] != expected[:4]:
        emit(ErrorLine(stage=_WAITS[check], reason=f"{label}-write-not-seen:{wait_s:g}s"))
    else:
        first = _first_difference(data, expected)
        detail = f"{label}: differs from the pattern at word {first}"
        emit(ResultLine(correct=False, check=check, detail=detail))


def _report(conn: socket.socket, check: PairCheck, written: bool) -> None:
    with contextlib.suppress(OSError):  # an owner already gone judges nothing more
        conn.send(f"{check}:{'written' if written else 'failed'}".encode())


def _pair_writer(
    job: PairJob, driver: Driver, conn: socket.socket, first: Stage, emit: Emit
) -> bool:
    _wait_at(job.gate)
    conn.settimeout(job.wait_s)
    try:
        message, fds, _, _ = socket.recv_fds(conn, _HEADER.size + _IPC_HANDLE_BYTES, 1)
    except TimeoutError:
        emit(ErrorLine(stage=first, reason=f"pair-not-sent:{job.wait_s:g}s"))
        return False
    except OSError as exc:
        emit(ErrorLine(stage=first, reason=f"pair-channel:{_errno(exc)}"))
        return False
    for extra in fds[1:]:
        os.close(extra)
    fd = fds[0] if fds else None
    if len(message) < _HEADER.size:
        if fd is not None:
            os.close(fd)
        emit(ErrorLine(stage=first, reason="pair-owner-gone"))
        return False
    (size,) = _HEADER.unpack_from(message)
    handle = message[_HEADER.size :]
    if handle:
        _report(conn, "cuda-ipc", _ipc_write(driver, job, handle, emit))
    if fd is not None:
        _symm_write(driver, job, fd, size, emit, conn)
    return True


def _ipc_write(driver: Driver, job: PairJob, raw: bytes, emit: Emit) -> bool:
    """Open the owner's handle (peer access enabled with it), write the pattern through the
    mapping, wait for the copy."""
    d = driver.d
    stage: Stage = "ipc-open"
    try:
        remote = int(
            driver.call("cuIpcOpenMemHandle", _handle_from(driver, raw), _LAZY_ENABLE_PEER_ACCESS)
        )
        stage = "ipc-write"
        emit(StageLine(stage=stage))
        local = driver.alloc(job.size_bytes)
        driver.call("cuMemsetD32", d.CUdeviceptr(local), IPC_PATTERN, job.size_bytes // 4)
        driver.call("cuMemcpyDtoD", d.CUdeviceptr(remote), d.CUdeviceptr(local), job.size_bytes)
        driver.call("cuCtxSynchronize")
        driver.call("cuIpcCloseMemHandle", d.CUdeviceptr(remote))
        driver.free(local)
    except CudaFailure as exc:
        emit(ErrorLine(stage=stage, reason=exc.reason))
        return False
    return True


def _symm_write(
    driver: Driver, job: PairJob, fd: int, size: int, emit: Emit, conn: socket.socket
) -> None:
    """map_block for the owner's allocation (import, reserve, map, access for this GPU),
    the pattern written through it, then the atomics on the counter after the pattern."""
    d = driver.d
    stage: Stage = "symm-import"
    if job.ipc:
        emit(StageLine(stage=stage))
    fault = os.environ.get(TEST_FAULT_ENV, "")
    try:
        try:
            _vmm_check(driver, driver.call("cuDeviceGet", job.gpu))
            handle = driver.call("cuMemImportFromShareableHandle", fd, _posix_fd(d))
        finally:
            os.close(fd)  # the imported handle keeps the allocation
        pointer = _map(driver, handle, size, job.gpu)
        stage = "symm-write"
        emit(StageLine(stage=stage))
        if fault == "symm-hang":
            threading.Event().wait()  # the seam's hang: the parent kills this child
        local = driver.alloc(job.size_bytes)
        driver.call("cuMemsetD32", d.CUdeviceptr(local), SYMM_PATTERN, job.size_bytes // 4)
        if fault == "symm-wrong":
            # The seam's wrong landing: word 1 of what is copied is zero, in the same copy
            # (a second write could land after the owner already compared).
            driver.call("cuMemsetD32", d.CUdeviceptr(local + 4), 0, 1)
        driver.call("cuMemcpyDtoD", d.CUdeviceptr(pointer), d.CUdeviceptr(local), job.size_bytes)
        driver.call("cuCtxSynchronize")
        driver.free(local)
    except CudaFailure as exc:
        emit(ErrorLine(stage=stage, reason=exc.reason))
        _report(conn, "symm-mem", False)
        return
    _report(conn, "symm-mem", True)
    stage = "symm-atomic"
    emit(StageLine(stage=stage))
    try:
        try:
            module = driver.call("cuModuleLoadData", _ATOMIC_PTX)
            function = driver.call("cuModuleGetFunction", module, b"bd_peer_add")
        except CudaFailure as exc:
            raise CudaFailure(exc.name, reason="atomic-module:" + reason_token(exc.name)) from None
        blocks = ATOMIC_BLOCKS - (1 if fault == "symm-atomic-short" else 0)
        counter = ctypes.c_uint64(pointer + job.size_bytes)
        driver.launch(function, blocks, ATOMIC_THREADS, 0, [counter])
        driver.call("cuCtxSynchronize")
    except CudaFailure as exc:
        emit(ErrorLine(stage=stage, reason=exc.reason))
        _report(conn, "symm-atomic", False)
    else:
        _report(conn, "symm-atomic", True)
    _unmap(driver, pointer, size, handle)


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print(
            "usage: python -m blackwell_doctor.collect.probe._collective_child JOB_JSON",
            file=sys.stderr,
        )
        return 2
    job = msgspec.json.decode(argv[0], type=Job)
    if isinstance(job, AllReduceJob):
        return run_allreduce(job, _emit)
    if isinstance(job, PairJob):
        return run_pair(job, _emit)
    return run_link_load(job, _emit)


if __name__ == "__main__":
    from blackwell_doctor.collect.childexit import leave

    # Its answer written, it ends at once: no CUDA/NVML/NCCL teardown (childexit).
    leave(main(sys.argv[1:]))
