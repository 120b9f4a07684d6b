"""PCI facts from sysfs: NVIDIA GPUs, the bridges above them (with ACS), and the IOMMU.

REFERENCE §4: per-GPU ``iommu_group`` → ``/sys/kernel/iommu_groups/<g>/type`` says whether
DMA is translated; the ACS control register of each bridge on the way to the root port says
whether peer traffic is redirected through the root complex.
"""

from __future__ import annotations

import posixpath
import struct

from blackwell_doctor.collect.hostfs import HostFS
from blackwell_doctor.collect.parsers import (
    parse_acs,
    parse_iommu_cmdline,
    parse_link_speed,
    parse_link_width,
    parse_sysfs_int,
    upstream_bridges,
)
from blackwell_doctor.facts.document import (
    AcsFacts,
    IommuFacts,
    PciBridge,
    PciFacts,
    PciGpu,
    SysfsLink,
    Unavailable,
)

PCI_DEVICES = "/sys/bus/pci/devices"
IOMMU_CLASS = "/sys/class/iommu"
NVIDIA_VENDOR_ID = 0x10DE
# PCI class codes (base class 0x03 display): 0x0300 VGA controller, 0x0302 3D controller.
# The GPU's HDMI audio function (0x0403) and NVSwitch (0x0680) are not GPUs.
GPU_CLASSES = frozenset({0x0300, 0x0302})
# Full config space is 4096 bytes (PCIe extended configuration space).
CONFIG_SPACE_SIZE = 4096


def collect_pci(fs: HostFS, kernel_cmdline: str | Unavailable) -> PciFacts | Unavailable:
    entries = fs.listdir(PCI_DEVICES)
    if isinstance(entries, Unavailable):
        return entries
    gpus: list[PciGpu] = []
    for bdf in entries:
        gpu = _gpu(fs, bdf)
        if isinstance(gpu, Unavailable):
            # PciGpu.vendor_id cannot say "unknown", and dropping the device could hide a
            # GPU from every check: the PCI view as a whole is incomplete, and says why.
            return gpu
        if gpu is not None:
            gpus.append(gpu)
    gpus.sort(key=lambda g: g.bdf)
    bridge_bdfs = sorted({bdf for gpu in gpus for bdf in gpu.upstream})
    bridges = [PciBridge(bdf=bdf, acs=_acs(fs, bdf), link=_link(fs, bdf)) for bdf in bridge_bdfs]
    return PciFacts(gpus=gpus, bridges=bridges, iommu=_iommu(fs, kernel_cmdline))


def _gpu(fs: HostFS, bdf: str) -> PciGpu | Unavailable | None:
    """The NVIDIA display-class function at ``bdf``; None when it is something else (or
    was removed while we looked); Unavailable when it may be a GPU but cannot be told."""
    base = f"{PCI_DEVICES}/{bdf}"
    vendor = _read_int(fs, f"{base}/vendor")
    class_code = _read_int(fs, f"{base}/class")
    if isinstance(vendor, Unavailable) or isinstance(class_code, Unavailable):
        # The first 64 bytes of config space are readable without root and hold the same
        # IDs (vendor at 0x00, class code at 0x09..0x0b).
        header = _config_header(fs, base)
        if header is not None:
            vendor = header[0] if isinstance(vendor, Unavailable) else vendor
            class_code = header[1] if isinstance(class_code, Unavailable) else class_code
    if isinstance(class_code, int) and class_code >> 8 not in GPU_CLASSES:
        return None
    if isinstance(vendor, Unavailable):
        resolved = fs.realpath(base)
        if isinstance(resolved, Unavailable) and resolved.reason.startswith("not-found:"):
            return None  # the device went away between listing and reading (hot removal)
        # Display class (or unknown class) from an unknown vendor: may be one of ours.
        return Unavailable(f"unidentified-pci-device:{bdf}:{vendor.reason}")
    if vendor != NVIDIA_VENDOR_ID:
        return None
    # An unreadable class keeps the device: better a GPU too many than a silent miss.
    group = _link_name(fs, f"{base}/iommu_group")
    domain_type: str | Unavailable | None = None
    if isinstance(group, Unavailable):
        # The link is there (the device has a group) but does not resolve: the group and
        # its domain type are unknown, which is not "no IOMMU group".
        domain_type, group = group, None
    elif group is not None:
        text = fs.read_text(f"/sys/kernel/iommu_groups/{group}/type")
        domain_type = text if isinstance(text, Unavailable) else text.strip()
    numa = _read_int(fs, f"{base}/numa_node")
    resolved = fs.realpath(base)
    driver = _link_name(fs, f"{base}/driver")
    return PciGpu(
        bdf=bdf,
        vendor_id=vendor,
        device_id=_read_int(fs, f"{base}/device"),
        class_code=class_code,
        # (PciGpu.driver cannot say "unreadable"; an unresolvable driver link reads as none.)
        driver=driver if isinstance(driver, str) else None,
        # -1: the firmware gave no proximity information for this device.
        numa_node=numa if isinstance(numa, int) and numa >= 0 else None,
        iommu_group=group,
        iommu_domain_type=domain_type,
        upstream=upstream_bridges(resolved) if isinstance(resolved, str) else [],
        link=_link(fs, bdf),
    )


def _link(fs: HostFS, bdf: str) -> SysfsLink | Unavailable:
    """The port's link from sysfs (drivers/pci/pci-sysfs.c: current/max_link_speed and
    _width, world-readable); Unavailable with the first reason when none of them reads."""
    base = f"{PCI_DEVICES}/{bdf}"
    texts = {
        name: fs.read_text(f"{base}/{name}")
        for name in ("current_link_speed", "current_link_width", "max_link_speed", "max_link_width")
    }
    if all(isinstance(t, Unavailable) for t in texts.values()):
        first = texts["current_link_speed"]
        assert isinstance(first, Unavailable)
        return first

    def speed(name: str) -> int | None:
        text = texts[name]
        return parse_link_speed(text) if isinstance(text, str) else None

    def width(name: str) -> int | None:
        text = texts[name]
        return parse_link_width(text) if isinstance(text, str) else None

    return SysfsLink(
        current_gen=speed("current_link_speed"),
        current_width=width("current_link_width"),
        max_gen=speed("max_link_speed"),
        max_width=width("max_link_width"),
    )


def _config_header(fs: HostFS, base: str) -> tuple[int, int] | None:
    """(vendor, class code) from the standard config header, None if unreadable."""
    data = fs.read_bytes(f"{base}/config", limit=64)
    if isinstance(data, Unavailable) or len(data) < 0x0C:
        return None
    (vendor,) = struct.unpack_from("<H", data, 0x00)
    if vendor == 0xFFFF:  # no device answered
        return None
    return vendor, int.from_bytes(data[0x09:0x0C], "little")


def _read_int(fs: HostFS, host_path: str) -> int | Unavailable:
    text = fs.read_text(host_path)
    if isinstance(text, Unavailable):
        return text
    value = parse_sysfs_int(text)
    return value if value is not None else Unavailable(f"unparsed:{host_path}")


def _link_name(fs: HostFS, host_path: str) -> str | Unavailable | None:
    """Basename of a sysfs symlink's target (``driver``, ``iommu_group``); None if absent
    (no driver bound, no IOMMU group); Unavailable if it exists but does not resolve."""
    if not fs.exists(host_path):
        return None
    target = fs.realpath(host_path)
    return posixpath.basename(target) if isinstance(target, str) else target


def _acs(fs: HostFS, bdf: str) -> AcsFacts | Unavailable | None:
    path = f"{PCI_DEVICES}/{bdf}/config"
    data = fs.read_bytes(path, limit=CONFIG_SPACE_SIZE)
    return data if isinstance(data, Unavailable) else parse_acs(data, path)


def _iommu(fs: HostFS, kernel_cmdline: str | Unavailable) -> IommuFacts:
    options = {} if isinstance(kernel_cmdline, Unavailable) else parse_iommu_cmdline(kernel_cmdline)
    units = fs.listdir(IOMMU_CLASS)
    # No /sys/class/iommu: no IOMMU unit registered, a valid answer (IOMMU off in firmware
    # or kernel). Any other failure (permission) stays unavailable.
    if isinstance(units, Unavailable) and units.reason == f"not-found:{IOMMU_CLASS}":
        units = []
    return IommuFacts(cmdline_options=options, units=units)
