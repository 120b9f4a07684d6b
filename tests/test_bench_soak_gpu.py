"""`bench --soak`'s GPU memory reader on a real GPU (marker ``gpu``; skipped cleanly without
one): it sees every GPU NVML sees, and 1 GiB allocated on GPU 0 shows in its next sample."""

from __future__ import annotations

import pytest

from blackwell_doctor.collect.bench import soak_gpu
from blackwell_doctor.collect.cuda_driver import Driver
from blackwell_doctor.collect.nvml import RealNvml

pytestmark = pytest.mark.gpu

GIB = 1 << 30


def test_the_reader_sees_every_gpu_with_its_total_memory() -> None:
    sample = soak_gpu.sample_gpu_memory(60.0)
    assert isinstance(sample, soak_gpu.Sample), sample
    nvml = RealNvml()
    nvml.init()
    try:
        count = nvml.device_count()
        totals = [nvml.device_memory_total(i) / soak_gpu.MIB for i in range(count)]
    finally:
        nvml.shutdown()
    assert len(sample.used_mib) == count
    assert sample.total_mib == totals
    for used, total in zip(sample.used_mib, sample.total_mib, strict=True):
        assert used is not None
        assert total is not None
        assert 0 < used <= total


def test_a_gibibyte_allocated_on_gpu_0_shows_in_the_next_sample() -> None:
    driver = Driver()
    driver.call("cuInit", 0)
    device = driver.call("cuDeviceGet", 0)
    context = driver.call("cuDevicePrimaryCtxRetain", device)
    driver.call("cuCtxSetCurrent", context)
    try:
        before = soak_gpu.sample_gpu_memory(60.0)
        pointer = driver.alloc(GIB)
        driver.call("cuMemsetD8", driver.d.CUdeviceptr(pointer), 1, GIB)  # backed for sure
        driver.synchronize()
        try:
            after = soak_gpu.sample_gpu_memory(60.0)
        finally:
            driver.free(pointer)
    finally:
        driver.call("cuDevicePrimaryCtxRelease", device)
    assert isinstance(before, soak_gpu.Sample), before
    assert isinstance(after, soak_gpu.Sample), after
    assert before.used_mib[0] is not None
    assert after.used_mib[0] is not None
    # Other processes may allocate meanwhile on a shared machine: at least the GiB, and
    # not wildly more.
    grown = after.used_mib[0] - before.used_mib[0]
    assert 1024.0 <= grown < 1024.0 + 512.0
