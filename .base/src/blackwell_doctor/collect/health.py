"""Hardware health facts outside NVML (issue 39): the PCIe AER counters of sysfs.

The kernel counts every AER message a device sent or received (Linux
drivers/pci/pcie/aer.c, ``aer_dev_correctable``/``_nonfatal``/``_fatal``, since 4.19). An
error of the GPU's link can show on either end (the kernel's own comment: the link partner
counts what it saw), so each GPU's counters are read with those of its upstream port: once
at the start of the run and again after the probes, for the deltas. Read only, through the
host root; a file that is absent (a kernel without AER statistics, a device without the
capability) is a reason token, never an exception.
"""

from __future__ import annotations

from blackwell_doctor.collect.hostfs import HostFS
from blackwell_doctor.collect.parsers import parse_aer_counters
from blackwell_doctor.facts.document import (
    AerCounts,
    AerKind,
    ClockSample,
    DeviceAer,
    GpuHealth,
    HealthFacts,
    LoadedGpu,
    PciFacts,
    Unavailable,
)

PCI_DEVICES = "/sys/bus/pci/devices"
AER_FILES: dict[AerKind, str] = {
    "correctable": "aer_dev_correctable",
    "nonfatal": "aer_dev_nonfatal",
    "fatal": "aer_dev_fatal",
}


def read_aer(fs: HostFS, bdf: str) -> AerCounts | Unavailable:
    """One reading of ``bdf``'s three AER files; Unavailable (the first file's reason) when
    none can be read."""
    totals: dict[str, int | None] = {}
    nonzero: dict[str, int] = {}
    reasons: list[str] = []
    for kind, name in AER_FILES.items():
        text = fs.read_text(f"{PCI_DEVICES}/{bdf}/{name}", limit=1 << 14)
        if isinstance(text, Unavailable):
            reasons.append(text.reason)
            totals[kind] = None
            continue
        total, named = parse_aer_counters(text)
        totals[kind] = total
        # The same names (e.g. "Undefined") appear in the non-fatal and fatal files.
        nonzero.update({f"{kind}:{k}": v for k, v in named.items()})
    if all(v is None for v in totals.values()):
        return Unavailable(reasons[0] if reasons else f"aer-unparsed:{bdf}")
    return AerCounts(**totals, nonzero=nonzero)


def aer_devices(pci: PciFacts) -> list[tuple[str, str]]:
    """(bdf, role) of each GPU and of the port right above it, each once."""
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    for gpu in pci.gpus:
        for bdf, role in ((gpu.bdf, "gpu"), *((b, "upstream") for b in gpu.upstream[:1])):
            if bdf not in seen:
                seen.add(bdf)
                out.append((bdf, role))
    return out


def collect_aer(fs: HostFS, pci: PciFacts | Unavailable) -> list[DeviceAer] | Unavailable:
    """The first reading of every GPU's and upstream port's AER counters."""
    if isinstance(pci, Unavailable):
        return pci
    return [
        DeviceAer(bdf=bdf, role="gpu" if role == "gpu" else "upstream", before=read_aer(fs, bdf))
        for bdf, role in aer_devices(pci)
    ]


def aer_after(fs: HostFS, first: list[DeviceAer] | Unavailable) -> list[DeviceAer] | Unavailable:
    """``first`` with the counters read again (after the probes): the deltas are the run's."""
    if isinstance(first, Unavailable):
        return first
    return [
        DeviceAer(bdf=d.bdf, role=d.role, before=d.before, after=read_aer(fs, d.bdf))
        if isinstance(d.before, AerCounts)
        else d
        for d in first
    ]


def health_facts(
    gpus: list[GpuHealth] | Unavailable,
    under_load: dict[str, list[ClockSample]] | Unavailable,
    aer: list[DeviceAer] | Unavailable,
    load_errors: dict[str, str] | None = None,
) -> HealthFacts:
    """The health section: NVML's answers, the samples taken under the probes' load (by
    PCI bus id), the AER readings."""
    loaded: list[LoadedGpu] | Unavailable
    if isinstance(under_load, Unavailable):
        loaded = under_load
    else:
        errors = load_errors or {}
        buses = sorted(set(under_load) | set(errors))
        loaded = [
            LoadedGpu(pci_bus_id=b, samples=under_load.get(b, [])[:4096], error=errors.get(b))
            for b in buses
        ]
    return HealthFacts(gpus=gpus, under_load=loaded, aer=aer)
