"""PCI facts from sysfs: NVIDIA GPUs, the bridges above them (with ACS), and the IOMMU.

REFERENCE §4: per-GPU ``iommu_group`` → ``/sys/kernel/iommu_groups/<g>/type`` says whether
DMA is translated; the ACS control register of each bridge on the way to the root port says
whether peer traffic is redirected through the root complex.
"""

from __future__ import annotations

import posixpath

from blackwell_doctor.collect.hostfs import HostFS
from blackwell_doctor.collect.parsers import (
    parse_acs,
    parse_iommu_cmdline,
    parse_sysfs_int,
    upstream_bridges,
)
from blackwell_doctor.facts import (
    AcsFacts,
    IommuFacts,
    PciBridge,
    PciFacts,
    PciGpu,
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
    gpus = [gpu for bdf in entries if (gpu := _gpu(fs, bdf)) is not None]
    gpus.sort(key=lambda g: g.bdf)
    bridge_bdfs = sorted({bdf for gpu in gpus for bdf in gpu.upstream})
    bridges = [PciBridge(bdf=bdf, acs=_acs(fs, bdf)) for bdf in bridge_bdfs]
    return PciFacts(gpus=gpus, bridges=bridges, iommu=_iommu(fs, kernel_cmdline))


def _gpu(fs: HostFS, bdf: str) -> PciGpu | None:
    base = f"{PCI_DEVICES}/{bdf}"
    vendor = _read_int(fs, f"{base}/vendor")
    if not isinstance(vendor, int) or vendor != NVIDIA_VENDOR_ID:
        return None
    class_code = _read_int(fs, f"{base}/class")
    # An unreadable class keeps the device: better a GPU too many than a silent miss.
    if isinstance(class_code, int) and class_code >> 8 not in GPU_CLASSES:
        return None
    group = _link_name(fs, f"{base}/iommu_group")
    domain_type: str | Unavailable | None = None
    if group is not None:
        text = fs.read_text(f"/sys/kernel/iommu_groups/{group}/type")
        domain_type = text if isinstance(text, Unavailable) else text.strip()
    numa = _read_int(fs, f"{base}/numa_node")
    resolved = fs.realpath(base)
    return PciGpu(
        bdf=bdf,
        vendor_id=vendor,
        device_id=_read_int(fs, f"{base}/device"),
        class_code=class_code,
        driver=_link_name(fs, f"{base}/driver"),
        # -1: the firmware gave no proximity information for this device.
        numa_node=numa if isinstance(numa, int) and numa >= 0 else None,
        iommu_group=group,
        iommu_domain_type=domain_type,
        upstream=upstream_bridges(resolved) if isinstance(resolved, str) else [],
    )


def _read_int(fs: HostFS, host_path: str) -> int | Unavailable:
    text = fs.read_text(host_path)
    if isinstance(text, Unavailable):
        return text
    value = parse_sysfs_int(text)
    return value if value is not None else Unavailable(f"unparsed:{host_path}")


def _link_name(fs: HostFS, host_path: str) -> str | None:
    """Basename of a sysfs symlink's target (``driver``, ``iommu_group``); None if absent
    (no driver bound, no IOMMU group) or unreadable."""
    if not fs.exists(host_path):
        return None
    target = fs.realpath(host_path)
    return posixpath.basename(target) if isinstance(target, str) else None


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
