"""The real collectors on a real GPU (marker ``gpu``; skipped cleanly without one).

Run on the H200 device machine; the values seen there are recorded in the evidence that the
lead commits. These assert what must hold on any NVIDIA host, plus the CC 9.0 and CC 12.x
shared-memory limits of REFERENCE §1.
"""

from __future__ import annotations

import os
from functools import cache

import pytest
from packaging.version import Version

from blackwell_doctor.collect.cuda import RealCuda, collect_cuda
from blackwell_doctor.collect.gpu import collect_gpu
from blackwell_doctor.collect.nvml import RealNvml, collect_nvml
from blackwell_doctor.facts.document import P2P_STATUS_NAMES, CudaFacts, NvmlFacts, Unavailable

pytestmark = pytest.mark.gpu

# REFERENCE §1: (opt-in per block, per SM, reserved per block) in bytes.
SMEM_LIMITS: dict[tuple[int, int], tuple[int, int, int]] = {
    (9, 0): (232_448, 233_472, 1_024),
    (10, 0): (232_448, 233_472, 1_024),
    (12, 0): (101_376, 102_400, 1_024),
    (12, 1): (101_376, 102_400, 1_024),
}


@cache
def collected() -> tuple[NvmlFacts, CudaFacts]:
    nvml, cuda = collect_gpu(120)
    assert isinstance(nvml, NvmlFacts), nvml
    assert isinstance(cuda, CudaFacts), cuda
    return nvml, cuda


def test_nvml_and_cuda_see_the_same_gpus_by_pci_bus_id() -> None:
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        pytest.skip("CUDA_VISIBLE_DEVICES hides GPUs from CUDA but not from NVML")
    nvml, cuda = collected()
    nvml_ids = [g.pci_bus_id for g in nvml.gpus]
    cuda_ids = [d.pci_bus_id for d in cuda.devices]
    assert len(nvml_ids) == len(cuda_ids) >= 1
    assert all(isinstance(i, str) for i in [*nvml_ids, *cuda_ids])
    assert sorted(nvml_ids) == sorted(cuda_ids)  # type: ignore[type-var]


def test_nvml_and_cuda_agree_on_name_and_compute_capability() -> None:
    nvml, cuda = collected()
    by_bus = {d.pci_bus_id: d for d in cuda.devices}
    for gpu in nvml.gpus:
        device = by_bus.get(gpu.pci_bus_id)
        if device is None:
            continue  # hidden from CUDA by CUDA_VISIBLE_DEVICES
        assert gpu.name == device.name
        assert gpu.compute_capability == device.compute_capability


def test_versions_parse_and_agree() -> None:
    nvml, cuda = collected()
    assert isinstance(nvml.driver_version, str)
    assert Version(nvml.driver_version) >= Version("525")
    assert isinstance(nvml.cuda_driver_version, str)
    assert Version(nvml.cuda_driver_version) >= Version("12.0")
    assert nvml.cuda_driver_version == cuda.driver_version
    assert isinstance(nvml.nvml_version, str)
    # NVML's own version ends with the driver version ("13.580.159.04").
    assert nvml.nvml_version.endswith(nvml.driver_version)


def test_every_gpu_has_its_identity_and_memory() -> None:
    nvml, _cuda = collected()
    for gpu in nvml.gpus:
        assert isinstance(gpu.uuid, str)
        assert gpu.uuid.startswith("GPU-")
        assert isinstance(gpu.name, str)
        assert gpu.name.startswith("NVIDIA")
        if gpu.name != "NVIDIA GB10":  # unified memory: NOT_SUPPORTED (REFERENCE §1)
            assert isinstance(gpu.memory_total_bytes, int)
            assert gpu.memory_total_bytes > 8 << 30


def test_shared_memory_limits_match_the_programming_guide() -> None:
    _nvml, cuda = collected()
    for device in cuda.devices:
        assert device.smem_per_block == 49_152  # the default on every arch since Volta
        assert isinstance(device.sm_count, int)
        assert device.sm_count > 0
        assert isinstance(device.l2_cache_bytes, int)
        assert device.l2_cache_bytes > 0
        capability = device.compute_capability
        assert isinstance(capability, tuple)
        if capability not in SMEM_LIMITS:
            continue
        optin, per_sm, reserved = SMEM_LIMITS[capability]
        assert device.smem_per_block_optin == optin
        assert device.smem_per_sm == per_sm
        assert device.reserved_smem_per_block == reserved


def test_p2p_matrix_names_every_pair_with_nvml_statuses() -> None:
    nvml, _cuda = collected()
    count = len(nvml.gpus)
    if count < 2:
        pytest.skip("one GPU: no pairs")
    assert isinstance(nvml.p2p, list)
    assert [(p.gpu_a, p.gpu_b) for p in nvml.p2p] == [
        (a, b) for a in range(count) for b in range(a + 1, count)
    ]
    for pair in nvml.p2p:
        for status in (pair.read, pair.write, pair.nvlink, pair.atomics):
            # Our integer index works where the binding's tuple constant raised ArgumentError.
            assert isinstance(status, str), status
            assert status in P2P_STATUS_NAMES.values()


def test_the_child_reports_what_an_in_process_collection_reads() -> None:
    nvml, cuda = collected()
    assert collect_nvml(RealNvml()) == nvml
    assert collect_cuda(RealCuda()) == cuda


def test_nothing_is_unavailable_on_a_healthy_datacenter_gpu() -> None:
    nvml, cuda = collected()
    if any(g.name == "NVIDIA GB10" for g in nvml.gpus):
        pytest.skip("GB10 has no NVML memory total")
    gpu_facts = [v for g in nvml.gpus for v in (g.name, g.uuid, g.compute_capability)]
    device_facts = [
        v
        for d in cuda.devices
        for v in (d.max_threads_per_sm, d.smem_per_block_optin, d.reserved_smem_per_block)
    ]
    assert [v for v in gpu_facts + device_facts if isinstance(v, Unavailable)] == []
