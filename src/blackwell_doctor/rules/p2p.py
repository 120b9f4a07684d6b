"""Family p2p: what the driver says about peer-to-peer for each GPU pair.

NVML's OK is a grant, not proof that transfers work (REFERENCE.md §4: patched drivers
report OK while transfers hang), so a pass here says only what the driver claims.
"""

from __future__ import annotations

from blackwell_doctor.facts import Facts, Unavailable
from blackwell_doctor.rules import view
from blackwell_doctor.rules.data import RuleData
from blackwell_doctor.rules.engine import check
from blackwell_doctor.rules.model import Evidence, Outcome, Status, not_evaluated, passed, skipped

# Short names used in the field (nvidia-smi topo -p2p r legend).
SHORT = {
    "OK": "OK",
    "CHIPSET_NOT_SUPPORTED": "CNS",
    "GPU_NOT_SUPPORTED": "GNS",
    "TOPOLOGY_NOT_SUPPORTED": "TNS",
    "DISABLED_BY_REGKEY": "DR",
    "NOT_SUPPORTED": "NS",
    "UNKNOWN": "U",
}


@check("p2p.nvml_status")
def p2p_nvml_status(facts: Facts, rules: RuleData) -> Outcome:
    n = view.nvml(facts)
    if n is None:
        return not_evaluated(f"NVML unavailable: {view.reason(facts.nvml)}")
    if len(n.gpus) < 2:
        return skipped("one GPU: no GPU pair" if n.gpus else "no GPU: no GPU pair")
    if isinstance(n.p2p, Unavailable):
        return not_evaluated(f"NVML P2P status unavailable: {n.p2p.reason}")
    if not n.p2p:
        return not_evaluated("NVML returned no P2P status for any pair")
    matrix: Evidence = {}
    refused: list[str] = []
    unreadable: list[str] = []
    for pair in n.p2p:
        name = f"GPU{pair.gpu_a}-GPU{pair.gpu_b}"
        cells: list[str] = []
        for kind, value in (
            ("read", pair.read),
            ("write", pair.write),
            ("nvlink", pair.nvlink),
            ("atomics", pair.atomics),
        ):
            shown = value if isinstance(value, str) else f"unavailable:{value.reason}"
            cells.append(f"{kind}={SHORT.get(shown, shown)}")
            if kind in ("read", "write"):
                if isinstance(value, Unavailable):
                    unreadable.append(f"{name} {kind}: {value.reason}")
                elif value != "OK":
                    refused.append(f"{name} {kind} {value} ({SHORT.get(value, value)})")
        matrix[name] = " ".join(cells)
    expected = len(n.gpus) * (len(n.gpus) - 1) // 2
    listed = {(p.gpu_a, p.gpu_b) for p in n.p2p}
    absent = [
        f"GPU{a.index}-GPU{b.index}"
        for i, a in enumerate(n.gpus)
        for b in n.gpus[i + 1 :]
        if (a.index, b.index) not in listed
    ]
    if absent:
        unreadable.append(f"no status for {', '.join(absent)} ({len(listed)} of {expected} pairs)")
    geforce = all(isinstance(g.name, str) and "GeForce" in g.name for g in n.gpus)
    if refused and geforce:
        # Not a fault to fix: NVIDIA's stock drivers give GeForce cards no P2P at all.
        return skipped(
            "GeForce cards have no peer-to-peer on NVIDIA's stock drivers; NCCL and vLLM copy "
            "through host memory by themselves (expect slower tensor-parallel all-reduce)",
            **matrix,
        )
    if refused:
        how = (
            "The driver refuses peer-to-peer between these GPUs. On RTX PRO/datacenter "
            "cards check the pci.iommu and pci.acs findings, the BIOS (Above 4G decoding, "
            "Resizable BAR, ACS), and the topology (`nvidia-smi topo -m`)."
        )
        return Outcome(
            status=Status.WARN,
            summary="NVML refuses P2P for " + "; ".join(refused),
            evidence=matrix,
            remedy_vars={"how": how},
            commands=["nvidia-smi topo -p2p r", "nvidia-smi topo -m"],
        )
    if unreadable:
        return not_evaluated("; ".join(unreadable), **matrix)
    return passed(
        f"NVML grants read and write P2P for {view.plural(len(n.p2p), 'GPU pair')} "
        "(a grant, not proof that transfers work)",
        **matrix,
    )
