"""Family pci: IOMMU translation and ACS redirect on the path between GPUs."""

from __future__ import annotations

from blackwell_doctor.facts.document import (
    AcsFacts,
    OsRelease,
    PciBridge,
    PciFacts,
    PciGpu,
    Unavailable,
)
from blackwell_doctor.report.results import Status
from blackwell_doctor.rules.pci import bridges_between
from tests.factsutil import load, replace, result, status


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


def test_pci_checks_skip_inside_a_virtual_machine() -> None:
    from blackwell_doctor.facts.document import VirtualizationFacts

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
