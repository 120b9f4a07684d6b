"""Family link: each GPU's PCIe link against the most its GPU and slot allow (issue 26).

A GPU drops its link generation when idle, so a generation below the maximum counts only
when read under load (``facts.link_load``: collect's probes read NVML while host-to-device
copies keep the GPU busy). A width below the maximum does not come from idling: it counts
whenever it is seen. Links trained down (Gen1, x4 in a Gen5 x16 slot) are the field reports
of NVIDIA/open-gpu-kernel-modules#888, #900 and #1010, often followed by Xid 79.
"""

from __future__ import annotations

import msgspec

from blackwell_doctor.facts.document import (
    Facts,
    LinkLoadFacts,
    LoadedLink,
    NvmlGpu,
    NvmlPcieLink,
    PciGpu,
    SysfsLink,
    Unavailable,
)
from blackwell_doctor.facts.pciaddr import normalize_pci_bus_id
from blackwell_doctor.report.results import (
    Evidence,
    Outcome,
    Status,
    not_evaluated,
    passed,
    skipped,
)
from blackwell_doctor.ruledata.rules import RuleData
from blackwell_doctor.rules import view
from blackwell_doctor.rules.registry import check

_PREDATES = "PCIe link not in these facts (collected before link facts existed)"
_UNSUPPORTED = "NVML has no PCIe link for these GPUs (integrated, as GB10)"


class LinkReading(msgspec.Struct, frozen=True):
    """One GPU's link as the checks judge it."""

    gpu: int
    current_gen: int | None
    current_width: int | None
    max_gen: int | None
    max_width: int | None
    gpu_max_gen: int | None
    loaded: bool  # read under load (link_load) rather than at collection time

    @property
    def text(self) -> str:
        return f"Gen{self.current_gen or '?'} x{self.current_width or '?'}"

    @property
    def max_text(self) -> str:
        return f"Gen{self.max_gen or '?'} x{self.max_width or '?'}"


def _loaded(facts: Facts) -> dict[int, LoadedLink]:
    load = facts.link_load
    if not isinstance(load, LinkLoadFacts):
        return {}
    return {g.gpu: g for g in load.gpus if g.error is None and g.current_gen is not None}


def readings(facts: Facts) -> dict[int, LinkReading]:
    """Every GPU's link reading: under load where one was taken, else NVML's at collection."""
    out: dict[int, LinkReading] = {}
    n = view.nvml(facts)
    loaded = _loaded(facts)
    for g in n.gpus if n is not None else []:
        idle = g.pcie if isinstance(g.pcie, NvmlPcieLink) else None
        busy = loaded.get(g.index)
        now = busy if busy is not None else idle
        if now is None:
            continue
        # The maxima of the reading under load, where it has them; else NVML's.
        out[g.index] = LinkReading(
            gpu=g.index,
            current_gen=now.current_gen,
            current_width=now.current_width,
            max_gen=(busy.max_gen if busy else None) or (idle.max_gen if idle else None),
            max_width=(busy.max_width if busy else None) or (idle.max_width if idle else None),
            gpu_max_gen=idle.gpu_max_gen if idle else None,
            loaded=busy is not None,
        )
    return out


def link_gbps(reading: LinkReading, rules: RuleData) -> float | None:
    """What this GPU's link carries one way as it is trained now (GB/s)."""
    if reading.current_gen is None or reading.current_width is None:
        return None
    return rules.preflight.link.link_gbps(reading.current_gen, reading.current_width)


def _pci_gpu(facts: Facts, g: NvmlGpu) -> PciGpu | None:
    if not isinstance(g.pci_bus_id, str):
        return None
    bdf = normalize_pci_bus_id(g.pci_bus_id).lower()
    for p in view.pci_gpus(facts):
        if normalize_pci_bus_id(p.bdf).lower() == bdf:
            return p
    return None


def _sysfs_text(link: SysfsLink | Unavailable | None) -> str | None:
    if not isinstance(link, SysfsLink):
        return None
    return (
        f"Gen{link.current_gen or '?'} x{link.current_width or '?'} of "
        f"Gen{link.max_gen or '?'} x{link.max_width or '?'}"
    )


def _slot(facts: Facts, g: NvmlGpu) -> tuple[str, Evidence]:
    """The GPU's PCI address and its upstream port (the slot's), with their sysfs links."""
    p = _pci_gpu(facts, g)
    if p is None:
        bus = g.pci_bus_id if isinstance(g.pci_bus_id, str) else f"GPU{g.index}"
        return bus, {}
    evidence: Evidence = {}
    own = _sysfs_text(p.link)
    if own:
        evidence[f"{p.bdf} (sysfs)"] = own
    where = p.bdf
    pci = view.pci(facts)
    if p.upstream and pci is not None:
        port = p.upstream[0]
        where = f"{p.bdf} below port {port}"
        bridge = next((b for b in pci.bridges if b.bdf == port), None)
        text = _sysfs_text(bridge.link) if bridge is not None else None
        if text:
            evidence[f"{port} (sysfs, upstream port)"] = text
    return where, evidence


@check("link.pcie", reads=("platform", "pci", "nvml", "link_load"))
def link_pcie(facts: Facts, rules: RuleData) -> Outcome:
    if view.is_wsl(facts):
        return skipped(
            f"{facts.platform.wsl.kind}: the GPU is paravirtualised, no PCIe link to read"
        )
    n = view.nvml_reporting(facts, lambda g: g.pcie, _PREDATES, _UNSUPPORTED)
    if isinstance(n, Outcome):
        return n
    got = readings(facts)
    evidence: Evidence = {}
    down: list[str] = []
    where: list[str] = []
    idle_only: list[str] = []
    unreadable: list[str] = []
    slot_limited: list[str] = []
    for g in n.gpus:
        r = got.get(g.index)
        if r is None:
            unreadable.append(f"GPU{g.index}: {view.reason(g.pcie)}")
            continue
        slot, slot_evidence = _slot(facts, g)
        when = "under load" if r.loaded else "at collection, maybe idle"
        evidence[f"GPU{g.index}"] = f"{r.text} of {r.max_text} ({when})"
        evidence.update(slot_evidence)
        narrow = (
            r.current_width is not None
            and r.max_width is not None
            and r.current_width < r.max_width
        )
        slow = r.current_gen is not None and r.max_gen is not None and r.current_gen < r.max_gen
        if r.gpu_max_gen is not None and r.max_gen is not None and r.max_gen < r.gpu_max_gen:
            slot_limited.append(f"GPU{g.index} (Gen{r.gpu_max_gen} GPU, Gen{r.max_gen} slot)")
        if narrow or (slow and r.loaded):
            down.append(f"GPU{g.index} {r.text} of {r.max_text}")
            where.append(slot)
        elif slow:
            idle_only.append(f"GPU{g.index} {r.text} of {r.max_text}")
    if slot_limited:
        evidence["limited_by_the_slot"] = slot_limited
    if down:
        return Outcome(
            status=Status.WARN,
            summary=f"PCIe link below its maximum: {'; '.join(down)}",
            evidence=evidence,
            case="trained_down",
            remedy_vars={"links": "; ".join(down), "slots": "; ".join(where)},
        )
    if unreadable:
        return not_evaluated("; ".join(unreadable), **evidence)
    if idle_only:
        return not_evaluated(
            f"generation read at idle only ({'; '.join(idle_only)}): a GPU lowers it when "
            "idle; collect with probes reads it under load",
            **evidence,
        )
    note = f" (slot-limited: {', '.join(slot_limited)})" if slot_limited else ""
    return passed(f"every GPU's PCIe link at its maximum{note}", **evidence)
