"""Family gpu: a GPU is present and answers, its architecture and shared-memory class."""

from __future__ import annotations

from blackwell_doctor.facts.document import Facts, NvmlFacts, PciFacts, Unavailable
from blackwell_doctor.report.results import Status
from tests.factsutil import load, replace, result, status


def test_gpu_on_pci_without_driver_fails_and_pci_checks_still_run() -> None:
    facts = load("rtxpro6000x4-threadripper-iommu")
    facts = replace(
        facts, nvml=Unavailable("nvml-driver-not-loaded"), cuda=Unavailable("libcuda-not-found")
    )
    r = result(facts, "gpu.present")
    assert r.status is Status.FAIL
    assert "nvml-driver-not-loaded" in r.summary
    # pci.* judge the sysfs inventory: they work without a driver.
    assert status(facts, "pci.iommu") is Status.WARN
    assert status(facts, "driver.version") is Status.SKIP  # blocked by gpu.present


def test_unknown_compute_capability_warns() -> None:
    facts = load("sm120-driver580")
    nvml = facts.nvml
    assert isinstance(nvml, NvmlFacts)
    gpus = [replace(g, compute_capability=(13, 0)) for g in nvml.gpus]
    r = result(replace(facts, nvml=replace(nvml, gpus=gpus)), "gpu.architecture")
    assert r.status is Status.WARN
    assert "13.0" in r.summary


def test_sm120_architecture_explains_the_99kb_budget() -> None:
    r = result(load("rtxpro6000x4-threadripper-iommu"), "gpu.architecture")
    assert "101,376 B" in r.summary
    assert "232,448 B" in r.summary  # what datacenter parts give, for contrast
    assert "227 KB" in str(r.evidence["why it matters"])


def test_shared_memory_differing_from_the_table_warns() -> None:
    facts = load("sm120-driver580")
    cuda = facts.cuda
    assert not isinstance(cuda, Unavailable)
    # e.g. a MIG or vGPU profile that grants less than the architecture has
    devices = [replace(d, smem_per_block_optin=65536) for d in cuda.devices]
    r = result(replace(facts, cuda=replace(cuda, devices=devices)), "gpu.shared_memory")
    assert r.status is Status.WARN
    assert "grants 65,536 B" in r.summary
    assert "table says 101,376 B" in r.summary


def test_shared_memory_with_a_cc_outside_the_table_is_not_evaluated() -> None:
    facts = load("sm120-driver580")
    cuda = facts.cuda
    assert not isinstance(cuda, Unavailable)
    devices = [replace(d, compute_capability=(13, 0)) for d in cuda.devices]
    r = result(replace(facts, cuda=replace(cuda, devices=devices)), "gpu.shared_memory")
    assert r.status is Status.ERROR
    assert "no table entry for CC 13.0" in r.summary


def test_shared_memory_with_one_device_unreadable_is_not_evaluated() -> None:
    facts = load("b200-x8")
    cuda = facts.cuda
    assert not isinstance(cuda, Unavailable)
    devices = list(cuda.devices)
    devices[3] = replace(devices[3], smem_per_block_optin=Unavailable("cuda-error-unknown"))
    r = result(replace(facts, cuda=replace(cuda, devices=devices)), "gpu.shared_memory")
    assert r.status is Status.ERROR
    assert "GPU3" in r.summary


def _lose_gpu(name: str, driver: str | None) -> Facts:
    facts = load(name)
    nvml, pci = facts.nvml, facts.pci
    assert isinstance(nvml, NvmlFacts)
    assert isinstance(pci, PciFacts)
    gpus = list(pci.gpus)
    gpus[-1] = replace(gpus[-1], driver=driver)
    lost: Facts = replace(
        facts, nvml=replace(nvml, gpus=nvml.gpus[:-1]), pci=replace(pci, gpus=gpus)
    )
    return lost


def test_a_gpu_on_pci_that_nvml_does_not_list_fails() -> None:
    r = result(_lose_gpu("rtxpro6000x4-threadripper-iommu", "nvidia"), "gpu.present")
    assert r.status is Status.FAIL
    assert "NVML answers for 3 of 4" in r.summary
    assert "0000:61:00.0" in r.summary
    assert r.remedy is not None
    assert "Xid" in r.remedy.summary


def test_a_gpu_handed_to_vfio_is_a_warning_not_a_failure() -> None:
    r = result(_lose_gpu("rtxpro6000x4-threadripper-iommu", "vfio-pci"), "gpu.present")
    assert r.status is Status.WARN
    assert "vfio-pci" in r.summary


def test_no_gpu_with_pci_unreadable_does_not_claim_there_is_none_on_the_bus() -> None:
    facts = replace(load("no-gpu"), pci=Unavailable("permission-denied:/sys/bus/pci/devices"))
    r = result(facts, "gpu.present")
    assert r.status is Status.FAIL
    assert "PCI: unreadable (permission-denied:/sys/bus/pci/devices)" in r.summary
    assert "none with vendor" not in r.summary
