"""Family module: the NVIDIA kernel module's flavour (open or proprietary) against the GPUs'
generation (issue 26). Blackwell GPUs are driven only by the open kernel modules: with the
proprietary one loaded, the driver prints "requires use of the NVIDIA open kernel modules"
and NVML does not answer, so the generation is also told from the PCI device id, which
sysfs shows whatever the driver's state.
"""

from __future__ import annotations

from blackwell_doctor.facts.document import Facts, ModuleFlavour, Unavailable
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


def open_only_gpus(facts: Facts, rules: RuleData) -> list[str]:
    """GPUs that only the open kernel modules drive: by compute capability where NVML or
    CUDA answered, else by PCI device id (checks/preflight.toml [module])."""
    data = rules.preflight.module
    found = [
        g.label
        for g in view.gpus(facts)
        if g.cc is not None and g.cc[0] >= data.open_required_from_major
    ]
    if found or view.gpus(facts):
        return found
    return [
        f"{p.bdf} (device 0x{p.device_id:04x})"
        for p in view.pci_gpus(facts)
        if isinstance(p.device_id, int) and p.device_id >= data.open_required_from_device_id
    ]


@check("module.flavour", reads=("platform", "pci", "nvml", "cuda"))
def module_flavour(facts: Facts, rules: RuleData) -> Outcome:
    if view.is_wsl(facts):
        return skipped(f"{facts.platform.wsl.kind}: the kernel driver is the Windows host's")
    flavour = facts.platform.nvidia_module_flavour
    if flavour is None:
        return skipped("module flavour not in these facts (collected before it was read)")
    if isinstance(flavour, Unavailable):
        if flavour.reason.startswith("not-found:") and not view.pci_gpus(facts):
            return skipped("no NVIDIA kernel module loaded and no NVIDIA GPU on PCI")
        return not_evaluated(f"kernel module flavour unreadable: {flavour.reason}")
    assert isinstance(flavour, ModuleFlavour)
    need_open = open_only_gpus(facts, rules)
    evidence: Evidence = {
        "flavour": flavour.flavour,
        "signals": flavour.signals,
        "open_only_gpus": need_open,
    }
    if flavour.flavour == "proprietary" and need_open:
        return Outcome(
            status=Status.FAIL,
            summary=(
                f"the proprietary NVIDIA kernel module is loaded, but {', '.join(need_open)} "
                "need the open kernel modules"
            ),
            evidence=evidence,
            case="proprietary_on_blackwell",
        )
    if flavour.flavour == "unknown":
        return not_evaluated("the module's flavour could not be told from its signals", **evidence)
    return passed(f"{flavour.flavour} kernel module", **evidence)
