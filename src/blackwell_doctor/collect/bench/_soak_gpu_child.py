"""The child process of :func:`blackwell_doctor.collect.bench.soak_gpu.sample_gpu_memory`.

Prints one :class:`~blackwell_doctor.collect.bench.soak_gpu.GpuMemory` as JSON on stdout and exits
0: each GPU's used and total memory, or the NVML reason token of what failed.
"""

from __future__ import annotations

import contextlib
import sys

import msgspec

from blackwell_doctor.collect.bench.soak_gpu import GpuMemory
from blackwell_doctor.collect.nvml import NvmlCallError, RealNvml


def read() -> GpuMemory:
    api = RealNvml()
    try:
        api.init()
    except NvmlCallError as exc:
        return GpuMemory(error=exc.reason)
    try:
        count = api.device_count()
        used: list[int | None] = []
        total: list[int | None] = []
        for index in range(count):
            try:
                u, t = api.device_memory_used_total(index)
            except NvmlCallError:  # one GPU (GB10 answers NOT_SUPPORTED) loses its own sample
                used.append(None)
                total.append(None)
                continue
            used.append(u)
            total.append(t)
        return GpuMemory(used_bytes=used, total_bytes=total)
    except NvmlCallError as exc:
        return GpuMemory(error=exc.reason)
    finally:
        with contextlib.suppress(NvmlCallError):
            api.shutdown()


def main() -> int:
    sys.stdout.buffer.write(msgspec.json.encode(read()) + b"\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    from blackwell_doctor.collect.childexit import leave

    # Its answer written, it ends at once: no CUDA/NVML/NCCL teardown (childexit).
    leave(main())
