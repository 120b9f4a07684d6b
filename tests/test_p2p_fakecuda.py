"""A fake of the few cuda-bindings driver calls the P2P child makes: GPUs as bytearrays in
one unified address space, the probe kernels in Python, peer access enforced, and knobs that
break the peer path (corrupt copies, faults, refusals, short memory). The real child's code
runs over it in-process (tests/test_p2p_child.py) and as a child process under the real
parent (tests/test_p2p_runner.py, through :func:`child_argv`)."""

from __future__ import annotations

import ctypes
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any

from blackwell_doctor.collect.cuda_driver import Driver
from blackwell_doctor.collect.probe._p2p_child import pattern_bytes, pattern_word
from blackwell_doctor.collect.probe.nvrtc import CompiledProbes, Target

REPO = Path(__file__).resolve().parents[1]


class CUresult(IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_NO_DEVICE = 100
    CUDA_ERROR_INVALID_HANDLE = 400
    CUDA_ERROR_ILLEGAL_ADDRESS = 700
    CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217
    CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704


OK = CUresult.CUDA_SUCCESS


class CUdeviceptr(int):
    pass


class CUstream(int):
    pass


class _Enum:
    def __init__(self, **values: int) -> None:
        self.__dict__.update(values)


@dataclass
class Knobs:
    gpus: int = 2
    can_access: Callable[[int, int], bool] = lambda a, b: True
    corrupt_peer_copy: bool = False  # flip one byte of every cuMemcpyPeer(Async)
    corrupt_peer_write: bool = False  # the fill kernel writing a peer's memory drops a word
    peer_copy_error: str | None = None  # cuMemcpyPeer fails with this
    enable_error: str | None = None  # cuCtxEnablePeerAccess fails with this
    alloc_limit: int | None = None  # cuMemAlloc of more than this: out of memory
    peer_gbps: float = 100.0
    host_gbps: float = 20.0
    no_device: bool = False


@dataclass
class _Alloc:
    device: int
    data: bytearray


@dataclass
class FakeCuda:
    """Stands in for the ``cuda.bindings.driver`` module."""

    knobs: Knobs = field(default_factory=Knobs)
    allocs: dict[int, _Alloc] = field(default_factory=dict)
    next_address: int = 1 << 40
    current: int | None = None  # the current context's device
    peer_enabled: set[tuple[int, int]] = field(default_factory=set)
    clock_ms: float = 0.0
    events: dict[int, float] = field(default_factory=dict)
    host: list[Any] = field(default_factory=list)
    sticky: str | None = None
    calls: list[str] = field(default_factory=list)

    CUdeviceptr = CUdeviceptr
    CUstream = CUstream
    CU_MEMHOSTALLOC_PORTABLE = 1
    CUstream_flags = _Enum(CU_STREAM_NON_BLOCKING=1)
    CUevent_flags = _Enum(CU_EVENT_DISABLE_TIMING=2)
    CUdevice_attribute = _Enum(
        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT=16,
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR=75,
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR=76,
    )

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("cu"):
            object.__getattribute__(self, "calls").append(name)
        return object.__getattribute__(self, name)

    # -- helpers

    def _err(self, name: str) -> tuple[Any, ...]:
        return (CUresult[name],)

    def _find(self, address: int, size: int) -> tuple[_Alloc, int]:
        for base, alloc in self.allocs.items():
            if base <= address and address + size <= base + len(alloc.data):
                return alloc, address - base
        raise KeyError(hex(address))

    def _tick(self, size: int, gbps: float) -> None:
        self.clock_ms += size / (gbps * 1e9) * 1e3

    # -- init and devices

    def cuInit(self, flags: int) -> tuple[Any, ...]:
        return self._err("CUDA_ERROR_NO_DEVICE") if self.knobs.no_device else (OK,)

    def cuDeviceGetCount(self) -> tuple[Any, ...]:
        return (OK, self.knobs.gpus)

    def cuDeviceGet(self, ordinal: int) -> tuple[Any, ...]:
        return (OK, ordinal)

    def cuDevicePrimaryCtxRetain(self, device: int) -> tuple[Any, ...]:
        return (OK, ("ctx", device))

    def cuDeviceGetAttribute(self, attribute: int, device: int) -> tuple[Any, ...]:
        return (OK, {16: 4, 75: 9, 76: 0}[attribute])

    def cuDeviceCanAccessPeer(self, dev: int, peer: int) -> tuple[Any, ...]:
        return (OK, int(self.knobs.can_access(dev, peer)))

    def cuCtxSetCurrent(self, context: tuple[str, int]) -> tuple[Any, ...]:
        self.current = context[1]
        return (OK,)

    def cuCtxEnablePeerAccess(self, peer: tuple[str, int], flags: int) -> tuple[Any, ...]:
        if self.knobs.enable_error:
            return self._err(self.knobs.enable_error)
        assert self.current is not None
        key = (self.current, peer[1])
        if key in self.peer_enabled:
            return self._err("CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED")
        self.peer_enabled.add(key)
        return (OK,)

    def cuCtxSynchronize(self) -> tuple[Any, ...]:
        return self._err(self.sticky) if self.sticky else (OK,)

    # -- memory

    def cuMemAlloc(self, size: int) -> tuple[Any, ...]:
        limit = self.knobs.alloc_limit
        if limit is not None and size > limit:
            return self._err("CUDA_ERROR_OUT_OF_MEMORY")
        assert self.current is not None
        address = self.next_address
        self.next_address += (size + 0xFFFF) & ~0xFFFF
        self.allocs[address] = _Alloc(device=self.current, data=bytearray(size))
        return (OK, CUdeviceptr(address))

    def cuMemFree(self, pointer: int) -> tuple[Any, ...]:
        del self.allocs[int(pointer)]
        return (OK,)

    def cuMemHostAlloc(self, size: int, flags: int) -> tuple[Any, ...]:
        buffer = ctypes.create_string_buffer(size)
        self.host.append(buffer)
        return (OK, ctypes.addressof(buffer))

    def cuMemsetD8(self, pointer: int, value: int, count: int) -> tuple[Any, ...]:
        alloc, offset = self._find(int(pointer), count)
        alloc.data[offset : offset + count] = bytes([value]) * count
        return (OK,)

    def cuMemsetD32(self, pointer: int, value: int, count: int) -> tuple[Any, ...]:
        alloc, offset = self._find(int(pointer), count * 4)
        alloc.data[offset : offset + count * 4] = struct.pack("<I", value) * count
        return (OK,)

    def cuMemcpyHtoD(self, pointer: int, host: int, size: int) -> tuple[Any, ...]:
        alloc, offset = self._find(int(pointer), size)
        alloc.data[offset : offset + size] = ctypes.string_at(host, size)
        return (OK,)

    def cuMemcpyDtoH(self, host: int, pointer: int, size: int) -> tuple[Any, ...]:
        alloc, offset = self._find(int(pointer), size)
        ctypes.memmove(host, bytes(alloc.data[offset : offset + size]), size)
        return (OK,)

    def cuMemcpyDtoHAsync(self, host: int, pointer: int, size: int, stream: Any) -> tuple[Any, ...]:
        self._tick(size, self.knobs.host_gbps * 2)
        return self.cuMemcpyDtoH(host, pointer, size)

    def cuMemcpyHtoDAsync(self, pointer: int, host: int, size: int, stream: Any) -> tuple[Any, ...]:
        self._tick(size, self.knobs.host_gbps * 2)
        return self.cuMemcpyHtoD(pointer, host, size)

    def cuMemcpyPeer(
        self, dst: int, dst_ctx: Any, src: int, src_ctx: Any, size: int
    ) -> tuple[Any, ...]:
        if self.knobs.peer_copy_error:
            self.sticky = self.knobs.peer_copy_error
            return self._err(self.knobs.peer_copy_error)
        source, s_off = self._find(int(src), size)
        target, t_off = self._find(int(dst), size)
        data = bytearray(source.data[s_off : s_off + size])
        if self.knobs.corrupt_peer_copy:
            data[size // 3] ^= 0x40
        target.data[t_off : t_off + size] = data
        self._tick(size, self.knobs.peer_gbps)
        return (OK,)

    def cuMemcpyPeerAsync(
        self, dst: int, dst_ctx: Any, src: int, src_ctx: Any, size: int, stream: Any
    ) -> tuple[Any, ...]:
        return self.cuMemcpyPeer(dst, dst_ctx, src, src_ctx, size)

    # -- streams, events

    def cuStreamCreate(self, flags: int) -> tuple[Any, ...]:
        return (OK, CUstream(len(self.calls) + 1))

    def cuEventCreate(self, flags: int) -> tuple[Any, ...]:
        handle = len(self.events) + 1000 + len(self.calls)
        self.events[handle] = 0.0
        return (OK, handle)

    def cuEventRecord(self, event: int, stream: Any) -> tuple[Any, ...]:
        self.events[event] = self.clock_ms
        return (OK,)

    def cuStreamWaitEvent(self, stream: Any, event: int, flags: int) -> tuple[Any, ...]:
        return (OK,) if event in self.events else self._err("CUDA_ERROR_INVALID_HANDLE")

    def cuEventSynchronize(self, event: int) -> tuple[Any, ...]:
        return self._err(self.sticky) if self.sticky else (OK,)

    def cuEventElapsedTime(self, start: int, end: int) -> tuple[Any, ...]:
        return (OK, self.events[end] - self.events[start])

    # -- modules and kernels

    def cuModuleLoadData(self, image: bytes) -> tuple[Any, ...]:
        return (OK, "module")

    def cuModuleGetFunction(self, module: Any, name: bytes) -> tuple[Any, ...]:
        return (OK, name.decode())

    def cuLaunchKernel(self, function: str, *args: Any) -> tuple[Any, ...]:
        params_address = args[-2]
        count = {"p2p_fill": 3, "p2p_check": 4, "p2p_spin": 2}[function]
        pointers = (ctypes.c_void_p * count).from_address(params_address)
        assert self.current is not None

        def u64(index: int) -> int:
            return ctypes.c_uint64.from_address(pointers[index] or 0).value

        if function == "p2p_fill":
            out, quads = u64(0), u64(1)
            seed = ctypes.c_uint32.from_address(pointers[2] or 0).value
            alloc, offset = self._find(out, quads * 16)
            self._access(alloc)
            data = bytearray(pattern_bytes(0, quads * 4, seed))
            if self.knobs.corrupt_peer_write and alloc.device != self.current:
                data[len(data) // 2] ^= 1
            alloc.data[offset : offset + quads * 16] = data
        elif function == "p2p_check":
            source, quads = u64(0), u64(1)
            seed = ctypes.c_uint32.from_address(pointers[2] or 0).value
            result = u64(3)
            alloc, offset = self._find(source, quads * 16)
            self._access(alloc)
            words = struct.unpack(f"<{quads * 4}I", alloc.data[offset : offset + quads * 16])
            bad = [i for i, w in enumerate(words) if w != pattern_word(i, seed)]
            res_alloc, res_off = self._find(result, 16)
            res_alloc.data[res_off : res_off + 16] = struct.pack(
                "<QQ", len(bad), bad[0] if bad else 2**64 - 1
            )
        return (OK,)

    def _access(self, alloc: _Alloc) -> None:
        if alloc.device != self.current and (self.current, alloc.device) not in self.peer_enabled:
            self.sticky = "CUDA_ERROR_ILLEGAL_ADDRESS"


def fake_compile(
    device_arch: int, name_expressions: Any, *, source: bytes | None = None, **_: Any
) -> CompiledProbes:
    """compile_probes without NVRTC: the fake runs the kernels in Python."""
    return CompiledProbes(
        image=b"fake",
        target=Target(device_arch, "cubin"),
        lowered_names={},
        cache="hit",
        nvrtc_version="13.0",
    )


def fake_driver(knobs: Knobs | None = None) -> tuple[Driver, FakeCuda]:
    fake = FakeCuda(knobs=knobs or Knobs())
    driver = Driver.__new__(Driver)
    driver.d = fake
    driver._lib_not_found = ()
    return driver, fake


# A child process that runs the real P2P child over the fake: `python -c CODE KNOBS JOB`.
_CHILD = """
import sys
sys.path.insert(0, {repo!r})
import json
from tests.test_p2p_fakecuda import Knobs, fake_compile, fake_driver
from blackwell_doctor.collect.probe import _p2p_child
_p2p_child.compile_probes = fake_compile
spec = json.loads(sys.argv[1])
can = {{tuple(p) for p in spec.pop("deny", [])}}
knobs = Knobs(**spec, can_access=lambda a, b: (a, b) not in can and (b, a) not in can)
driver, _fake = fake_driver(knobs)
job = _p2p_child.msgspec.json.decode(sys.argv[2], type=_p2p_child.P2PJob)
sys.exit(_p2p_child.run_job(job, _p2p_child._emit, driver))
"""


def child_argv(**knobs: Any) -> list[str]:
    """argv of a child process running the real P2P child code over :class:`FakeCuda`;
    ``deny=[(a, b)]`` refuses peer access for those pairs, other keys are :class:`Knobs`."""
    import json

    return [sys.executable, "-c", _CHILD.format(repo=str(REPO)), json.dumps(knobs)]
