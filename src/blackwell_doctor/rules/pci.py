"""Family pci: IOMMU translation and ACS redirects on the paths between GPUs.

Judged from the PCI sysfs inventory, so they work even when the driver does not answer.
"""

from __future__ import annotations

from itertools import combinations

from blackwell_doctor.facts.document import (
    AcsFacts,
    Facts,
    OsRelease,
    PciFacts,
    PciGpu,
    Unavailable,
)
from blackwell_doctor.report.results import (
    Evidence,
    Outcome,
    Status,
    not_evaluated,
    passed,
    skipped,
)
from blackwell_doctor.ruledata.rules import RuleData, fill
from blackwell_doctor.rules import view
from blackwell_doctor.rules.registry import check

_TRANSLATING = frozenset({"DMA", "DMA-FQ"})
_REDIRECT_BITS = ("ReqRedir", "CmpltRedir")


def _multi_gpu_pci(facts: Facts, rules: RuleData) -> PciFacts | Outcome:
    """The PCI facts when the family applies, else the skip/error outcome to return."""
    if view.is_wsl(facts):
        return skipped(
            f"{facts.platform.wsl.kind}: the GPU is paravirtualised, there is no PCI view of it"
        )
    virt = facts.platform.virtualization
    if virt.in_vm:
        return skipped(rules.word("reasons", "pci_in_vm", signals=", ".join(virt.signals)))
    if isinstance(facts.pci, Unavailable):
        return not_evaluated(f"PCI sysfs unreadable: {facts.pci.reason}")
    if len(facts.pci.gpus) < 2:
        found = "no NVIDIA GPU" if not facts.pci.gpus else "one NVIDIA GPU"
        return skipped(f"{found} on PCI: no peer-to-peer traffic between GPUs")
    return facts.pci


def _passthrough_note(facts: Facts, requested: bool) -> str:
    cmdline = facts.platform.kernel_cmdline
    if isinstance(cmdline, Unavailable):
        return f"; the kernel command line is unreadable ({cmdline.reason})"
    if requested:
        return "; iommu=pt is on the command line but not in effect for them"
    return " and iommu=pt is not set"


def _boot_command_set(facts: Facts, rules: RuleData) -> str:
    """pci.iommu's [check.command_sets] for this host's boot loader (checks/distros.toml)."""
    os = facts.platform.os_release
    distro = rules.distros.find(os.id, None) if isinstance(os, OsRelease) and os.id else None
    return distro.boot if distro is not None and distro.boot is not None else "unknown"


def iommu_passthrough_requested(options: dict[str, str]) -> bool:
    return options.get("iommu") == "pt" or options.get("iommu.passthrough") in ("1", "on", "y")


@check("pci.iommu", reads=("platform", "pci"))
def pci_iommu(facts: Facts, rules: RuleData) -> Outcome:
    pci = _multi_gpu_pci(facts, rules)
    if isinstance(pci, Outcome):
        return pci
    options = pci.iommu.cmdline_options
    translating: list[PciGpu] = []
    unreadable: list[str] = []
    types: Evidence = {}
    for gpu in pci.gpus:
        kind = gpu.iommu_domain_type
        if isinstance(kind, Unavailable):
            unreadable.append(f"{gpu.bdf}: {kind.reason}")
            types[gpu.bdf] = kind.reason
            continue
        types[gpu.bdf] = kind if kind is not None else "no IOMMU group"
        if kind in _TRANSLATING:
            translating.append(gpu)
    evidence: Evidence = {
        "cmdline": " ".join(f"{k}={v}" for k, v in sorted(options.items())) or "(no IOMMU option)",
        **types,
    }
    if translating:
        kinds = sorted({str(g.iommu_domain_type) for g in translating})
        pt = iommu_passthrough_requested(options)
        if isinstance(facts.platform.kernel_cmdline, Unavailable):
            case = "translating_cmdline_unreadable"
        elif pt:
            case = "translating_despite_pt"
        else:
            case = "translating"
        return Outcome(
            status=Status.WARN,
            summary=(
                f"IOMMU translates DMA for {len(translating)} of {len(pci.gpus)} GPUs "
                f"({', '.join(kinds)})" + _passthrough_note(facts, pt)
            ),
            evidence=evidence,
            case=case,
            remedy_vars={
                "bdfs": ", ".join(g.bdf for g in translating),
                "kinds": "/".join(kinds),
            },
            command_set=_boot_command_set(facts, rules),
        )
    if unreadable:
        return not_evaluated("; ".join(unreadable), **evidence)
    if all(g.iommu_domain_type is None for g in pci.gpus):
        return passed("no IOMMU groups: the IOMMU is off, peer DMA is not translated", **evidence)
    return passed("IOMMU in passthrough (identity) for every GPU", **evidence)


def bridges_between(a: PciGpu, b: PciGpu) -> list[str]:
    """Bridges a peer request from ``a`` to ``b`` crosses, below their common ancestor.

    ``upstream`` lists bridges nearest first, root port last, so the shared tail of both
    lists is above the point where the paths meet; everything before it is on the path.
    """
    shared = 0
    while (
        shared < min(len(a.upstream), len(b.upstream))
        and a.upstream[-1 - shared] == b.upstream[-1 - shared]
    ):
        shared += 1
    return a.upstream[: len(a.upstream) - shared] + b.upstream[: len(b.upstream) - shared]


@check("pci.acs", reads=("platform", "pci"))
def pci_acs(facts: Facts, rules: RuleData) -> Outcome:
    pci = _multi_gpu_pci(facts, rules)
    if isinstance(pci, Outcome):
        return pci
    by_bdf = {b.bdf: b for b in pci.bridges}
    on_path: set[str] = set()
    share_switch = False
    for a, b in combinations(pci.gpus, 2):
        path = bridges_between(a, b)
        on_path.update(path)
        # If the paths meet below the root complex, a switch could route peers directly.
        if set(a.upstream) & set(b.upstream):
            share_switch = True
    flagged: dict[str, list[str]] = {}
    unreadable: list[str] = []
    for bdf in sorted(on_path):
        bridge = by_bdf.get(bdf)
        if bridge is None:
            unreadable.append(f"{bdf}: not in the bridge inventory")
            continue
        acs = bridge.acs
        if isinstance(acs, Unavailable):
            unreadable.append(acs.reason)
        elif isinstance(acs, AcsFacts):
            bits = [bit for bit in _REDIRECT_BITS if bit in acs.enabled]
            if bits:
                flagged[bdf] = bits
    evidence: Evidence = {
        "bridges_on_gpu_paths": sorted(on_path),
        **{f"{bdf} ACS": bits for bdf, bits in flagged.items()},
    }
    if flagged:
        where = (
            "GPUs share a PCIe switch, so traffic it could switch directly goes up to the root "
            "complex"
            if share_switch
            else "GPUs sit on separate root ports, so every peer request is redirected through "
            "the root complex's IOMMU checks"
        )
        import shlex  # for the commands of a finding alone

        return Outcome(
            status=Status.WARN,
            summary=f"ACS redirect on {view.plural(len(flagged), 'bridge')} between GPUs: {where}",
            evidence=evidence,
            remedy_vars={"bridges": ", ".join(flagged)},
            commands=[
                fill(line, {"bdf": shlex.quote(bdf)})
                for bdf in flagged
                for line in rules.checks["pci.acs"].command_sets["per_bridge"]
            ],
        )
    if unreadable:
        root_hint = (
            rules.word("reasons", "pci_run_as_root")
            if any("truncated" in u for u in unreadable)
            else ""
        )
        return not_evaluated("ACS unreadable: " + "; ".join(unreadable) + root_hint, **evidence)
    if not on_path:
        return passed("no bridge between the GPUs", **evidence)
    return passed(
        f"no ACS redirect on the {view.plural(len(on_path), 'bridge')} between GPUs", **evidence
    )
