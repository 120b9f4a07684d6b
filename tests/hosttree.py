"""Fake host trees for the host collectors: files, binary PCI config space and *relative*
symlinks laid out exactly as sysfs has them, under a temporary root that HostFS reads.

Where each ready-made host's file contents come from is listed in
``tests/fixtures/hosts/README.md``.
"""

from __future__ import annotations

import os
import posixpath
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from blackwell_doctor.collect.hostfs import HostFS

# --------------------------------------------------------------------------- builder


@dataclass
class HostTree:
    """A host root under ``root``; every path argument is a host path (``/proc/cmdline``)."""

    root: Path
    # Bytes of each PCI ``config`` file readable: 64 models a non-root reader (sysfs
    # pci_read_config() serves only the standard header to unprivileged readers).
    config_readable: int = 4096
    environ: dict[str, str] = field(default_factory=dict)

    @property
    def fs(self) -> HostFS:
        return HostFS(self.root)

    def _at(self, host_path: str) -> Path:
        return self.root / host_path.lstrip("/")

    def write(self, host_path: str, content: str | bytes) -> None:
        target = self._at(host_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")

    def mkdir(self, host_path: str) -> None:
        self._at(host_path).mkdir(parents=True, exist_ok=True)

    def link(self, host_path: str, target_host_path: str, *, absolute: bool = False) -> None:
        """A symlink at ``host_path``; relative like sysfs's unless ``absolute``."""
        link = self._at(host_path)
        link.parent.mkdir(parents=True, exist_ok=True)
        target = (
            target_host_path
            if absolute
            else posixpath.relpath(target_host_path, posixpath.dirname(host_path))
        )
        os.symlink(target, link)

    def pci_function(
        self,
        bdf: str,
        *,
        sysfs_parent: str,
        vendor: int,
        device: int,
        class_code: int,
        driver: str | None,
        numa_node: int = -1,
        iommu_group: str | None = None,
        config: bytes | None = None,
        link: tuple[str, int, str, int] | None = ("32.0 GT/s PCIe", 16, "32.0 GT/s PCIe", 16),
    ) -> str:
        """One PCI function at ``<sysfs_parent>/<bdf>`` (e.g. sysfs_parent
        ``/sys/devices/pci0000:40/0000:40:01.1``), with the ``/sys/bus/pci/devices/<bdf>``,
        ``driver`` and ``iommu_group`` links sysfs has. Returns the device directory."""
        directory = f"{sysfs_parent}/{bdf}"
        self.write(f"{directory}/vendor", f"0x{vendor:04x}\n")
        self.write(f"{directory}/device", f"0x{device:04x}\n")
        self.write(f"{directory}/class", f"0x{class_code:06x}\n")
        self.write(f"{directory}/numa_node", f"{numa_node}\n")
        if link is not None:  # drivers/pci/pci-sysfs.c: current/max_link_speed and _width
            speed, width, max_speed, max_width = link
            self.write(f"{directory}/current_link_speed", f"{speed}\n")
            self.write(f"{directory}/current_link_width", f"{width}\n")
            self.write(f"{directory}/max_link_speed", f"{max_speed}\n")
            self.write(f"{directory}/max_link_width", f"{max_width}\n")
        if config is None:
            bridge = class_code >> 8 == 0x0604  # type 1 header for PCI-to-PCI bridges
            config = config_space(vendor, device, class_code, header_type=int(bridge))
        space = config
        self.write(f"{directory}/config", space[: self.config_readable])
        # ../../../devices/pci0000:40/0000:40:01.1/0000:41:00.0
        self.link(f"/sys/bus/pci/devices/{bdf}", directory)
        if driver is not None:
            self.mkdir(f"/sys/bus/pci/drivers/{driver}")
            # ../../../../bus/pci/drivers/nvidia
            self.link(f"{directory}/driver", f"/sys/bus/pci/drivers/{driver}")
        if iommu_group is not None:
            self.mkdir(f"/sys/kernel/iommu_groups/{iommu_group}/devices")
            # ../../../../kernel/iommu_groups/27
            self.link(f"{directory}/iommu_group", f"/sys/kernel/iommu_groups/{iommu_group}")
            self.link(f"/sys/kernel/iommu_groups/{iommu_group}/devices/{bdf}", directory)
        return directory

    def iommu_group_type(self, group: str, domain_type: str) -> None:
        self.write(f"/sys/kernel/iommu_groups/{group}/type", f"{domain_type}\n")

    def dmi(self, fields: Mapping[str, str]) -> None:
        """/sys/class/dmi/id/<field> files, one line each, as drivers/firmware/dmi-id.c
        writes them (a field the firmware leaves out has no file)."""
        for name, value in fields.items():
            self.write(f"/sys/class/dmi/id/{name}", f"{value}\n")


# --------------------------------------------------------------------------- config space

PCI_EXT_CAP_ID_AER = 0x0001
PCI_EXT_CAP_ID_VNDR = 0x000B
PCI_EXT_CAP_ID_ACS = 0x000D
PCI_EXT_CAP_ID_SECPCI = 0x0019
PCI_EXT_CAP_ID_L1SS = 0x001E

# What Linux writes into the ACS control register of every ACS-capable downstream port
# when an IOMMU driver has requested ACS (drivers/pci/pci.c pci_std_enable_acs():
# SrcValid | ReqRedir | CmpltRedir | UpstreamFwd); seen as "ACSCtl: SrcValid+ TransBlk-
# ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-" in NVIDIA/nccl#629.
ACS_CTRL_LINUX_DEFAULT = 0x001D
# ACSCap of a port that has every bit but EgressCtrl: "SrcValid+ TransBlk+ ReqRedir+
# CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans+" (lspci output in microsoft/openvmm#3461).
ACS_CAP_TYPICAL = 0x005F


def ext_cap(cap_id: int, version: int, body: bytes = b"") -> tuple[int, int, bytes]:
    return (cap_id, version, body)


def acs_body(capability: int, control: int) -> bytes:
    return struct.pack("<HH", capability, control)


def config_space(
    vendor: int,
    device: int,
    class_code: int,
    *,
    header_type: int = 0,
    ext_caps: Sequence[tuple[int, tuple[int, int, bytes]]] = (),
    size: int = 4096,
) -> bytes:
    """A config space image: the standard header (vendor, device, class, header type) and
    the extended capabilities at the given offsets, chained in the order given."""
    data = bytearray(size)
    struct.pack_into("<HH", data, 0x00, vendor, device)
    # Class code register at 0x09..0x0b: prog-if, subclass, base class.
    data[0x09:0x0C] = class_code.to_bytes(3, "little")
    data[0x0E] = header_type
    for index, (offset, (cap_id, version, body)) in enumerate(ext_caps):
        following = ext_caps[index + 1][0] if index + 1 < len(ext_caps) else 0
        header = cap_id | (version << 16) | (following << 20)
        struct.pack_into("<I", data, offset, header)
        data[offset + 4 : offset + 4 + len(body)] = body
    return bytes(data)


def root_port_config(device: int, *, acs_control: int = ACS_CTRL_LINUX_DEFAULT) -> bytes:
    """An AMD GPP bridge (root port) with ACS at 0x2a0 behind VSEC, AER and Secondary PCIe
    capabilities; offsets follow the usual lspci layout of AMD root ports ("[2a0 v1]
    Access Control Services") but are constructed."""
    return config_space(
        0x1022,
        device,
        0x060400,
        header_type=1,
        ext_caps=[
            (0x100, ext_cap(PCI_EXT_CAP_ID_VNDR, 1, b"\x01\x00\x01\x01")),
            (0x150, ext_cap(PCI_EXT_CAP_ID_AER, 2)),
            (0x270, ext_cap(PCI_EXT_CAP_ID_SECPCI, 1)),
            (0x2A0, ext_cap(PCI_EXT_CAP_ID_ACS, 1, acs_body(ACS_CAP_TYPICAL, acs_control))),
            (0x370, ext_cap(PCI_EXT_CAP_ID_L1SS, 1)),
        ],
    )


# --------------------------------------------------------------------------- file contents

OS_RELEASE_UBUNTU_2204 = """\
PRETTY_NAME="Ubuntu 22.04.4 LTS"
NAME="Ubuntu"
VERSION_ID="22.04"
VERSION="22.04.4 LTS (Jammy Jellyfish)"
VERSION_CODENAME=jammy
ID=ubuntu
ID_LIKE=debian
HOME_URL="https://www.ubuntu.com/"
SUPPORT_URL="https://help.ubuntu.com/"
BUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"
PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"
UBUNTU_CODENAME=jammy
"""

OS_RELEASE_UBUNTU_2404 = """\
PRETTY_NAME="Ubuntu 24.04.3 LTS"
NAME="Ubuntu"
VERSION_ID="24.04"
VERSION="24.04.3 LTS (Noble Numbat)"
VERSION_CODENAME=noble
ID=ubuntu
ID_LIKE=debian
HOME_URL="https://www.ubuntu.com/"
SUPPORT_URL="https://help.ubuntu.com/"
BUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"
PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"
UBUNTU_CODENAME=noble
LOGO=ubuntu-logo
"""

OS_RELEASE_UBUNTU_1804 = """\
NAME="Ubuntu"
VERSION="18.04.6 LTS (Bionic Beaver)"
ID=ubuntu
ID_LIKE=debian
PRETTY_NAME="Ubuntu 18.04.6 LTS"
VERSION_ID="18.04"
HOME_URL="https://www.ubuntu.com/"
SUPPORT_URL="https://help.ubuntu.com/"
BUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"
PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"
VERSION_CODENAME=bionic
UBUNTU_CODENAME=bionic
"""

OS_RELEASE_DEBIAN_12 = """\
PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"
NAME="Debian GNU/Linux"
VERSION_ID="12"
VERSION="12 (bookworm)"
VERSION_CODENAME=bookworm
ID=debian
HOME_URL="https://www.debian.org/"
SUPPORT_URL="https://www.debian.org/support"
BUG_REPORT_URL="https://bugs.debian.org/"
"""

PROC_VERSION_UBUNTU_2204 = (
    "Linux version 5.15.0-91-generic (buildd@lcy02-amd64-059) (gcc (Ubuntu 11.4.0-1ubuntu1"
    "~22.04) 11.4.0, GNU ld (GNU Binutils for Ubuntu) 2.38) #101-Ubuntu SMP Tue Nov 14 "
    "13:30:08 UTC 2023\n"
)
PROC_VERSION_WSL2 = (
    "Linux version 5.15.167.4-microsoft-standard-WSL2 (root@f9c826d3017f) (gcc (GCC) "
    "11.2.0, GNU ld (GNU Binutils) 2.37) #1 SMP Tue Nov 5 00:21:55 UTC 2024\n"
)
PROC_VERSION_WSL2_OLD = (
    "Linux version 4.19.67-microsoft-standard (oe-user@oe-host) (gcc version 8.2.0 (GCC)) "
    "#1 SMP Sun Aug 18 13:37:54 UTC 2019\n"
)
PROC_VERSION_WSL1 = (
    "Linux version 4.4.0-18985-Microsoft (Microsoft@Microsoft.com) (gcc version 5.4.0 "
    "(GCC) ) #1-Microsoft Fri Sep 13 14:26:00 PST 2019\n"
)
PROC_VERSION_DEBIAN_12 = (
    "Linux version 6.1.0-26-amd64 (debian-kernel@lists.debian.org) (gcc-12 (Debian "
    "12.2.0-14) 12.2.0, GNU ld (GNU Binutils for Debian) 2.40) #1 SMP PREEMPT_DYNAMIC "
    "Debian 6.1.112-1 (2024-09-30)\n"
)
PROC_VERSION_DGX_SPARK = (
    "Linux version 6.11.0-1016-nvidia (buildd@bos03-arm64-047) (aarch64-linux-gnu-gcc-13 "
    "(Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0, GNU ld (GNU Binutils for Ubuntu) 2.42) "
    "#16-Ubuntu SMP PREEMPT_DYNAMIC Tue Sep 16 15:20:33 UTC 2025\n"
)

NVIDIA_VERSION_OPEN_580 = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Tue Sep 23 09:48:11 UTC 2025\n"
    "GCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04) \n"
)
NVIDIA_VERSION_OPEN_580_ARM64 = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Tue Sep 23 09:48:11 UTC 2025\n"
    "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04) \n"
)
NVIDIA_VERSION_PROPRIETARY_550 = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n"
    "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04) \n"
)

WSL_INTEROP_BINFMT = "enabled\ninterpreter /init\nflags: PF\noffset 0\nmagic 4d5a\n"

_X86_FLAGS = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx "
    "fxsr sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good "
    "nopl xtopology nonstop_tsc cpuid extd_apicid aperfmperf rapl pni pclmulqdq monitor "
    "ssse3 fma cx16 sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand lahf_lm"
)


def x86_cpuinfo(
    *,
    vendor_id: str,
    family: int,
    model: int,
    model_name: str,
    logical: int,
    cores: int,
    mhz: str,
    hypervisor: bool = False,
) -> str:
    """Stanzas in the layout of x86 /proc/cpuinfo (arch/x86/kernel/cpu/proc.c). A guest's
    flags carry "hypervisor" (CPUID.1:ECX[31]), listed by the kernel right after rdrand."""
    flags = _X86_FLAGS.replace("rdrand", "rdrand hypervisor") if hypervisor else _X86_FLAGS
    stanzas = []
    for cpu in range(logical):
        stanzas.append(
            f"processor\t: {cpu}\n"
            f"vendor_id\t: {vendor_id}\n"
            f"cpu family\t: {family}\n"
            f"model\t\t: {model}\n"
            f"model name\t: {model_name}\n"
            "stepping\t: 2\n"
            f"cpu MHz\t\t: {mhz}\n"
            "physical id\t: 0\n"
            f"siblings\t: {logical}\n"
            f"core id\t\t: {cpu % cores}\n"
            f"cpu cores\t: {cores}\n"
            f"apicid\t\t: {cpu}\n"
            "fpu\t\t: yes\n"
            f"flags\t\t: {flags}\n"
            "address sizes\t: 48 bits physical, 48 bits virtual\n"
            "power management: ts ttp tm hwpstate cpb eff_freq_ro [13] [14]\n"
        )
    return "\n".join(stanzas) + "\n"


_GB10_FEATURES = (
    "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt "
    "fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm sb "
    "paca pacg dcpodp sve2 sveaes svepmull svebitperm svesha3 svesm4 flagm2 frint svei8mm "
    "svebf16 i8mm bf16 dgh bti ecv afp wfxt"
)


def arm64_cpuinfo(parts: Sequence[int], implementer: int = 0x41) -> str:
    """Stanzas in the layout of arm64 /proc/cpuinfo (arch/arm64/kernel/cpuinfo.c): no
    model name, the MIDR fields instead."""
    return "".join(
        f"processor\t: {cpu}\n"
        "BogoMIPS\t: 2000.00\n"
        f"Features\t: {_GB10_FEATURES}\n"
        f"CPU implementer\t: 0x{implementer:02x}\n"
        "CPU architecture: 8\n"
        "CPU variant\t: 0x0\n"
        f"CPU part\t: 0x{part:03x}\n"
        "CPU revision\t: 1\n\n"
        for cpu, part in enumerate(parts)
    )


# --------------------------------------------------------------------------- DMI

# Lenovo ThinkStation P620 (Threadripper PRO): machine type 30E0 in product_name, the
# model in product_version, as Lenovo fills SMBIOS type 1.
DMI_THINKSTATION_P620: Mapping[str, str] = {
    "sys_vendor": "LENOVO",
    "product_name": "30E0CTO1WW",
    "product_version": "ThinkStation P620",
    "board_vendor": "LENOVO",
    "board_name": "1046",
    "bios_vendor": "LENOVO",
    "bios_version": "S07KT4BA",
    "chassis_type": "3",
}
DMI_SUPERMICRO_M12SWA: Mapping[str, str] = {
    "sys_vendor": "Supermicro",
    "product_name": "Super Server",
    "board_vendor": "Supermicro",
    "board_name": "M12SWA-TF",
    "bios_vendor": "American Megatrends International, LLC.",
    "bios_version": "2.3",
    "chassis_type": "17",
}
DMI_DELL_R740: Mapping[str, str] = {
    "sys_vendor": "Dell Inc.",
    "product_name": "PowerEdge R740",
    "board_vendor": "Dell Inc.",
    "board_name": "0WRPXK",
    "bios_vendor": "Dell Inc.",
    "bios_version": "2.19.1",
    "chassis_type": "23",
}
# DGX Spark, as read on a real unit (lablup/all-smi#147): product NVIDIA_DGX_Spark, board
# P4242, chassis type 17.
DMI_DGX_SPARK: Mapping[str, str] = {
    "sys_vendor": "NVIDIA",
    "product_name": "NVIDIA_DGX_Spark",
    "product_version": "A.7",
    "board_name": "P4242",
    "bios_version": "5.36_0ACUM018",
    "chassis_type": "17",
}
# QEMU/KVM i440FX machine with SeaBIOS (QEMU's smbios defaults: no baseboard table, so no
# board_* files).
DMI_QEMU_I440FX: Mapping[str, str] = {
    "sys_vendor": "QEMU",
    "product_name": "Standard PC (i440FX + PIIX, 1996)",
    "product_version": "pc-i440fx-8.2",
    "bios_vendor": "SeaBIOS",
    "bios_version": "1.16.3-debian-1.16.3-2",
    "chassis_vendor": "QEMU",
    "chassis_type": "1",
}


# --------------------------------------------------------------------------- ready-made hosts

RTX_PRO_6000_BLACKWELL = 0x2BB1  # RTX PRO 6000 Blackwell Workstation Edition
RTX_5090 = 0x2B85
GB202_AUDIO = 0x22E8  # the GPU's HDMI/DP audio function (class 0x0403): not a GPU
AMD_GPP_BRIDGE = 0x1483  # Starship/Matisse GPP bridge, the root ports of Zen 2/3 TR PRO

# (GPU BDF, root complex, root port BDF, IOMMU group) of the 4-GPU Threadripper PRO host.
THREADRIPPER_GPUS: tuple[tuple[str, str, str, str], ...] = (
    ("0000:01:00.0", "pci0000:00", "0000:00:01.1", "12"),
    ("0000:21:00.0", "pci0000:20", "0000:20:03.1", "19"),
    ("0000:41:00.0", "pci0000:40", "0000:40:01.1", "27"),
    ("0000:e1:00.0", "pci0000:e0", "0000:e0:03.1", "45"),
)


def _linux_base(
    tree: HostTree,
    *,
    hostname: str,
    osrelease: str,
    proc_version: str,
    cmdline: str,
    cpuinfo: str,
    os_release: str | None,
    arch: str | None = None,
    dmi: Mapping[str, str] | None = None,
) -> None:
    """``arch``: /proc/sys/kernel/arch, which kernels before 6.1 do not have (None).
    ``dmi``: /sys/class/dmi/id fields; None for machines without SMBIOS (WSL2,
    Firecracker)."""
    tree.write("/proc/sys/kernel/hostname", f"{hostname}\n")
    if arch is not None:
        tree.write("/proc/sys/kernel/arch", f"{arch}\n")
    if dmi is not None:
        tree.dmi(dmi)
    tree.write("/proc/sys/kernel/osrelease", f"{osrelease}\n")
    tree.write("/proc/version", proc_version)
    tree.write("/proc/cmdline", f"{cmdline}\n")
    tree.write("/proc/cpuinfo", cpuinfo)
    tree.write("/proc/1/cgroup", "0::/init.scope\n")
    if os_release is not None:
        # Ubuntu and Debian: /etc/os-release -> ../usr/lib/os-release (os-release(5)).
        tree.write("/usr/lib/os-release", os_release)
        tree.link("/etc/os-release", "/usr/lib/os-release")


def threadripper_pro_cpuinfo() -> str:
    return x86_cpuinfo(
        vendor_id="AuthenticAMD",
        family=25,
        model=8,
        model_name="AMD Ryzen Threadripper PRO 5975WX 32-Cores",
        logical=64,
        cores=32,
        mhz="3600.000",
    )


UBUNTU_CMDLINE = (
    "BOOT_IMAGE=/vmlinuz-5.15.0-91-generic root=/dev/mapper/ubuntu--vg-ubuntu--lv ro "
    "quiet splash vt.handoff=7"
)


def threadripper_4x_rtx_pro_6000(
    root: Path, *, iommu_pt: bool = False, config_readable: int = 4096
) -> HostTree:
    """Hosts (1), (2) and (6): four RTX PRO 6000 Blackwell, each behind its own root port
    of a Threadripper PRO; IOMMU translating (DMA-FQ) unless ``iommu_pt``."""
    tree = HostTree(root, config_readable=config_readable)
    cmdline = UBUNTU_CMDLINE + (" amd_iommu=on iommu=pt" if iommu_pt else "")
    _linux_base(
        tree,
        hostname="tr-pro-ws",
        osrelease="5.15.0-91-generic",
        proc_version=PROC_VERSION_UBUNTU_2204,
        cmdline=cmdline,
        cpuinfo=threadripper_pro_cpuinfo(),
        os_release=OS_RELEASE_UBUNTU_2204,
        dmi=DMI_THINKSTATION_P620,
    )
    tree.write("/proc/driver/nvidia/version", NVIDIA_VERSION_OPEN_580)
    tree.pci_function(
        "0000:00:00.0",
        sysfs_parent="/sys/devices/pci0000:00",
        vendor=0x1022,
        device=0x1480,
        class_code=0x060000,
        driver=None,
    )
    for gpu, complex_, port, group in THREADRIPPER_GPUS:
        parent = f"/sys/devices/{complex_}"
        tree.pci_function(
            port,
            sysfs_parent=parent,
            vendor=0x1022,
            device=AMD_GPP_BRIDGE,
            class_code=0x060400,
            driver="pcieport",
            config=root_port_config(AMD_GPP_BRIDGE),
        )
        port_dir = f"{parent}/{port}"
        tree.pci_function(
            gpu,
            sysfs_parent=port_dir,
            vendor=0x10DE,
            device=RTX_PRO_6000_BLACKWELL,
            class_code=0x030000,
            driver="nvidia",
            iommu_group=group,
        )
        tree.pci_function(
            gpu[:-1] + "1",
            sysfs_parent=port_dir,
            vendor=0x10DE,
            device=GB202_AUDIO,
            class_code=0x040300,
            driver="snd_hda_intel",
            iommu_group=group,
        )
        tree.iommu_group_type(group, "identity" if iommu_pt else "DMA-FQ")
    for unit in ("ivhd0", "ivhd1", "ivhd2", "ivhd3"):
        tree.mkdir(f"/sys/class/iommu/{unit}")
    return tree


# Host (3): root port -> switch upstream port -> two downstream ports -> one GPU each.
SWITCH_ROOT_PORT = "0000:00:01.1"
SWITCH_UPSTREAM = "0000:01:00.0"
SWITCH_DOWNSTREAM = ("0000:02:00.0", "0000:02:01.0")
SWITCH_GPUS = ("0000:03:00.0", "0000:04:00.0")
BROADCOM_PEX89000 = 0xC030  # Broadcom/PLX PEX890xx Gen5 switch port (vendor 0x1000)


def switch_2x_rtx_pro_6000(root: Path) -> HostTree:
    tree = HostTree(root)
    _linux_base(
        tree,
        hostname="tr-pro-switch",
        osrelease="5.15.0-91-generic",
        proc_version=PROC_VERSION_UBUNTU_2204,
        cmdline=UBUNTU_CMDLINE,
        cpuinfo=threadripper_pro_cpuinfo(),
        os_release=OS_RELEASE_UBUNTU_2204,
        dmi=DMI_SUPERMICRO_M12SWA,
    )
    tree.write("/proc/driver/nvidia/version", NVIDIA_VERSION_OPEN_580)
    rc = "/sys/devices/pci0000:00"
    tree.pci_function(
        SWITCH_ROOT_PORT,
        sysfs_parent=rc,
        vendor=0x1022,
        device=AMD_GPP_BRIDGE,
        class_code=0x060400,
        driver="pcieport",
        numa_node=0,
        config=root_port_config(AMD_GPP_BRIDGE),
    )
    up_parent = f"{rc}/{SWITCH_ROOT_PORT}"
    # Switch upstream ports usually carry no ACS capability (only downstream ports route
    # peer traffic between their links): AER only.
    tree.pci_function(
        SWITCH_UPSTREAM,
        sysfs_parent=up_parent,
        vendor=0x1000,
        device=BROADCOM_PEX89000,
        class_code=0x060400,
        driver="pcieport",
        numa_node=0,
        config=config_space(
            0x1000,
            BROADCOM_PEX89000,
            0x060400,
            header_type=1,
            ext_caps=[(0x100, ext_cap(PCI_EXT_CAP_ID_AER, 2))],
        ),
    )
    down_parent = f"{up_parent}/{SWITCH_UPSTREAM}"
    downstream_config = config_space(
        0x1000,
        BROADCOM_PEX89000,
        0x060400,
        header_type=1,
        ext_caps=[
            (0x100, ext_cap(PCI_EXT_CAP_ID_AER, 2)),
            (0x138, ext_cap(PCI_EXT_CAP_ID_ACS, 1, acs_body(ACS_CAP_TYPICAL, 0x001D))),
        ],
    )
    for port, gpu, group in zip(SWITCH_DOWNSTREAM, SWITCH_GPUS, ("14", "15"), strict=True):
        tree.pci_function(
            port,
            sysfs_parent=down_parent,
            vendor=0x1000,
            device=BROADCOM_PEX89000,
            class_code=0x060400,
            driver="pcieport",
            numa_node=0,
            config=downstream_config,
        )
        tree.pci_function(
            gpu,
            sysfs_parent=f"{down_parent}/{port}",
            vendor=0x10DE,
            device=RTX_PRO_6000_BLACKWELL,
            class_code=0x030000,
            driver="nvidia",
            numa_node=0,
            iommu_group=group,
        )
        tree.iommu_group_type(group, "DMA-FQ")
    tree.mkdir("/sys/class/iommu/ivhd0")
    return tree


WSL2_ENVIRON: Mapping[str, str] = {
    "WSL_DISTRO_NAME": "Ubuntu-24.04",
    "WSL_INTEROP": "/run/WSL/1234_interop",
}
# Hyper-V puts the "Microsoft Basic Render Driver" (1414:008e, class 0x0302) on a vPCI bus
# below VMBus; the real GPU is reached through /dev/dxg, not PCI.
WSL2_RENDER_BDF = "2bec:00:00.0"


def wsl2_rtx_5090(root: Path) -> HostTree:
    """Host (4): RTX 5090 under WSL2 (no NVIDIA device on PCI)."""
    tree = HostTree(root, environ=dict(WSL2_ENVIRON))
    _linux_base(
        tree,
        hostname="DESKTOP-5090",
        osrelease="5.15.167.4-microsoft-standard-WSL2",
        proc_version=PROC_VERSION_WSL2,
        cmdline=(
            "initrd=\\initrd.img WSL_ROOT_INIT=1 panic=-1 nr_cpus=32 "
            "hv_utils.timesync_implicit=1 console=hvc0 debug pty.legacy_count=0"
        ),
        cpuinfo=x86_cpuinfo(
            vendor_id="AuthenticAMD",
            family=26,
            model=68,
            model_name="AMD Ryzen 9 9950X 16-Core Processor",
            logical=32,
            cores=16,
            mhz="4291.998",
            # WSL2 is a Hyper-V utility VM; it boots without SMBIOS (no DMI files).
            hypervisor=True,
        ),
        os_release=OS_RELEASE_UBUNTU_2404,
    )
    tree.write("/proc/sys/fs/binfmt_misc/WSLInterop", WSL_INTEROP_BINFMT)
    tree.write("/dev/dxg", b"")  # a character device on a real host; only its presence counts
    for lib in ("libcuda.so.1", "libdxcore.so", "libnvidia-ml.so.1", "nvidia-smi"):
        tree.write(f"/usr/lib/wsl/lib/{lib}", b"")
    tree.pci_function(
        WSL2_RENDER_BDF,
        sysfs_parent=(
            "/sys/devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00/"
            "2bec7c4d-1f5a-4b1e-9d8b-3c2a1e0f9a77/pci2bec:00"
        ),
        vendor=0x1414,
        device=0x008E,
        class_code=0x030200,
        driver=None,
    )
    return tree


def wsl1(root: Path) -> HostTree:
    """Host (5): WSL1 — an emulated kernel: no /sys/bus/pci, no /dev/dxg."""
    tree = HostTree(root, environ={"WSL_DISTRO_NAME": "Ubuntu-18.04"})
    _linux_base(
        tree,
        hostname="LAPTOP-WSL1",
        osrelease="4.4.0-18985-Microsoft",
        proc_version=PROC_VERSION_WSL1,
        cmdline="BOOT_IMAGE=/kernel init=/init",
        cpuinfo=x86_cpuinfo(
            vendor_id="GenuineIntel",
            family=6,
            model=165,
            model_name="Intel(R) Core(TM) i7-10750H CPU @ 2.60GHz",
            logical=12,
            cores=6,
            mhz="2592.000",
        ),
        os_release=OS_RELEASE_UBUNTU_1804,
    )
    tree.write("/proc/sys/fs/binfmt_misc/WSLInterop", WSL_INTEROP_BINFMT)
    # lxcore mounts an emulated sysfs on /sys (`mount`: microsoft/WSL#3159) that lists the
    # network interfaces (/sys/class/net/<if>/, few attributes: microsoft/WSL#3561) but has
    # no /sys/bus/pci and no /sys/dev/block (microsoft/WSL#2287).
    tree.mkdir("/sys/class/net/eth0")
    return tree


def no_gpu(root: Path) -> HostTree:
    """Host (7): an Intel server with an ASPEED BMC VGA and a NIC, no NVIDIA device; only
    /usr/lib/os-release (a minimal image without /etc/os-release)."""
    tree = HostTree(root)
    _linux_base(
        tree,
        hostname="build-07",
        osrelease="6.1.0-26-amd64",
        proc_version=PROC_VERSION_DEBIAN_12,
        cmdline="BOOT_IMAGE=/boot/vmlinuz-6.1.0-26-amd64 root=UUID=0b4c ro intel_iommu=on quiet",
        cpuinfo=x86_cpuinfo(
            vendor_id="GenuineIntel",
            family=6,
            model=85,
            model_name="Intel(R) Xeon(R) Gold 6254 CPU @ 3.10GHz",
            logical=72,
            cores=18,
            mhz="3100.000",
        ),
        os_release=None,
        arch="x86_64",
        dmi=DMI_DELL_R740,
    )
    tree.write("/usr/lib/os-release", OS_RELEASE_DEBIAN_12)
    rc = "/sys/devices/pci0000:00"
    tree.pci_function(
        "0000:00:1c.0",
        sysfs_parent=rc,
        vendor=0x8086,
        device=0xA190,
        class_code=0x060400,
        driver="pcieport",
    )
    tree.pci_function(
        "0000:03:00.0",
        sysfs_parent=f"{rc}/0000:00:1c.0",
        vendor=0x1A03,
        device=0x2000,
        class_code=0x030000,
        driver="ast",
        iommu_group="30",
    )
    tree.iommu_group_type("30", "DMA")
    tree.pci_function(
        "0000:18:00.0",
        sysfs_parent="/sys/devices/pci0000:17",
        vendor=0x8086,
        device=0x1521,
        class_code=0x020000,
        driver="igb",
    )
    for unit in ("dmar0", "dmar1"):
        tree.mkdir(f"/sys/class/iommu/{unit}")
    return tree


DGX_SPARK_GPU = "000f:01:00.0"
DGX_SPARK_ROOT_PORT = "000f:00:00.0"
# GB10: 10 Cortex-X925 (0xd85) + 10 Cortex-A725 (0xd87) (hrw/arm-socs-table#133).
GB10_PARTS: tuple[int, ...] = (0xD85,) * 10 + (0xD87,) * 10


def dgx_spark(root: Path) -> HostTree:
    """Host (8): DGX Spark-like arm64 host (GB10)."""
    tree = HostTree(root)
    _linux_base(
        tree,
        hostname="spark-01",
        osrelease="6.11.0-1016-nvidia",
        proc_version=PROC_VERSION_DGX_SPARK,
        cmdline="BOOT_IMAGE=/boot/vmlinuz-6.11.0-1016-nvidia root=UUID=5e1d ro quiet splash",
        cpuinfo=arm64_cpuinfo(GB10_PARTS),
        os_release=OS_RELEASE_UBUNTU_2404,
        arch="aarch64",
        dmi=DMI_DGX_SPARK,
    )
    tree.write("/proc/driver/nvidia/version", NVIDIA_VERSION_OPEN_580_ARM64)
    rc = "/sys/devices/pci000f:00"
    tree.pci_function(
        DGX_SPARK_ROOT_PORT,
        sysfs_parent=rc,
        vendor=0x10DE,
        device=0x22CE,
        class_code=0x060400,
        driver="pcieport",
        numa_node=0,
        config=config_space(
            0x10DE,
            0x22CE,
            0x060400,
            header_type=1,
            ext_caps=[
                (0x100, ext_cap(PCI_EXT_CAP_ID_AER, 2)),
                (0x148, ext_cap(PCI_EXT_CAP_ID_ACS, 1, acs_body(ACS_CAP_TYPICAL, 0x001D))),
            ],
        ),
    )
    tree.pci_function(
        DGX_SPARK_GPU,
        sysfs_parent=f"{rc}/{DGX_SPARK_ROOT_PORT}",
        vendor=0x10DE,
        device=0x2E12,
        class_code=0x030200,
        driver="nvidia",
        numa_node=0,
        iommu_group="7",
    )
    tree.iommu_group_type("7", "DMA")
    tree.mkdir("/sys/class/iommu/smmu3.0x0000000016000000")
    return tree


# Host (9): a KVM guest with two H200s passed through, laid out like the real capture in
# tests/fixtures/facts/h200x2-captured.json (a Firecracker microVM): both GPUs straight on
# the guest's root bus, no bridge (so no ACS to read), no virtual IOMMU (no groups; an
# empty /sys/class/iommu). Firecracker gives no SMBIOS and no /sys/hypervisor: the CPU's
# hypervisor flag is the only VM signal. All of this was checked on the real guest
# (/proc/sys/kernel/arch x86_64, host bridge 8086:0d57, GPU numa_node -1, 4096-byte
# config). ``smbios=True`` makes it a QEMU guest instead (DMI says QEMU).
H200 = 0x2335
VM_GPUS = ("0000:00:06.0", "0000:00:07.0")
PROC_VERSION_FIRECRACKER_GUEST = (
    "Linux version 6.18.44-fc-v657-gpu (builder@sandboxing) (gcc (GCC) 15.3.0, GNU ld "
    "(GNU Binutils) 2.46) #1 SMP PREEMPT_DYNAMIC @0\n"
)
FIRECRACKER_CMDLINE = (
    "mitigations=auto,no_guest_host,no_guest_guest console=ttyS0 quiet reboot=k panic=1 "
    "random.trust_cpu=1 swiotlb=noforce psi=1 pci=realloc=off "
    "memhp_default_state=online_kernel -- --firecracker-init --addr 0.0.0.0:2024"
)


def vm_2x_h200(root: Path, *, smbios: bool = False) -> HostTree:
    tree = HostTree(root)
    _linux_base(
        tree,
        hostname="h200-guest",
        osrelease="6.18.44-fc-v657-gpu",
        proc_version=PROC_VERSION_FIRECRACKER_GUEST,
        cmdline=FIRECRACKER_CMDLINE,
        cpuinfo=x86_cpuinfo(
            vendor_id="GenuineIntel",
            family=6,
            model=143,
            model_name="Intel(R) Xeon(R) Processor",
            logical=32,
            cores=32,
            mhz="2000.000",
            hypervisor=True,
        ),
        os_release=OS_RELEASE_UBUNTU_2404,
        arch="x86_64",
        dmi=DMI_QEMU_I440FX if smbios else None,
    )
    tree.write("/proc/driver/nvidia/version", NVIDIA_VERSION_OPEN_580)
    rc = "/sys/devices/pci0000:00"
    tree.pci_function(
        "0000:00:00.0",
        sysfs_parent=rc,
        vendor=0x8086,
        device=0x0D57,  # the host bridge Firecracker's PCI root presents
        class_code=0x060000,
        driver=None,
    )
    tree.mkdir("/sys/class/iommu")
    for bdf in VM_GPUS:
        tree.pci_function(
            bdf,
            sysfs_parent=rc,
            vendor=0x10DE,
            device=H200,
            class_code=0x030200,
            driver="nvidia",
        )
    return tree
