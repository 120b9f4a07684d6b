"""Read-only helpers over facts that several check families share."""

from __future__ import annotations

from collections.abc import Callable, Sized
from typing import TYPE_CHECKING, TypeVar

import msgspec

from blackwell_doctor.facts.document import (
    CudaFacts,
    Facts,
    NvmlFacts,
    NvmlGpu,
    PciFacts,
    PciGpu,
    Unavailable,
)
from blackwell_doctor.report.results import Outcome, not_evaluated, skipped

if TYPE_CHECKING:
    from packaging.version import Version

T = TypeVar("T")


class GpuView(msgspec.Struct, frozen=True):
    """One GPU as the checks see it: NVML first, CUDA's answer where NVML has none."""

    label: str  # "GPU0 NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    cc: tuple[int, int] | None
    pci_bus_id: str | None


def nvml(facts: Facts) -> NvmlFacts | None:
    return facts.nvml if isinstance(facts.nvml, NvmlFacts) else None


def cuda(facts: Facts) -> CudaFacts | None:
    return facts.cuda if isinstance(facts.cuda, CudaFacts) else None


def nvml_reporting(
    facts: Facts, field: Callable[[NvmlGpu], object], predates: str, unsupported: str
) -> NvmlFacts | Outcome:
    """NVML's GPUs for a check of one per-GPU ``field``, or the outcome of a check that has
    none to judge: NVML unavailable, no GPU, facts collected before the field existed
    (``predates``: None on every GPU), or NVML not supporting it on any GPU
    (``unsupported``)."""
    n = nvml(facts)
    if n is None:
        return not_evaluated(f"NVML unavailable: {reason(facts.nvml)}")
    if not n.gpus:
        return skipped("no GPU")
    values = [field(g) for g in n.gpus]
    if all(v is None for v in values):
        return skipped(predates)
    if all(isinstance(v, Unavailable) and v.reason == "not-supported" for v in values):
        return skipped(unsupported)
    return n


def pci(facts: Facts) -> PciFacts | None:
    return facts.pci if isinstance(facts.pci, PciFacts) else None


def reason(value: object) -> str:
    return value.reason if isinstance(value, Unavailable) else "unknown"


def section(value: T | Unavailable | None, absent: str, unreadable: str) -> T | Outcome:
    """A section of the facts, or the outcome of a check that has none to judge: ``absent``
    (facts without the section) skipped; a section that could not be read not evaluated
    with ``unreadable`` (``{reason}`` filled in)."""
    if value is None:
        return skipped(absent)
    if isinstance(value, Unavailable):
        return not_evaluated(unreadable.format(reason=value.reason))
    return value


def probed(
    value: T | Unavailable | None,
    *,
    absent: str,
    not_run: str,
    failed: str,
    measured: Callable[[T], Sized],
    nothing: str,
) -> T | Outcome:
    """A probe's section of the facts, or the outcome of a check that has none to judge:
    :func:`section`'s; a probe skipped on purpose (reason "skipped:WHY") skipped with
    ``not_run`` (``{why}`` filled in); a probe that ran but ``measured`` nothing not
    evaluated with ``nothing``."""
    if isinstance(value, Unavailable) and value.reason.startswith("skipped:"):
        return skipped(not_run.format(why=value.reason.removeprefix("skipped:")))
    got = section(value, absent, failed)
    if not isinstance(got, Outcome) and not measured(got):
        return not_evaluated(nothing)
    return got


def gpus(facts: Facts) -> list[GpuView]:
    n = nvml(facts)
    c = cuda(facts)
    out: list[GpuView] = []
    if n is not None and n.gpus:
        for g in n.gpus:
            name = g.name if isinstance(g.name, str) else "(name unavailable)"
            cc = g.compute_capability if isinstance(g.compute_capability, tuple) else None
            if cc is None and c is not None and g.index < len(c.devices):
                cc_c = c.devices[g.index].compute_capability
                cc = cc_c if isinstance(cc_c, tuple) else None
            bus = g.pci_bus_id if isinstance(g.pci_bus_id, str) else None
            out.append(GpuView(label=f"GPU{g.index} {name}", cc=cc, pci_bus_id=bus))
    elif c is not None:
        for d in c.devices:
            name = d.name if isinstance(d.name, str) else "(name unavailable)"
            cc = d.compute_capability if isinstance(d.compute_capability, tuple) else None
            bus = d.pci_bus_id if isinstance(d.pci_bus_id, str) else None
            out.append(GpuView(label=f"GPU{d.ordinal} {name}", cc=cc, pci_bus_id=bus))
    return out


def pci_gpus(facts: Facts) -> list[PciGpu]:
    p = pci(facts)
    return list(p.gpus) if p is not None else []


def is_sm12x(cc: tuple[int, int] | None) -> bool:
    return cc is not None and cc[0] == 12


def cc_str(cc: tuple[int, int] | None) -> str:
    return "unknown" if cc is None else f"{cc[0]}.{cc[1]}"


def driver_version(facts: Facts) -> str | None:
    """The user-space driver version NVML reports, else the loaded kernel module's."""
    n = nvml(facts)
    if n is not None and isinstance(n.driver_version, str):
        return n.driver_version
    module = facts.platform.nvidia_kernel_module
    return module if isinstance(module, str) else None


def _release(text: str) -> tuple[int, ...] | None:
    """A version of release numbers alone ("580.65.06", "13.0": how NVIDIA writes driver and
    CUDA versions) as PEP 440 orders it (trailing zeros do not count, as packaging's key);
    None for any other form."""
    parts = text.split(".")
    if not all(p.isascii() and p.isdigit() for p in parts):
        return None
    numbers = [int(p) for p in parts]
    while numbers and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers)


def parse_version(text: str | None) -> tuple[int, ...] | Version | None:
    """A version to compare with :func:`at_least`; None when unreadable. Release numbers
    alone are compared as numbers; any other form through ``packaging``, which is imported
    only then (its import and regex cost ~2.5 ms of a check's start-up)."""
    if text is None:
        return None
    release = _release(text)
    if release is not None:
        return release
    from packaging.version import Version

    try:
        return Version(text)
    except ValueError:  # InvalidVersion, or a number past int()'s 4,300 digits
        return None


def at_least(version: tuple[int, ...] | Version, floor: str) -> bool:
    """``version`` >= the version ``floor`` names (a threshold from checks/*.toml)."""
    floor_release = _release(floor)
    if isinstance(version, tuple) and floor_release is not None:
        return version >= floor_release
    from packaging.version import Version

    if isinstance(version, tuple):
        version = Version(".".join(map(str, version)) or "0")
    return version >= Version(floor)


def is_wsl(facts: Facts) -> bool:
    """WSL1 or WSL2 was seen. "unknown" (neither kernel string read: a container without the
    host's /proc) is not WSL: the checks judge what they can read, and say what they could
    not (issue 37)."""
    return facts.platform.wsl.kind in ("wsl1", "wsl2")


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def fmt_bytes(n: int) -> str:
    return f"{n:,} B"


def marlin_expected(facts: Facts) -> bool:
    """The checkpoint is W4A16, so vLLM choosing Marlin is the right path (the context rule
    marlin-requested of checks/log_signatures.toml)."""
    m = facts.model
    return m is not None and not isinstance(m, Unavailable) and m.quantization.method == "w4a16"
