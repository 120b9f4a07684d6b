"""The collective child: ``python -m blackwell_doctor.collect.probe._collective_child JOB``.

:class:`AllReduceJob`: loads libnccl.so.2 (:mod:`blackwell_doctor.collect.nccl`), fills a
float32 send buffer per rank with ``rank + 1`` in each GPU's primary context (the one the
CUDA runtime inside NCCL uses too), runs one grouped ``ncclAllReduce`` (sum) over all the
job's GPUs with ``ncclCommInitAll``, reads every rank's result back and compares it with
``n(n+1)/2``, then times ``iterations`` more and compares again. A hang stays a hang: the
parent kills this child at its deadline (the stage it last printed says where).

:class:`LinkLoadJob`: per GPU, pinned host-to-device copies for a moment, and NVML's
current link generation and width read while they run (a GPU lowers its link when idle).

:class:`IpcExportJob` / :class:`IpcImportJob`: one process writes another's buffer through
a CUDA IPC mapping (vLLM's custom all-reduce). :class:`SymmExportJob` /
:class:`SymmImportJob`: the same through a CUDA VMM allocation shared by file descriptor,
as PyTorch's CUDA symmetric memory shares its buffers (vLLM's symmetric-memory all-reduce):
``cuMemCreate`` with a POSIX fd handle, ``cuMemExportToShareableHandle``, the fd passed over
a Unix socket with SCM_RIGHTS, ``cuMemImportFromShareableHandle``, ``cuMemAddressReserve``,
``cuMemMap``, ``cuMemSetAccess`` for the writer's own GPU, a write, and every word checked
by the owner. No multicast object is ever created: the multicast attribute is only read.

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

from blackwell_doctor.collect.cuda_driver import CudaFailure, Driver, reason_token
from blackwell_doctor.collect.nccl import Nccl, NcclFailure
from blackwell_doctor.collect.probe.collective_protocol import (
    IPC_PATTERN,
    SYMM_PATTERN,
    TEST_FAULT_ENV,
    AllReduceJob,
    DoneLine,
    ErrorLine,
    FatalLine,
    HandleLine,
    IpcExportJob,
    IpcImportJob,
    Job,
    Line,
    LinkLine,
    LinkLoadJob,
    ResultLine,
    Stage,
    StageLine,
    SymmExportJob,
    SymmImportJob,
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


def _first_difference(data: bytes, expected: bytes) -> int:
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
        detail = _compare(ranks, expected)
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
        detail = _compare(ranks, expected)
        emit(
            ResultLine(
                correct=detail is None,
                detail=detail,
                iterations=job.iterations,
                time_s=round(statistics.median(times), 7) if times else None,
            )
        )
        nccl.destroy(comms)
    except NcclFailure as exc:
        emit(ErrorLine(stage=stage, reason=exc.reason))
        return 0
    except CudaFailure as exc:
        emit(ErrorLine(stage=stage, reason=reason_token(exc.name)))
        return 0
    emit(DoneLine())
    return 0


def _compare(ranks: _Ranks, expected: bytes) -> str | None:
    for rank in range(len(ranks.recvs)):
        ranks.use(rank)
        data = ranks.driver.download(ranks.recvs[rank], len(expected))
        if data != expected:
            first = _first_difference(data, expected)
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


def c_bus_id(raw: object) -> str:
    """The bus id in cuDeviceGetPCIBusId's buffer: the text before its first NUL. The
    buffer is returned whole (32 bytes asked), and what follows the NUL is not always NULs:
    on an H200 pair, stripping trailing NULs left one inside ('0000:00:06.0\\x00'), and no
    NVML device matched."""
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else str(raw)
    return text.split("\0", 1)[0].strip()


def _load_one(
    driver: Driver, nvml: Any, by_bus: dict[str, int], ordinal: int, job: LinkLoadJob
) -> LinkLine:
    from blackwell_doctor.facts.pciaddr import normalize_pci_bus_id

    device = driver.call("cuDeviceGet", ordinal)
    bus = normalize_pci_bus_id(c_bus_id(driver.call("cuDeviceGetPCIBusId", 32, device)))
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


def run_ipc_export(job: IpcExportJob, emit: Emit, driver: Driver | None = None) -> int:
    stage: Stage = "ipc-export"
    emit(StageLine(stage=stage))
    started = _start(driver, job.gpu, emit)
    if started is None:
        return 0
    driver = started
    expected = struct.pack("<I", IPC_PATTERN) * (job.size_bytes // 4)
    try:
        pointer = driver.alloc(job.size_bytes)
        d = driver.d
        driver.call("cuMemsetD32", d.CUdeviceptr(pointer), 0, job.size_bytes // 4)
        driver.call("cuCtxSynchronize")
        handle = driver.call("cuIpcGetMemHandle", d.CUdeviceptr(pointer))
        emit(HandleLine(handle=_handle_bytes(handle).hex()))
        stage = "ipc-wait"
        emit(StageLine(stage=stage))
        deadline = time.monotonic() + job.wait_s
        last = job.size_bytes - 4
        while time.monotonic() < deadline:
            # The copy lands in order of no promise: the first and the last word both.
            if driver.download(pointer, 4) == expected[:4] and (
                driver.download(pointer + last, 4) == expected[:4]
            ):
                break
            time.sleep(0.005)
        data = driver.download(pointer, job.size_bytes)
        if data == expected:
            emit(ResultLine(correct=True))
        elif data[:4] != expected[:4] and data[-4:] != expected[:4]:
            emit(ErrorLine(stage=stage, reason=f"ipc-write-not-seen:{job.wait_s:g}s"))
        else:
            first = _first_difference(data, expected)
            emit(ResultLine(correct=False, detail=f"ipc: differs from the pattern at word {first}"))
    except CudaFailure as exc:
        emit(ErrorLine(stage=stage, reason=reason_token(exc.name)))
        return 0
    emit(DoneLine())
    return 0


def run_ipc_import(job: IpcImportJob, emit: Emit, driver: Driver | None = None) -> int:
    stage: Stage = "ipc-open"
    emit(StageLine(stage=stage))
    started = _start(driver, job.gpu, emit)
    if started is None:
        return 0
    driver = started
    d = driver.d
    try:
        try:
            raw = bytes.fromhex(job.handle)
        except ValueError:
            raise CudaFailure("CUDA_ERROR_INVALID_VALUE", reason="ipc-handle-malformed") from None
        handle = _handle_from(driver, raw)
        remote = int(driver.call("cuIpcOpenMemHandle", handle, _LAZY_ENABLE_PEER_ACCESS))
        stage = "ipc-write"
        emit(StageLine(stage=stage))
        local = driver.alloc(job.size_bytes)
        driver.call("cuMemsetD32", d.CUdeviceptr(local), IPC_PATTERN, job.size_bytes // 4)
        driver.call("cuMemcpyDtoD", d.CUdeviceptr(remote), d.CUdeviceptr(local), job.size_bytes)
        driver.call("cuCtxSynchronize")
        driver.call("cuIpcCloseMemHandle", d.CUdeviceptr(remote))
    except CudaFailure as exc:
        emit(ErrorLine(stage=stage, reason=exc.reason))
        return 0
    emit(DoneLine())
    return 0


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


_SIZE = struct.Struct("<Q")  # the allocation's size, sent with the fd


def run_symm_export(job: SymmExportJob, emit: Emit, driver: Driver | None = None) -> int:
    stage: Stage = "symm-export"
    emit(StageLine(stage=stage))
    started = _start(driver, job.gpu, emit)
    if started is None:
        return 0
    driver = started
    d = driver.d
    expected = struct.pack("<I", SYMM_PATTERN) * (job.size_bytes // 4)
    try:
        device = driver.call("cuDeviceGet", job.gpu)
        _vmm_check(driver, device)
        multicast = _multicast(driver, (job.gpu, job.peer))
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
        size = -(-job.size_bytes // granularity) * granularity
        handle = driver.call("cuMemCreate", size, prop, 0)
        pointer = _map(driver, handle, size, job.gpu)
        driver.call("cuMemsetD32", d.CUdeviceptr(pointer), 0, job.size_bytes // 4)
        driver.call("cuCtxSynchronize")
        fd = int(driver.call("cuMemExportToShareableHandle", handle, _posix_fd(d), 0))
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
            server.bind(job.socket)
            server.listen(1)
            server.settimeout(job.wait_s)
            emit(HandleLine(handle=job.socket, multicast=multicast))
            stage = "symm-wait"
            emit(StageLine(stage=stage))
            try:
                conn, _ = server.accept()
            except TimeoutError:
                emit(ErrorLine(stage=stage, reason=f"symm-peer-not-connected:{job.wait_s:g}s"))
                return 0
            with conn:
                socket.send_fds(conn, [_SIZE.pack(size)], [fd])
        os.close(fd)
        deadline = time.monotonic() + job.wait_s
        last = job.size_bytes - 4
        while time.monotonic() < deadline:
            if driver.download(pointer, 4) == expected[:4] and (
                driver.download(pointer + last, 4) == expected[:4]
            ):
                break
            time.sleep(0.005)
        data = driver.download(pointer, job.size_bytes)
        if data == expected:
            emit(ResultLine(correct=True))
        elif data[:4] != expected[:4] and data[-4:] != expected[:4]:
            emit(ErrorLine(stage=stage, reason=f"symm-write-not-seen:{job.wait_s:g}s"))
        else:
            first = _first_difference(data, expected)
            detail = f"symm: differs from the pattern at word {first}"
            emit(ResultLine(correct=False, detail=detail))
        _unmap(driver, pointer, size, handle)
    except CudaFailure as exc:
        emit(ErrorLine(stage=stage, reason=exc.reason))
        return 0
    except OSError as exc:
        emit(ErrorLine(stage=stage, reason=f"symm-socket:{_errno(exc)}"))
        return 0
    emit(DoneLine())
    return 0


def _errno(exc: OSError) -> str:
    import errno

    return errno.errorcode.get(exc.errno or 0, type(exc).__name__)


def receive_fd(path: str, timeout_s: float) -> tuple[int, int]:
    """The fd and allocation size the owner sends over its socket (SCM_RIGHTS)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout_s)
        conn.connect(path)
        message, fds, _, _ = socket.recv_fds(conn, _SIZE.size, 1)
    if not fds:
        raise CudaFailure("CUDA_ERROR_INVALID_VALUE", reason="symm-fd-not-received")
    for extra in fds[1:]:
        os.close(extra)
    if len(message) != _SIZE.size:
        os.close(fds[0])
        raise CudaFailure("CUDA_ERROR_INVALID_VALUE", reason="symm-size-not-received")
    return fds[0], _SIZE.unpack(message)[0]


def run_symm_import(job: SymmImportJob, emit: Emit, driver: Driver | None = None) -> int:
    stage: Stage = "symm-import"
    emit(StageLine(stage=stage))
    started = _start(driver, job.gpu, emit)
    if started is None:
        return 0
    driver = started
    d = driver.d
    try:
        _vmm_check(driver, driver.call("cuDeviceGet", job.gpu))
        try:
            fd, size = receive_fd(job.socket, job.wait_s)
        except TimeoutError:
            raise CudaFailure(
                "CUDA_ERROR_INVALID_VALUE", reason=f"symm-fd-not-received:{job.wait_s:g}s"
            ) from None
        try:
            handle = driver.call("cuMemImportFromShareableHandle", fd, _posix_fd(d))
        finally:
            os.close(fd)  # the imported handle keeps the allocation
        pointer = _map(driver, handle, size, job.gpu)
        stage = "symm-write"
        emit(StageLine(stage=stage))
        fault = os.environ.get(TEST_FAULT_ENV, "")
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
        _unmap(driver, pointer, size, handle)
    except CudaFailure as exc:
        emit(ErrorLine(stage=stage, reason=exc.reason))
        return 0
    except OSError as exc:
        emit(ErrorLine(stage=stage, reason=f"symm-socket:{_errno(exc)}"))
        return 0
    emit(DoneLine())
    return 0


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
    if isinstance(job, IpcExportJob):
        return run_ipc_export(job, _emit)
    if isinstance(job, IpcImportJob):
        return run_ipc_import(job, _emit)
    if isinstance(job, SymmExportJob):
        return run_symm_export(job, _emit)
    if isinstance(job, SymmImportJob):
        return run_symm_import(job, _emit)
    return run_link_load(job, _emit)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
