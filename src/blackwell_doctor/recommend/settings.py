"""Launch settings derived from the facts and the report, never copied from an example.

REFERENCE §5 lists the environment used with the K=64 image (OMP_NUM_THREADS = cores / TP,
CUDA_DEVICE_MAX_CONNECTIONS=32, ...); here each value is computed for the host at hand and
carries the reason it has that value.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from blackwell_doctor.facts import CpuFacts, Facts, PciFacts, Unavailable
from blackwell_doctor.report import Report
from blackwell_doctor.rules import view
from blackwell_doctor.rules.model import Status
from blackwell_doctor.rules.pci import iommu_passthrough_requested

# Findings that say GPU peer-to-peer is broken or refused on this host.
P2P_FINDING_PREFIXES = ("p2p.",)
_FINDING = frozenset({Status.WARN, Status.FAIL})
_TRANSLATING = frozenset({"DMA", "DMA-FQ"})

# Fixed values (REFERENCE §5), each with why it is set.
FIXED_ENV: dict[str, tuple[str, str]] = {
    "VLLM_WORKER_MULTIPROC_METHOD": (
        "spawn",
        "CUDA cannot be re-initialised in a forked worker; vLLM's multiprocessing workers "
        "must be spawned",
    ),
    "CUDA_DEVICE_MAX_CONNECTIONS": (
        "32",
        "hardware work queues per device (CUDA's maximum), used with the SM 12.x runtime "
        "images (REFERENCE §5)",
    ),
    "PYTORCH_CUDA_ALLOC_CONF": (
        "expandable_segments:True",
        "lets PyTorch's allocator grow segments instead of fragmenting (REFERENCE §5)",
    ),
}


def tensor_parallel_size(gpu_count: int) -> int:
    """The largest power of two not above the GPU count (attention heads split evenly)."""
    if gpu_count < 1:
        raise ValueError("tensor parallelism needs at least one GPU")
    return 1 << (gpu_count.bit_length() - 1)


def omp_num_threads(logical_cpus: int, tp: int) -> int:
    """CPU threads per tensor-parallel worker: the logical CPUs shared out, at least 1."""
    if tp < 1:
        raise ValueError("tensor-parallel size must be at least 1")
    return max(1, logical_cpus // tp)


def gpu_count(facts: Facts) -> int:
    """GPUs the driver answers for; the PCI inventory when the driver does not."""
    gpus = view.gpus(facts)
    return len(gpus) if gpus else len(view.pci_gpus(facts))


def is_sm12x_host(facts: Facts) -> bool:
    return any(view.is_sm12x(g.cc) for g in view.gpus(facts))


def logical_cpus(facts: Facts) -> int | None:
    cpu = facts.platform.cpu
    if isinstance(cpu, CpuFacts) and cpu.logical_cpus and cpu.logical_cpus > 0:
        return cpu.logical_cpus
    return None


def _cmdline_options(facts: Facts) -> dict[str, str] | None:
    if isinstance(facts.pci, PciFacts):
        return facts.pci.iommu.cmdline_options
    cmdline = facts.platform.kernel_cmdline
    if isinstance(cmdline, Unavailable):
        return None
    options: dict[str, str] = {}
    for word in cmdline.split():
        key, sep, value = word.partition("=")
        if sep and key in ("iommu", "iommu.passthrough", "amd_iommu", "intel_iommu"):
            options[key] = value
    return options


def iommu_passthrough_in_effect(facts: Facts) -> bool | None:
    """True when iommu=pt is asked for and no GPU's IOMMU domain translates; None: unknown."""
    options = _cmdline_options(facts)
    if options is None:
        return None
    if not iommu_passthrough_requested(options):
        return False
    if isinstance(facts.pci, PciFacts):
        return not any(g.iommu_domain_type in _TRANSLATING for g in facts.pci.gpus)
    return True


def p2p_findings(report: Report) -> list[str]:
    return [
        r.id
        for r in report.results
        if r.status in _FINDING and r.id.startswith(P2P_FINDING_PREFIXES)
    ]


@dataclass(frozen=True)
class Derived:
    """Settings for one host, each with the reason it has its value."""

    gpu_count: int
    tensor_parallel_size: int
    sm12x: bool
    env: dict[str, str] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def derive(facts: Facts, report: Report) -> Derived | None:
    """None when the facts show no GPU: there is nothing to launch."""
    count = gpu_count(facts)
    if count < 1:
        return None
    tp = tensor_parallel_size(count)
    env: dict[str, str] = {}
    why: dict[str, str] = {
        "tensor_parallel_size": f"the largest power of two not above the GPU count ({count})"
        + ("" if tp == count else f" ({count - tp} GPU(s) left idle: heads split evenly)"),
    }
    notes: list[str] = []
    for name, (value, reason) in FIXED_ENV.items():
        env[name] = value
        why[name] = reason
    cpus = logical_cpus(facts)
    if cpus is None:
        notes.append("OMP_NUM_THREADS not set: the facts do not say how many logical CPUs")
    else:
        threads = omp_num_threads(cpus, tp)
        env["OMP_NUM_THREADS"] = str(threads)
        why["OMP_NUM_THREADS"] = f"{cpus} logical CPUs / tensor-parallel size {tp}"
    broken = p2p_findings(report)
    pt = iommu_passthrough_in_effect(facts)
    if broken and pt is not True:
        env["NCCL_P2P_DISABLE"] = "1"
        why["NCCL_P2P_DISABLE"] = (
            f"P2P findings ({', '.join(broken)}) and iommu=pt is "
            + ("not known to be in effect" if pt is None else "not in effect")
            + "; NCCL copies through host memory instead (slower all-reduce, no hang). "
            "Remove it once the pci findings are fixed and the p2p checks pass."
        )
    elif broken:
        notes.append(
            f"NCCL_P2P_DISABLE not set: P2P findings ({', '.join(broken)}) while iommu=pt is "
            "in effect, so the IOMMU is not the cause; look at pci.acs and the BIOS first"
        )
    return Derived(
        gpu_count=count,
        tensor_parallel_size=tp,
        sm12x=is_sm12x_host(facts),
        env=env,
        why=why,
        notes=notes,
    )
