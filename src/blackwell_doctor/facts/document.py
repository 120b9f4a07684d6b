"""The facts document: everything the collectors read, as plain versioned data.

Every value a collector may fail to read is typed ``T | Unavailable``. On the wire an
unavailable value is ``{"status": "unavailable", "reason": "<token>"}`` and an available
structured value carries ``"status": "ok"``; scalars are written as they are. Reason tokens
are short and machine-readable: ``nvml-library-not-found``, ``not-found:/proc/cmdline``,
``permission-denied:/sys/bus/pci/devices/0000:41:00.0/config``, ``not-mounted:/proc/cmdline``
(the host's /proc is not under the host root: collect/hostfs.py).

``check --facts FILE`` decodes this document with full validation, so a facts file from any
host is judged anywhere, by the reading tool's rules: facts hold what was measured or seen,
never a verdict. Additive changes keep ``SCHEMA_VERSION``; a reader rejects a document whose
version is newer than the one it knows and converts older ones (:func:`_upgrade`).
"""

# Annotations are evaluated here, not kept as strings (no `from __future__ import
# annotations`): msgspec would otherwise eval every struct's strings when a decoder is
# built, ~4 ms of each command that reads facts.
import functools
from typing import Annotated, Any, Literal

import msgspec

from blackwell_doctor.facts.bench import BenchFacts
from blackwell_doctor.facts.model import ModelFacts
from blackwell_doctor.facts.stack import StackFacts

SCHEMA_VERSION = 4
# Version 1 froze verdicts into the facts (P2P pair verdicts, log finding severities);
# :func:`decode_facts` converts it on read. Version 3 added ``bench`` (a bench run's
# measurements): a version 2 document is a version 3 one without it. Version 4 keeps the
# log hits inside autotuner records, with their context markers (LogFinding.context), for
# the rules to judge; versions 2 and 3 left them out at scan time, so their findings read
# as version 4 ones with no context. Each bump makes an older tool refuse a capture it
# would misread ("upgrade") instead of dropping or misjudging part of it.
OLDEST_SCHEMA_VERSION = 1
# Versions whose documents decode as the current one as they are (only fields added since).
_ADDITIVE_SINCE = 2


class Unavailable(msgspec.Struct, frozen=True, tag_field="status", tag="unavailable"):
    """A fact that could not be read, and why (a reason token, never an exception text)."""

    reason: str


class Available(msgspec.Struct, frozen=True, kw_only=True, tag_field="status", tag="ok"):
    """Base of every structured fact that may instead be :class:`Unavailable`."""


# Ranges: facts files are untrusted input, and their numbers end up in launch settings
# (OMP_NUM_THREADS from logical_cpus) and in report text ("grants -5 B"). Counts of GPUs are
# bounded too: no host exposes more than MAX_GPUS, and per-pair checks grow with the square.
MAX_GPUS = 64
MAX_PAIRS = MAX_GPUS * (MAX_GPUS - 1)
Gpus = msgspec.Meta(max_length=MAX_GPUS, description=f"at most {MAX_GPUS} GPUs")
Pairs = msgspec.Meta(max_length=MAX_PAIRS, description=f"at most {MAX_PAIRS} ordered GPU pairs")
GpuIndex = Annotated[int, msgspec.Meta(ge=0, lt=MAX_GPUS)]
Bytes = Annotated[int, msgspec.Meta(ge=0, le=1 << 50)]
SmemBytes = Annotated[int, msgspec.Meta(ge=0, le=1 << 24)]  # shared memory: KiB, not GiB
Count = Annotated[int, msgspec.Meta(ge=0, le=1 << 20)]
# Linux's CONFIG_NR_CPUS tops out at 8192; 1 << 16 leaves room and refuses nonsense.
LogicalCpus = Annotated[int, msgspec.Meta(ge=1, le=1 << 16)]
CcPart = Annotated[int, msgspec.Meta(ge=0, le=99)]
ComputeCapability = tuple[CcPart, CcPart]


# --------------------------------------------------------------------------- platform


# "unknown": neither /proc/version nor osrelease could be read and no other signal was seen
# (a container without the host's /proc). Not WSL: the checks judge what they can read.
WslKind = Literal["none", "wsl1", "wsl2", "unknown"]

# A PCI address as sysfs names it (domain:bus:device.function). Facts files are untrusted
# input (bug reports, other nodes) and addresses end up in commands a user pastes, so they
# are validated on decode. `$(?!\n)`, not `$`: msgspec searches with Python's re, whose `$`
# also matches before a final newline (issue 32); in the JSON Schema (ECMA-262) both are the
# end of the string.
Bdf = Annotated[
    str, msgspec.Meta(pattern=r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$(?!\n)")
]


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


class VirtualizationFacts(msgspec.Struct, frozen=True, kw_only=True):
    """Whether this kernel runs in a virtual machine. In a guest, the PCI tree, IOMMU and ACS
    that the checks read are the hypervisor's virtual ones, not the host's."""

    # None: no signal either way could be read.
    in_vm: bool | None
    # e.g. "cpuinfo:hypervisor", "dmi:sys_vendor=QEMU", "dmi:product_name=KVM".
    signals: list[str] = msgspec.field(default_factory=list)


class CpuFacts(Available, frozen=True):
    vendor: str | None = None
    model: str | None = None
    logical_cpus: LogicalCpus | None = None


ModuleFlavourName = Literal["open", "proprietary", "unknown"]


class ModuleFlavour(Available, frozen=True):
    """Which NVIDIA kernel module is loaded: the open one (license "Dual MIT/GPL") or the
    proprietary one, and every signal that says so (``version:open``: the first line of
    /proc/driver/nvidia/version names the "Open Kernel Module"; ``taint:P``:
    /sys/module/nvidia/taint carries P, the kernel's mark of a proprietary license)."""

    flavour: ModuleFlavourName
    signals: list[str] = msgspec.field(default_factory=list)


class MemInfo(Available, frozen=True):
    """/proc/meminfo, the figures vLLM's start-up check reads on unified memory (psutil's
    ``virtual_memory().available`` is MemAvailable on Linux)."""

    total_bytes: Bytes
    available_bytes: Bytes | None = None  # MemAvailable (kernels before 3.14 lack it)
    free_bytes: Bytes | None = None
    cached_bytes: Bytes | None = None  # page cache (Cached)
    swap_free_bytes: Bytes | None = None


class PlatformFacts(msgspec.Struct, frozen=True, kw_only=True):
    hostname: str | Unavailable
    kernel_release: str | Unavailable
    kernel_version: str | Unavailable
    kernel_cmdline: str | Unavailable
    os_release: OsRelease | Unavailable
    wsl: WslFacts
    container: ContainerFacts
    # Defaults keep facts files written before these fields were collected readable.
    virtualization: VirtualizationFacts = msgspec.field(
        default_factory=lambda: VirtualizationFacts(in_vm=None)
    )
    # The kernel's machine architecture (x86_64, aarch64), from /proc/sys/kernel/arch.
    machine: str | Unavailable = msgspec.field(default_factory=lambda: Unavailable("not-collected"))
    cpu: CpuFacts | Unavailable
    # /proc/driver/nvidia/version: the loaded kernel module's version, which can differ
    # from the user-space driver (upgraded without a reboot).
    nvidia_kernel_module: str | Unavailable
    # Open or proprietary kernel module (None: not collected, facts from before issue 26).
    nvidia_module_flavour: ModuleFlavour | Unavailable | None = None
    # /proc/meminfo (None: not collected).
    meminfo: MemInfo | Unavailable | None = None


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


LinkGen = Annotated[int, msgspec.Meta(ge=1, le=16)]
LinkWidth = Annotated[int, msgspec.Meta(ge=1, le=32)]


class SysfsLink(Available, frozen=True):
    """A PCIe port's link as sysfs shows it (current_link_speed "32.0 GT/s PCIe" read as
    generation 5; current_link_width "16"); None where the file is absent or unparsed."""

    current_gen: LinkGen | None = None
    current_width: LinkWidth | None = None
    max_gen: LinkGen | None = None
    max_width: LinkWidth | None = None


class PciBridge(msgspec.Struct, frozen=True, kw_only=True):
    bdf: Bdf
    # None: the bridge has no ACS capability at all (nothing to redirect).
    acs: AcsFacts | Unavailable | None
    # Its link (None: not collected).
    link: SysfsLink | Unavailable | None = None


class PciGpu(msgspec.Struct, frozen=True, kw_only=True):
    """An NVIDIA display-class PCI function, seen from sysfs whatever the driver's state."""

    bdf: Bdf
    vendor_id: int
    device_id: int | Unavailable
    class_code: int | Unavailable
    driver: str | None
    numa_node: int | None
    iommu_group: str | None
    # identity (passthrough), DMA, DMA-FQ, unmanaged, blocked; None when there is no group.
    iommu_domain_type: str | Unavailable | None
    # Bridges from the GPU's own upstream port to its root port, nearest first.
    upstream: list[Bdf] = msgspec.field(default_factory=list)
    # The GPU's own link, as sysfs shows it (None: not collected).
    link: SysfsLink | Unavailable | None = None


class IommuFacts(msgspec.Struct, frozen=True, kw_only=True):
    # Options from the kernel command line: iommu, amd_iommu, intel_iommu.
    cmdline_options: dict[str, str] = msgspec.field(default_factory=dict)
    # /sys/class/iommu/* entries (IOMMU hardware units the kernel drives).
    units: list[str] | Unavailable = msgspec.field(default_factory=list)


class PciFacts(Available, frozen=True):
    gpus: Annotated[list[PciGpu], Gpus] = msgspec.field(default_factory=list)
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


class NvmlPcieLink(Available, frozen=True):
    """nvmlDeviceGetCurrPcieLinkGeneration/Width and nvmlDeviceGetMaxPcieLinkGeneration/
    Width (the most this GPU and this system allow), plus nvmlDeviceGetGpuMaxPcieLinkGeneration
    (the GPU's own maximum, whatever the slot)."""

    current_gen: LinkGen | None = None
    current_width: LinkWidth | None = None
    max_gen: LinkGen | None = None
    max_width: LinkWidth | None = None
    gpu_max_gen: LinkGen | None = None


class NvmlGpu(msgspec.Struct, frozen=True, kw_only=True):
    index: GpuIndex
    name: str | Unavailable
    uuid: str | Unavailable
    pci_bus_id: str | Unavailable
    compute_capability: ComputeCapability | Unavailable
    # GB10 (DGX Spark) answers NOT_SUPPORTED: its memory is unified with the CPU's.
    memory_total_bytes: Bytes | Unavailable
    # The PCIe link at collection time (often idle: a GPU drops its generation when idle);
    # None: not collected (facts from before issue 26).
    pcie: NvmlPcieLink | Unavailable | None = None
    # nvmlDeviceGetBAR1MemoryInfo().bar1Total: the CPU/peer-visible window into GPU memory.
    bar1_total_bytes: Bytes | Unavailable | None = None


class P2PPair(msgspec.Struct, frozen=True, kw_only=True):
    """NVML's answer for one ordered pair; values are P2P_STATUS_NAMES entries."""

    gpu_a: GpuIndex
    gpu_b: GpuIndex
    read: str | Unavailable
    write: str | Unavailable
    nvlink: str | Unavailable
    atomics: str | Unavailable


class NvmlFacts(Available, frozen=True):
    driver_version: str | Unavailable
    # e.g. "13.0" from nvmlSystemGetCudaDriverVersion (13000).
    cuda_driver_version: str | Unavailable
    nvml_version: str | Unavailable
    gpus: Annotated[list[NvmlGpu], Gpus] = msgspec.field(default_factory=list)
    p2p: Annotated[list[P2PPair], Pairs] | Unavailable = msgspec.field(default_factory=list)


# --------------------------------------------------------------------------- CUDA driver API


class CudaDevice(msgspec.Struct, frozen=True, kw_only=True):
    ordinal: GpuIndex
    name: str | Unavailable
    pci_bus_id: str | Unavailable
    compute_capability: ComputeCapability | Unavailable
    sm_count: Count | Unavailable
    max_threads_per_sm: Count | Unavailable
    l2_cache_bytes: Bytes | Unavailable
    smem_per_block: SmemBytes | Unavailable
    smem_per_block_optin: SmemBytes | Unavailable
    smem_per_sm: SmemBytes | Unavailable
    reserved_smem_per_block: SmemBytes | Unavailable


class CudaFacts(Available, frozen=True):
    # e.g. "13.0" from cuDriverGetVersion (13000).
    driver_version: str | Unavailable
    devices: Annotated[list[CudaDevice], Gpus] = msgspec.field(default_factory=list)


# --------------------------------------------------------------------------- probes


class TileProbe(msgspec.Struct, frozen=True, kw_only=True):
    """One block-scaled GEMM tile: CUTLASS's arithmetic, then (when measured) the driver's
    answer and a timing of the probe's mainloop. m, n, k are elements; k_bytes is K as
    FlashInfer/TRT-LLM tile names give it (FP4: k / 2)."""

    m: int
    n: int
    k: int
    k_bytes: int
    stage_bytes: int  # what the stage-count formula charges per stage
    stages: int  # what StageCountAutoCarveout picks for the limit
    mainloop_bytes: int  # sizeof(CollectiveMainloop::SharedStorage) with alignment
    epilogue_bytes: int
    smem_bytes: int  # the kernel's whole dynamic shared memory request
    fits: bool  # stages >= 2 and smem_bytes <= the limit (arithmetic)
    reason: str | None = None  # why it does not fit
    # Measured (absent in a plan): did the driver accept and run a kernel laid out like it?
    launched: bool | None = None
    launch_error: str | None = None
    time_us: float | None = None  # median time of one probe-kernel launch
    k_iterations: int | None = None  # K tiles each block streams through its pipeline
    macs_per_s: float | None = None  # dequantise + multiply-accumulate rate of the probe


class DeviceProbe(msgspec.Struct, frozen=True, kw_only=True):
    ordinal: GpuIndex
    name: str | Unavailable
    compute_capability: ComputeCapability | Unavailable
    # CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, as the driver reports it.
    smem_optin_attribute: SmemBytes | Unavailable
    # The largest dynamic shared memory a real launch accepted, bisected to the byte.
    smem_launch_limit: SmemBytes | Unavailable
    # How the probe kernels were built: "sm_90 cubin", "compute_90 PTX (driver JIT)".
    compiled_as: str | Unavailable
    tiles: list[TileProbe] = msgspec.field(default_factory=list)


class ProbeFacts(Available, frozen=True):
    nvrtc_version: str | Unavailable
    cache: str  # "hit", "miss" or "rebuilt" (a corrupt entry was replaced)
    wall_s: float
    devices: Annotated[list[DeviceProbe], Gpus] = msgspec.field(default_factory=list)


# ------------------------------------------------------------- GPU peer-to-peer transfers


class P2PTransfer(msgspec.Struct, frozen=True, kw_only=True):
    """One GPU pair, tested by actually moving data (REFERENCE §4: a grant is not proof).

    Only what was measured or seen; the verdict (works, broken, slower than the host...) is
    the p2p.transfer check's (:func:`blackwell_doctor.rules.p2p.pair_verdict`), so a capture
    is judged again by the rules of the tool that reads it (since schema_version 2; version
    1 documents carried a frozen verdict and are converted on read)."""

    gpu_a: GpuIndex
    gpu_b: GpuIndex
    can_access_peer: bool | Unavailable  # cuDeviceCanAccessPeer, both directions
    # The driver allows one direction only: the allowed one ("0->1").
    access_only: str | None = None
    peer_copy_verified: bool | None = None  # cuMemcpyPeer of a pattern, read back and compared
    peer_write_verified: bool | None = None  # a kernel on A writing B's memory via the mapping
    after_load_verified: bool | None = None  # the copy verified again after the bandwidth load
    # Bandwidth in the direction that fares worst against its host-staged control (without a
    # control, the slower one): ``direction`` names it ("1->0").
    unidirectional_gbps: float | None = None
    bidirectional_gbps: float | None = None
    host_staged_gbps: float | None = None  # control: A -> pinned host -> B
    direction: str | None = None
    # What went wrong, as seen (reason tokens, never prose):
    mismatch: str | None = (
        None  # a verification read back other data: "mismatch:a-to-b:1/16384 words"
    )
    fault: str | None = None  # a fault, hang or crash on the peer path: "p2p-timeout:20s at copy"
    error: str | None = None  # the test itself stopped: "cuda-error-out-of-memory at buffers"
    # Measurements the child never reported ("after-load", "uni:b-to-a", "done-not-seen").
    not_measured: list[str] = msgspec.field(default_factory=list)


class P2PProbeFacts(Available, frozen=True):
    wall_s: float
    pairs: Annotated[list[P2PTransfer], Pairs] = msgspec.field(default_factory=list)


# ------------------------------------------------------- links under load, the collective path


class LoadedLink(msgspec.Struct, frozen=True, kw_only=True):
    """One GPU's PCIe link read by NVML while host-to-device copies kept it busy (a GPU
    idles at a lower generation, so only this reading says what the link trained to)."""

    gpu: GpuIndex
    current_gen: LinkGen | None = None
    current_width: LinkWidth | None = None
    max_gen: LinkGen | None = None
    max_width: LinkWidth | None = None
    h2d_gbps: float | None = None  # pinned host -> device, the load itself, measured
    error: str | None = None  # reason token when this GPU could not be loaded or read


class LinkLoadFacts(Available, frozen=True):
    wall_s: float
    gpus: Annotated[list[LoadedLink], Gpus] = msgspec.field(default_factory=list)


# "nccl": an NCCL all-reduce; "cuda-ipc": one process writing another's GPU memory through
# a CUDA IPC mapping, the path of vLLM's custom all-reduce; "symm-mem": the same through a
# CUDA VMM allocation (cuMemCreate) shared as a POSIX file descriptor, the way PyTorch's
# symmetric memory (vLLM's symmetric-memory all-reduce) shares its buffers without NVLink
# multicast. Added after the first two: facts without it read as before.
CollectivePath = Literal["nccl", "cuda-ipc", "symm-mem"]


class CollectiveRun(msgspec.Struct, frozen=True, kw_only=True):
    """One all-reduce over ``gpus`` (a pair, or every GPU), as seen: whether it finished in
    time, whether every rank got the right sum, how fast. ``env`` is what the run set on
    top of the caller's environment (``{"NCCL_P2P_DISABLE": "1"}``: the fallback path)."""

    gpus: Annotated[list[GpuIndex], Gpus]
    path: CollectivePath = "nccl"
    env: dict[str, str] = msgspec.field(default_factory=dict)
    size_bytes: Bytes = 0
    correct: bool | None = None  # None: never got as far as reading the result back
    iterations: Count = 0
    time_s: float | None = None  # median time of one all-reduce of size_bytes
    algbw_gbps: float | None = None  # size / time
    busbw_gbps: float | None = None  # algbw x 2(n-1)/n, nccl-tests' definition
    # What went wrong, as seen: "collective-timeout:8s at allreduce", "wrong-sum:rank1:...".
    failure: str | None = None
    stage: str | None = None  # the last stage the child reported
    # "symm-mem" runs: whether both GPUs report CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED
    # (an attribute read; no multicast object is created). None: not read.
    multicast: bool | None = None
    # "symm-mem" runs: whether the writer's system-scope atomic adds on a counter in the
    # owner's memory, through the same mapping, all landed (the kind of atomic PyTorch's
    # symmetric memory signals peers with). None: not run. Added after ``multicast``.
    atomic: bool | None = None


class CollectiveFacts(Available, frozen=True):
    library: str  # the libnccl.so.2 that was loaded (a path or a soname)
    nccl_version: str | Unavailable
    wall_s: float
    # Per unordered pair: NCCL, its fallback, the CUDA IPC write and the symmetric-memory
    # write; all GPUs: NCCL twice.
    runs: Annotated[list[CollectiveRun], msgspec.Meta(max_length=4 * MAX_PAIRS // 2 + 2)] = (
        msgspec.field(default_factory=list)
    )


# ------------------------------------------------------------------ hardware health (issue 39)

# A temperature NVML reports, in degrees Celsius (a threshold of 0 or a margin below 0 are
# real answers; nonsense is refused on decode).
Celsius = Annotated[int, msgspec.Meta(ge=-100, le=300)]
Milliwatts = Annotated[int, msgspec.Meta(ge=0, le=100_000_000)]
Mhz = Annotated[int, msgspec.Meta(ge=0, le=100_000)]
Counter = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]
Percent = Annotated[int, msgspec.Meta(ge=0, le=255)]  # NVML allows a fan speed above 100
# nvmlClocksEventReasons bits (nvml.h): a 64-bit mask whose defined bits are the low 11.
ReasonMask = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]


class RemappedRows(Available, frozen=True):
    """nvmlDeviceGetRemappedRows: rows remapped for correctable and uncorrectable errors, a
    remapping that waits for a GPU reset (``pending``), and whether one ever failed."""

    correctable: Counter
    uncorrectable: Counter
    pending: bool
    failure: bool


class RetiredPages(Available, frozen=True):
    """nvmlDeviceGetRetiredPages per cause (multiple single-bit, double-bit ECC errors) and
    nvmlDeviceGetRetiredPagesPendingStatus: pages retired, and whether a retirement waits for
    the driver to reload (a GPU reset or a reboot)."""

    single_bit: Counter
    double_bit: Counter
    pending: bool | None = None  # None: the pending status could not be read


class EccCounts(Available, frozen=True):
    """nvmlDeviceGetTotalEccErrors: corrected and uncorrected errors since the driver loaded
    (volatile) and over the board's life (aggregate); None where NVML did not answer."""

    volatile_corrected: Counter | None = None
    volatile_uncorrected: Counter | None = None
    aggregate_corrected: Counter | None = None
    aggregate_uncorrected: Counter | None = None


class GpuHealth(msgspec.Struct, frozen=True, kw_only=True):
    """One GPU's health as NVML reports it at collection (read only: nothing is changed).

    Every value is what NVML answered, or Unavailable with its reason (``not-supported``:
    GeForce parts have no ECC or row remapper, GB10 reports no power limits)."""

    index: GpuIndex  # the NVML index (NvmlGpu.index)
    temperature_c: Celsius | Unavailable
    # nvmlDeviceGetTemperatureThreshold: SLOWDOWN (the hardware slows the clocks), SHUTDOWN
    # (the board powers off), GPU_MAX (the most a workload should see).
    slowdown_c: Celsius | Unavailable
    shutdown_c: Celsius | Unavailable
    gpu_max_c: Celsius | Unavailable
    # nvmlDeviceGetMarginTemperature: degrees left before slowdown (newer drivers only).
    margin_c: Celsius | Unavailable
    # nvmlDeviceGetFanSpeed_v2 per fan, in percent of the fan's maximum.
    fans_percent: list[Percent] | Unavailable
    # nvmlDeviceGetEnforcedPowerLimit, ...PowerManagementDefaultLimit, ...LimitConstraints.
    power_limit_mw: Milliwatts | Unavailable
    power_default_mw: Milliwatts | Unavailable
    power_min_mw: Milliwatts | Unavailable
    power_max_mw: Milliwatts | Unavailable
    power_usage_mw: Milliwatts | Unavailable
    # nvmlDeviceGetCurrentClocksEventReasons at collection (the GPU is usually idle then).
    clock_event_reasons: ReasonMask | Unavailable
    sm_clock_mhz: Mhz | Unavailable
    sm_clock_max_mhz: Mhz | Unavailable
    # nvmlDeviceGetEccMode: current and pending (a change waits for a reset or reboot).
    ecc_enabled: bool | Unavailable
    ecc_pending_enabled: bool | Unavailable
    ecc_errors: EccCounts | Unavailable
    remapped_rows: RemappedRows | Unavailable
    retired_pages: RetiredPages | Unavailable
    # nvmlDeviceGetPcieReplayCounter: link-level replays since the driver loaded.
    pcie_replays: Counter | Unavailable
    # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (nvmlDeviceGetFieldValues): the driver's own
    # nvmlDeviceGpuRecoveryAction_t (0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4
    # drain and reset, ...).
    recovery_action: Annotated[int, msgspec.Meta(ge=0, le=255)] | Unavailable


class ClockSample(msgspec.Struct, frozen=True, kw_only=True, array_like=True):
    """One NVML reading taken while a probe kernel was running on the GPU."""

    reasons: ReasonMask | None  # nvmlDeviceGetCurrentClocksEventReasons
    sm_clock_mhz: Mhz | None = None
    temperature_c: Celsius | None = None
    power_mw: Milliwatts | None = None
    pcie_replays: Counter | None = None


class LoadedGpu(msgspec.Struct, frozen=True, kw_only=True):
    """What NVML said of one probed GPU while the probe kernels ran on it (a GPU's clock
    event reasons mean something only under load: at idle it reports GpuIdle)."""

    pci_bus_id: str
    samples: Annotated[list[ClockSample], msgspec.Meta(max_length=4096)] = msgspec.field(
        default_factory=list
    )
    error: str | None = None  # reason token when NVML could not be read during the probes


# The AER counters a device's sysfs files carry (Linux drivers/pci/pcie/aer.c, since 4.19):
# "aer_dev_correctable", "aer_dev_nonfatal", "aer_dev_fatal".
AerKind = Literal["correctable", "nonfatal", "fatal"]


class AerCounts(Available, frozen=True):
    """One reading of a device's AER counters: the TOTAL_ERR_* line of each file, and the
    named counters that were not zero (``RxErr``, ``BadTLP``, ``CmpltTO``...)."""

    correctable: Counter | None = None
    nonfatal: Counter | None = None
    fatal: Counter | None = None
    nonzero: dict[str, Counter] = msgspec.field(default_factory=dict)


class DeviceAer(msgspec.Struct, frozen=True, kw_only=True):
    """A GPU's or its upstream port's AER counters at the start of the run and after the
    probes (the link partner counts what it received: an error of the GPU's link can show
    on either end)."""

    bdf: Bdf
    role: Literal["gpu", "upstream"]
    before: AerCounts | Unavailable
    after: AerCounts | Unavailable | None = None  # None: read once only (no probes)


class HealthFacts(Available, frozen=True):
    """Hardware health without DCGM: NVML at collection, NVML while the probes ran, and
    the PCIe AER counters of sysfs before and after."""

    # Unavailable: NVML did not answer (no driver, a GPU fallen off the bus): the AER
    # counters below may still tell why.
    gpus: Annotated[list[GpuHealth], Gpus] | Unavailable = msgspec.field(default_factory=list)
    # Unavailable: the probes did not run (--no-probe, no CUDA device), with the reason.
    under_load: Annotated[list[LoadedGpu], Gpus] | Unavailable = msgspec.field(default_factory=list)
    aer: Annotated[list[DeviceAer], msgspec.Meta(max_length=2 * MAX_GPUS)] | Unavailable = (
        msgspec.field(default_factory=list)
    )


# --------------------------------------------------------------------------- runtime logs

LogSourceKind = Literal["file", "gzip", "stdin", "container", "journal", "kernel", "docker-json"]


class LogSource(msgspec.Struct, frozen=True, kw_only=True):
    name: str  # a path, "-", "container:<name>", "journal", "kernel"
    kind: LogSourceKind
    lines: int = 0
    bytes: int = 0
    error: str | None = None  # reason token when it could not be read (whole or in part)
    # Context markers seen in this source (checks/log_signatures.toml [[marker]] ids): lines
    # that are no finding themselves but change how the rules judge the others.
    markers: list[str] = msgspec.field(default_factory=list)


class LogFinding(msgspec.Struct, frozen=True, kw_only=True):
    """All occurrences of one signature in one source, as seen (of a signature of rule
    ``xid``: of one Xid number, so that each number's first line is kept). Its severity and
    the check that judges it are the rules' (:mod:`blackwell_doctor.rules.logs`), from the
    catalogue the reading tool ships (since schema_version 2; version 1 froze them in and is
    converted), and so is what its context means (schema_version 3)."""

    signature: str  # stable id from checks/log_signatures.toml
    path: str  # the LogSource name
    line: int  # 1-based, first occurrence (0: the source could not be read at all)
    last_line: int
    # Occurrences; for a summary signature (rule autotuner-summary), the sum of the counts
    # its lines report ("Skipped 3 unsupported tactic(s)" adds 3).
    count: int
    excerpt: str  # the first occurrence: ANSI stripped, secrets redacted, truncated
    # Where these occurrences stood (logs/context.py): "autotuner-line" (on an autotuner
    # Skipping line), "autotuner-record" (on a continuation line of one); empty: neither.
    # Occurrences of one signature in different contexts are separate findings. Version 2
    # documents have none: their scanner left such hits out.
    context: list[str] = msgspec.field(default_factory=list)


# What a directory scan passed over without reading (collect/logs/walk.py, issue 40): whole
# directories (a VCS's, a virtual environment, a cache, a pseudo filesystem, the tool's own
# data) and files (not named like a log, or binary by their first bytes).
SkipReason = Literal[
    "vcs", "virtualenv", "cache", "pseudo-filesystem", "tool-data", "not-log-named", "binary"
]


class LogFacts(Available, frozen=True):
    sources: list[LogSource] = msgspec.field(default_factory=list)
    findings: list[LogFinding] = msgspec.field(default_factory=list)
    # Directories and files a directory scan skipped, counted by reason (the directories
    # are counted, not what is in them). Empty: nothing skipped, or no directory given.
    skipped: dict[SkipReason, Annotated[int, msgspec.Meta(ge=1)]] = msgspec.field(
        default_factory=dict
    )


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
    # What the probe kernels measured; Unavailable with the reason when they did not run
    # (--no-probe, no GPU, no NVRTC, a hung or crashed probe...). None in old documents.
    probes: ProbeFacts | Unavailable | None = None
    # Verified peer transfers per GPU pair (probe --p2p); None where not collected.
    p2p_transfers: P2PProbeFacts | Unavailable | None = None
    # Runtime and kernel logs scanned for fallback/failure signatures; None: none given.
    logs: LogFacts | Unavailable | None = None
    # The model directory given with --model-dir (config, quantization, safetensors
    # headers; never weights); None: none given.
    model: ModelFacts | Unavailable | None = None
    # A bench run against the server (collect --bench run.json): its measurements, judged
    # by the serving.* checks; None: none given.
    bench: BenchFacts | None = None
    # The Python GPU stack (`audit`, `collect --stack`): packages, the targets of their
    # shared objects, Triton's ptxas; None: not read.
    stack: StackFacts | Unavailable | None = None
    # PCIe links read under a short load (collect's probes); None: not collected.
    link_load: LinkLoadFacts | Unavailable | None = None
    # NCCL all-reduce over every GPU pair and all GPUs (collect's probes); None: not collected.
    collective: CollectiveFacts | Unavailable | None = None
    # Hardware health (issue 39): NVML's thermal, power, ECC, row remapper and replay
    # counter, clock event reasons under the probes' load, PCIe AER counters; None: not
    # collected (facts from before issue 39).
    health: HealthFacts | Unavailable | None = None
    # For fixtures and hand-made captures: where the numbers came from.
    provenance: str | None = None


# The parts of the facts a check may read (attributes of Facts). Each check declares those it
# reads (``reads=`` of :func:`blackwell_doctor.rules.registry.check`); a live run whose
# --select/--ignore leave checks out collects only what the others read, and marks a part it
# left out ``Unavailable("not-collected:--select")`` (or ``--ignore``). The platform is
# always read: the document and every report's header need it, and it costs milliseconds.
Section = Literal[
    "platform",
    "pci",
    "nvml",
    "cuda",
    "probes",
    "p2p_transfers",
    "link_load",
    "collective",
    "health",
    "logs",
    "model",
    "bench",
    "stack",
]
NOT_COLLECTED = "not-collected"


class FactsError(Exception):
    """A facts document that cannot be used: malformed, truncated, or from the future."""


def encode_facts(facts: Facts) -> bytes:
    """Pretty, stable JSON (keys in schema order) ending with a newline."""
    return msgspec.json.format(msgspec.json.encode(facts), indent=2) + b"\n"


@functools.cache
def _facts_decoder() -> msgspec.json.Decoder[Facts]:
    """One decoder for every facts document of the process (``fleet`` decodes thousands:
    ``msgspec.json.decode(data, type=Facts)`` looks the type up again each call)."""
    return msgspec.json.Decoder(Facts)


def decode_facts(data: bytes, *, source: str = "facts") -> Facts:
    """Validate and decode a facts document; every problem becomes one FactsError line.
    A UTF-8 byte-order mark (Windows editors write one) is accepted; UTF-16 is named."""
    if data.startswith(_BOM_UTF8):
        data = data[len(_BOM_UTF8) :]
    elif data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise FactsError(f"{source}: not a facts document: UTF-16 text; save it as UTF-8")
    # The common case in one pass (``fleet`` decodes thousands): a current document.
    # Anything else (older, newer, malformed) goes the careful way below.
    try:
        facts = _facts_decoder().decode(data)
        if facts.schema_version == SCHEMA_VERSION:
            return facts
        if _ADDITIVE_SINCE <= facts.schema_version < SCHEMA_VERSION:
            return msgspec.structs.replace(facts, schema_version=SCHEMA_VERSION)
    except (msgspec.DecodeError, RecursionError):
        pass
    # One more parse, to plain values, which an older document is upgraded from; the
    # header is read from them. Anything odd is read again as a header alone, for its error.
    try:
        doc: Any = msgspec.json.decode(data)
        header = msgspec.convert(doc, type=_Header)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        doc, header = _NOT_READ, _header(data, source)
    if header.schema_version > SCHEMA_VERSION:
        raise FactsError(
            f"{source}: schema_version {header.schema_version} is newer than this tool "
            f"understands ({SCHEMA_VERSION}); upgrade blackwell-doctor"
        )
    if header.schema_version < OLDEST_SCHEMA_VERSION:
        raise FactsError(f"{source}: schema_version {header.schema_version} is not valid")
    try:
        if header.schema_version < SCHEMA_VERSION:
            raw = msgspec.json.decode(data) if doc is _NOT_READ else doc
            return msgspec.convert(_upgrade(raw), type=Facts)
        return msgspec.json.decode(data, type=Facts)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise FactsError(f"{source}: invalid facts document: {_limits(_one_line(exc))}") from None
    except RecursionError:
        raise FactsError(f"{source}: invalid facts document: nested too deeply") from None


_BOM_UTF8 = b"\xef\xbb\xbf"
_NOT_READ = object()


def _header(data: bytes, source: str) -> "_Header":
    try:
        return msgspec.json.decode(data, type=_Header)
    except RecursionError:
        raise FactsError(f"{source}: not a facts document: nested too deeply") from None
    except msgspec.DecodeError as exc:
        raise FactsError(f"{source}: not a facts document: {_one_line(exc)}") from None


def _limits(message: str) -> str:
    # msgspec says "Expected `array` of length <= 64"; say what the limit is about.
    if f"length <= {MAX_GPUS} " in message:
        return f"{message} (at most {MAX_GPUS} GPUs per host)"
    if f"length <= {MAX_PAIRS} " in message:
        return f"{message} (at most {MAX_PAIRS} GPU pairs, for {MAX_GPUS} GPUs)"
    return message


class _Header(msgspec.Struct):
    schema_version: int


# --------------------------------------------------------------------------- older versions


def _upgrade(doc: Any) -> Any:
    """An older document as the current version. Versions 2 and 3 need nothing (they only
    lack ``bench`` or the log findings' ``context``: their scanners left the hits inside
    autotuner records out). Version 1: the frozen verdicts become what they were drawn
    from, so the current rules judge it (a v1 pair "slower-than-host" becomes its measured
    bandwidths, fully verified; a v1 log finding loses its severity and check). Anything
    malformed is left for the typed
    conversion to reject."""
    if not isinstance(doc, dict):
        return doc
    version = doc.get("schema_version")
    doc = dict(doc, schema_version=SCHEMA_VERSION)
    if version != 1:
        return doc
    transfers = doc.get("p2p_transfers")
    if isinstance(transfers, dict) and isinstance(transfers.get("pairs"), list):
        pairs = [_upgrade_pair(p) if isinstance(p, dict) else p for p in transfers["pairs"]]
        doc["p2p_transfers"] = dict(transfers, pairs=pairs)
    logs = doc.get("logs")
    if isinstance(logs, dict) and isinstance(logs.get("findings"), list):
        findings = [
            {k: v for k, v in f.items() if k not in ("severity", "check")}
            if isinstance(f, dict)
            else f
            for f in logs["findings"]
        ]
        doc["logs"] = dict(logs, findings=findings)
    return doc


def _upgrade_pair(pair: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in pair.items() if k not in ("verdict", "detail")}
    verdict, detail = pair.get("verdict"), pair.get("detail")
    detail = detail if isinstance(detail, str) else None
    if verdict in ("works", "slower-than-host"):
        out["after_load_verified"] = True  # v1 gave these verdicts only when it was
        if detail and "->" in detail.split(" ", 1)[0]:
            out["direction"] = detail.split(" ", 1)[0]
    elif verdict == "not-supported" and detail and detail.startswith("asymmetric: only "):
        out["access_only"] = detail.removeprefix("asymmetric: only ").removesuffix(" allowed")
    elif verdict == "granted-but-broken":
        verified = (pair.get("peer_copy_verified"), pair.get("peer_write_verified"))
        out["mismatch" if False in verified else "fault"] = detail or "unknown"
    elif verdict == "error" and not isinstance(pair.get("can_access_peer"), dict):
        if detail and detail.startswith("p2p-incomplete:"):
            out["not_measured"] = detail.removeprefix("p2p-incomplete:").split(",")
        else:
            out["error"] = detail or "unknown"
    return out


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())
