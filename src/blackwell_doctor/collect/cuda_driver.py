"""The one CUDA driver API adapter: the only module that imports ``cuda.bindings.driver``.

:class:`Driver` wraps cuda-bindings' calls: a CUresult error becomes a :class:`CudaFailure`
carrying the result's name (``CUDA_ERROR_INVALID_VALUE``) and its reason token for the facts
(``cuda-error-invalid-value``). The collector (:mod:`blackwell_doctor.collect.cuda`) and both
probe children (:mod:`blackwell_doctor.collect.probe._child`,
:mod:`blackwell_doctor.collect.probe._p2p_child`) call the driver through it. ``Any`` from the
untyped binding stays in here and in the callers' handles (devices, contexts, functions), which
they only pass back.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

# The CUresult "name" of a missing libcuda (cuda-bindings 13 raises instead of returning one).
LIBCUDA_NOT_FOUND = "LIBCUDA_NOT_FOUND"


def reason_token(name: str) -> str:
    """``CUDA_ERROR_NO_DEVICE`` → ``cuda-error-no-device``; a missing libcuda →
    ``libcuda-not-found``."""
    if name == LIBCUDA_NOT_FOUND:
        return "libcuda-not-found"
    return "cuda-error-" + name.removeprefix("CUDA_ERROR_").lower().replace("_", "-")


def c_string(value: object) -> str:
    """The text of a C string buffer a binding returned (bytes, or a str of it): what comes
    before its first NUL. A buffer comes back whole, and what follows the NUL is not always
    NULs: on an H200 pair, cuDeviceGetPCIBusId's buffer held '0000:00:06.0\\x00\\x07...'."""
    raw = value if isinstance(value, bytes) else str(value).encode()
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


class CudaFailure(Exception):
    """A driver call failed; ``name`` is the CUresult name (``CUDA_ERROR_INVALID_VALUE``),
    ``reason`` the token to record (``cuda-error-invalid-value``)."""

    def __init__(self, name: str, reason: str | None = None) -> None:
        super().__init__(name)
        self.name = name
        self.reason = reason if reason is not None else reason_token(name)


class StickyFailure(Exception):
    """The context is unusable after this error: report it and let a fresh child go on."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class Driver:
    """The driver API calls blackwell-doctor makes, over cuda-bindings.

    Constructing it imports the binding: :class:`ImportError` when cuda-bindings is absent.
    """

    def __init__(self) -> None:
        import cuda.bindings.driver as driver  # noqa: TID251 -- the CUDA adapter

        self.d: Any = driver
        self._lib_not_found: tuple[type[Exception], ...] = ()
        try:
            from cuda.pathfinder import DynamicLibNotFoundError  # noqa: TID251
        except ImportError:
            pass
        else:
            self._lib_not_found = (DynamicLibNotFoundError,)

    def call(self, function: str, *args: Any) -> Any:
        try:
            result, *values = getattr(self.d, function)(*args)
        except self._lib_not_found:
            raise CudaFailure(LIBCUDA_NOT_FOUND) from None
        if int(result) != 0:
            raise CudaFailure(getattr(result, "name", None) or f"CUDA_ERROR_{int(result)}")
        if not values:
            return None
        return values[0] if len(values) == 1 else tuple(values)

    def attribute(self, device: Any, name: str) -> int:
        """cuDeviceGetAttribute of ``CU_DEVICE_ATTRIBUTE_<name>``."""
        member = f"CU_DEVICE_ATTRIBUTE_{name}"
        enum = getattr(self.d.CUdevice_attribute, member, None)
        if enum is None:  # a cuda-bindings older than the attribute
            raise CudaFailure(member, reason=f"cuda-binding-missing:{member}")
        return int(self.call("cuDeviceGetAttribute", enum, device))

    def set_max_dynamic_smem(self, function: Any, size: int) -> None:
        attr = self.d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        self.call("cuFuncSetAttribute", function, attr, size)

    def launch(
        self, function: Any, grid: int, block: int, smem: int, params: Sequence[Any]
    ) -> None:
        """cuLaunchKernel with ctypes parameter values (kept alive for the call)."""
        pointers = (ctypes.c_void_p * len(params))(*[ctypes.addressof(p) for p in params])
        self.call(
            "cuLaunchKernel",
            function,
            grid,
            1,
            1,
            block,
            1,
            1,
            smem,
            self.d.CUstream(0),
            ctypes.addressof(pointers),
            0,
        )

    def synchronize(self) -> None:
        try:
            self.call("cuCtxSynchronize")
        except CudaFailure as exc:
            raise StickyFailure(exc.name) from None

    def alloc(self, size: int) -> int:
        return int(self.call("cuMemAlloc", max(size, 1)))

    def free(self, pointer: int) -> None:
        self.call("cuMemFree", self.d.CUdeviceptr(pointer))

    def upload(self, pointer: int, data: bytes) -> None:
        buffer = ctypes.create_string_buffer(data, len(data))
        self.call("cuMemcpyHtoD", self.d.CUdeviceptr(pointer), ctypes.addressof(buffer), len(data))

    def download(self, pointer: int, size: int) -> bytes:
        buffer = ctypes.create_string_buffer(size)
        self.call("cuMemcpyDtoH", ctypes.addressof(buffer), self.d.CUdeviceptr(pointer), size)
        return buffer.raw

    def download_into(self, pointer: int, buffer: bytearray) -> None:
        """:meth:`download` of ``len(buffer)`` bytes into ``buffer`` itself: no new buffer
        to zero and page in, no copy out of it (the collective child reads 64 MB per rank)."""
        size = len(buffer)
        target = (ctypes.c_char * size).from_buffer(buffer)
        self.call("cuMemcpyDtoH", ctypes.addressof(target), self.d.CUdeviceptr(pointer), size)

    def elapsed_ms(self, start: Any, end: Any) -> float:
        name = "cuEventElapsedTime"
        if not hasattr(self.d, name):
            name = "cuEventElapsedTime_v2"
        return float(self.call(name, start, end))
