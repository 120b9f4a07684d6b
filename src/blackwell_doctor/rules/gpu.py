"""Family gpu: is there a GPU, what class is it, what shared memory does it grant."""

from __future__ import annotations

from blackwell_doctor.facts.document import Facts, NvmlFacts, PciGpu, Unavailable
from blackwell_doctor.facts.pciaddr import normalize_pci_bus_id
from blackwell_doctor.report.results import Evidence, Outcome, Status, not_evaluated, passed
from blackwell_doctor.ruledata.rules import RuleData
from blackwell_doctor.rules import view
from blackwell_doctor.rules.registry import check


@check("gpu.present", reads=("platform", "pci", "nvml", "cuda"))
def gpu_present(facts: Facts, rules: RuleData) -> Outcome:
    pci = view.pci(facts)
    pci_gpus = view.pci_gpus(facts)
    on_pci = [g.bdf for g in pci_gpus]
    pci_note = (
        f"PCI: unreadable ({facts.pci.reason})"
        if isinstance(facts.pci, Unavailable)
        else "PCI: none with vendor 0x10de"
    )
    if isinstance(facts.nvml, NvmlFacts) and facts.nvml.gpus:
        names = [g.label for g in view.gpus(facts)]
        evidence: Evidence = {"nvml_gpus": len(names), "pci_gpus": on_pci if pci else pci_note}
        seen = {
            normalize_pci_bus_id(g.pci_bus_id)
            for g in facts.nvml.gpus
            if isinstance(g.pci_bus_id, str)
        }
        missing = [g for g in pci_gpus if g.bdf.lower() not in seen]
        if pci is not None and missing and len(seen) == len(facts.nvml.gpus):
            return _gpus_missing_from_nvml(facts, names, missing, evidence)
        verb = "answers" if len(names) == 1 else "answer"
        return passed(
            f"{view.plural(len(names), 'NVIDIA GPU')} {verb} through NVML: " + ", ".join(names),
            **evidence,
        )
    nvml_reason = facts.nvml.reason if isinstance(facts.nvml, Unavailable) else "NVML lists no GPU"
    evidence = {
        "nvml": nvml_reason,
        "pci_gpus": on_pci if pci is not None else pci_note,
        "cuda": view.reason(facts.cuda) if isinstance(facts.cuda, Unavailable) else "ok",
    }
    values = {"nvml_reason": nvml_reason}
    if on_pci:
        case = "driver_not_usable"
        if nvml_reason == "nvml-driver-library-mismatch":
            case = "library_mismatch"
        summary = f"GPU(s) on PCI but the driver is not usable: {nvml_reason}"
        values |= {"gpus": view.plural(len(on_pci), "NVIDIA GPU"), "bdfs": ", ".join(on_pci)}
    else:
        if facts.platform.wsl.kind in ("wsl1", "wsl2"):  # not "unknown": /proc/version unread
            case = "wsl"
        elif pci is None:
            case = "pci_unreadable"
        else:
            case = "none_found"
        summary = f"no NVIDIA GPU found (NVML: {nvml_reason}; {pci_note})"
        values["pci_reason"] = view.reason(facts.pci)
    return Outcome(
        status=Status.FAIL, summary=summary, evidence=evidence, case=case, remedy_vars=values
    )


def _gpus_missing_from_nvml(
    facts: Facts, names: list[str], missing: list[PciGpu], evidence: Evidence
) -> Outcome:
    """GPUs on the PCI bus that NVML does not list: lost, unbound, or deliberately elsewhere."""
    detail = ", ".join(f"{g.bdf} (driver: {g.driver or 'none'})" for g in missing)
    evidence = {**evidence, "not_in_nvml": [g.bdf for g in missing]}
    expected = facts.platform.container.in_container or all(g.driver == "vfio-pci" for g in missing)
    total = len(names) + len(missing)
    summary = f"NVML answers for {len(names)} of {total} NVIDIA GPUs on PCI; missing: {detail}"
    if expected:
        return Outcome(
            status=Status.WARN,
            summary=summary,
            evidence=evidence,
            case="hidden",
        )
    return Outcome(
        status=Status.FAIL,
        summary=summary,
        evidence=evidence,
        case="fallen_off",
    )


@check("gpu.architecture", reads=("nvml", "cuda"))
def gpu_architecture(facts: Facts, rules: RuleData) -> Outcome:
    gpus = view.gpus(facts)
    known = [g for g in gpus if g.cc is not None]
    if not known:
        return not_evaluated(
            "no GPU reported a compute capability",
            nvml=view.reason(facts.nvml) if isinstance(facts.nvml, Unavailable) else "ok",
        )
    evidence: Evidence = {g.label: view.cc_str(g.cc) for g in gpus}
    unknown = sorted({g.cc for g in known if g.cc is not None and g.cc not in rules.architectures})
    if unknown:
        ccs = ", ".join(view.cc_str(cc) for cc in unknown)
        return Outcome(
            status=Status.WARN,
            summary=f"compute capability {ccs} is not in the architecture table",
            evidence=evidence,
            remedy_vars={"cc": ccs},
        )
    classes = sorted({view.cc_str(g.cc) for g in known})
    lines: list[str] = []
    for cc_text in classes:
        arch = next(a for a in rules.architectures.values() if a.cc == cc_text)
        lines.append(
            f"CC {arch.cc} {arch.name}: {view.fmt_bytes(arch.smem_optin_per_block)} "
            f"shared memory per block"
        )
    summary = "; ".join(lines)
    if any(view.is_sm12x(g.cc) for g in known):
        datacenter = max(
            a.smem_optin_per_block for a in rules.architectures.values() if a.klass == "hopper"
        )
        summary += f" (H100/H200/B200: {view.fmt_bytes(datacenter)})"
        evidence["why it matters"] = (
            "NVFP4 MoE GEMM tiles sized for 227 KB parts do not fit in 99 KB; a runtime "
            "without SM 12.x tiles falls back to slower kernels"
        )
    if len(classes) > 1:
        return Outcome(
            status=Status.WARN,
            summary=f"mixed architectures on one host ({', '.join(classes)}): " + summary,
            evidence=evidence,
            remedy_vars={"cc": ", ".join(classes)},
        )
    return passed(summary, **evidence)


@check("gpu.shared_memory", reads=("cuda",))
def gpu_shared_memory(facts: Facts, rules: RuleData) -> Outcome:
    c = view.cuda(facts)
    if c is None:
        return not_evaluated(f"CUDA driver API unavailable: {view.reason(facts.cuda)}")
    if not c.devices:
        return not_evaluated("the CUDA driver lists no device")
    evidence: Evidence = {}
    mismatches: list[str] = []
    mismatched_ccs: set[str] = set()
    unknown: list[str] = []
    for d in c.devices:
        cc = d.compute_capability if isinstance(d.compute_capability, tuple) else None
        optin = d.smem_per_block_optin
        label = f"GPU{d.ordinal}"
        if not isinstance(optin, int):
            unknown.append(f"{label}: opt-in limit unreadable ({view.reason(optin)})")
            continue
        evidence[f"{label} opt-in per block"] = optin
        if isinstance(d.smem_per_sm, int):
            evidence[f"{label} per SM"] = d.smem_per_sm
        arch = rules.architectures.get(cc) if cc is not None else None
        if arch is None:
            unknown.append(f"{label}: no table entry for CC {view.cc_str(cc)}")
            continue
        if optin != arch.smem_optin_per_block:
            mismatched_ccs.add(arch.cc)
            mismatches.append(
                f"{label} (CC {arch.cc}) grants {view.fmt_bytes(optin)}, "
                f"table says {view.fmt_bytes(arch.smem_optin_per_block)}"
            )
    if mismatches:
        return Outcome(
            status=Status.WARN,
            summary="; ".join(mismatches),
            evidence=evidence,
            remedy_vars={"cc": ", ".join(sorted(mismatched_ccs))},
        )
    if unknown:
        # Never a pass while any device could not be compared.
        return not_evaluated("; ".join(unknown), **evidence)
    optins = sorted({v for k, v in evidence.items() if k.endswith("opt-in per block")}, key=str)
    return passed(
        "driver grants "
        + ", ".join(view.fmt_bytes(v) for v in optins if isinstance(v, int))
        + " opt-in shared memory per block, as the architecture table expects",
        **evidence,
    )
