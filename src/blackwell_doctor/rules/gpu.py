"""Family gpu: is there a GPU, what class is it, what shared memory does it grant."""

from __future__ import annotations

from blackwell_doctor.facts import Facts, NvmlFacts, Unavailable
from blackwell_doctor.rules import view
from blackwell_doctor.rules.data import RuleData
from blackwell_doctor.rules.engine import check
from blackwell_doctor.rules.model import Evidence, Outcome, Status, not_evaluated, passed, skipped


@check("gpu.present")
def gpu_present(facts: Facts, rules: RuleData) -> Outcome:
    pci_gpus = view.pci_gpus(facts)
    on_pci = [g.bdf for g in pci_gpus]
    if isinstance(facts.nvml, NvmlFacts) and facts.nvml.gpus:
        names = [g.label for g in view.gpus(facts)]
        return passed(
            f"{view.plural(len(names), 'NVIDIA GPU')} answer through NVML: " + ", ".join(names),
            nvml_gpus=len(names),
            pci_gpus=len(on_pci) if view.pci(facts) is not None else None,
        )
    nvml_reason = facts.nvml.reason if isinstance(facts.nvml, Unavailable) else "NVML lists no GPU"
    evidence: dict[str, str | int | list[str] | None] = {
        "nvml": nvml_reason,
        "pci_gpus": on_pci,
        "cuda": view.reason(facts.cuda) if isinstance(facts.cuda, Unavailable) else "ok",
    }
    if on_pci:
        how = (
            f"{view.plural(len(on_pci), 'NVIDIA GPU')} on the PCI bus ({', '.join(on_pci)}), "
            f"but the driver does not answer ({nvml_reason}). Install or repair the NVIDIA driver "
            "(open kernel modules are required for Blackwell), then reboot."
        )
        if nvml_reason == "nvml-driver-library-mismatch":
            how = (
                "The loaded kernel module and the user-space driver libraries differ "
                "(upgraded without a reboot?). Reboot, or unload and reload the nvidia modules."
            )
        return Outcome(
            status=Status.FAIL,
            summary=f"GPU(s) on PCI but the driver is not usable: {nvml_reason}",
            evidence=dict(evidence),
            remedy_vars={"reason": how},
        )
    if view.is_wsl(facts):
        how = (
            "Under WSL2 the GPU comes from the Windows driver through /dev/dxg: install the "
            "NVIDIA Windows driver on the host (not a Linux driver inside WSL) and run "
            "`nvidia-smi` in WSL to confirm."
        )
    else:
        how = (
            "No NVIDIA GPU was found on the PCI bus or through NVML. In a container, run it "
            "with the GPU (`docker run --gpus all ...`) and mount the host's /sys and /proc "
            "(`--host-root`); otherwise check the hardware and BIOS."
        )
    return Outcome(
        status=Status.FAIL,
        summary=f"no NVIDIA GPU found (NVML: {nvml_reason}; PCI: none with vendor 0x10de)",
        evidence=dict(evidence),
        remedy_vars={"reason": how},
    )


@check("gpu.architecture")
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
        summary += " (B200/H100: 232,448 B)"
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


@check("gpu.shared_memory")
def gpu_shared_memory(facts: Facts, rules: RuleData) -> Outcome:
    c = view.cuda(facts)
    if c is None:
        return not_evaluated(f"CUDA driver API unavailable: {view.reason(facts.cuda)}")
    if not c.devices:
        return not_evaluated("the CUDA driver lists no device")
    evidence: Evidence = {}
    mismatches: list[str] = []
    mismatched_ccs: set[str] = set()
    unreadable: list[str] = []
    for d in c.devices:
        cc = d.compute_capability if isinstance(d.compute_capability, tuple) else None
        optin = d.smem_per_block_optin
        label = f"GPU{d.ordinal}"
        if not isinstance(optin, int):
            unreadable.append(f"{label}: {view.reason(optin)}")
            continue
        per_sm = d.smem_per_sm if isinstance(d.smem_per_sm, int) else None
        evidence[f"{label} opt-in per block"] = optin
        if per_sm is not None:
            evidence[f"{label} per SM"] = per_sm
        arch = rules.architectures.get(cc) if cc is not None else None
        if arch is None:
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
    if unreadable and not evidence:
        return not_evaluated("; ".join(unreadable))
    if not evidence:
        return skipped("no device with a compute capability in the table")
    optins = sorted({v for k, v in evidence.items() if k.endswith("opt-in per block")}, key=str)
    return passed(
        "driver grants "
        + ", ".join(view.fmt_bytes(v) for v in optins if isinstance(v, int))
        + " opt-in shared memory per block, as the architecture table expects",
        **evidence,
    )
