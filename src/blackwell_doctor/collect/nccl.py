"""NCCL: the only module that loads ``libnccl.so.2``, through ctypes, and only when asked.

The library is the one a runtime ships (the ``nvidia-nccl-cu12``/``-cu13`` wheel that
PyTorch and vLLM install, ``nvidia/nccl/lib/libnccl.so.2``) or the system's; no binding
package is needed. :class:`Nccl` turns an ``ncclResult_t`` into this program's reason
tokens (``nccl-error-unhandled-cuda-error``). Only the single-process, many-GPU API is used:
``ncclCommInitAll`` and grouped ``ncclAllReduce`` (NCCL user guide, "Example 1: Single
Process, Single Thread, Multiple Devices").
"""

from __future__ import annotations

import ctypes
import importlib.util
from pathlib import Path

SONAME = "libnccl.so.2"

# ncclDataType_t / ncclRedOp_t (nccl.h): ncclFloat32 = 7, ncclSum = 0.
NCCL_FLOAT32 = 7
NCCL_SUM = 0

# ncclResult_t (nccl.h).
_RESULTS = {
    1: "unhandled-cuda-error",
    2: "system-error",
    3: "internal-error",
    4: "invalid-argument",
    5: "invalid-usage",
    6: "remote-error",
    7: "in-progress",
}


def nccl_reason(code: int) -> str:
    return f"nccl-error-{_RESULTS.get(code, str(code))}"


class NcclFailure(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def find_nccl_library() -> str:
    """The NCCL a Python runtime on this host loads: the nvidia-nccl wheel's file when one
    is installed beside this tool, else the soname (the system's, found by dlopen)."""
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        candidate = Path(location) / "lib" / SONAME
        if candidate.is_file():
            return str(candidate)
    return SONAME


def format_version(code: int) -> str:
    """ncclGetVersion's integer: 22703 → "2.27.3" (NCCL >= 2.9 encodes X*10000+Y*100+Z)."""
    if code >= 10000:
        return f"{code // 10000}.{(code % 10000) // 100}.{code % 100}"
    return f"{code // 1000}.{(code % 1000) // 100}.{code % 100}"


class Nccl:
    """The NCCL calls the collective probe makes. Comms and streams are raw handles (ints)."""

    def __init__(self, library: str) -> None:
        try:
            self._lib = ctypes.CDLL(library)
        except OSError:
            raise NcclFailure("nccl-library-not-found") from None
        self.library = library

    def _check(self, code: int) -> None:
        if code != 0:
            raise NcclFailure(nccl_reason(code))

    def version(self) -> str:
        value = ctypes.c_int()
        self._check(self._lib.ncclGetVersion(ctypes.byref(value)))
        return format_version(value.value)

    def comm_init_all(self, devices: list[int]) -> list[int]:
        comms = (ctypes.c_void_p * len(devices))()
        devlist = (ctypes.c_int * len(devices))(*devices)
        self._check(self._lib.ncclCommInitAll(comms, len(devices), devlist))
        return [int(c or 0) for c in comms]

    def all_reduce_sum(
        self, comms: list[int], sends: list[int], recvs: list[int], count: int, streams: list[int]
    ) -> None:
        """One grouped float32 sum over the given ranks (a subset of ranks hangs: the seam)."""
        self._check(self._lib.ncclGroupStart())
        try:
            for comm, send, recv, stream in zip(comms, sends, recvs, streams, strict=True):
                self._check(
                    self._lib.ncclAllReduce(
                        ctypes.c_void_p(send),
                        ctypes.c_void_p(recv),
                        ctypes.c_size_t(count),
                        ctypes.c_int(NCCL_FLOAT32),
                        ctypes.c_int(NCCL_SUM),
                        ctypes.c_void_p(comm),
                        ctypes.c_void_p(stream),
                    )
                )
        finally:
            self._check(self._lib.ncclGroupEnd())
