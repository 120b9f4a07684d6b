"""collect_pci over fake sysfs trees with real symlink layouts and binary config space."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import msgspec

from blackwell_doctor.collect.hostfs import HostFS
from blackwell_doctor.collect.pci import collect_pci
from blackwell_doctor.facts.document import (
    AcsFacts,
    IommuFacts,
    PciBridge,
    PciFacts,
    PciGpu,
    SysfsLink,
    Unavailable,
)
from tests.hosttree import (
    DGX_SPARK_GPU,
    DGX_SPARK_ROOT_PORT,
    SWITCH_DOWNSTREAM,
    SWITCH_GPUS,
    SWITCH_ROOT_PORT,
    SWITCH_UPSTREAM,
    THREADRIPPER_GPUS,
    UBUNTU_CMDLINE,
    VM_GPUS,
    dgx_spark,
    no_gpu,
    switch_2x_rtx_pro_6000,
    threadripper_4x_rtx_pro_6000,
    vm_2x_h200,
    wsl1,
    wsl2_rtx_5090,
)

# What hosttree writes by default: a Gen5 x16 link (sysfs "32.0 GT/s PCIe", "16").
GEN5_X16 = SysfsLink(current_gen=5, current_width=16, max_gen=5, max_width=16)

FIXTURES = Path(__file__).parent / "fixtures" / "facts"
GPU_41 = "/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0"

LINUX_ACS = AcsFacts(
    capability_offset=0x2A0,
    capability=0x005F,
    control=0x001D,
    enabled=["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"],
)


def _pci(fs: HostFS, cmdline: str | Unavailable = "") -> PciFacts:
    facts = collect_pci(fs, cmdline)
    assert isinstance(facts, PciFacts), facts
    return facts


def test_fake_tree_has_sysfs_relative_links(tmp_path: Path) -> None:
    threadripper_4x_rtx_pro_6000(tmp_path)
    sys_dir = tmp_path / "sys"
    assert os.readlink(sys_dir / "bus/pci/devices/0000:41:00.0") == (
        "../../../devices/pci0000:40/0000:40:01.1/0000:41:00.0"
    )
    device = sys_dir / "devices/pci0000:40/0000:40:01.1/0000:41:00.0"
    assert os.readlink(device / "driver") == "../../../../bus/pci/drivers/nvidia"
    assert os.readlink(device / "iommu_group") == "../../../../kernel/iommu_groups/27"


def test_four_gpus_each_behind_its_own_root_port_with_translation(tmp_path: Path) -> None:
    tree = threadripper_4x_rtx_pro_6000(tmp_path)
    facts = _pci(tree.fs, UBUNTU_CMDLINE)
    assert facts.gpus == [
        PciGpu(
            bdf=gpu,
            vendor_id=0x10DE,
            device_id=0x2BB1,
            class_code=0x030000,
            driver="nvidia",
            numa_node=None,  # numa_node -1
            iommu_group=group,
            iommu_domain_type="DMA-FQ",
            upstream=[port],
            link=GEN5_X16,
        )
        for gpu, _complex, port, group in THREADRIPPER_GPUS
    ]
    # The GPUs' HDMI audio functions (10de:22e8, class 0x0403) are not GPUs.
    assert all(g.bdf.endswith(".0") for g in facts.gpus)
    assert facts.bridges == [
        PciBridge(bdf=port, acs=LINUX_ACS, link=GEN5_X16)
        for _gpu, _complex, port, _group in THREADRIPPER_GPUS
    ]
    assert facts.iommu == IommuFacts(cmdline_options={}, units=["ivhd0", "ivhd1", "ivhd2", "ivhd3"])


def test_iommu_pt_gives_identity_domains_and_cmdline_options(tmp_path: Path) -> None:
    tree = threadripper_4x_rtx_pro_6000(tmp_path, iommu_pt=True)
    cmdline = tree.fs.read_text("/proc/cmdline")
    assert isinstance(cmdline, str)
    facts = _pci(tree.fs, cmdline.strip())
    assert [g.iommu_domain_type for g in facts.gpus] == ["identity"] * 4
    assert facts.iommu.cmdline_options == {"amd_iommu": "on", "iommu": "pt"}


def test_gpus_behind_a_switch_list_every_bridge_nearest_first(tmp_path: Path) -> None:
    tree = switch_2x_rtx_pro_6000(tmp_path)
    facts = _pci(tree.fs)
    assert [g.bdf for g in facts.gpus] == list(SWITCH_GPUS)
    assert [g.upstream for g in facts.gpus] == [
        [SWITCH_DOWNSTREAM[0], SWITCH_UPSTREAM, SWITCH_ROOT_PORT],
        [SWITCH_DOWNSTREAM[1], SWITCH_UPSTREAM, SWITCH_ROOT_PORT],
    ]
    assert [g.numa_node for g in facts.gpus] == [0, 0]
    assert [g.iommu_group for g in facts.gpus] == ["14", "15"]
    downstream_acs = AcsFacts(
        capability_offset=0x138,
        capability=0x005F,
        control=0x001D,
        enabled=["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"],
    )
    # One entry per distinct bridge, sorted by BDF; the upstream port has no ACS at all.
    assert facts.bridges == [
        PciBridge(bdf=SWITCH_ROOT_PORT, acs=LINUX_ACS, link=GEN5_X16),
        PciBridge(bdf=SWITCH_UPSTREAM, acs=None, link=GEN5_X16),
        PciBridge(bdf=SWITCH_DOWNSTREAM[0], acs=downstream_acs, link=GEN5_X16),
        PciBridge(bdf=SWITCH_DOWNSTREAM[1], acs=downstream_acs, link=GEN5_X16),
    ]


def test_wsl2_has_no_nvidia_device_on_pci(tmp_path: Path) -> None:
    tree = wsl2_rtx_5090(tmp_path)
    facts = _pci(tree.fs)
    # The Hyper-V "Basic Render Driver" (1414:008e) is display class but not NVIDIA.
    assert tree.fs.exists("/sys/bus/pci/devices/2bec:00:00.0")
    assert facts == PciFacts(gpus=[], bridges=[], iommu=IommuFacts(cmdline_options={}, units=[]))


def test_wsl1_has_no_pci_sysfs(tmp_path: Path) -> None:
    tree = wsl1(tmp_path)
    assert collect_pci(tree.fs, "") == Unavailable("not-found:/sys/bus/pci/devices")


def test_non_root_reads_64_bytes_of_config_and_says_so(tmp_path: Path) -> None:
    tree = threadripper_4x_rtx_pro_6000(tmp_path, config_readable=64)
    facts = _pci(tree.fs)
    assert facts.bridges[0] == PciBridge(
        bdf="0000:00:01.1",
        acs=Unavailable("config-space-truncated:/sys/bus/pci/devices/0000:00:01.1/config:64-bytes"),
        link=GEN5_X16,  # world-readable, unlike the config space past 64 bytes
    )
    assert all(isinstance(b.acs, Unavailable) for b in facts.bridges)
    # Everything else still reads without root.
    assert [g.iommu_domain_type for g in facts.gpus] == ["DMA-FQ"] * 4


def test_host_without_nvidia_gpu(tmp_path: Path) -> None:
    tree = no_gpu(tmp_path)
    facts = _pci(tree.fs, "BOOT_IMAGE=/boot/vmlinuz ro intel_iommu=on quiet")
    # The ASPEED BMC VGA (1a03:2000, class 0x0300) is not NVIDIA.
    assert facts == PciFacts(
        gpus=[],
        bridges=[],
        iommu=IommuFacts(cmdline_options={"intel_iommu": "on"}, units=["dmar0", "dmar1"]),
    )


def test_dgx_spark_gpu_is_a_3d_controller(tmp_path: Path) -> None:
    tree = dgx_spark(tmp_path)
    facts = _pci(tree.fs)
    assert facts.gpus == [
        PciGpu(
            bdf=DGX_SPARK_GPU,
            vendor_id=0x10DE,
            device_id=0x2E12,
            class_code=0x030200,
            driver="nvidia",
            numa_node=0,
            iommu_group="7",
            iommu_domain_type="DMA",
            upstream=[DGX_SPARK_ROOT_PORT],
            link=GEN5_X16,
        )
    ]
    assert facts.iommu.units == ["smmu3.0x0000000016000000"]


def test_unbound_gpu_without_iommu_group(tmp_path: Path) -> None:
    tree = threadripper_4x_rtx_pro_6000(tmp_path)
    device = tmp_path / "sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0"
    (device / "driver").unlink()
    (device / "iommu_group").unlink()
    gpu = next(g for g in _pci(tree.fs).gpus if g.bdf == "0000:41:00.0")
    assert (gpu.driver, gpu.iommu_group, gpu.iommu_domain_type) == (None, None, None)


def test_missing_group_type_and_config_are_reasons(tmp_path: Path) -> None:
    tree = threadripper_4x_rtx_pro_6000(tmp_path)
    (tmp_path / "sys/kernel/iommu_groups/27/type").unlink()
    (tmp_path / "sys/devices/pci0000:40/0000:40:01.1/config").unlink()
    facts = _pci(tree.fs)
    gpu = next(g for g in facts.gpus if g.bdf == "0000:41:00.0")
    assert gpu.iommu_domain_type == Unavailable("not-found:/sys/kernel/iommu_groups/27/type")
    bridge = next(b for b in facts.bridges if b.bdf == "0000:40:01.1")
    assert bridge.acs == Unavailable("not-found:/sys/bus/pci/devices/0000:40:01.1/config")


def test_unreadable_cmdline_gives_no_options(tmp_path: Path) -> None:
    tree = threadripper_4x_rtx_pro_6000(tmp_path, iommu_pt=True)
    facts = _pci(tree.fs, Unavailable("not-found:/proc/cmdline"))
    assert facts.iommu.cmdline_options == {}


@dataclass(frozen=True)
class _DeniedIommuClass(HostFS):
    """Tests run as root here, so a chmod cannot deny a read: deny it in the reader."""

    def listdir(self, host_path: str) -> list[str] | Unavailable:
        if host_path == "/sys/class/iommu":
            return Unavailable(f"permission-denied:{host_path}")
        return super().listdir(host_path)


def test_iommu_units_permission_problem_stays_unavailable(tmp_path: Path) -> None:
    threadripper_4x_rtx_pro_6000(tmp_path)
    facts = _pci(_DeniedIommuClass(tmp_path))
    assert facts.iommu.units == Unavailable("permission-denied:/sys/class/iommu")
    assert len(facts.gpus) == 4


def test_pci_facts_survive_a_json_round_trip(tmp_path: Path) -> None:
    tree = switch_2x_rtx_pro_6000(tmp_path)
    facts = _pci(tree.fs, "iommu=pt")
    decoded = msgspec.json.decode(msgspec.json.encode(facts), type=PciFacts)
    assert decoded == facts


# --------------------------------------------------------------------------- VM guest


def test_vm_guest_gpus_sit_on_the_root_bus_as_in_the_h200_capture(tmp_path: Path) -> None:
    tree = vm_2x_h200(tmp_path)
    facts = _pci(tree.fs, "console=ttyS0 quiet")
    assert [g.bdf for g in facts.gpus] == list(VM_GPUS)
    # What the real H200 guest's collector wrote (tests/fixtures/facts/h200x2-captured.json).
    captured = json.loads((FIXTURES / "h200x2-captured.json").read_text())["pci"]
    # That capture predates the link facts (issue 26): compare without them.
    unlinked = msgspec.structs.replace(
        facts,
        gpus=[msgspec.structs.replace(g, link=None) for g in facts.gpus],
        bridges=[msgspec.structs.replace(b, link=None) for b in facts.bridges],
    )
    assert unlinked == msgspec.convert(captured, type=PciFacts)


def test_a_link_trained_down_and_an_unknown_speed_are_read_as_sysfs_says(tmp_path: Path) -> None:
    tree = threadripper_4x_rtx_pro_6000(tmp_path)
    device = "/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0"
    tree.write(f"{device}/current_link_speed", "2.5 GT/s PCIe\n")
    tree.write(f"{device}/current_link_width", "4\n")
    tree.write(f"{device}/max_link_speed", "Unknown\n")
    gpu = next(g for g in _pci(tree.fs).gpus if g.bdf == "0000:41:00.0")
    assert gpu.link == SysfsLink(current_gen=1, current_width=4, max_gen=None, max_width=16)


# --------------------------------------------------------------------------- unreadable links


def test_looping_iommu_group_link_is_unavailable_not_no_group(tmp_path: Path) -> None:
    tree = threadripper_4x_rtx_pro_6000(tmp_path)
    link = tmp_path / GPU_41.lstrip("/") / "iommu_group"
    link.unlink()
    os.symlink("iommu_group", link)
    gpu = next(g for g in _pci(tree.fs).gpus if g.bdf == "0000:41:00.0")
    assert gpu.iommu_group is None
    assert gpu.iommu_domain_type == Unavailable(
        "symlink-loop:/sys/bus/pci/devices/0000:41:00.0/iommu_group"
    )


@dataclass(frozen=True)
class _DeniedLink(HostFS):
    """readlink(2) denied on one path (as root a chmod cannot deny it: deny in the reader)."""

    denied: str = ""

    def realpath(self, host_path: str) -> str | Unavailable:
        if host_path == self.denied:
            return Unavailable(f"permission-denied:{host_path}")
        return super().realpath(host_path)


def test_unreadable_iommu_group_link_is_unavailable(tmp_path: Path) -> None:
    threadripper_4x_rtx_pro_6000(tmp_path)
    denied = "/sys/bus/pci/devices/0000:41:00.0/iommu_group"
    facts = _pci(_DeniedLink(tmp_path, denied))
    gpu = next(g for g in facts.gpus if g.bdf == "0000:41:00.0")
    assert (gpu.iommu_group, gpu.iommu_domain_type) == (
        None,
        Unavailable(f"permission-denied:{denied}"),
    )
    assert [g.iommu_domain_type for g in facts.gpus if g.bdf != "0000:41:00.0"] == ["DMA-FQ"] * 3


# --------------------------------------------------------------------------- unreadable vendor


def test_unreadable_vendor_file_falls_back_to_the_config_header(tmp_path: Path) -> None:
    tree = threadripper_4x_rtx_pro_6000(tmp_path, config_readable=64)
    (tmp_path / GPU_41.lstrip("/") / "vendor").unlink()
    (tmp_path / GPU_41.lstrip("/") / "class").unlink()
    gpu = next(g for g in _pci(tree.fs).gpus if g.bdf == "0000:41:00.0")
    # The first 64 bytes of config space (readable without root) hold both IDs.
    assert (gpu.vendor_id, gpu.class_code) == (0x10DE, 0x030000)


def test_display_device_of_unknown_vendor_makes_pci_unavailable(tmp_path: Path) -> None:
    tree = threadripper_4x_rtx_pro_6000(tmp_path)
    (tmp_path / GPU_41.lstrip("/") / "vendor").unlink()
    (tmp_path / GPU_41.lstrip("/") / "config").unlink()
    # It may be a fifth NVIDIA GPU: dropping it would let the checks judge four of five.
    assert collect_pci(tree.fs, "") == Unavailable(
        "unidentified-pci-device:0000:41:00.0:not-found:/sys/bus/pci/devices/0000:41:00.0/vendor"
    )


def test_unknown_vendor_of_a_non_display_device_is_not_a_gpu(tmp_path: Path) -> None:
    tree = threadripper_4x_rtx_pro_6000(tmp_path)
    audio = tmp_path / "sys/devices/pci0000:40/0000:40:01.1/0000:41:00.1"
    (audio / "vendor").unlink()
    (audio / "config").unlink()
    assert len(_pci(tree.fs).gpus) == 4  # class 0x0403 (audio): whoever made it, not a GPU


def test_looping_device_link_makes_pci_unavailable(tmp_path: Path) -> None:
    # /sys/bus/pci/devices/0000:41:00.0 -> itself: listed, but nothing about it can be read.
    tree = threadripper_4x_rtx_pro_6000(tmp_path)
    link = tmp_path / "sys/bus/pci/devices/0000:41:00.0"
    link.unlink()
    os.symlink("0000:41:00.0", link)
    assert collect_pci(tree.fs, "") == Unavailable(
        "unidentified-pci-device:0000:41:00.0:symlink-loop:/sys/bus/pci/devices/0000:41:00.0/vendor"
    )


def test_device_removed_during_the_scan_is_skipped(tmp_path: Path) -> None:
    # Hot removal: the listing still had it, its sysfs directory is gone (dangling link).
    tree = threadripper_4x_rtx_pro_6000(tmp_path)
    shutil.rmtree(tmp_path / GPU_41.lstrip("/"))
    facts = _pci(tree.fs)
    assert [g.bdf for g in facts.gpus] == ["0000:01:00.0", "0000:21:00.0", "0000:e1:00.0"]
