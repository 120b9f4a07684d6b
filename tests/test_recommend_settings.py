"""Settings derived from facts: tensor parallel size, OMP threads, the NCCL_P2P_DISABLE rule."""

from __future__ import annotations

import msgspec
import pytest

from blackwell_doctor.facts.document import Facts, NvmlFacts, PciFacts, decode_facts
from blackwell_doctor.recommend.settings import (
    derive,
    iommu_passthrough_in_effect,
    omp_num_threads,
    tensor_parallel_size,
)
from blackwell_doctor.rules.evaluate import evaluate
from tests.conftest import FACTS_FIXTURES


def _facts(name: str) -> Facts:
    return decode_facts((FACTS_FIXTURES / name).read_bytes(), source=name)


RTXPRO = "rtxpro6000x4-threadripper-iommu.json"


@pytest.mark.parametrize(
    ("gpus", "tp"), [(1, 1), (2, 2), (3, 2), (4, 4), (5, 4), (7, 4), (8, 8), (12, 8)]
)
def test_tensor_parallel_is_largest_power_of_two_not_above_gpu_count(gpus: int, tp: int) -> None:
    assert tensor_parallel_size(gpus) == tp


def test_tensor_parallel_needs_a_gpu() -> None:
    with pytest.raises(ValueError, match="at least one GPU"):
        tensor_parallel_size(0)


@pytest.mark.parametrize(
    ("cpus", "tp", "threads"), [(48, 4, 12), (24, 4, 6), (14, 1, 14), (2, 4, 1)]
)
def test_omp_threads_are_cpus_per_worker(cpus: int, tp: int, threads: int) -> None:
    assert omp_num_threads(cpus, tp) == threads


@pytest.mark.parametrize(
    ("fixture", "tp", "omp"),
    [
        (RTXPRO, 4, "12"),  # 48 logical CPUs, 4 GPUs
        ("b200-x8.json", 8, "28"),  # 224 logical CPUs, 8 GPUs
        ("sm120-driver580.json", 1, "14"),
        ("dgx-spark-gb10.json", 1, "20"),
        ("h200x2-captured.json", 2, "16"),
    ],
)
def test_derived_from_fixture(fixture: str, tp: int, omp: str) -> None:
    facts = _facts(fixture)
    derived = derive(facts, evaluate(facts))
    assert derived is not None
    assert derived.tensor_parallel_size == tp
    assert derived.env["OMP_NUM_THREADS"] == omp
    assert derived.env["CUDA_DEVICE_MAX_CONNECTIONS"] == "32"
    assert derived.env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert derived.env["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"


def test_no_gpu_means_nothing_to_launch() -> None:
    facts = _facts("no-gpu.json")
    assert derive(facts, evaluate(facts)) is None


def test_iommu_passthrough_in_effect_read_from_domains() -> None:
    assert iommu_passthrough_in_effect(_facts("b200-x8.json")) is True
    assert iommu_passthrough_in_effect(_facts(RTXPRO)) is False


def _p2p_refused(facts: Facts) -> Facts:
    nvml = facts.nvml
    assert isinstance(nvml, NvmlFacts)
    assert isinstance(nvml.p2p, list)
    pairs = [msgspec.structs.replace(p, read="CHIPSET_NOT_SUPPORTED") for p in nvml.p2p]
    return msgspec.structs.replace(facts, nvml=msgspec.structs.replace(nvml, p2p=pairs))


def _with_passthrough(facts: Facts) -> Facts:
    pci = facts.pci
    assert isinstance(pci, PciFacts)
    gpus = [msgspec.structs.replace(g, iommu_domain_type="identity") for g in pci.gpus]
    iommu = msgspec.structs.replace(pci.iommu, cmdline_options={"iommu": "pt"})
    return msgspec.structs.replace(facts, pci=msgspec.structs.replace(pci, gpus=gpus, iommu=iommu))


def test_p2p_healthy_translating_iommu_does_not_disable_p2p() -> None:
    # The article's host before the fix: no P2P finding, so NCCL keeps P2P (pci.iommu is
    # its own action: iommu=pt).
    facts = _facts(RTXPRO)
    derived = derive(facts, evaluate(facts))
    assert derived is not None
    assert "NCCL_P2P_DISABLE" not in derived.env


def test_broken_p2p_without_passthrough_disables_nccl_p2p() -> None:
    facts = _p2p_refused(_facts(RTXPRO))
    report = evaluate(facts)
    assert any(r.id == "p2p.nvml_status" and r.status == "warn" for r in report.results)
    derived = derive(facts, report)
    assert derived is not None
    assert derived.env["NCCL_P2P_DISABLE"] == "1"
    assert "p2p.nvml_status" in derived.why["NCCL_P2P_DISABLE"]


def test_broken_p2p_with_passthrough_in_effect_keeps_nccl_p2p() -> None:
    facts = _with_passthrough(_p2p_refused(_facts(RTXPRO)))
    assert iommu_passthrough_in_effect(facts) is True
    derived = derive(facts, evaluate(facts))
    assert derived is not None
    assert "NCCL_P2P_DISABLE" not in derived.env
    assert any("iommu=pt is in effect" in n for n in derived.notes)
