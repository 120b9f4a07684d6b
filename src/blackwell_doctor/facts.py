"""The facts document: everything the collectors read, as plain versioned data.

Every value a collector may fail to read is typed ``T | Unavailable``. On the wire an
unavailable value is ``{"status": "unavailable", "reason": "<token>"}`` and an available
structured value carries ``"status": "ok"``; scalars are written as they are. Reason tokens
are short and machine-readable: ``nvml-library-not-found``, ``not-found:/proc/cmdline``,
``permission-denied:/sys/bus/pci/devices/0000:41:00.0/config``.

``check --facts FILE`` decodes this document with full validation, so a facts file from any
host replays every check anywhere. Additive changes keep ``SCHEMA_VERSION``; a reader rejects
a document whose version is newer than the one it knows.
"""

from __future__ import annotations

from typing import Literal

import msgspec

SCHEMA_VERSION = 1


class Unavailable(msgspec.Struct, frozen=True, tag_field="status", tag="unavailable"):
    """A fact that could not be read, and why (a reason token, never an exception text)."""

    reason: str


class Available(msgspec.Struct, frozen=True, kw_only=True, tag_field="status", tag="ok"):
    """Base of every structured fact that may instead be :class:`Unavailable`."""


def unavailable_reason(value: object) -> str | None:
    """The reason when ``value`` is unavailable, else None."""
    return value.reason if isinstance(value, Unavailable) else None


# --------------------------------------------------------------------------- platform


WslKind = Literal["none", "wsl1", "wsl2"]


class OsRelease(Available, frozen=True):
    """Fields of /etc/os-release (or /usr/lib/os-release)."""

    id: str | None = None
    version_id: str | None = None
    pretty_name: str | None = None


class WslFacts(msgspec.Struct, frozen=True, kw_only=True):
    """WSL detection: the verdict and every signal seen (REFERENCE §4)."""

    kind: WslKind
    signals: list[str] = msgspec.field(default_factory=list)


class ContainerFacts(msgspec.Struct, frozen=True, kw_only=True):
    in_container: bool
    signals: list[str] = msgspec.field(default_factory=list)


class CpuFacts(Available, frozen=True):
    vendor: str | None = None
    model: str | None = None
    logical_cpus: int | None = None


class PlatformFacts(msgspec.Struct, frozen=True, kw_only=True):
    hostname: str | Unavailable
    kernel_release: str | Unavailable
    kernel_version: str | Unavailable
    kernel_cmdline: str | Unavailable
    os_release: OsRelease | Unavailable
    wsl: WslFacts
    container: ContainerFacts
    cpu: CpuFacts | Unavailable
    # /proc/driver/nvidia/version: the loaded kernel module's version, which can differ
    # from the user-space driver (upgraded without a reboot).
    nvidia_kernel_module: str | Unavailable


# --------------------------------------------------------------------------- PCI / IOMMU / ACS

# ACS control register bits (PCIe base spec, ACS extended capability; REFERENCE §4).
ACS_BITS: dict[str, int] = {
    "SrcValid": 0,
    "TransBlk": 1,
    "ReqRedir": 2,
    "CmpltRedir": 3,
    "UpstreamFwd": 4,
    "EgressCtrl": 5,
    "DirectTrans": 6,
}


class AcsFacts(Available, frozen=True):
    """The ACS extended capability of one bridge, read from its config space."""

    capability_offset: int
    capability: int
    control: int
    enabled: list[str] = msgspec.field(default_factory=list)


class PciBridge(msgspec.Struct, frozen=True, kw_only=True):
    bdf: str
    # None: the bridge has no ACS capability at all (nothing to redirect).
    acs: AcsFacts | Unavailable | None


class PciGpu(msgspec.Struct, frozen=True, kw_only=True):
    """An NVIDIA display-class PCI function, seen from sysfs whatever the driver's state."""

    bdf: str
    vendor_id: int
    device_id: int | Unavailable
    class_code: int | Unavailable
    driver: str | None
    numa_node: int | None
    iommu_group: str | None
    # identity (passthrough), DMA, DMA-FQ, unmanaged, blocked; None when there is no group.
    iommu_domain_type: str | Unavailable | None
    # Bridges from the GPU's own upstream port to its root port, nearest first.
    upstream: list[str] = msgspec.field(default_factory=list)


class IommuFacts(msgspec.Struct, frozen=True, kw_only=True):
    # Options from the kernel command line: iommu, amd_iommu, intel_iommu.
    cmdline_options: dict[str, str] = msgspec.field(default_factory=dict)
    # /sys/class/iommu/* entries (IOMMU hardware units the kernel drives).
    units: list[str] | Unavailable = msgspec.field(default_factory=list)


class PciFacts(Available, frozen=True):
    gpus: list[PciGpu] = msgspec.field(default_factory=list)
    bridges: list[PciBridge] = msgspec.field(default_factory=list)
    iommu: IommuFacts = msgspec.field(default_factory=IommuFacts)


# --------------------------------------------------------------------------- NVML


# NVML P2P status names (nvmlGpuP2PStatus_t): OK, CHIPSET_NOT_SUPPORTED (CNS),
# GPU_NOT_SUPPORTED (GNS), IOH_TOPOLOGY_NOT_SUPPORTED (TNS), DISABLED_BY_REGKEY (DR),
# NOT_SUPPORTED (NS), UNKNOWN.
P2P_STATUS_NAMES: dict[int, str] = {
    0: "OK",
    1: "CHIPSET_NOT_SUPPORTED",
    2: "GPU_NOT_SUPPORTED",
    3: "TOPOLOGY_NOT_SUPPORTED",
    4: "DISABLED_BY_REGKEY",
    5: "NOT_SUPPORTED",
    6: "UNKNOWN",
}


class NvmlGpu(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    name: str | Unavailable
    uuid: str | Unavailable
    pci_bus_id: str | Unavailable
    compute_capability: tuple[int, int] | Unavailable
    # GB10 (DGX Spark) answers NOT_SUPPORTED: its memory is unified with the CPU's.
    memory_total_bytes: int | Unavailable


class P2PPair(msgspec.Struct, frozen=True, kw_only=True):
    """NVML's answer for one ordered pair; values are P2P_STATUS_NAMES entries."""

    gpu_a: int
    gpu_b: int
    read: str | Unavailable
    write: str | Unavailable
    nvlink: str | Unavailable
    atomics: str | Unavailable


class NvmlFacts(Available, frozen=True):
    driver_version: str | Unavailable
    # e.g. "13.0" from nvmlSystemGetCudaDriverVersion (13000).
    cuda_driver_version: str | Unavailable
    nvml_version: str | Unavailable
    gpus: list[NvmlGpu] = msgspec.field(default_factory=list)
    p2p: list[P2PPair] | Unavailable = msgspec.field(default_factory=list)


# --------------------------------------------------------------------------- CUDA driver API


class CudaDevice(msgspec.Struct, frozen=True, kw_only=True):
    ordinal: int
    name: str | Unavailable
    pci_bus_id: str | Unavailable
    compute_capability: tuple[int, int] | Unavailable
    sm_count: int | Unavailable
    max_threads_per_sm: int | Unavailable
    l2_cache_bytes: int | Unavailable
    smem_per_block: int | Unavailable
    smem_per_block_optin: int | Unavailable
    smem_per_sm: int | Unavailable
    reserved_smem_per_block: int | Unavailable


class CudaFacts(Available, frozen=True):
    # e.g. "13.0" from cuDriverGetVersion (13000).
    driver_version: str | Unavailable
    devices: list[CudaDevice] = msgspec.field(default_factory=list)


# --------------------------------------------------------------------------- the document


class ToolInfo(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    version: str


class Facts(msgspec.Struct, frozen=True, kw_only=True):
    schema_version: int
    tool: ToolInfo
    collected_at: str
    host_root: str
    redacted: bool
    platform: PlatformFacts
    pci: PciFacts | Unavailable
    nvml: NvmlFacts | Unavailable
    cuda: CudaFacts | Unavailable
    # Only the variables that matter (NCCL_*, CUDA_*, VLLM_*, ...), secret values redacted.
    env: dict[str, str] = msgspec.field(default_factory=dict)
    # Probe results arrive with the probe issue; until then this says they were not run.
    probes: Unavailable | None = None
    # For fixtures and hand-made captures: where the numbers came from.
    provenance: str | None = None


class FactsError(Exception):
    """A facts document that cannot be used: malformed, truncated, or from the future."""


def encode_facts(facts: Facts) -> bytes:
    """Pretty, stable JSON (keys in schema order) ending with a newline."""
    return msgspec.json.format(msgspec.json.encode(facts), indent=2) + b"\n"


def decode_facts(data: bytes, *, source: str = "facts") -> Facts:
    """Validate and decode a facts document; every problem becomes one FactsError line."""
    try:
        header = msgspec.json.decode(data, type=_Header)
    except msgspec.DecodeError as exc:
        raise FactsError(f"{source}: not a facts document: {_one_line(exc)}") from None
    if header.schema_version > SCHEMA_VERSION:
        raise FactsError(
            f"{source}: schema_version {header.schema_version} is newer than this tool "
            f"understands ({SCHEMA_VERSION}); upgrade blackwell-doctor"
        )
    if header.schema_version < 1:
        raise FactsError(f"{source}: schema_version {header.schema_version} is not valid")
    try:
        return msgspec.json.decode(data, type=Facts)
    except msgspec.DecodeError as exc:
        raise FactsError(f"{source}: invalid facts document: {_one_line(exc)}") from None


class _Header(msgspec.Struct):
    schema_version: int


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())
